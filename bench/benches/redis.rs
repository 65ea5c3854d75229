//! Throughput of the Redis store, against a minimal reference queue
//! measured in the same run on the same server with the same clients:
//! adds/s, claim+archive jobs/s in batches of 100 with several claimers,
//! server commands and server CPU per job, and claim latency with 10k vs
//! 1M jobs waiting.
//!
//! `cargo bench -p jobstore-bench --bench redis` against
//! `JOBSTORE_TEST_REDIS_URL` (default `redis://127.0.0.1:6379`), in fresh
//! namespaces that are deleted afterwards. `BENCH_JOBS` (default 200,000),
//! `BENCH_CLAIMERS` (default 4), `BENCH_RUNS` (default 3; medians are
//! printed) and `BENCH_BIG` (backlog of the second latency test, default
//! 1,000,000; 0 skips the latency tests) change the load.
//!
//! The reference (`jobstore_bench::reference::RedisRef`, the one
//! `jobstore bench reference` measures) is the least a Redis claim/ack
//! queue can do: one ZSET of waiting ids and one HASH per job; add = HSET +
//! ZADD, claim = ZPOPMIN + HSET owner + ZADD to a lock zset, ack = DEL +
//! ZREM; one EVALSHA per batch. No fencing, no ordering by time, no unique
//! ids, no results.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jobstore_api::{JobRelease, JobResult, JobStore, JobStoreExt, NewJob, Release};
use jobstore_bench::reference::{RedisRef, RefQueue};
use jobstore_redis::{RedisOptions, RedisStore};
use redis::aio::MultiplexedConnection;

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

/// Adds `n` jobs of `jobtype` in batches of 1,000 from one task per store;
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
                // One per-job release for the whole batch, as the daemon
                // finishes its jobs (here all with the same result).
                let releases: Vec<JobRelease> = got
                    .into_iter()
                    .map(|j| JobRelease::new(j.id, Release::Archive(JobResult::from_status(200))))
                    .collect();
                let n = store
                    .release_jobs(&releases, &owner, T0 + 2)
                    .await
                    .expect("archive")
                    .len();
                assert_eq!(n, releases.len());
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

// ------------------------------------------------------------ reference

/// The reference queue, one handle (and connection) per client.
struct Reference {
    queues: Vec<Arc<RedisRef>>,
}

impl Reference {
    async fn open(url: &str, ns: &str, clients: usize) -> Reference {
        let mut queues = Vec::new();
        for _ in 0..clients {
            let q = RedisRef::open(url, ns).await.expect("reference queue");
            queues.push(Arc::new(q));
        }
        Reference { queues }
    }

