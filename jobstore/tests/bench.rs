//! `jobstore bench`, every mode on every backend with a few hundred jobs,
//! through the real binary: the JSON report has its figures, they are
//! plausible (every job accounted for, rates above zero, latencies
//! ordered), and the bench's namespace is gone afterwards.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};

use jobstore_conformance::services;
use rstest::rstest;
use serde_json::Value;
use support::*;

/// A store URL to point the bench at, or `None` when the backend's server
/// is missing (skipped, or a failure when required).
async fn base_url(backend: &str, dir: &Path) -> Option<String> {
    match backend {
        "memory" => Some("memory://".into()),
        "sqlite" => Some(format!("sqlite://{}", dir.join("jobs.db").display())),
        "postgres" => services::postgres_url().await,
        "redis" => services::redis_url().await,
        other => panic!("unknown backend {other}"),
    }
}

fn mode_args(mode: &str) -> Vec<&'static str> {
    match mode {
        "store" => vec!["--jobs", "400", "--jobtypes", "2", "--batch", "50"],
        "reference" => vec!["--jobs", "400", "--batch", "50"],
        "drain" => vec!["--jobs", "300", "--jobtypes", "2", "--add-batch", "128"],
        "e2e" => vec![
            "--jobs",
            "200",
            "--rate",
            "100",
            "--rate-duration",
            "500ms",
            "--clients",
            "4",
            "--lines",
            "20",
        ],
        "intake" => vec![
            "--jobs",
            "200",
            "--single-jobs",
            "150",
            "--clients",
            "4",
            "--lines",
            "50",
        ],
        "scale" => vec![
            "--sizes",
            "300,100",
            "--archive",
            "200",
            "--samples",
            "10",
            "--batch",
            "20",
        ],
        "soak" => vec![
            "--duration",
            "2s",
            "--interval",
            "1s",
            "--rate",
            "300",
            "--backlog",
            "200",
            "--retention",
            "500ms",
            "--claimers",
            "2",
            "--batch",
            "25",
        ],
        other => panic!("unknown mode {other}"),
    }
}

fn bench(url: &str, data_dir: &Path, mode: &str) -> Value {
    bench_with(url, data_dir, mode, &[])
}

