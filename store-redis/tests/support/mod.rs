//! Private redis-server instances for tests: free ports, a temp dir, and a
//! watchdog that stops the servers when the test process ends, however it
//! ends (the servers daemonize, so nothing else would).

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Whether `redis-server` and `redis-cli` can be run.
pub fn redis_binaries() -> Result<(), String> {
    jobstore_conformance::servers::PrivateRedis::binaries()
}

/// A fresh temp dir, removed by the watchdog at exit.
pub fn temp_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "jobstore-{what}-{}-{}",
        std::process::id(),
        &jobstore_api::new_token()[..8]
    ));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// Starts a watchdog in its own session (`setsid -f`, so neither Ctrl-C to
/// the test's process group nor the test's exit takes it down): once this
/// process is gone, it sends SIGTERM to every server whose pidfile is in
/// `dir`, gives them 10 s to exit, sends SIGKILL to any still running (a
/// cluster node can outlive SIGTERM), then removes `dir`.
pub fn watchdog(dir: &Path) {
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
         pids=$(cat '{dir}'/*.pid 2>/dev/null); \
         [ -n \"$pids\" ] && kill $pids 2>/dev/null; \
         for _ in 1 2 3 4 5 6 7 8 9 10; do \
           alive=; for p in $pids; do kill -0 $p 2>/dev/null && alive=1; done; \
           [ -z \"$alive\" ] && break; sleep 1; \
         done; \
         for p in $pids; do kill -0 $p 2>/dev/null && kill -9 $p; done; \
         rm -rf '{dir}'",
        pid = std::process::id(),
        dir = dir.display()
    );
    let status = Command::new("setsid")
        .arg("-f")
        .arg("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("start the watchdog (setsid -f sh)");
    assert!(status.success(), "the watchdog did not start");
}

/// A free port `p` on 127.0.0.1 (and, with `bus`, `p + 10000` too: the
/// cluster bus port).
pub fn free_port(bus: bool) -> u16 {
    for _ in 0..1000 {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let p = l.local_addr().expect("addr").port();
        if !bus {
            return p;
        }
        if p < 55_000 && TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok() {
            return p;
        }
    }
    panic!("no free port pair found");
}

/// Starts a daemonized redis-server on `port` in `dir` (pidfile
/// `dir/<port>.pid`), with no persistence, plus `extra` arguments.
pub fn start_server(dir: &Path, port: u16, extra: &[&str]) {
    let d = dir.display().to_string();
    let status = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "yes"])
        .args(["--pidfile", &format!("{d}/{port}.pid")])
        .args(["--logfile", &format!("{d}/{port}.log")])
        .args(["--dir", &d])
        .args(extra)
        .stdout(Stdio::null())
        .status()
        .expect("run redis-server");
    assert!(
        status.success(),
        "redis-server on port {port} failed to start"
    );
    wait_for(
        || cli(port, &["ping"]).is_some_and(|o| o.trim() == "PONG"),
        "redis-server to answer",
    );
}

/// Sends SHUTDOWN NOSAVE to the server on `port`, and waits until it is gone.
pub fn shutdown(port: u16) {
    let _ = cli(port, &["shutdown", "nosave"]);
    wait_for(|| cli(port, &["ping"]).is_none(), "redis-server to stop");
}

/// `redis-cli -p port args...`: its stdout if it succeeded.
pub fn cli(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.success() && !text.contains("Could not connect")).then_some(text)
}

/// Polls `cond` for up to 20 s.
pub fn wait_for(mut cond: impl FnMut() -> bool, what: &str) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Six cluster-enabled servers made into a cluster (3 primaries, 3
/// replicas); returns the `redis+cluster://` URL.
pub fn start_cluster() -> String {
    let dir = temp_dir("redis-cluster");
    watchdog(&dir);
    let ports: Vec<u16> = (0..6).map(|_| free_port(true)).collect();
    for &p in &ports {
        let conf = format!("{}/nodes-{p}.conf", dir.display());
        start_server(
            &dir,
            p,
            &["--cluster-enabled", "yes", "--cluster-config-file", &conf],
        );
    }
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let out = Command::new("redis-cli")
        .arg("--cluster")
        .arg("create")
        .args(&addrs)
        .args(["--cluster-replicas", "1", "--cluster-yes"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("run redis-cli --cluster create");
    assert!(
        out.status.success(),
        "redis-cli --cluster create failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    for &p in &ports {
        wait_for(
            || cli(p, &["cluster", "info"]).is_some_and(|o| o.contains("cluster_state:ok")),
            "the cluster to be ready",
        );
    }
    format!("redis+cluster://{}", addrs.join(","))
}

/// `drop_namespace` removes every key of its namespace (more keys than one
/// SCAN page, over several jobtypes: several slots in a cluster) and no
/// key of another namespace. `url` is the store URL; `seeds` the servers to
/// look for leftover keys on (`redis://` URLs; replicas are passed over).
pub async fn drop_namespace_removes_only_its_own(url: &str, seeds: &[String]) {
    use jobstore_api::{JobResult, JobStore, JobStoreExt, NewJob, ResultCode};
    use jobstore_conformance::services::unique_namespace;
    use jobstore_redis::{RedisOptions, RedisStore};

    let (pa, pb) = (unique_namespace(), unique_namespace());
    let a = RedisStore::connect_with(url, RedisOptions::new().prefix(pa.clone()))
        .await
        .unwrap();
    let b = RedisStore::connect_with(url, RedisOptions::new().prefix(pb.clone()))
        .await
        .unwrap();
    let t0 = 1_700_000_000_000;
    for chunk in 0..12 {
        let jobs: Vec<NewJob> = (0..1000)
            .map(|i| NewJob::new(format!("j{chunk}-{i}"), format!("t{}", i % 5), "x"))
            .collect();
        a.add_jobs(&jobs, t0).await.unwrap();
    }
    // Leases and archived jobs have keys of their own.
    let got = a
        .claim_jobs("t0", 100, "own", Duration::from_secs(60), t0)
        .await
        .unwrap();
    let ids: Vec<String> = got.into_iter().map(|j| j.id).collect();
    a.archive_jobs(&ids, "own", JobResult::new(ResultCode::Ok, 200), t0)
        .await
        .unwrap();
    a.claim_jobs("t1", 100, "own", Duration::from_secs(60), t0)
        .await
        .unwrap();
    b.add_jobs(&[NewJob::new("kept", "t0", "y")], t0)
        .await
        .unwrap();

    let removed = a.drop_namespace().await.unwrap();
    assert!(removed >= 12_000, "{removed} keys removed");
    let mut left = 0;
    for seed in seeds {
        let client = redis::Client::open(seed.as_str()).unwrap();
        let mut c = client.get_multiplexed_async_connection().await.unwrap();
        // A replica may lag behind its primary's UNLINKs: primaries only.
        let role: Vec<redis::Value> = redis::cmd("ROLE").query_async(&mut c).await.unwrap();
        if !matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master") {
            continue;
        }
        for pattern in [
            format!("{{{pa}}}*"),
            format!("{{{pa}:*"),
            format!("{{{pa}|*"),
        ] {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(&pattern)
                .query_async(&mut c)
                .await
                .unwrap();
            left += keys.len();
        }
    }
    assert_eq!(left, 0, "keys of the dropped namespace are left");
    let kept = b
        .get_job("kept")
        .await
        .unwrap()
        .expect("the other namespace's job");
    assert_eq!(kept.data, b"y");
    b.drop_namespace().await.unwrap();
}