    async fn add(&self, n: usize) -> f64 {
        let batches = n.div_ceil(1000);
        let start = Instant::now();
        let mut tasks = Vec::new();
        for (k, q) in self.queues.iter().enumerate() {
            let q = q.clone();
            let per = self.queues.len();
            tasks.push(tokio::spawn(async move {
                let mut b = k;
                while b < batches {
                    let (from, to) = (b * 1000, ((b + 1) * 1000).min(n));
                    let added = q.add(from, to, 100).await.expect("reference add");
                    assert_eq!(added, to - from);
                    b += per;
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        n as f64 / start.elapsed().as_secs_f64()
    }

    async fn claim_ack(&self) -> (usize, f64) {
        let start = Instant::now();
        let mut tasks = Vec::new();
        for (k, q) in self.queues.iter().enumerate() {
            let q = q.clone();
            tasks.push(tokio::spawn(async move {
                let owner = format!("claimer-{k}");
                let mut done = 0;
                loop {
                    let ids = q.claim(100, &owner).await.expect("reference claim");
                    if ids.is_empty() {
                        break done;
                    }
                    let n = q.ack(&ids).await.expect("reference ack");
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

    async fn drop_keys(&self) {
        self.queues[0]
            .remove()
            .await
            .expect("remove the reference keys");
    }
}

// ------------------------------------------------------------ server stats

/// Commands (calls, µs) from `INFO commandstats` and server CPU seconds.
#[derive(Default, Clone)]
struct Snapshot {
    cmds: BTreeMap<String, (u64, u64)>,
    cpu: f64,
    client_cpu: f64,
}

/// CPU seconds (user + system) of this process, from `/proc/self/stat`
/// (0 where that file does not exist).
fn client_cpu() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces): utime is the
    // 12th, stime the 13th, in clock ticks (100 per second on Linux).
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (tick(11) + tick(12)) / 100.0
}

async fn snapshot(c: &mut MultiplexedConnection) -> Snapshot {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(c)
        .await
        .expect("INFO commandstats");
    let mut s = Snapshot {
        client_cpu: client_cpu(),
        ..Snapshot::default()
    };
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, fields)) = rest.split_once(':') else {
            continue;
        };
        let mut calls = 0;
        let mut usec = 0;
        for f in fields.split(',') {
            if let Some(v) = f.strip_prefix("calls=") {
                calls = v.trim().parse().unwrap_or(0);
            } else if let Some(v) = f.strip_prefix("usec=") {
                usec = v.trim().parse().unwrap_or(0);
            }
        }
        s.cmds.insert(name.to_owned(), (calls, usec));
    }
    let cpu: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(c)
        .await
        .expect("INFO cpu");
    for line in cpu.lines() {
        if let Some(v) = line
            .strip_prefix("used_cpu_sys:")
            .or_else(|| line.strip_prefix("used_cpu_user:"))
        {
            s.cpu += v.trim().parse::<f64>().unwrap_or(0.0);
        }
    }
    s
}

/// Server commands per job between two snapshots, as text.
fn per_job(a: &Snapshot, b: &Snapshot, jobs: usize) -> String {
    let mut parts = Vec::new();
    let mut total = 0.0;
    for (name, (calls, usec)) in &b.cmds {
        let (c0, u0) = a.cmds.get(name).copied().unwrap_or((0, 0));
        let dc = calls - c0;
        if dc == 0 || name == "info" {
            continue;
        }
        let per = dc as f64 / jobs as f64;
        if !name.starts_with("eval") {
            total += per;
        }
        parts.push(format!(
            "{name} {per:.3} ({:.2} µs/call)",
            (usec - u0) as f64 / dc as f64
        ));
    }
    format!(
        "{total:.2} keyed commands/job, server CPU {:.1} µs/job, client CPU {:.1} µs/job: {}",
        (b.cpu - a.cpu) * 1e6 / jobs as f64,
        (b.client_cpu - a.client_cpu) * 1e6 / jobs as f64,
        parts.join(", ")
    )
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
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
            .release_all(&ids, "lat", &Release::Unget, T0 + 1)
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
        let runs = env("BENCH_RUNS", 3).max(1);
        let token = jobstore_api::new_token();
        let prefix = format!("bench_{}", &token[..8]);
        let mut stores = Vec::new();
        for _ in 0..claimers {
            stores.push(Arc::new(open(&url, &prefix).await));
        }
        let reference = Reference::open(&url, &format!("benchref_{}", &token[8..16]), claimers).await;
        let client = redis::Client::open(url.as_str()).expect("URL");
        let mut admin = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        println!(
            "redis store benchmark: {url}, {n} jobs, {claimers} clients, {runs} runs, prefix {prefix}"
        );

        let (mut adds, mut ref_adds, mut cas, mut ref_cas) = (vec![], vec![], vec![], vec![]);
        for run in 0..runs {
            let jt = format!("bench{run}");
            let s0 = snapshot(&mut admin).await;
            let add = add_jobs(&stores, &jt, n).await;
            let s1 = snapshot(&mut admin).await;
            let (total, ca) = claim_archive(&stores, &jt).await;
            let s2 = snapshot(&mut admin).await;
            assert_eq!(total, n, "every job claimed and archived once");
            let radd = reference.add(n).await;
            let s3 = snapshot(&mut admin).await;
            let (rtotal, rca) = reference.claim_ack().await;
            let s4 = snapshot(&mut admin).await;
            assert_eq!(rtotal, n, "every reference job claimed and acked once");
            println!(
                "run {run}: adds {add:>7.0}/s  ref {radd:>7.0}/s  ratio {:.2} | claim+archive {ca:>7.0}/s  ref {rca:>7.0}/s  ratio {:.2}",
                add / radd,
                ca / rca
            );
            if run == 0 {
                println!("  jobstore add:           {}", per_job(&s0, &s1, n));
                println!("  jobstore claim+archive: {}", per_job(&s1, &s2, n));
                println!("  reference add:          {}", per_job(&s2, &s3, n));
                println!("  reference claim+ack:    {}", per_job(&s3, &s4, n));
            }
            adds.push(add);
            ref_adds.push(radd);
            cas.push(ca);
            ref_cas.push(rca);
        }
        let (a, ra, c, rc) = (
            median(&adds),
            median(&ref_adds),
            median(&cas),
            median(&ref_cas),
        );
        println!(
            "median adds:          {a:>8.0} jobs/s, reference {ra:>8.0} jobs/s, ratio {:.2} (batches of 1,000, 100-byte payloads)",
            a / ra
        );
        println!(
            "median claim+archive: {c:>8.0} jobs/s, reference {rc:>8.0} jobs/s, ratio {:.2} (batches of 100, {claimers} claimers)",
            c / rc
        );

        let store = &stores[0];
        let big = env("BENCH_BIG", 1_000_000);
        if big > 0 {
            add_jobs(&stores, "lat10k", 10_000).await;
            let (p50, p99) = claim_latency(store, "lat10k", 300).await;
            println!("claim latency 10k: p50 {p50:>9.2?}  p99 {p99:>9.2?} (claim of 100)");
            add_jobs(&stores, "lat1m", big).await;
            let (p50, p99) = claim_latency(store, "lat1m", 300).await;
            println!(
                "claim latency {}k: p50 {p50:>9.2?}  p99 {p99:>9.2?} (claim of 100)",
                big / 1000
            );
        }

        let removed = store.drop_namespace().await.expect("drop namespace");
        reference.drop_keys().await;
        println!("(removed {removed} keys)");
    });
}