fn bench_with(url: &str, data_dir: &Path, mode: &str, extra: &[&str]) -> Value {
    let out = Command::new(BIN)
        .arg("bench")
        .arg(mode)
        .arg("--json")
        .arg("--store")
        .arg(url)
        .arg("--data-dir")
        .arg(data_dir)
        .args(mode_args(mode))
        .args(extra)
        .env_remove("JOBSTORE_STORE")
        .stdin(Stdio::null())
        .output()
        .expect("run jobstore bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "jobstore bench {mode} failed ({:?}):\n{stdout}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

fn num(v: &Value, what: &str) -> f64 {
    v.as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"))
}

/// A latency summary with `calls` calls, ordered quantiles, all above 0.
fn latency(v: &Value, what: &str, calls: Option<u64>) {
    let c = v["calls"].as_u64().unwrap_or_else(|| panic!("{what}: {v}"));
    if let Some(expect) = calls {
        assert_eq!(c, expect, "{what} calls: {v}");
    }
    assert!(c > 0, "{what}: no calls");
    let (p50, p99, max) = (
        num(&v["p50_ms"], what),
        num(&v["p99_ms"], what),
        num(&v["max_ms"], what),
    );
    assert!(
        0.0 < p50 && p50 <= p99 && p99 <= max && max < 60_000.0,
        "{what}: {v}"
    );
}

fn rate(v: &Value, what: &str) {
    let r = num(v, what);
    assert!(r > 0.0 && r.is_finite(), "{what} is {r}");
}

/// CPU per job: the bench process's own in the modes that time store
/// calls or a daemon, and the server's where the backend reports it
/// (Redis only).
fn check_cpu(mode: &str, backend: &str, f: &Value) {
    let own = match mode {
        "store" | "reference" => "client_cpu_us_per_job",
        "drain" | "e2e" => "daemon_cpu_us_per_job",
        _ => return,
    };
    rate(&f[own], own);
    if backend == "redis" {
        rate(&f["server_cpu_us_per_job"], "server CPU per job");
    } else {
        assert!(f.get("server_cpu_us_per_job").is_none(), "{f}");
    }
}

/// PostgreSQL's soak windows carry the job table's statistics (the dead
/// tuples that vacuum has not yet removed); other backends' do not.
fn check_table_stats(backend: &str, f: &Value) {
    for w in f["windows"].as_array().expect("windows") {
        if backend == "postgres" {
            let t = &w["table"];
            for k in ["live_tuples", "dead_tuples", "vacuums", "autovacuums"] {
                assert!(t[k].as_i64().is_some_and(|v| v >= 0), "{k} in {w}");
            }
        } else {
            assert!(w.get("table").is_none(), "{w}");
        }
    }
}

fn check_figures(mode: &str, f: &Value) {
    match mode {
        "store" => {
            assert_eq!(f["jobs_added"], 400);
            assert_eq!(f["jobs_archived"], 400);
            rate(&f["adds_per_s"], "adds/s");
            rate(&f["claim_archive_per_s"], "claim+archive/s");
            latency(&f["add_latency"], "add", Some(1));
            // 2 jobtypes × 200 jobs in batches of 50: at least 8 full
            // claims, each archived in one release call.
            latency(&f["claim_latency"], "claim", None);
            let releases = f["release_latency"]["calls"].as_u64().unwrap();
            assert!(releases >= 8, "{f}");
            latency(&f["release_latency"], "release", None);
        }
        "reference" => {
            assert_eq!(f["jobs_added"], 400);
            assert_eq!(f["jobs_archived"], 400);
            rate(&f["adds_per_s"], "adds/s");
            rate(&f["claim_archive_per_s"], "claim+ack/s");
            latency(&f["add_latency"], "add", Some(1));
            latency(&f["claim_latency"], "claim", None);
            assert!(f["release_latency"]["calls"].as_u64().unwrap() >= 8, "{f}");
        }
        "drain" => {
            assert_eq!(f["jobs"], 300);
            assert_eq!(f["jobs_archived"], 300);
            rate(&f["jobs_per_s"], "jobs/s");
            rate(&f["jobs_per_s_with_start"], "jobs/s with start");
            assert!(num(&f["jobs_per_s"], "") >= num(&f["jobs_per_s_with_start"], ""));
        }
        "e2e" => {
            // 1 warm-up, 50 at 100/s for 0.5 s, 200 at full speed in bodies of 20.
            assert_eq!(f["jobs_archived"], 251);
            rate(&f["jobs_per_s"], "jobs/s");
            // One add every 10 ms, unless the adds are slower than that.
            let achieved = num(&f["rate_achieved_per_s"], "rate");
            assert!(0.0 < achieved && achieved <= 110.0, "{f}");
            latency(&f["add_to_start_at_rate"], "add-to-start at rate", Some(50));
            latency(&f["ack_latency_at_rate"], "ack at rate", Some(50));
            latency(&f["add_to_start_full_speed"], "add-to-start", Some(200));
            // 200 jobs in bodies of 20 lines: 10 requests.
            latency(&f["ack_latency_full_speed"], "ack", Some(10));
        }
        "intake" => {
            // 150 single adds from one client, 150 from 4, 200 in bodies.
            assert_eq!(f["jobs_acknowledged"], 500);
            assert_eq!(f["jobs_in_store"], 500);
            for k in [
                "single_adds_per_s",
                "concurrent_adds_per_s",
                "bodies_jobs_per_s",
            ] {
                rate(&f[k], k);
            }
            latency(&f["single_ack_latency"], "single", Some(150));
            latency(&f["concurrent_ack_latency"], "concurrent", Some(150));
            latency(&f["bodies_ack_latency"], "bodies", Some(4));
        }
        "scale" => {
            let points = f["points"].as_array().expect("points");
            let shape: Vec<(u64, u64)> = points
                .iter()
                .map(|p| {
                    (
                        p["waiting"].as_u64().unwrap(),
                        p["archived"].as_u64().unwrap(),
                    )
                })
                .collect();
            assert_eq!(shape, [(100, 0), (300, 0), (300, 200)]);
            for p in points {
                latency(&p["claim_latency"], "claim", Some(10));
            }
            rate(&f["p50_largest_to_smallest"], "ratio");
            rate(&f["p50_with_archive_to_without"], "ratio");
        }
        "soak" => {
            let windows = f["windows"].as_array().expect("windows");
            assert_eq!(windows.len(), 2, "{f}");
            for w in windows {
                latency(&w["claim_latency"], "claim", None);
                // The backlog stands: claims take what adds bring.
                let waiting = w["waiting"].as_u64().unwrap();
                assert!((200..=200 + 300).contains(&waiting), "{w}");
            }
            let added = f["jobs_added"].as_u64().unwrap();
            let archived = f["jobs_archived"].as_u64().unwrap();
            assert!(archived > 0 && archived <= added, "{f}");
            // About 300/s for 2 s.
            assert!((300..=700).contains(&added), "{f}");
            rate(&f["claim_p99_first_window_ms"], "p99");
            assert!(f["claim_p99_within_2x"].is_boolean());
        }
        other => panic!("unknown mode {other}"),
    }
}

/// The bench's namespace no longer holds anything.
async fn namespace_gone(backend: &str, url: &str, dir: &Path, ns: &str) {
    match backend {
        "sqlite" => {
            let left: Vec<_> = std::fs::read_dir(dir)
                .unwrap()
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(ns))
                .collect();
            assert!(left.is_empty(), "left behind: {left:?}");
        }
        "postgres" => {
            use sqlx::Connection;
            let mut c = sqlx::PgConnection::connect(url).await.unwrap();
            // The store's schema, and the reference queue's.
            let (n,): (i64,) = sqlx::query_as(
                "SELECT count(*) FROM information_schema.schemata WHERE schema_name LIKE $1 || '%'",
            )
            .bind(ns)
            .fetch_one(&mut c)
            .await
            .unwrap();
            assert_eq!(n, 0, "schema {ns} is still there");
        }
        "redis" => {
            let client = redis::Client::open(url).unwrap();
            let mut c = client.get_multiplexed_async_connection().await.unwrap();
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{{{ns}*"))
                .query_async(&mut c)
                .await
                .unwrap();
            assert!(keys.is_empty(), "keys left behind: {keys:?}");
        }
        _ => {}
    }
}

#[rstest]
fn bench_modes(
    #[values("memory", "sqlite", "postgres", "redis")] backend: &'static str,
    #[values("store", "drain", "e2e", "intake", "scale", "soak")] mode: &'static str,
) {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let Some(url) = base_url(backend, dir.path()).await else {
            return;
        };
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let report = {
            let (url, data) = (url.clone(), data.clone());
            tokio::task::spawn_blocking(move || bench(&url, &data, mode))
                .await
                .unwrap()
        };
        assert_eq!(report["mode"], mode, "{report}");
        assert_eq!(report["backend"], backend, "{report}");
        let ns = report["namespace"].as_str().expect("namespace").to_owned();
        assert!(ns.starts_with("bench_"), "{ns}");
        assert!(report["parameters"].is_object(), "{report}");
        assert!(num(&report["seconds"], "seconds") > 0.0);
        if mode == "store" {
            assert_eq!(report["parameters"]["release"], "archive", "{report}");
        }
        check_figures(mode, &report["figures"]);
        check_cpu(mode, backend, &report["figures"]);
        if mode == "soak" {
            check_table_stats(backend, &report["figures"]);
        }
        namespace_gone(backend, &url, dir.path(), &ns).await;
        // The daemons' journals went with the run.
        assert_eq!(std::fs::read_dir(&data).unwrap().count(), 0);
    });
}

/// `store --unique`: every job carries a key of its own; all are added,
/// claimed and archived, and the report says the run was keyed.
#[rstest]
fn store_mode_with_unique_keys(
    #[values("memory", "sqlite", "postgres", "redis")] backend: &'static str,
) {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let Some(url) = base_url(backend, dir.path()).await else {
            return;
        };
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let report = {
            let (url, data) = (url.clone(), data.clone());
            tokio::task::spawn_blocking(move || bench_with(&url, &data, "store", &["--unique"]))
                .await
                .unwrap()
        };
        assert_eq!(report["parameters"]["unique"], true, "{report}");
        check_figures("store", &report["figures"]);
        let ns = report["namespace"].as_str().expect("namespace").to_owned();
        namespace_gone(backend, &url, dir.path(), &ns).await;
    });
}

