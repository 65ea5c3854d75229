//! Runners: how a claimed job is run, by its handler's [`Method`].
//!
//! - [`process`]: one process per job (`sh -c BODY`), payload on stdin;
//! - [`worker`]: long-lived worker processes per execution context (`eid`),
//!   each running one job at a time over a line protocol;
//! - [`http`]: a POST of the payload to the handler's URL.
//!
//! Every runner reads the job's output the same way ([`output`]) and ends
//! each job with a [`Finished`]: an [`Outcome`], or "lost" (its lease was
//! lost and it was stopped: it must not be released), or "not started"
//! (a graceful stop came first: hand it back).

pub mod http;
pub mod output;
pub mod process;
pub mod worker;

use std::time::Duration;

use jobstore_api::{Handler, TraceContext};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use output::{Child, OutputParser, Parsed};

/// How a jobtype's jobs run: the method of its handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// A command on the daemon's host: one process per job, or a
    /// long-lived worker per execution context (`eid`). Only daemons that
    /// allow process handlers run it.
    Process,
    /// A POST of the payload to the handler's URL.
    Http,
    /// Run only by remote workers that fetch jobs over the API; the
    /// daemon's own runners leave these jobs alone (the handler's limits
    /// still apply).
    Remote,
}

impl Method {
    /// Every method, in the order the API lists them.
    pub const ALL: [Method; 3] = [Method::Process, Method::Http, Method::Remote];

    /// The method named `name` (`process`, `http`, `remote`).
    pub fn parse(name: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.as_str() == name)
    }

    /// Its name, as stored with the handler and shown by the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Process => "process",
            Method::Http => "http",
            Method::Remote => "remote",
        }
    }

    /// The method of a stored handler; `None` for a name this daemon does
    /// not know (set by a newer daemon on the same store).
    pub fn of(handler: &Handler) -> Option<Method> {
        Method::parse(&handler.method)
    }

    /// Every method's name, for messages: `process, http, remote`.
    pub fn names() -> String {
        Method::ALL.map(Method::as_str).join(", ")
    }

    /// Whether this daemon's runners run jobs of this method: not remote
    /// ones (remote workers fetch those), and process handlers only where
    /// the daemon allows them (`processes`).
    pub fn runs_here(self, processes: bool) -> bool {
        match self {
            Method::Process => processes,
            Method::Http => true,
            Method::Remote => false,
        }
    }

    /// The first field `handler` sets that this method never reads (`eid`,
    /// `before`, `before_each` and `after_each` are for process handlers
    /// only).
    pub fn unused_field(self, handler: &Handler) -> Option<&'static str> {
        if self == Method::Process {
            return None;
        }
        [
            ("eid", handler.eid.is_some()),
            ("before", handler.before.is_some()),
            ("before_each", handler.before_each.is_some()),
            ("after_each", handler.after_each.is_some()),
        ]
        .into_iter()
        .find_map(|(name, set)| set.then_some(name))
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A claimed job, as a runner sees it.
#[derive(Debug, Clone)]
pub struct Task {
    /// The store id.
    pub id: String,
    /// The id as the client knows it (no client prefix).
    pub local_id: String,
    /// The store jobtype.
    pub jobtype: String,
    /// The jobtype as the client knows it.
    pub local_type: String,
    /// The client (tenant).
    pub client: String,
    /// This is the job's `attempt`-th hand-out (1 on the first run).
    pub attempt: u32,
    /// The payload.
    pub data: Vec<u8>,
    /// Longest the run may take before it is stopped (an error).
    pub time_limit: Duration,
    /// Cancelled when the job's lease is lost or the daemon stops hard: the
    /// runner kills the job and reports [`Finished::Lost`].
    pub lost: CancellationToken,
    /// The W3C trace context the run continues ([`crate::trace::run_trace`]):
    /// passed to the handler, and given to the jobs the run adds.
    pub trace: Option<TraceContext>,
    /// For a job that waited for other jobs: what they were and how they
    /// ended, as compact JSON ([`crate::executor::waited`]).
    pub waited: Option<std::sync::Arc<str>>,
}

