//! Private servers for tests that stop and start their store's server
//! (restarts, outages): a PostgreSQL cluster or a redis-server of the test's
//! own, on a free 127.0.0.1 port in a temp dir, stopped and removed when
//! dropped.
//!
//! PostgreSQL binaries are those of the newest
//! `/usr/lib/postgresql/<version>/bin` (Debian and Ubuntu packages), or of
//! `JOBSTORE_PG_BIN`. PostgreSQL refuses to run as root: as root the
//! servers run as the `postgres` user (`runuser`). When the binaries are
//! missing, [`PrivatePostgres::binaries`] and [`PrivateRedis::binaries`]
//! say why, for a skip (or a failure, when the backend is required).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn temp_dir(what: &str, port: u16) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "jobstore-{what}-{}-{port}-{}",
        std::process::id(),
        &jobstore_api::new_token()[..8]
    ));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

fn wait_for(mut cond: impl FnMut() -> bool, within: Duration, what: &str) -> Result<(), String> {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > within {
            return Err(format!("timed out waiting for {what}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Whether this process runs as root.
pub fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// A PostgreSQL cluster of the test's own.
pub struct PrivatePostgres {
    bin: PathBuf,
    as_postgres: bool,
    dir: PathBuf,
    port: u16,
}

impl PrivatePostgres {
    /// The directory holding `initdb` and `pg_ctl`: `JOBSTORE_PG_BIN`, else
    /// the newest `/usr/lib/postgresql/<version>/bin` that has both.
    pub fn binaries() -> Result<PathBuf, String> {
        let has_both = |d: &Path| d.join("initdb").is_file() && d.join("pg_ctl").is_file();
        if let Some(dir) = std::env::var_os("JOBSTORE_PG_BIN").filter(|d| !d.is_empty()) {
            let dir = PathBuf::from(dir);
            return if has_both(&dir) {
                Ok(dir)
            } else {
                Err(format!(
                    "JOBSTORE_PG_BIN={} has no initdb and pg_ctl",
                    dir.display()
                ))
            };
        }
        let mut found: Vec<(Vec<u64>, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .map_err(|e| format!("no PostgreSQL server binaries (/usr/lib/postgresql: {e})"))?
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
        found
            .pop()
            .map(|(_, bin)| bin)
            .ok_or_else(|| "no initdb and pg_ctl under /usr/lib/postgresql/*/bin".to_owned())
    }

    /// Creates a cluster with the binaries in `bin` and starts it.
    pub fn create(bin: PathBuf) -> Result<PrivatePostgres, String> {
        let port = free_port();
        let server = PrivatePostgres {
            bin,
            as_postgres: running_as_root(),
            dir: temp_dir("pg", port),
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

    /// Starts the server (again).
    pub fn start(&self) -> Result<(), String> {
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

    /// Stops the server: `mode` is `smart`, `fast` or `immediate` (a crash).
    pub fn stop(&self, mode: &str) -> Result<(), String> {
        self.pg_ctl(&["-m", mode, "-w", "stop"])
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL for database `postgres` on this server.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = self.stop("immediate");
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A redis-server of the test's own, with an append-only file fsynced on
/// every write, so that what it acknowledged survives its restarts.
pub struct PrivateRedis {
    dir: PathBuf,
    port: u16,
}

impl PrivateRedis {
    /// Whether `redis-server` and `redis-cli` can be run.
    pub fn binaries() -> Result<(), String> {
        for bin in ["redis-server", "redis-cli"] {
            let ok = Command::new(bin)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if !ok {
                return Err(format!("{bin} is not installed"));
            }
        }
        Ok(())
    }

    /// Starts a server on a free port.
    pub fn start() -> Result<PrivateRedis, String> {
        let port = free_port();
        let server = PrivateRedis {
            dir: temp_dir("redis", port),
            port,
        };
        server.start_again()?;
        Ok(server)
    }

    /// Starts the server again, on the same port and data.
    pub fn start_again(&self) -> Result<(), String> {
        let d = self.dir.display().to_string();
        let port = self.port.to_string();
        let status = Command::new("redis-server")
            .args(["--port", &port, "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "yes", "--appendfsync", "always"])
            .args(["--daemonize", "yes", "--dir", &d])
            .args(["--pidfile", &format!("{d}/redis.pid")])
            .args(["--logfile", &format!("{d}/redis.log")])
            .stdout(Stdio::null())
            .status()
            .map_err(|e| format!("redis-server: {e}"))?;
        if !status.success() {
            return Err(format!("redis-server on port {port} failed to start"));
        }
        wait_for(
            || self.cli(&["ping"]).is_some_and(|o| o.trim() == "PONG"),
            Duration::from_secs(20),
            "redis-server to answer",
        )
    }

    /// Stops the server (its data stays in the append-only file).
    pub fn stop(&self) -> Result<(), String> {
        let _ = self.cli(&["shutdown"]);
        wait_for(
            || self.cli(&["ping"]).is_none(),
            Duration::from_secs(20),
            "redis-server to stop",
        )
    }

    /// `redis-cli -p port args...`: its stdout if it succeeded.
    pub fn cli(&self, args: &[&str]) -> Option<String> {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .stderr(Stdio::null())
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.success() && !text.contains("Could not connect")).then_some(text)
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.cli(&["shutdown", "nosave"]);
        if let Ok(pid) = std::fs::read_to_string(self.dir.join("redis.pid")) {
            let _ = Command::new("kill").arg(pid.trim()).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