/// `store --repeat`: every job repeats; each is claimed once and released
/// with a repeat, none archived, and the report says which release it used.
#[rstest]
fn store_mode_with_repeat(
    #[values("memory", "sqlite", "postgres", "redis")] backend: &'static str,
) {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let Some(url) = base_url(backend, dir.path()).await else {
            return;
        };
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let report = {
            let (url, data) = (url.clone(), data.clone());
            tokio::task::spawn_blocking(move || bench_with(&url, &data, "store", &["--repeat"]))
                .await
                .unwrap()
        };
        assert_eq!(report["parameters"]["release"], "repeat", "{report}");
        let f = &report["figures"];
        assert_eq!(f["jobs_added"], 400, "{f}");
        assert_eq!(f["jobs_repeated"], 400, "{f}");
        assert_eq!(f["jobs_archived"], 0, "{f}");
        rate(&f["adds_per_s"], "adds/s");
        rate(&f["claim_archive_per_s"], "claim+repeat/s");
        assert!(f["release_latency"]["calls"].as_u64().unwrap() >= 8, "{f}");
        let ns = report["namespace"].as_str().expect("namespace").to_owned();
        namespace_gone(backend, &url, dir.path(), &ns).await;
    });
}

/// `soak --hold-xmin` on PostgreSQL keeps a transaction open beside the
/// load, of the kind asked (a transaction id, or a snapshot only), seen
/// in `pg_stat_activity` while the soak runs, and says so in its report.
/// (The two kinds run one after the other: the server's sessions are
/// all the test sees of them.)
#[test]
fn soak_holds_a_transaction_open_beside_the_load() {
    for kind in ["xid", "snapshot"] {
        soak_holding(kind);
    }
}

