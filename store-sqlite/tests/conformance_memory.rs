//! The conformance suite against `sqlite::memory:` stores; the peer is a
//! clone of the store (an in-memory database is private to its store).

use jobstore_conformance::TestStore;
use jobstore_sqlite::SqliteStore;

async fn factory() -> Option<TestStore> {
    // SQLite is embedded: there is nothing to skip, a failure to open fails.
    let store = SqliteStore::connect("sqlite::memory:")
        .await
        .unwrap_or_else(|e| panic!("cannot open sqlite::memory: {e}"));
    let peer = store.clone();
    Some(TestStore::new(store).with_peer(peer))
}

jobstore_conformance::conformance_tests!(factory);
