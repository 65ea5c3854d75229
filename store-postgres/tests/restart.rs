//! A private PostgreSQL server is stopped and started again under a store:
//! calls made while it is down fail with a retryable `Unavailable` error,
//! and the next call after it is back succeeds without reconnecting by
//! hand. The work listener reconnects by itself too.
//!
//! The server binaries (`initdb`, `pg_ctl`) are those of the newest
//! `/usr/lib/postgresql/<version>/bin` (Debian and Ubuntu packages), or of
//! the directory named by `JOBSTORE_PG_BIN`. PostgreSQL refuses to run as
//! root: as root the test runs them as the `postgres` user (`runuser`),
//! otherwise as the current user. With no server binaries at all the test
//! prints a skip notice, or fails when `JOBSTORE_REQUIRE_BACKENDS` names
//! `postgres`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use jobstore_api::{ErrorKind, JobStore, NewJob, Wakeup, WorkWatcher};
use jobstore_conformance::services::skip;
use jobstore_postgres::PgStore;

const T0: i64 = 1_700_000_000_000;

/// The directory holding `initdb` and `pg_ctl`: `JOBSTORE_PG_BIN`, else the
/// newest `/usr/lib/postgresql/<version>/bin` that has both.
fn server_bin() -> Option<PathBuf> {
    let has_both = |d: &Path| d.join("initdb").is_file() && d.join("pg_ctl").is_file();
    if let Some(dir) = std::env::var_os("JOBSTORE_PG_BIN").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        return has_both(&dir).then_some(dir);
    }
    let mut found: Vec<(Vec<u64>, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let version: Vec<u64> = e
                .file_name()
                .to_str()?
                .split('.')
                .map(|p| p.parse().ok())
                .collect::<Option<_>>()?;
            let bin = e.path().join("bin");
            has_both(&bin).then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

/// Whether this process runs as root (then the server runs as `postgres`).
fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// A private server in a temp dir; stopped (immediately) and removed on drop,
/// whether the test passed or not.
struct Server {
    bin: PathBuf,
    as_postgres: bool,
    dir: PathBuf,
    port: u16,
}

impl Server {
    fn run(&self, program: &str, args: &[&str]) -> Result<(), String> {
        let program = self.bin.join(program);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&program);
            c
        } else {
            Command::new(&program)
        };
        let out = cmd
            .args(args)
            .output()
            .map_err(|e| format!("{} {args:?}: {e}", program.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} {args:?} failed: {}\n{}",
                program.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<(), String> {
        let data = self.dir.join("data");
        let mut all = vec!["-D", data.to_str().unwrap_or_default()];
        all.extend_from_slice(args);
        self.run("pg_ctl", &all)
    }

    fn create(bin: PathBuf) -> Result<Server, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let dir =
            std::env::temp_dir().join(format!("jobstore-pg-restart-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("mkdir {dir:?}: {e}"))?;
        let server = Server {
            bin,
            as_postgres: running_as_root(),
            dir,
            port,
        };
        if server.as_postgres {
            let chown = Command::new("chown")
                .args(["-R", "postgres"])
                .arg(&server.dir)
                .status()
                .map_err(|e| format!("chown: {e}"))?;
            if !chown.success() {
                return Err("chown of the temp dir to postgres failed".into());
            }
        }
        let data = server.dir.join("data");
        server.run(
            "initdb",
            &[
                "-D",
                data.to_str().unwrap_or_default(),
                "-A",
                "trust",
                "-U",
                "postgres",
            ],
        )?;
        server.start()?;
        Ok(server)
    }

    fn start(&self) -> Result<(), String> {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("log");
        self.pg_ctl(&[
            "-o",
            &opts,
            "-l",
            log.to_str().unwrap_or_default(),
            "-w",
            "start",
        ])
    }

    fn stop(&self, mode: &str) -> Result<(), String> {
        self.pg_ctl(&["-m", mode, "-w", "stop"])
    }

    fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?schema=restart&acquire_timeout_ms=1000&max_connections=3&poll_interval_ms=200",
            self.port
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop("immediate");
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Waits until the watcher reports `jobtype`, for at most `within`.
async fn woken_for(w: &mut WorkWatcher, jobtype: &str, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        if let Wakeup::Work(types) = w.wait(left).await
            && types.contains(jobtype)
        {
            return true;
        }
    }
}

async fn down_then_up(
    server: &Server,
    store: &PgStore,
    w: &mut WorkWatcher,
    mode: &str,
    round: i64,
) {
    let id = format!("job-{mode}");
    store
        .add_jobs(&[NewJob::new(id.clone(), "t", "x")], T0 + round)
        .await
        .expect("add before stop");

    server.stop(mode).expect("stop");
    for attempt in 0..2 {
        let err = store.get_job(&id).await.expect_err("server is down");
        assert_eq!(
            err.kind(),
            ErrorKind::Unavailable,
            "{mode} #{attempt}: {err:?}"
        );
        assert!(err.is_retryable(), "{err}");
    }
    let err = store
        .claim_jobs("t", 10, "sys-a", Duration::from_secs(60), T0 + round)
        .await
        .expect_err("server is down");
    assert!(err.is_retryable(), "{mode}: {err:?}");

    server.start().expect("start again");
    // The very next call succeeds: the pool reconnects by itself.
    let job = store.get_job(&id).await.expect("get after restart");
    assert_eq!(job.map(|j| j.id), Some(id.clone()));
    let claimed = store
        .claim_jobs("t", 10, "sys-a", Duration::from_secs(60), T0 + round)
        .await
        .expect("claim after restart");
    assert_eq!(claimed.len(), 1);

    // The listener reconnects too: a new add wakes the watcher by jobtype.
    let jt = format!("after-{mode}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut n = 0;
    while tokio::time::Instant::now() < deadline {
        // Notices sent before the listener is back are lost (that is what
        // the empty "anything changed" notice is for), so add new jobs until
        // one is seen.
        n += 1;
        store
            .add_jobs(&[NewJob::new(format!("{jt}-{n}"), jt.clone(), "")], T0)
            .await
            .expect("add after restart");
        if woken_for(w, &jt, Duration::from_secs(1)).await {
            return;
        }
    }
    panic!("watcher never woke for {jt} after the {mode} restart");
}

#[test]
fn store_survives_server_restart() {
    let Some(bin) = server_bin() else {
        skip::<()>(
            "postgres",
            "no PostgreSQL server binaries (initdb, pg_ctl) in /usr/lib/postgresql/*/bin \
             or JOBSTORE_PG_BIN, needed for the restart test",
        );
        return;
    };
    // Binaries present: from here on, any failure to run the server is a
    // test failure, not a skip.
    let server = Server::create(bin).expect("private PostgreSQL server");
    jobstore_conformance::block_on(async {
        let store = PgStore::connect(&server.url()).await.expect("connect");
        let mut watcher = store.watch().await.expect("watch");
        down_then_up(&server, &store, &mut watcher, "fast", 1).await;
        down_then_up(&server, &store, &mut watcher, "immediate", 2).await;
    });
}