fn soak_holding(kind: &str) {
    block_on(async {
        use sqlx::Connection;
        let dir = tempfile::tempdir().unwrap();
        let Some(url) = base_url("postgres", dir.path()).await else {
            return;
        };
        // soak's own arguments, 3 s long instead of 2
        let mut args = mode_args("soak");
        let at = args.iter().position(|a| *a == "--duration").unwrap();
        args[at + 1] = "3s";
        let mut child = Command::new(BIN)
            .args(["bench", "soak", "--json", "--store", &url])
            .args(args)
            .args(["--hold-xmin", "2s", "--hold-kind", kind])
            .arg("--data-dir")
            .arg(dir.path())
            .env_remove("JOBSTORE_STORE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The held transaction, as the server sees it: open and idle, with
        // a transaction id and no snapshot for `xid`, the other way round
        // for `snapshot`. (The soak starts, migrates and adds its backlog
        // first: up to 30 s on a busy machine.)
        let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
        let mut seen = None;
        for _ in 0..600 {
            seen = sqlx::query_as::<_, (bool, bool)>(
                "SELECT backend_xid IS NOT NULL, backend_xmin IS NOT NULL FROM pg_stat_activity
                 WHERE application_name = 'jobstore-bench-hold'
                   AND state = 'idle in transaction'",
            )
            .fetch_optional(&mut c)
            .await
            .unwrap();
            if seen.is_some() || child.try_wait().unwrap().is_some() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(
            seen,
            Some((kind == "xid", kind == "snapshot")),
            "the held transaction, as pg_stat_activity shows it"
        );
        let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(report["parameters"]["hold_kind"], kind, "{report}");
        assert_eq!(report["parameters"]["hold_xmin_seconds"], 2.0, "{report}");
        let windows = report["figures"]["windows"].as_array().unwrap();
        let holding: Vec<_> = windows.iter().map(|w| w["holding"].as_bool()).collect();
        assert_eq!(holding, [Some(true), Some(true), Some(false)], "{report}");
        assert!(report["figures"]["dead_tuples_max"].is_number(), "{report}");
        // Gone once the soak ended (a closed session leaves the server's
        // list soon after, not at once).
        let mut left: i64 = -1;
        for _ in 0..100 {
            (left,) = sqlx::query_as(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE application_name = 'jobstore-bench-hold'",
            )
            .fetch_one(&mut c)
            .await
            .unwrap();
            if left == 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(left, 0);
    });
}

/// The bare reference queues, where the backend has one.
#[rstest]
fn bench_reference(#[values("postgres", "redis")] backend: &'static str) {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let Some(url) = base_url(backend, dir.path()).await else {
            return;
        };
        let report = {
            let (url, data) = (url.clone(), dir.path().to_owned());
            tokio::task::spawn_blocking(move || bench(&url, &data, "reference"))
                .await
                .unwrap()
        };
        assert_eq!(report["mode"], "reference", "{report}");
        assert_eq!(report["backend"], backend, "{report}");
        check_figures("reference", &report["figures"]);
        check_cpu("reference", backend, &report["figures"]);
        let ns = report["namespace"].as_str().unwrap();
        namespace_gone(backend, &url, dir.path(), ns).await;
    });
}

