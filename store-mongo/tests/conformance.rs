//! The shared conformance suite against MongoDB: `JOBSTORE_TEST_MONGO_URL`
//! (default `mongodb://127.0.0.1:27017`), each test on a fresh database,
//! with a second client on the same database as the peer.

use jobstore_conformance::{TestStore, services};
use jobstore_mongo::{MongoOptions, MongoStore};

async fn factory() -> Option<TestStore> {
    let url = services::mongo_url().await?;
    let ns = services::unique_namespace();
    let options = MongoOptions::default().database(&ns);
    let store = MongoStore::connect_with(&url, options.clone())
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    let peer = MongoStore::connect_with(&url, options)
        .await
        .unwrap_or_else(|e| panic!("connect the peer to {url}: {e}"));
    let db = store.database().clone();
    Some(
        TestStore::new(store)
            .with_peer(peer)
            .with_cleanup(async move {
                if let Err(e) = db.drop().await {
                    eprintln!("could not drop test database {ns}: {e}");
                }
            }),
    )
}

jobstore_conformance::conformance_tests!(factory);
