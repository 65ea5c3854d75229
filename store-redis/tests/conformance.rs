//! The conformance suite against a single Redis server
//! (`JOBSTORE_TEST_REDIS_URL`, default `redis://127.0.0.1:6379`).

use jobstore_conformance::TestStore;
use jobstore_conformance::services::{redis_url, unique_namespace};
use jobstore_redis::{RedisOptions, RedisStore};

async fn factory() -> Option<TestStore> {
    let url = redis_url().await?;
    let prefix = unique_namespace();
    let open = || RedisStore::connect_with(&url, RedisOptions::new().prefix(prefix.clone()));
    let store = open().await.expect("connect to redis");
    let peer = open().await.expect("connect peer to redis");
    let cleaner = open().await.expect("connect cleaner to redis");
    Some(
        TestStore::new(store)
            .with_peer(peer)
            .with_cleanup(async move {
                cleaner.drop_namespace().await.expect("drop namespace");
            }),
    )
}

jobstore_conformance::conformance_tests!(factory);
