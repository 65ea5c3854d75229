//! Server time of the hot scripts: `claim.lua` and `release.lua` (archive)
//! of `BATCH` jobs, as the server's slow log records each `EVALSHA`
//! (threshold 0, so every call is logged with its duration in µs), plus
//! the server's CPU (`INFO cpu`) over the measured calls.
//!
//! ```text
//! redis-server --port 6390 --bind 127.0.0.1 --save "" --appendonly no --daemonize yes
//! CARGO_TARGET_DIR=... cargo run -p jobstore-redis --example claim_profile -- \
//!     redis://127.0.0.1:6390 [rounds] [retries before the measured claim]
//! ```
//!
//! Use a server of its own: the slow log and `INFO` are server-wide.

use std::time::Duration;

use jobstore_api::{JobRelease, JobResult, JobStore, NewJob, Release, ResultCode};
use jobstore_redis::{RedisOptions, RedisStore};

const BATCH: usize = 100;

async fn cpu(c: &mut redis::aio::MultiplexedConnection) -> f64 {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(c).await.unwrap();
    info.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k == "used_cpu_user" || k == "used_cpu_sys").then(|| v.trim().parse::<f64>().ok())?
        })
        .sum()
}

/// The 10th percentile and the median.
fn p10_p50(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[v.len() / 10], v[v.len() / 2])
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let url = args.get(1).cloned().expect("redis URL");
    let rounds: usize = args.get(2).map_or(30, |s| s.parse().unwrap());
    let retries: usize = args.get(3).map_or(0, |s| s.parse().unwrap());
    let prefix = format!("prof{}", &jobstore_api::new_token()[..8]);
    let s = RedisStore::connect_with(&url, RedisOptions::new().prefix(&prefix))
        .await
        .unwrap();
    let mut c = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for (k, v) in [
        ("slowlog-log-slower-than", "0"),
        ("slowlog-max-len", "1000"),
    ] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let lease = Duration::from_secs(600);
    let mut now = 1_700_000_000_000;
    let (mut claims, mut releases, mut cpus) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let jobs: Vec<NewJob> = (0..BATCH)
            .map(|i| NewJob::new(format!("j{r}-{i}"), "p", vec![b'x'; 100]))
            .collect();
        s.add_jobs(&jobs, now).await.unwrap();
        for _ in 0..retries {
            now += 1;
            let got = s.claim_jobs("p", BATCH, "w1", lease, now).await.unwrap();
            let rel: Vec<JobRelease> = got
                .iter()
                .map(|j| {
                    JobRelease::new(
                        j.id.clone(),
                        Release::Retry {
                            delay: Duration::ZERO,
                        },
                    )
                })
                .collect();
            s.release_jobs(&rel, "w1", now).await.unwrap();
        }
        now += 1;
        let _: () = redis::cmd("SLOWLOG")
            .arg("RESET")
            .query_async(&mut c)
            .await
            .unwrap();
        let before = cpu(&mut c).await;
        let got = s.claim_jobs("p", BATCH, "w1", lease, now).await.unwrap();
        assert_eq!(got.len(), BATCH);
        let rel: Vec<JobRelease> = got
            .iter()
            .map(|j| {
                JobRelease::new(
                    j.id.clone(),
                    Release::Archive(JobResult::new(ResultCode::Ok, 200)),
                )
            })
            .collect();
        assert_eq!(s.release_jobs(&rel, "w1", now).await.unwrap().len(), BATCH);
        cpus.push((cpu(&mut c).await - before) * 1e6);
        let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(-1)
            .query_async(&mut c)
            .await
            .unwrap();
        for e in log {
            let redis::Value::Array(e) = e else { continue };
            let us: i64 = redis::from_redis_value(e[2].clone()).unwrap();
            let argv: Vec<Vec<u8>> = redis::from_redis_value(e[3].clone()).unwrap();
            // told apart by their number of keys: claim.lua 4, release.lua 10
            if argv.len() > 2 && argv[0].eq_ignore_ascii_case(b"evalsha") {
                match &argv[2][..] {
                    b"4" => claims.push(us as f64),
                    b"10" => releases.push(us as f64),
                    _ => {}
                }
            }
        }
    }
    s.drop_namespace().await.unwrap();
    let (n, m) = (claims.len(), releases.len());
    let (c10, c50) = p10_p50(&mut claims);
    let (r10, r50) = p10_p50(&mut releases);
    let (_, cpu) = p10_p50(&mut cpus);
    println!(
        "{rounds} rounds of {BATCH} jobs, {} events before the claim: \
         claim p10 {c10:.0} p50 {c50:.0} µs ({n} calls), \
         release (archive) p10 {r10:.0} p50 {r50:.0} µs ({m} calls), \
         server CPU claim+release p50 {cpu:.0} µs",
        1 + 2 * retries,
    );
}
