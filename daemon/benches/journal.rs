//! Journal append throughput and acknowledgement latency, on the real disk
//! (fsync on):
//!
//! * single-record appends from one caller, one after the other;
//! * 100-record appends from 8 concurrent callers.
//!
//! `cargo bench -p jobstore-daemon --bench journal`. The journal lives in a
//! temporary directory under `$JOURNAL_BENCH_DIR` (default: the system's
//! temporary directory); `JOURNAL_BENCH_SECS` sets each case's duration.

use std::time::{Duration, Instant};

use jobstore_daemon::journal::{Journal, JournalOptions, Record};

fn record(caller: usize, n: usize) -> Record {
    Record {
        id: format!("bench-{caller:02}-{n:010}"),
        jobtype: "bench-email".into(),
        priority: (n % 10) as i32,
        run_at: None,
        data: format!(
            r#"{{"to":"user{n}@example.com","subject":"hello {n}","body":"a short job payload for the journal bench"}}"#
        )
        .into_bytes(),
        tags: Vec::new(),
        trace: None,
        unique: None,
        repeat: None,
        depends_on: Vec::new(),
        on_dependency_failure: Default::default(),
        with_outputs: false,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn report(case: &str, appends: usize, records: usize, elapsed: Duration, mut lat: Vec<Duration>) {
    lat.sort_unstable();
    let secs = elapsed.as_secs_f64();
    println!(
        "{case}: {appends} appends, {:.0} appends/s, {:.0} records/s, p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        appends as f64 / secs,
        records as f64 / secs,
        percentile(&lat, 0.50).as_secs_f64() * 1e3,
        percentile(&lat, 0.99).as_secs_f64() * 1e3,
        lat.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
}

fn open(base: &std::path::Path) -> (tempfile::TempDir, Journal) {
    let dir = tempfile::tempdir_in(base).expect("temporary directory");
    let journal = Journal::open(JournalOptions::new(dir.path())).expect("open the journal");
    (dir, journal)
}

async fn single(base: &std::path::Path, run: Duration) {
    let (_dir, journal) = open(base);
    let mut lat = Vec::new();
    let start = Instant::now();
    let mut n = 0;
    while start.elapsed() < run {
        let t = Instant::now();
        journal.append(vec![record(0, n)]).await.expect("append");
        lat.push(t.elapsed());
        n += 1;
    }
    let elapsed = start.elapsed();
    let stats = journal.stats();
    report("1 caller x 1 record", n, n, elapsed, lat);
    println!(
        "  fsyncs {}, group writes {}",
        stats.fsyncs, stats.group_writes
    );
    journal.close().await.expect("close");
}

async fn concurrent(base: &std::path::Path, run: Duration, callers: usize, batch: usize) {
    let (_dir, journal) = open(base);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for caller in 0..callers {
        let journal = journal.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut n = 0;
            while start.elapsed() < run {
                let records = (0..batch).map(|k| record(caller, n + k)).collect();
                let t = Instant::now();
                journal.append(records).await.expect("append");
                lat.push(t.elapsed());
                n += batch;
            }
            lat
        }));
    }
    let mut lat = Vec::new();
    for task in tasks {
        lat.extend(task.await.expect("caller"));
    }
    let elapsed = start.elapsed();
    let appends = lat.len();
    let stats = journal.stats();
    report(
        &format!("{callers} callers x {batch} records"),
        appends,
        appends * batch,
        elapsed,
        lat,
    );
    println!(
        "  fsyncs {}, group writes {}, {:.1} MB/s",
        stats.fsyncs,
        stats.group_writes,
        stats.appended_bytes as f64 / elapsed.as_secs_f64() / 1e6
    );
    journal.close().await.expect("close");
}

fn main() {
    let base = std::env::var_os("JOURNAL_BENCH_DIR")
        .map(Into::into)
        .unwrap_or_else(std::env::temp_dir);
    let run = Duration::from_secs_f64(
        std::env::var("JOURNAL_BENCH_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(3.0),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        single(&base, run).await;
        concurrent(&base, run, 8, 100).await;
    });
}
