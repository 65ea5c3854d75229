//! Throughput and latency of the PostgreSQL store, printed as plain figures.
//!
//! ```text
//! cargo bench -p jobstore-bench --bench postgres
//! ```
//!
//! Uses `JOBSTORE_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`), in fresh schemas that are
//! dropped at the end.
//!
//! Each round loads 100,000 jobs (one adding task, then four) and drains
//! them with four claimers in batches of 100 (claim, then archive), first
//! in the store, then in a minimal single-table `SKIP LOCKED` reference
//! queue (`jobstore_bench::reference::PgRef`, the one `jobstore bench
//! reference` measures) in a schema of its own, and prints both and
//! their ratio; ratios from the same round are what count on a shared
//! machine. `BENCH_ROUNDS` (default 3) sets the number of rounds,
//! `BENCH_BIG` the size of the large queue for the claim latency
//! (default 1,000,000; 0 skips that part).

use std::sync::Arc;
use std::time::{Duration, Instant};

use jobstore_api::{JobRelease, JobResult, JobStore, JobStoreExt, NewJob, Release};
use jobstore_bench::reference::{PgRef, RefQueue};
use jobstore_postgres::{PgStore, PgStoreOptions};

const T0: i64 = 1_700_000_000_000;
const LEASE: Duration = Duration::from_secs(300);
const CLAIM_SQL: &str = include_str!("../../store-postgres/queries/claim_jobs.sql");

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
    vacuum_pool(store.pool(), &["jobs", "archive"]).await;
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
                // One per-job release for the whole batch, as the daemon
                // finishes its jobs (here all with the same result).
                let releases: Vec<JobRelease> = got
                    .into_iter()
                    .map(|j| JobRelease::new(j.id, Release::Archive(JobResult::from_status(200))))
                    .collect();
                let rel = store
                    .release_jobs(&releases, &owner, T0 + 2)
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
            .release_all(
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

/// The reference queue ([`PgRef`]) loaded and drained the same way as the
/// store. It has none of the store's duties (user ids with duplicate
/// detection, expired leases as eligible work in the claim itself, a
/// result per job, counts by result code).
mod reference {
    use std::sync::Arc;
    use std::time::Instant;

    use super::{PgRef, RefQueue};

    /// How the reference queue finishes a job.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub enum Finish {
        /// `UPDATE state = 'completed'` (kept, as River and Oban do).
        Complete,
        /// `DELETE`.
        Delete,
    }

    /// A fresh reference queue, with a pool of 8 connections.
    pub async fn open(url: &str, tag: &str) -> Arc<PgRef> {
        let ns = format!("bench_{tag}_{}", std::process::id());
        let url = format!(
            "{url}{}max_connections=8",
            if url.contains('?') { '&' } else { '?' }
        );
        let q = PgRef::open(&url, &ns).await.expect("reference queue");
        Arc::new(q)
    }

    /// Empties the queue and vacuums it.
    pub async fn reset(q: &PgRef) {
        sqlx::query("TRUNCATE jobs")
            .execute(q.pool())
            .await
            .expect("truncate");
        super::vacuum_pool(q.pool(), &["jobs"]).await;
    }

    pub async fn add_many(q: &Arc<PgRef>, total: usize, tasks: usize) -> f64 {
        let per_task = total / tasks;
        let start = Instant::now();
        let mut handles = Vec::new();
        for t in 0..tasks {
            let q = q.clone();
            handles.push(tokio::spawn(async move {
                let mut i = t * per_task;
                while i < (t + 1) * per_task {
                    let n = 1000.min((t + 1) * per_task - i);
                    let done = q.add(i, i + n, 64).await.expect("ref add");
                    assert_eq!(done, n);
                    i += n;
                }
            }));
        }
        for h in handles {
            h.await.expect("ref adder");
        }
        (per_task * tasks) as f64 / start.elapsed().as_secs_f64()
    }

    pub async fn drain(q: &Arc<PgRef>, claimers: usize, size: usize, how: Finish) -> (usize, f64) {
        let start = Instant::now();
        let mut handles = Vec::new();
        for c in 0..claimers {
            let q = q.clone();
            handles.push(tokio::spawn(async move {
                let owner = format!("claimer-{c}");
                let mut done = 0;
                loop {
                    let keys = q.claim(size, &owner).await.expect("ref claim");
                    if keys.is_empty() {
                        return done;
                    }
                    done += match how {
                        Finish::Complete => q.ack(&keys).await,
                        Finish::Delete => q.delete(&keys).await,
                    }
                    .expect("ref complete");
                }
            }));
        }
        let mut total = 0;
        for h in handles {
            total += h.await.expect("ref claimer");
        }
        (total, total as f64 / start.elapsed().as_secs_f64())
    }
}

async fn vacuum_pool(pool: &sqlx::PgPool, tables: &[&str]) {
    for t in tables {
        sqlx::query(sqlx::AssertSqlSafe(format!("VACUUM ANALYZE {t}")))
            .execute(pool)
            .await
            .expect("vacuum");
    }
}

async fn wal_lsn(pool: &sqlx::PgPool) -> String {
    let (lsn,): (String,) = sqlx::query_as("SELECT pg_current_wal_lsn()::text")
        .fetch_one(pool)
        .await
        .expect("lsn");
    lsn
}

