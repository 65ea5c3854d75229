//! Throughput and latency of the PostgreSQL store, printed as plain figures.
//!
//! ```text
//! cargo bench -p jobstore-postgres --bench throughput
//! ```
//!
//! Uses `JOBSTORE_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`), in fresh schemas that are
//! dropped at the end. `BENCH_BIG` sets the size of the large queue
//! (default 1,000,000).

use std::sync::Arc;
use std::time::{Duration, Instant};

use jobstore_api::{JobResult, JobStore, NewJob, Release};
use jobstore_postgres::{PgStore, PgStoreOptions};

const T0: i64 = 1_700_000_000_000;
const LEASE: Duration = Duration::from_secs(300);
const CLAIM_SQL: &str = include_str!("../queries/claim_jobs.sql");

fn url() -> String {
    std::env::var("JOBSTORE_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

async fn open(tag: &str) -> Arc<PgStore> {
    let schema = format!("bench_{tag}_{}", std::process::id());
    let opts = PgStoreOptions::from_url(&url())
        .expect("url")
        .schema(schema)
        .max_connections(8);
    let store = PgStore::connect_with(opts).await.expect("connect");
    // Start from an empty schema even if an earlier run was interrupted.
    for t in ["jobs", "archive"] {
        sqlx::query(sqlx::AssertSqlSafe(format!("TRUNCATE {t}")))
            .execute(store.pool())
            .await
            .expect("truncate");
    }
    Arc::new(store)
}

async fn drop_schema(store: &PgStore) {
    let sql = format!("DROP SCHEMA \"{}\" CASCADE", store.schema());
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .execute(store.pool())
        .await
        .expect("drop schema");
    store.close().await;
}

/// What autovacuum would do on a server that runs it (this machine's test
/// server has it off): vacuum and analyze the live-jobs table.
async fn vacuum(store: &PgStore) {
    for sql in ["VACUUM ANALYZE jobs", "VACUUM ANALYZE archive"] {
        sqlx::query(sql)
            .execute(store.pool())
            .await
            .expect("vacuum");
    }
}

fn batch(prefix: &str, from: usize, n: usize) -> Vec<NewJob> {
    (from..from + n)
        .map(|i| {
            NewJob::new(format!("{prefix}{i:08}"), "bench", vec![b'x'; 64]).priority((i % 3) as i32)
        })
        .collect()
}

/// Adds `total` jobs in batches of 1000 from `tasks` concurrent tasks;
/// returns jobs per second.
async fn add_many(store: &Arc<PgStore>, prefix: &str, total: usize, tasks: usize) -> f64 {
    let per_task = total / tasks;
    let start = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let store = store.clone();
        let prefix = prefix.to_owned();
        handles.push(tokio::spawn(async move {
            let mut i = t * per_task;
            while i < (t + 1) * per_task {
                let n = 1000.min((t + 1) * per_task - i);
                let out = store
                    .add_jobs(&batch(&prefix, i, n), T0)
                    .await
                    .expect("add");
                assert_eq!(out.new.len(), n);
                i += n;
            }
        }));
    }
    for h in handles {
        h.await.expect("adder");
    }
    (per_task * tasks) as f64 / start.elapsed().as_secs_f64()
}

/// Claims and archives everything with `claimers` tasks in batches of
/// `size`; returns jobs per second.
async fn drain(store: &Arc<PgStore>, claimers: usize, size: usize) -> (usize, f64) {
    let start = Instant::now();
    let mut handles = Vec::new();
    for c in 0..claimers {
        let store = store.clone();
        handles.push(tokio::spawn(async move {
            let owner = format!("claimer-{c}");
            let mut done = 0;
            loop {
                let got = store
                    .claim_jobs("bench", size, &owner, LEASE, T0 + 1)
                    .await
                    .expect("claim");
                if got.is_empty() {
                    return done;
                }
                let ids: Vec<String> = got.into_iter().map(|j| j.id).collect();
                let rel = store
                    .release_jobs(
                        &ids,
                        &owner,
                        &Release::Archive(JobResult::from_status(200)),
                        T0 + 2,
                    )
                    .await
                    .expect("archive");
                done += rel.len();
            }
        }));
    }
    let mut total = 0;
    for h in handles {
        total += h.await.expect("claimer");
    }
    (total, total as f64 / start.elapsed().as_secs_f64())
}

/// `samples` claims of `size` jobs, each archived after; returns the median
/// and p99 claim latency.
async fn claim_latency(store: &PgStore, samples: usize, size: usize) -> (Duration, Duration) {
    let mut lat = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        let got = store
            .claim_jobs("bench", size, "lat", LEASE, T0 + 1)
            .await
            .expect("claim");
        lat.push(t.elapsed());
        assert_eq!(got.len(), size);
        let ids: Vec<String> = got.into_iter().map(|j| j.id).collect();
        store
            .release_jobs(
                &ids,
                "lat",
                &Release::Archive(JobResult::from_status(200)),
                T0 + 2,
            )
            .await
            .expect("archive");
    }
    lat.sort();
    let p = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
    (p(0.5), p(0.99))
}

