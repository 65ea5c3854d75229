//! Throughput of the Redis store: adds/s, claim+archive jobs/s in batches
//! of 100 with several claimers, and claim latency with 10k vs 1M jobs
//! waiting.
//!
//! `cargo bench -p jobstore-redis --bench throughput` against
//! `JOBSTORE_TEST_REDIS_URL` (default `redis://127.0.0.1:6379`), in a fresh
//! namespace that is deleted afterwards. `BENCH_JOBS` (default 200,000)
//! and `BENCH_CLAIMERS` (default 4) change the load.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jobstore_api::{JobResult, JobStore, NewJob, Release};
use jobstore_redis::{RedisOptions, RedisStore};

const T0: i64 = 1_700_000_000_000;
const LEASE: Duration = Duration::from_secs(600);

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn open(url: &str, prefix: &str) -> RedisStore {
    RedisStore::connect_with(url, RedisOptions::new().prefix(prefix))
        .await
        .expect("connect to redis")
}

/// Adds `n` jobs of `jobtype` in batches of 1,000 from `adders` tasks;
/// returns the rate.
async fn add_jobs(stores: &[Arc<RedisStore>], jobtype: &str, n: usize) -> f64 {
    let batches = n.div_ceil(1000);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (k, store) in stores.iter().enumerate() {
        let store = store.clone();
        let jobtype = jobtype.to_owned();
        let per = stores.len();
        tasks.push(tokio::spawn(async move {
            let mut b = k;
            while b < batches {
                let jobs: Vec<NewJob> = (b * 1000..((b + 1) * 1000).min(n))
                    .map(|i| {
                        NewJob::new(
                            format!("{jobtype}-{i:08}"),
                            jobtype.as_str(),
                            vec![b'x'; 100],
                        )
                        .priority((i % 3) as i32)
                    })
                    .collect();
                store.add_jobs(&jobs, T0).await.expect("add");
                b += per;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// Claimers drain `jobtype` in batches of 100, archiving each batch.
async fn claim_archive(stores: &[Arc<RedisStore>], jobtype: &str) -> (usize, f64) {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (k, store) in stores.iter().enumerate() {
        let store = store.clone();
        let jobtype = jobtype.to_owned();
        tasks.push(tokio::spawn(async move {
            let owner = format!("claimer-{k}");
            let mut done = 0;
            loop {
                let got = store
                    .claim_jobs(&jobtype, 100, &owner, LEASE, T0 + 1)
                    .await
                    .expect("claim");
                if got.is_empty() {
                    break done;
                }
                let ids: Vec<String> = got.into_iter().map(|j| j.id).collect();
                let n = store
                    .release_jobs(
                        &ids,
                        &owner,
                        &Release::Archive(JobResult::from_status(200)),
                        T0 + 2,
                    )
                    .await
                    .expect("archive")
                    .len();
                assert_eq!(n, ids.len());
                done += n;
            }
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    (total, total as f64 / start.elapsed().as_secs_f64())
}

/// Claim latency: `rounds` claims of 100 from a queue of `waiting` jobs;
/// each batch is handed back (unget) so the backlog stays the same.
async fn claim_latency(store: &RedisStore, jobtype: &str, rounds: usize) -> (Duration, Duration) {
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let start = Instant::now();
        let got = store
            .claim_jobs(jobtype, 100, "lat", LEASE, T0 + 1)
            .await
            .expect("claim");
        times.push(start.elapsed());
        assert_eq!(got.len(), 100);
        let ids: Vec<String> = got.into_iter().map(|j| j.id).collect();
        store
            .release_jobs(&ids, "lat", &Release::Unget, T0 + 1)
            .await
            .expect("unget");
    }
    times.sort();
    (times[rounds / 2], times[rounds * 99 / 100])
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let url = std::env::var("JOBSTORE_TEST_REDIS_URL")
            .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
        let n = env("BENCH_JOBS", 200_000);
        let claimers = env("BENCH_CLAIMERS", 4);
        let prefix = format!("bench_{}", &jobstore_api::new_token()[..8]);
        let mut stores = Vec::new();
        for _ in 0..claimers {
            stores.push(Arc::new(open(&url, &prefix).await));
        }
        println!("redis store benchmark: {url}, {n} jobs, {claimers} clients, prefix {prefix}");

        let rate = add_jobs(&stores, "bench", n).await;
        println!("adds:              {rate:>10.0} jobs/s (batches of 1,000, 100-byte payloads)");

        let (total, rate) = claim_archive(&stores, "bench").await;
        assert_eq!(total, n, "every job claimed and archived once");
        println!("claim+archive:     {rate:>10.0} jobs/s (batches of 100, {claimers} claimers)");

        let store = &stores[0];
        add_jobs(&stores, "lat10k", 10_000).await;
        let (p50, p99) = claim_latency(store, "lat10k", 300).await;
        println!("claim latency 10k: p50 {p50:>9.2?}  p99 {p99:>9.2?} (claim of 100)");
        let big = env("BENCH_BIG", 1_000_000);
        add_jobs(&stores, "lat1m", big).await;
        let (p50, p99) = claim_latency(store, "lat1m", 300).await;
        println!(
            "claim latency {}k: p50 {p50:>9.2?}  p99 {p99:>9.2?} (claim of 100)",
            big / 1000
        );

        let removed = store.drop_namespace().await.expect("drop namespace");
        println!("(removed {removed} keys)");
    });
}