/// How a run ended, by status class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// 2xx: archive as `ok`.
    Ok,
    /// 4xx: archive as `failed`.
    Failed,
    /// 1xx (and HTTP 429/503): run again after a backoff.
    Retry,
    /// 5xx and anything else: run again after a backoff.
    Error,
}

impl Class {
    /// The class of a status code.
    pub fn of(status: u16) -> Class {
        match status / 100 {
            1 => Class::Retry,
            2 => Class::Ok,
            4 => Class::Failed,
            _ => Class::Error,
        }
    }
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The status code.
    pub status: u16,
    /// Its class (usually [`Class::of`] the status).
    pub class: Class,
    /// Captured output (capped).
    pub output: Vec<u8>,
    /// New jobs of the same client, from `J:` lines.
    pub children: Vec<Child>,
    /// The runner's wish for the retry delay (HTTP `Retry-After`).
    pub retry_after: Option<Duration>,
    /// The payload of the job's next run when it repeats (the last `U:`
    /// line, a remote finish's `data`).
    pub data: Option<Vec<u8>>,
}

impl Outcome {
    /// An outcome from parsed output and a status.
    pub fn new(status: u16, parsed: Parsed) -> Self {
        Outcome {
            status,
            class: Class::of(status),
            output: parsed.output,
            children: parsed.children,
            retry_after: None,
            data: parsed.data,
        }
    }

    /// An error (500) with a note as its output.
    pub fn error(note: &str) -> Self {
        let mut p = OutputParser::default();
        p.note(note);
        Outcome::new(500, p.finish())
    }
}

/// How a job's run ended.
#[derive(Debug, Clone)]
pub enum Finished {
    /// It ran.
    Done(Outcome),
    /// Its lease was lost and it was stopped: another daemon may own it now.
    Lost,
    /// A graceful stop came before it started.
    NotStarted,
}

/// The results of a batch, as each job ends.
pub type Results = mpsc::UnboundedSender<(Task, Finished)>;

/// The runners of one daemon.
pub struct Runners {
    process: process::ProcessRunner,
    workers: worker::Workers,
    http: http::HttpRunner,
}

impl Runners {
    /// Runners whose `http` handlers may only call `allow_hosts` (empty: any).
    pub fn new(allow_hosts: Vec<String>) -> Self {
        Runners {
            process: process::ProcessRunner::default(),
            workers: worker::Workers::default(),
            http: http::HttpRunner::new(allow_hosts),
        }
    }

    /// Runs `tasks` (all of one jobtype) under `handler`, sending each
    /// job's end to `results` as it comes. `stop` asks not to start more.
    pub async fn run_batch(
        &self,
        handler: &Handler,
        tasks: Vec<Task>,
        stop: &CancellationToken,
        results: &Results,
    ) {
        match Method::of(handler) {
            Some(Method::Process) if handler.eid.is_some() => {
                self.workers.run_batch(handler, tasks, stop, results).await
            }
            Some(Method::Process) => self.process.run_batch(handler, tasks, stop, results).await,
            Some(Method::Http) => self.http.run_batch(handler, tasks, stop, results).await,
            Some(Method::Remote) | None => {
                let note = format!(
                    "this daemon has no runner for handler method {:?}",
                    handler.method
                );
                for t in tasks {
                    let _ = results.send((t, Finished::Done(Outcome::error(&note))));
                }
            }
        }
    }

    /// Stops every long-lived worker.
    pub async fn shutdown(&self) {
        self.workers.shutdown().await;
    }

    /// Stops long-lived workers idle for longer than `idle`.
    pub async fn reap_idle(&self, idle: Duration) {
        self.workers.reap_idle(idle).await;
    }
}

/// The longest output line read; longer lines are cut (the rest dropped).
pub const MAX_LINE: usize = 1 << 20;