async fn explain_claim(store: &PgStore) {
    let mut tx = store.pool().begin().await.expect("begin");
    let sql = format!("EXPLAIN (ANALYZE, BUFFERS) {CLAIM_SQL}");
    let rows: Vec<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind("bench")
        .bind(T0 + 1)
        .bind(100i64)
        .bind("explain")
        .bind(T0 + 1 + 300_000)
        .fetch_all(&mut *tx)
        .await
        .expect("explain");
    tx.rollback().await.expect("rollback");
    println!("EXPLAIN (ANALYZE, BUFFERS) claim of 100:");
    for (line,) in rows {
        println!("    {line}");
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

async fn bench() {
    let big: usize = std::env::var("BENCH_BIG")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);

    // Adds and claim+archive throughput on 100k jobs.
    let s = open("tp").await;
    let one = add_many(&s, "a", 100_000, 1).await;
    println!("adds, 1 task, batches of 1000:       {one:>9.0} jobs/s");
    let (n, rate1) = drain(&s, 4, 100).await;
    assert_eq!(n, 100_000);
    vacuum(&s).await;
    let four = add_many(&s, "b", 100_000, 4).await;
    println!("adds, 4 tasks, batches of 1000:      {four:>9.0} jobs/s");
    vacuum(&s).await;
    let (n, rate) = drain(&s, 4, 100).await;
    assert_eq!(n, 100_000);
    println!("claim+archive, 4 claimers, batch 100 (no vacuum after load): {rate1:>9.0} jobs/s");
    println!("claim+archive, 4 claimers, batch 100 (vacuumed after load):  {rate:>9.0} jobs/s");
    drop_schema(&s).await;

    // Claim latency at 10k and at `big` waiting jobs.
    let s = open("lat").await;
    add_many(&s, "s", 10_000, 2).await;
    vacuum(&s).await;
    let (p50, p99) = claim_latency(&s, 100, 50).await;
    println!(
        "claim of 50 at 10k waiting:   median {}, p99 {}",
        ms(p50),
        ms(p99)
    );
    add_many(&s, "m", big, 2).await;
    vacuum(&s).await;
    let (p50, p99) = claim_latency(&s, 100, 50).await;
    println!(
        "claim of 50 at {big} waiting: median {}, p99 {}",
        ms(p50),
        ms(p99)
    );
    let t = Instant::now();
    let w = s.waiting_jobtypes(T0 + 1).await.expect("waiting");
    println!(
        "waiting_jobtypes at {big} waiting: {} ({w:?})",
        ms(t.elapsed())
    );
    explain_claim(&s).await;
    drop_schema(&s).await;
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(bench());
}
