//! Starting the real `jobstore` binary for end-to-end tests, on a free port,
//! and talking to it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jobstore_api::JobStore;
use jobstore_conformance::services;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

pub mod admin;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_jobstore");

/// A store for a test: its URL (`None`: the embedded default) and how to
/// remove what the test left.
pub struct Backend {
    pub name: &'static str,
    pub url: Option<String>,
    cleanup: Option<Box<dyn FnOnce() + Send>>,
}

impl Backend {
    /// The backend named `name` on a fresh namespace, or `None` when its
    /// server is missing (skip printed, or a panic when required).
    pub async fn new(name: &'static str) -> Option<Backend> {
        let ns = services::unique_namespace();
        match name {
            "memory" => Some(Backend {
                name,
                url: Some("memory://".into()),
                cleanup: None,
            }),
            "sqlite" => Some(Backend {
                name,
                url: None,
                cleanup: None,
            }),
            "postgres" => {
                let base = services::postgres_url().await?;
                let url = with_param(&base, "schema", &ns);
                let drop_url = base.clone();
                Some(Backend {
                    name,
                    url: Some(url),
                    cleanup: Some(Box::new(move || drop_pg_schema(&drop_url, &ns))),
                })
            }
            "redis" => {
                let base = services::redis_url().await?;
                let url = with_param(&base, "prefix", &ns);
                let u = url.clone();
                Some(Backend {
                    name,
                    url: Some(url),
                    cleanup: Some(Box::new(move || drop_redis_prefix(&u))),
                })
            }
            other => panic!("unknown backend {other}"),
        }
    }

    /// A direct handle on the store, as another process would open it.
    pub async fn open(&self, data_dir: &Path) -> Arc<dyn JobStore> {
        jobstore_daemon::factory::open(self.url.as_deref(), data_dir)
            .await
            .expect("open the store directly")
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Some(c) = self.cleanup.take() {
            c();
        }
    }
}

pub fn with_param(url: &str, key: &str, value: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{key}={value}")
}

fn drop_pg_schema(url: &str, schema: &str) {
    let url = url.to_owned();
    let schema = schema.to_owned();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            use sqlx::Connection;
            if let Ok(mut c) = sqlx::PgConnection::connect(&url).await {
                let sql = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
                let _ = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut c).await;
            }
        });
    })
    .join()
    .ok();
}

fn drop_redis_prefix(url: &str) {
    let url = url.to_owned();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            if let Ok(s) = jobstore_redis::RedisStore::connect(&url).await {
                let _ = s.drop_namespace().await;
            }
        });
    })
    .join()
    .ok();
}

/// A `jobstore serve` process.
pub struct DaemonProc {
    child: Option<Child>,
    pub url: String,
    pub data_dir: PathBuf,
    log: PathBuf,
}

/// How to start a daemon.
#[derive(Clone, Default)]
pub struct Start<'a> {
    pub store: Option<&'a str>,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl<'a> Start<'a> {
    pub fn store(store: Option<&'a str>) -> Self {
        Start {
            store,
            ..Start::default()
        }
    }

    /// An intake-only daemon (`--no-execute`): jobs stay as added.
    pub fn intake(store: Option<&'a str>) -> Self {
        Start::store(store).arg("--no-execute")
    }

    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }

    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }
}

impl DaemonProc {
    /// Starts a daemon with its data in `data_dir`; panics if it does not
    /// come up.
    pub fn start(data_dir: &Path, how: &Start) -> DaemonProc {
        Self::try_start(data_dir, how).unwrap_or_else(|e| panic!("daemon did not start: {e}"))
    }

    /// Starts a daemon; `Err` with its exit status and log if it exits
    /// before listening.
    pub fn try_start(data_dir: &Path, how: &Start) -> Result<DaemonProc, String> {
        std::fs::create_dir_all(data_dir).unwrap();
        let addr_file = data_dir.join("addr");
        let _ = std::fs::remove_file(&addr_file);
        let log = data_dir.join(format!(
            "daemon-{}.log",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--addr-file")
            .arg(&addr_file)
            .arg("--data-dir")
            .arg(data_dir)
            .args(&how.args)
            .env_remove("JOBSTORE_STORE")
            .env_remove("JOBSTORE_ADMIN_TOKEN")
            .env("JOBSTORE_LOG", "info,jobstore_daemon=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        if let Some(store) = how.store {
            cmd.arg("--store").arg(store);
        }
        for (k, v) in &how.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn jobstore");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(addr) = std::fs::read_to_string(&addr_file) {
                let addr = addr.trim();
                if !addr.is_empty() {
                    return Ok(DaemonProc {
                        child: Some(child),
                        url: format!("http://{addr}"),
                        data_dir: data_dir.to_owned(),
                        log,
                    });
                }
            }
            if let Some(status) = child.try_wait().unwrap() {
                return Err(format!(
                    "exited with {status}:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                ));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return Err(format!(
                    "not listening after 60 s:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.child.as_ref().expect("running").id() as i32)
    }

    /// SIGTERM, then waits for the exit.
    pub fn terminate(&mut self) -> ExitStatus {
        kill(self.pid(), Signal::SIGTERM).expect("SIGTERM");
        self.wait()
    }

    /// SIGKILL, then waits for the exit.
    pub fn kill9(&mut self) {
        kill(self.pid(), Signal::SIGKILL).expect("SIGKILL");
        self.wait();
    }

    pub fn wait(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("daemon did not exit within 90 s:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for DaemonProc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
            if std::thread::panicking() {
                eprintln!("--- daemon log ---\n{}", self.log());
            }
        }
    }
}

/// Writes a config file at `path` with the admin token (if any) and
/// clients' tokens, as hashes, after `extra` top-level lines.
pub fn token_config(
    path: &Path,
    extra: &str,
    admin: Option<&str>,
    clients: &[(&str, &str)],
) -> PathBuf {
    use jobstore_daemon::auth::TokenHash;
    let mut text = format!("{extra}\n[auth]\n");
    if let Some(a) = admin {
        text += &format!("admin_token_sha256 = \"{}\"\n", TokenHash::of(a).to_hex());
    }
    for (name, token) in clients {
        text += &format!(
            "[[auth.clients]]\nname = \"{name}\"\ntoken_sha256 = \"{}\"\n",
            TokenHash::of(token).to_hex()
        );
    }
    std::fs::write(path, text).unwrap();
    path.to_owned()
}

/// An HTTP client for the tests.
pub fn http() -> reqwest::Client {
    jobstore_daemon::http_client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// A response's status and JSON body.
pub async fn json(r: reqwest::RequestBuilder) -> (u16, Value) {
    let r = r.send().await.expect("request");
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, v)
}

/// Polls `f` until it returns `Some`, for at most `within`.
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The ids of an add answer.
pub fn ids(v: &Value) -> Vec<String> {
    v["ids"]
        .as_array()
        .unwrap_or_else(|| panic!("no ids in {v}"))
        .iter()
        .map(|i| i.as_str().unwrap().to_owned())
        .collect()
}

/// Runs `f` on a fresh multi-threaded runtime.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// Prints a test's figures where `cargo test` shows them for a passing test
/// too (CI's log): straight to the process's stderr, which the test
/// harness does not capture, unlike `println!` and `eprintln!`.
pub fn report(text: impl AsRef<str>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{}", text.as_ref());
}