/// Reads one line (without the newline) of at most `max` bytes into `buf`;
/// the rest of a longer line is skipped. `Ok(false)` at end of input.
pub async fn read_line_capped<R: AsyncBufRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<bool> {
    buf.clear();
    let mut any = false;
    loop {
        let chunk = r.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(any);
        }
        any = true;
        let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let content = if done {
            &chunk[..take - 1]
        } else {
            &chunk[..take]
        };
        let room = max.saturating_sub(buf.len());
        buf.extend_from_slice(&content[..content.len().min(room)]);
        r.consume(take);
        if done {
            return Ok(true);
        }
    }
}

/// Environment variables a job must not inherit from the daemon.
pub const SECRET_ENV: [&str; 4] = [
    "JOBSTORE_ADMIN_TOKEN",
    "JOBSTORE_STORE",
    "JOBSTORE_TOKEN",
    "JOBSTORE_CONFIG",
];

/// A `sh -c` command for `body`, in its own process group, without the
/// daemon's secrets, with the job's identity in its environment.
pub fn shell(body: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c").arg(body).process_group(0).kill_on_drop(true);
    for k in SECRET_ENV {
        cmd.env_remove(k);
    }
    cmd
}

/// Sets the job's identity in a command's environment, and its trace
/// context as `TRACEPARENT` and `TRACESTATE` (OpenTelemetry's environment
/// carrier); neither is inherited from the daemon's own environment.
pub fn task_env(cmd: &mut tokio::process::Command, t: &Task) {
    cmd.env("JOBSTORE_JOB_ID", &t.local_id)
        .env("JOBSTORE_JOBTYPE", &t.local_type)
        .env("JOBSTORE_CLIENT", &t.client)
        .env("JOBSTORE_ATTEMPT", t.attempt.to_string());
    match &t.trace {
        Some(trace) => cmd.env("TRACEPARENT", &trace.traceparent),
        None => cmd.env_remove("TRACEPARENT"),
    };
    match t.trace.as_ref().and_then(|tc| tc.tracestate.as_deref()) {
        Some(state) => cmd.env("TRACESTATE", state),
        None => cmd.env_remove("TRACESTATE"),
    };
}

/// Kills a process group (the job and everything it started).
pub fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_capped() {
        let input = b"short\n0123456789abcdef\nlast".to_vec();
        let mut r = tokio::io::BufReader::with_capacity(4, &input[..]);
        let mut buf = Vec::new();
        assert!(read_line_capped(&mut r, &mut buf, 8).await.unwrap());
        assert_eq!(buf, b"short");
        assert!(read_line_capped(&mut r, &mut buf, 8).await.unwrap());
        assert_eq!(buf, b"01234567");
        assert!(read_line_capped(&mut r, &mut buf, 8).await.unwrap());
        assert_eq!(buf, b"last");
        assert!(!read_line_capped(&mut r, &mut buf, 8).await.unwrap());
    }

    #[test]
    fn methods_by_name_and_their_fields() {
        for m in Method::ALL {
            assert_eq!(Method::parse(m.as_str()), Some(m));
        }
        assert_eq!(Method::parse("lua"), None);
        assert_eq!(Method::names(), "process, http, remote");
        assert!(Method::Process.runs_here(true) && !Method::Process.runs_here(false));
        assert!(Method::Http.runs_here(false) && !Method::Remote.runs_here(true));
        let mut h = Handler::new("http", "http://x/");
        assert_eq!(Method::Http.unused_field(&h), None);
        h.after_each = Some("x".into());
        assert_eq!(Method::Http.unused_field(&h), Some("after_each"));
        h.eid = Some("e".into());
        assert_eq!(Method::Remote.unused_field(&h), Some("eid"));
        h.before = Some("b".into());
        h.before_each = Some("b".into());
        assert_eq!(Method::Process.unused_field(&h), None);
        h.eid = None;
        assert_eq!(Method::Http.unused_field(&h), Some("before"));
    }

    #[test]
    fn classes() {
        assert_eq!(Class::of(102), Class::Retry);
        assert_eq!(Class::of(204), Class::Ok);
        assert_eq!(Class::of(404), Class::Failed);
        assert_eq!(Class::of(503), Class::Error);
        assert_eq!(Class::of(302), Class::Error);
    }
}
