//! The real `jobstore` binary, measured from outside, per backend:
//!
//! * **drain**: `BENCH_JOBS` (20,000) no-op jobs already in the store (added
//!   through an intake-only daemon), then an executing daemon started on
//!   them with a long-lived worker; jobs/s until every one is archived;
//! * **add-to-start**: single-job adds at `BENCH_RATE` (100) per second for
//!   5 s to a running daemon; the time from sending the add to the worker
//!   receiving the job, p50 and p99.
//!
//! `cargo bench -p jobstore-daemon --bench daemon`. `BENCH_BACKENDS`
//! (default `sqlite,postgres,redis`) picks the stores (PostgreSQL and Redis
//! at the test addresses, `JOBSTORE_TEST_POSTGRES_URL` and
//! `JOBSTORE_TEST_REDIS_URL`), `BENCH_RUNS` (3) the repetitions; figures are
//! medians with min and max. Needs `python3` for the worker.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_jobstore");
const TOKEN: &str = "bench-admin-token-0123456789";

/// A no-op worker: answers each job with its receipt time (µs).
const WORKER: &str = r#"python3 -c '
import sys, time
w = sys.stdout.write
for line in sys.stdin:
    w("t %d\nD: 200\n" % (time.time_ns() // 1000))
    sys.stdout.flush()
'"#;

fn env_or<T: std::str::FromStr>(k: &str, d: T) -> T {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

struct Daemon {
    child: Child,
    url: String,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

// The child is waited for when the returned `Daemon` is dropped.
#[allow(clippy::zombie_processes)]
fn start(dir: &Path, store: Option<&str>, args: &[&str]) -> Daemon {
    let addr_file = dir.join("addr");
    let _ = std::fs::remove_file(&addr_file);
    let mut cmd = Command::new(BIN);
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--allow-process-handlers",
    ])
    .arg("--addr-file")
    .arg(&addr_file)
    .arg("--data-dir")
    .arg(dir)
    .args(args)
    .env("JOBSTORE_ADMIN_TOKEN", TOKEN)
    .env("JOBSTORE_LOG", "warn")
    .stdout(Stdio::null())
    .stderr(Stdio::inherit());
    if let Some(s) = store {
        cmd.arg("--store").arg(s);
    }
    let mut child = cmd.spawn().expect("start jobstore");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(a) = std::fs::read_to_string(&addr_file)
            && !a.trim().is_empty()
        {
            return Daemon {
                child,
                url: format!("http://{}", a.trim()),
            };
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("daemon did not start");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stop(mut d: Daemon) {
    let _ = Command::new("kill")
        .args(["-TERM", &d.child.id().to_string()])
        .status();
    let _ = d.child.wait();
}

async fn post(c: &reqwest::Client, url: String, body: reqwest::Body, json_ct: bool) -> Value {
    let mut r = c.post(url).bearer_auth(TOKEN).body(body);
    if json_ct {
        r = r.header("content-type", "application/json");
    }
    let r = r.send().await.expect("request");
    assert!(r.status().is_success(), "{}", r.status());
    r.json().await.expect("json")
}

async fn get(c: &reqwest::Client, url: String) -> Value {
    c.get(url)
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json")
}

async fn set_worker(c: &reqwest::Client, url: &str) {
    let spec = json!({"method": "process", "body": WORKER, "eid": "bench"});
    post(
        c,
        format!("{url}/acme/handler/add/noop/add"),
        spec.to_string().into(),
        true,
    )
    .await;
}

/// Jobs this daemon finished as ok, from its metrics (cheap, unlike job
/// counts, which scan the store).
async fn archived_ok(c: &reqwest::Client, url: &str) -> u64 {
    let text = c
        .get(format!("{url}/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    text.lines()
        .find_map(|l| l.strip_prefix("jobstore_jobs_finished_total{outcome=\"ok\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

const EXEC_ARGS: [&str; 6] = [
    "--max-running",
    "256",
    "--claim-batch",
    "128",
    "--max-running-per-jobtype",
    "256",
];

/// Jobs/s of a daemon draining `n` stored jobs.
async fn drain(store: Option<&str>, n: usize) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let c = reqwest_client();
    let intake = start(dir.path(), store, &["--no-execute"]);
    set_worker(&c, &intake.url).await;
    let body: String = (0..1000).map(|i| format!("{i}\n")).collect();
    for _ in 0..n.div_ceil(1000) {
        post(
            &c,
            format!("{}/acme/job/noop/add", intake.url),
            body.clone().into(),
            false,
        )
        .await;
    }
    // Wait until ingest has put them all in the store.
    loop {
        let h = get(&c, format!("{}/health", intake.url)).await;
        if h["journal"]["backlog_records"] == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop(intake);
    let total = (n.div_ceil(1000) * 1000) as u64;
    let started = Instant::now();
    let d = start(dir.path(), store, &EXEC_ARGS);
    loop {
        if archived_ok(&c, &d.url).await >= total {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    stop(d);
    total as f64 / secs
}

/// Add-to-start latencies (ms) at `rate` adds per second for 5 s.
async fn add_to_start(store: Option<&str>, rate: u64) -> Vec<f64> {
    let dir = tempfile::tempdir().unwrap();
    let c = reqwest_client();
    let d = start(dir.path(), store, &EXEC_ARGS);
    set_worker(&c, &d.url).await;
    // Let the worker context start, so the first job does not pay for it.
    post(
        &c,
        format!("{}/acme/job/noop/add", d.url),
        "warm".into(),
        false,
    )
    .await;
    while archived_ok(&c, &d.url).await < 1 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut sent: HashMap<String, u128> = HashMap::new();
    let every = Duration::from_micros(1_000_000 / rate);
    let mut tick = tokio::time::interval(every);
    for _ in 0..rate * 5 {
        tick.tick().await;
        let at = now_us();
        let v = post(
            &c,
            format!("{}/acme/job/noop/add", d.url),
            "x".into(),
            false,
        )
        .await;
        sent.insert(v["ids"][0].as_str().unwrap().to_owned(), at);
    }
    let mut lat = Vec::new();
    for (id, at) in sent {
        let job = loop {
            let j = get(&c, format!("{}/acme/jobs/{id}", d.url)).await;
            if j["state"] == "archived" {
                break j;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let out = job["result"]["output"].as_str().unwrap_or_default();
        let start: u128 = out
            .split_whitespace()
            .nth(1)
            .and_then(|t| t.parse().ok())
            .expect("worker timestamp");
        lat.push(start.saturating_sub(at) as f64 / 1000.0);
    }
    stop(d);
    lat.sort_by(f64::total_cmp);
    lat
}

fn now_us() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros()
}

fn reqwest_client() -> reqwest::Client {
    jobstore_daemon::http_client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn store_url(backend: &str) -> Option<Option<String>> {
    let ns = format!("bench_{}", &jobstore_api::new_token()[..8]);
    match backend {
        "sqlite" => Some(None),
        "postgres" => Some(Some(format!(
            "{}?schema={ns}",
            std::env::var("JOBSTORE_TEST_POSTGRES_URL")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
        ))),
        "redis" => Some(Some(format!(
            "{}?prefix={ns}",
            std::env::var("JOBSTORE_TEST_REDIS_URL")
                .unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
        ))),
        _ => None,
    }
}

/// Drops what a run left in a shared server.
async fn cleanup(url: Option<&str>) {
    let Some(url) = url else { return };
    if url.starts_with("postgres") {
        use sqlx::Connection;
        let (base, schema) = url.split_once("?schema=").unwrap();
        if let Ok(mut c) = sqlx::PgConnection::connect(base).await {
            let sql = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
            let _ = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut c).await;
        }
    } else if url.starts_with("redis")
        && let Ok(s) = jobstore_redis::RedisStore::connect(url).await
    {
        let _ = s.drop_namespace().await;
    }
}

fn main() {
    let backends =
        std::env::var("BENCH_BACKENDS").unwrap_or_else(|_| "sqlite,postgres,redis".into());
    let runs: usize = env_or("BENCH_RUNS", 3);
    let n: usize = env_or("BENCH_JOBS", 20_000);
    let rate: u64 = env_or("BENCH_RATE", 100);
    let rt = tokio::runtime::Runtime::new().unwrap();
    for backend in backends.split(',').map(str::trim) {
        let mut drains = Vec::new();
        let mut p50s = Vec::new();
        let mut p99s = Vec::new();
        for _ in 0..runs {
            let Some(url) = store_url(backend) else {
                eprintln!("unknown backend {backend}");
                break;
            };
            drains.push(rt.block_on(drain(url.as_deref(), n)));
            rt.block_on(cleanup(url.as_deref()));
            let url = store_url(backend).unwrap();
            let lat = rt.block_on(add_to_start(url.as_deref(), rate));
            rt.block_on(cleanup(url.as_deref()));
            p50s.push(pct(&lat, 0.5));
            p99s.push(pct(&lat, 0.99));
        }
        if drains.is_empty() {
            continue;
        }
        let (d, dmin, dmax) = median(drains);
        let (p50, p50min, p50max) = median(p50s);
        let (p99, p99min, p99max) = median(p99s);
        println!(
            "{backend}: drain {d:.0} jobs/s (min {dmin:.0}, max {dmax:.0}) over {n} no-op jobs in a long-lived worker context; \
             add-to-start at {rate}/s: p50 {p50:.2} ms ({p50min:.2}–{p50max:.2}), p99 {p99:.2} ms ({p99min:.2}–{p99max:.2}); {runs} runs"
        );
    }
}