async fn wal_since(pool: &sqlx::PgPool, from: &str) -> f64 {
    let (n,): (f64,) =
        sqlx::query_as("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::float8")
            .bind(from)
            .fetch_one(pool)
            .await
            .expect("lsn diff");
    n
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Per-round figures, by name, in order of first appearance.
#[derive(Default)]
struct Figures(Vec<(String, Vec<f64>)>);

impl Figures {
    fn push(&mut self, name: &str, v: f64) {
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some((_, vs)) => vs.push(v),
            None => self.0.push((name.to_owned(), vec![v])),
        }
    }
    fn get(&self, name: &str) -> Vec<f64> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }
}

const N: usize = 100_000;
const CLAIMERS: usize = 4;

/// One round: jobstore and the reference, each loaded and drained the same
/// way, one after the other.
async fn round(f: &mut Figures, s: &Arc<PgStore>, r: &Arc<PgRef>, k: usize) {
    // jobstore
    let a1 = add_many(s, &format!("r{k}a"), N, 1).await;
    vacuum(s).await;
    let lsn = wal_lsn(s.pool()).await;
    let (n, d1) = drain(s, CLAIMERS, 100).await;
    assert_eq!(n, N);
    let wal = wal_since(s.pool(), &lsn).await / N as f64;
    vacuum(s).await;
    let a4 = add_many(s, &format!("r{k}b"), N, 4).await;
    vacuum(s).await;
    let (n, d2) = drain(s, CLAIMERS, 100).await;
    assert_eq!(n, N);
    vacuum(s).await;
    // reference, finishing with UPDATE state = 'completed'
    reference::reset(r).await;
    let ra1 = reference::add_many(r, N, 1).await;
    vacuum_pool(r.pool(), &["jobs"]).await;
    let lsn = wal_lsn(r.pool()).await;
    let (n, rd1) = reference::drain(r, CLAIMERS, 100, reference::Finish::Complete).await;
    assert_eq!(n, N);
    let rwal = wal_since(r.pool(), &lsn).await / N as f64;
    reference::reset(r).await;
    let ra4 = reference::add_many(r, N, 4).await;
    vacuum_pool(r.pool(), &["jobs"]).await;
    let (n, rd2) = reference::drain(r, CLAIMERS, 100, reference::Finish::Complete).await;
    assert_eq!(n, N);
    // reference, finishing with DELETE
    reference::reset(r).await;
    reference::add_many(r, N, 4).await;
    vacuum_pool(r.pool(), &["jobs"]).await;
    let lsn = wal_lsn(r.pool()).await;
    let (n, rdd) = reference::drain(r, CLAIMERS, 100, reference::Finish::Delete).await;
    assert_eq!(n, N);
    let rdwal = wal_since(r.pool(), &lsn).await / N as f64;

    let drain_js = (d1 + d2) / 2.0;
    let drain_ref = (rd1 + rd2) / 2.0;
    println!(
        "round {k}: claim+archive {d1:.0} / {d2:.0} jobs/s (WAL {wal:.0} B/job) | reference complete {rd1:.0} / {rd2:.0} (WAL {rwal:.0} B/job), delete {rdd:.0} (WAL {rdwal:.0} B/job) | ratio {:.2} | adds 1 task {a1:.0} vs {ra1:.0}, 4 tasks {a4:.0} vs {ra4:.0}",
        drain_js / drain_ref
    );
    f.push("js_drain", drain_js);
    f.push("ref_drain", drain_ref);
    f.push("ref_drain_delete", rdd);
    f.push("drain_ratio", drain_js / drain_ref);
    f.push("drain_ratio_delete", drain_js / rdd);
    f.push("js_wal", wal);
    f.push("ref_wal", rwal);
    f.push("ref_wal_delete", rdwal);
    f.push("js_add1", a1);
    f.push("ref_add1", ra1);
    f.push("js_add4", a4);
    f.push("ref_add4", ra4);
    f.push("add1_ratio", a1 / ra1);
    f.push("add4_ratio", a4 / ra4);
}

async fn bench() {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let big = env("BENCH_BIG", 1_000_000);
    let rounds = env("BENCH_ROUNDS", 3);

    if rounds > 0 {
        let s = open("tp").await;
        let r = reference::open(&url(), "tp").await;
        let mut f = Figures::default();
        for k in 1..=rounds {
            round(&mut f, &s, &r, k).await;
        }
        let m = |n: &str| median(&f.get(n));
        println!("medians of {rounds} rounds ({N} jobs, {CLAIMERS} claimers, batches of 100):");
        println!(
            "  claim+archive: jobstore {:>7.0} jobs/s, reference (complete) {:>7.0}, ratio {:.2}; reference (delete) {:>7.0}, ratio {:.2}",
            m("js_drain"),
            m("ref_drain"),
            m("drain_ratio"),
            m("ref_drain_delete"),
            m("drain_ratio_delete")
        );
        println!(
            "  WAL per job claimed+finished: jobstore {:.0} B, reference (complete) {:.0} B, (delete) {:.0} B",
            m("js_wal"),
            m("ref_wal"),
            m("ref_wal_delete")
        );
        println!(
            "  adds, 1 task:  jobstore {:>7.0} jobs/s, reference {:>7.0}, ratio {:.2}",
            m("js_add1"),
            m("ref_add1"),
            m("add1_ratio")
        );
        println!(
            "  adds, 4 tasks: jobstore {:>7.0} jobs/s, reference {:>7.0}, ratio {:.2}",
            m("js_add4"),
            m("ref_add4"),
            m("add4_ratio")
        );
        drop_schema(&s).await;
        r.remove().await.expect("drop the reference schema");
    }

    if big == 0 {
        return;
    }
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