#[test]
fn bad_arguments_are_usage_errors() {
    for args in [
        &["bench", "store", "--store", "memory://", "--batch", "0"][..],
        &["bench", "store", "--store", "memory://", "--batch", "5000"],
        &["bench", "scale", "--store", "memory://", "--sizes", "0"],
        &[
            "bench",
            "intake",
            "--store",
            "memory://",
            "--single-jobs",
            "0",
        ],
        &[
            "bench",
            "soak",
            "--store",
            "memory://",
            "--duration",
            "1s",
            "--interval",
            "2s",
        ],
        &["bench", "store", "--store", "ftp://nowhere"],
        &["bench", "drain", "--store", "memory://", "--unique"],
        &["bench", "drain", "--store", "memory://", "--repeat"],
        // --hold-xmin: soak only, PostgreSQL only, above 0
        &[
            "bench",
            "store",
            "--store",
            "memory://",
            "--hold-xmin",
            "1s",
        ],
        &["bench", "soak", "--store", "memory://", "--hold-xmin", "1s"],
        &[
            "bench",
            "soak",
            "--store",
            "postgres://nobody@127.0.0.1:1/none",
            "--hold-xmin",
            "0s",
        ],
        &[
            "bench",
            "soak",
            "--store",
            "postgres://nobody@127.0.0.1:1/none",
            "--hold-xmin",
            "1s",
            "--hold-kind",
            "forever",
        ],
        &["bench", "nonsense"],
        &["bench", "reference", "--store", "memory://"],
    ] {
        let out = Command::new(BIN)
            .args(args)
            .env_remove("JOBSTORE_STORE")
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.stderr.is_empty());
    }
}

/// SIGTERM (as Ctrl-C) stops a bench, which still drops its namespace.
#[test]
fn a_signal_still_drops_the_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("jobs.db").display());
    let child = Command::new(BIN)
        .args([
            "bench", "drain", "--json", "--jobs", "2000000", "--store", &url,
        ])
        .arg("--data-dir")
        .arg(dir.path())
        .env_remove("JOBSTORE_STORE")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let bench_files = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("bench_"))
            .collect::<Vec<_>>()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !bench_files().iter().any(|n| n.ends_with(".db")) {
        assert!(
            std::time::Instant::now() < deadline,
            "no namespace appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(bench_files(), Vec::<String>::new());
}

#[test]
fn noop_worker_answers_every_message() {
    use std::io::{BufRead, BufReader, Write};
    let mut child = Command::new(BIN)
        .args(["noop-worker", "--stamp"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros();
    writeln!(stdin, r#"{{"op":"before_each","code":"x"}}"#).unwrap();
    assert_eq!(lines.next().unwrap().unwrap(), "D: 200");
    writeln!(
        stdin,
        r#"{{"op":"job","id":"a","type":"t","client":"c","attempt":1,"data":"x"}}"#
    )
    .unwrap();
    let stamp = lines.next().unwrap().unwrap();
    let t: u128 = stamp.strip_prefix("t ").unwrap().parse().unwrap();
    assert!(t >= before, "{stamp}");
    assert_eq!(lines.next().unwrap().unwrap(), "D: 200");
    drop(stdin);
    assert!(child.wait().unwrap().success());
}
