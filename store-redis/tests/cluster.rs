//! The conformance suite against a real Redis Cluster:
//! `JOBSTORE_TEST_REDIS_CLUSTER_URL` (`redis+cluster://h1:p1,...`) if set,
//! otherwise six local `redis-server --cluster-enabled yes`, started once
//! per test process and stopped when it ends. Required (not skipped) when
//! `JOBSTORE_REQUIRE_BACKENDS` names `redis-cluster`.

mod support;

use std::sync::OnceLock;

use jobstore_api::{JobStore, NewJob};
use jobstore_conformance::TestStore;
use jobstore_conformance::services::{skip, unique_namespace};
use jobstore_redis::{RedisOptions, RedisStore};

const BACKEND: &str = "redis-cluster";

fn cluster_url() -> Option<String> {
    static URL: OnceLock<Result<String, String>> = OnceLock::new();
    let url = URL.get_or_init(|| {
        if let Ok(url) = std::env::var("JOBSTORE_TEST_REDIS_CLUSTER_URL")
            && !url.is_empty()
        {
            return Ok(url);
        }
        support::redis_binaries()?;
        Ok(support::start_cluster())
    });
    match url {
        Ok(u) => Some(u.clone()),
        Err(why) => skip(
            BACKEND,
            &format!(
                "JOBSTORE_TEST_REDIS_CLUSTER_URL is not set and no local cluster can be started: {why}"
            ),
        ),
    }
}

async fn open(url: &str, prefix: &str) -> RedisStore {
    RedisStore::connect_with(url, RedisOptions::new().prefix(prefix))
        .await
        .expect("connect to the cluster")
}

async fn factory() -> Option<TestStore> {
    let url = tokio::task::spawn_blocking(cluster_url)
        .await
        .expect("cluster fixture")?;
    let prefix = unique_namespace();
    let store = open(&url, &prefix).await;
    assert!(store.is_cluster());
    let peer = open(&url, &prefix).await;
    let cleaner = open(&url, &prefix).await;
    Some(
        TestStore::new(store)
            .with_peer(peer)
            .with_cleanup(async move {
                // A cleanup that times out on a loaded server is tried
                // again, then reported; it is not the test's verdict.
                if let Err(e) = cleaner.drop_namespace().await
                    && let Err(e2) = cleaner.drop_namespace().await
                {
                    eprintln!("could not drop the namespace: {e}; then {e2}");
                }
            }),
    )
}

jobstore_conformance::conformance_tests!(factory);

/// Two jobtypes live in different slots, owned by different primaries,
/// and the slot the store computes is the server's.
#[test]
fn jobtypes_spread_over_shards() {
    jobstore_conformance::block_on(async {
        let Some(url) = tokio::task::spawn_blocking(cluster_url).await.unwrap() else {
            return;
        };
        let prefix = unique_namespace();
        let store = open(&url, &prefix).await;
        let seed = url
            .trim_start_matches("redis+cluster://")
            .split(',')
            .next()
            .unwrap()
            .to_owned();
        let client = redis::Client::open(format!("redis://{seed}/")).unwrap();
        let mut c = client.get_multiplexed_async_connection().await.unwrap();
        // Which primary owns which slot.
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async(&mut c)
            .await
            .unwrap();
        let owner_of = |slot: u16| -> String {
            for line in nodes.lines() {
                let f: Vec<&str> = line.split_whitespace().collect();
                if !f[2].contains("master") {
                    continue;
                }
                for range in &f[8..] {
                    let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                    if let (Ok(lo), Ok(hi)) = (lo.parse::<u16>(), hi.parse::<u16>())
                        && (lo..=hi).contains(&slot)
                    {
                        return f[1].to_owned();
                    }
                }
            }
            panic!("no primary owns slot {slot}")
        };
        let types: Vec<String> = (0..20).map(|i| format!("type-{i}")).collect();
        let first = &types[0];
        let other = types
            .iter()
            .find(|t| owner_of(store.jobtype_slot(t)) != owner_of(store.jobtype_slot(first)))
            .expect("20 jobtypes all on one primary: tags are not per jobtype");
        for t in [first, other] {
            let key = format!("{{{prefix}:{t}}}:ready");
            let server_slot: u16 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(&key)
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(server_slot, store.jobtype_slot(t), "slot of {key}");
            store
                .add_jobs(&[NewJob::new(format!("id-{t}"), t.as_str(), "x")], 1_000)
                .await
                .unwrap();
        }
        assert_ne!(store.jobtype_slot(first), store.jobtype_slot(other));
        // The jobs really are on their slots' primaries.
        for t in [first, other] {
            let slot = store.jobtype_slot(t);
            let owner = owner_of(slot);
            let addr = owner.split('@').next().unwrap();
            let node = redis::Client::open(format!("redis://{addr}/")).unwrap();
            let mut nc = node.get_multiplexed_async_connection().await.unwrap();
            let n: u64 = redis::cmd("CLUSTER")
                .arg("COUNTKEYSINSLOT")
                .arg(slot)
                .query_async(&mut nc)
                .await
                .unwrap();
            assert!(
                n >= 2,
                "job hash and ready zset of {t} in slot {slot} on {addr}"
            );
            let claimed = store
                .claim_jobs(t, 10, "sys-a", std::time::Duration::from_secs(60), 1_000)
                .await
                .unwrap();
            assert_eq!(claimed.len(), 1);
        }
        store.drop_namespace().await.unwrap();
    });
}

/// `drop_namespace` on a cluster: each SCAN page's keys span slots (one
/// UNLINK, split by slot by the client); nothing of the namespace is left
/// on any primary.
#[test]
fn drop_namespace_removes_only_its_own() {
    jobstore_conformance::block_on(async {
        let Some(url) = tokio::task::spawn_blocking(cluster_url).await.unwrap() else {
            return;
        };
        let nodes: Vec<String> = url
            .trim_start_matches("redis+cluster://")
            .split(',')
            .map(|n| format!("redis://{n}/"))
            .collect();
        support::drop_namespace_removes_only_its_own(&url, &nodes).await;
    });
}
