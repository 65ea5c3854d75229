//! The conformance suite against file-backed SQLite stores: a fresh file per
//! test in the system temp dir, a peer opened separately on the same file.

use jobstore_conformance::TestStore;
use jobstore_conformance::services::unique_namespace;
use jobstore_sqlite::SqliteStore;

async fn factory() -> Option<TestStore> {
    let path = std::env::temp_dir().join(format!("{}.db", unique_namespace()));
    let url = format!("sqlite://{}", path.display());
    // Open the store and its peer at once: both must survive creating and
    // migrating the same fresh file concurrently.
    let (store, peer) = tokio::join!(SqliteStore::connect(&url), SqliteStore::connect(&url));
    // SQLite is embedded: there is nothing to skip, a failure to open fails.
    let store = store.unwrap_or_else(|e| panic!("cannot open {url}: {e}"));
    let peer = peer.unwrap_or_else(|e| panic!("cannot open {url} again: {e}"));
    let (s, p) = (store.clone(), peer.clone());
    Some(
        TestStore::new(store)
            .with_peer(peer)
            .with_cleanup(async move {
                s.close().await;
                p.close().await;
                for suffix in ["", "-wal", "-shm"] {
                    let mut f = path.clone().into_os_string();
                    f.push(suffix);
                    let _ = std::fs::remove_file(f);
                }
            }),
    )
}

jobstore_conformance::conformance_tests!(factory);
