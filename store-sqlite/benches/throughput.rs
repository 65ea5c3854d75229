//! Throughput of the SQLite store: adds per second, and claim + archive
//! jobs per second in batches of 100, on a fresh file in the temp dir.
//!
//! ```sh
//! cargo bench -p jobstore-sqlite --bench throughput [-- JOBS [CLAIMERS]]
//! ```
//! Environment: `JOBSTORE_BENCH_SYNCHRONOUS=normal` to measure
//! `synchronous = NORMAL` instead of the default `FULL`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jobstore_api::{JobRelease, JobResult, JobStore, NewJob, Release, now_millis};
use jobstore_sqlite::SqliteStore;

const BATCH: usize = 100;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let jobs: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let claimers: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(4);
    let sync = std::env::var("JOBSTORE_BENCH_SYNCHRONOUS").unwrap_or_else(|_| "full".into());
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(run(jobs, claimers, &sync));
}

async fn run(jobs: usize, claimers: usize, sync: &str) {
    let path =
        std::env::temp_dir().join(format!("jobstore-bench-{}.db", jobstore_api::new_token()));
    let url = format!("sqlite://{}?synchronous={sync}", path.display());
    let store = Arc::new(SqliteStore::connect(&url).await.expect("open"));
    let now = now_millis();

    // Adds: batches of 1,000 jobs with 64-byte payloads.
    let start = Instant::now();
    for chunk in 0..jobs.div_ceil(1_000) {
        let batch: Vec<NewJob> = (chunk * 1_000..((chunk + 1) * 1_000).min(jobs))
            .map(|i| {
                NewJob::new(format!("job-{i:09}"), "bench", vec![b'x'; 64]).priority((i % 5) as i32)
            })
            .collect();
        store.add_jobs(&batch, now).await.expect("add");
    }
    let add_secs = start.elapsed().as_secs_f64();

    // Claim + archive in batches of 100, `claimers` concurrent tasks.
    let start = Instant::now();
    let mut tasks = Vec::new();
    for n in 0..claimers {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let owner = format!("bench-{n}");
            let mut done = 0usize;
            loop {
                let got = store
                    .claim_jobs("bench", BATCH, &owner, Duration::from_secs(300), now)
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
                    .release_jobs(&releases, &owner, now)
                    .await
                    .expect("archive");
                done += rel.len();
            }
        }));
    }
    let mut done = 0;
    for t in tasks {
        done += t.await.expect("claimer");
    }
    let claim_secs = start.elapsed().as_secs_f64();
    assert_eq!(done, jobs, "every job claimed and archived once");
    println!(
        "sqlite synchronous={sync} jobs={jobs} claimers={claimers}: adds {:.0}/s, claim+archive (batches of {BATCH}) {:.0} jobs/s",
        jobs as f64 / add_secs,
        done as f64 / claim_secs
    );
    store.close().await;
    for suffix in ["", "-wal", "-shm"] {
        let mut f = path.clone().into_os_string();
        f.push(suffix);
        let _ = std::fs::remove_file(f);
    }
}
