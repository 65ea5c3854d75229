//! The `process` runner without an execution context: one `sh -c BODY` per
//! job, the payload on stdin, the job's identity in `JOBSTORE_JOB_ID`,
//! `JOBSTORE_JOBTYPE`, `JOBSTORE_CLIENT` and `JOBSTORE_ATTEMPT`, and for a
//! job that waited for other jobs their ids and results (JSON, see
//! [`crate::executor::waited`]) in `JOBSTORE_WAITED`, or, over 32 KiB, in a
//! file named by `JOBSTORE_WAITED_FILE` (removed after the run). Its stdout
//! and stderr are read line by line ([`super::output`]). Exit 0 without a
//! status line is 200; another exit without one is 500; a run past its time
//! limit has its whole process group killed and is a 500.
//!
//! `before` runs once per handler version (the first time this daemon runs
//! it), `before_each` before each batch and `after_each` after it, each as
//! `sh -c`; a `before` or `before_each` that fails makes the batch's jobs
//! errors without running them.

use std::collections::HashSet;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use futures::future::join_all;
use jobstore_api::Handler;
use tokio::io::{AsyncRead, AsyncWriteExt, BufReader};
use tokio_util::sync::CancellationToken;

use super::{
    Finished, MAX_LINE, Outcome, OutputParser, Results, Task, kill_group, read_line_capped, shell,
    task_env,
};

/// Longest a `before`, `before_each` or `after_each` command may run.
pub const HOOK_TIME_LIMIT: Duration = Duration::from_secs(300);

/// Runs one process per job.
#[derive(Debug, Default)]
pub struct ProcessRunner {
    /// Handler versions whose `before` already ran.
    before_done: Mutex<HashSet<(String, String)>>,
}

impl ProcessRunner {
    /// Runs a batch: hooks around it, its jobs at once.
    pub async fn run_batch(
        &self,
        handler: &Handler,
        tasks: Vec<Task>,
        stop: &CancellationToken,
        results: &Results,
    ) {
        if let Some(before) = &handler.before {
            let key = (handler.body.clone(), before.clone());
            let first = !self
                .before_done
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&key);
            if first {
                if let Err(e) = hook(before, "before").await {
                    fail_all(tasks, &e, results);
                    return;
                }
                self.before_done
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key);
            }
        }
        if let Some(before_each) = &handler.before_each
            && let Err(e) = hook(before_each, "before_each").await
        {
            fail_all(tasks, &e, results);
            return;
        }
        join_all(tasks.into_iter().map(|t| async {
            if stop.is_cancelled() {
                let _ = results.send((t, Finished::NotStarted));
                return;
            }
            let f = run_one(&handler.body, &t).await;
            let _ = results.send((t, f));
        }))
        .await;
        if let Some(after_each) = &handler.after_each
            && let Err(e) = hook(after_each, "after_each").await
        {
            tracing::warn!(error = %e, "after_each failed");
        }
    }
}

fn fail_all(tasks: Vec<Task>, why: &str, results: &Results) {
    for t in tasks {
        let _ = results.send((t, Finished::Done(Outcome::error(why))));
    }
}

/// Runs a hook command; `Err` with what went wrong.
async fn hook(cmdline: &str, what: &str) -> Result<(), String> {
    let mut cmd = shell(cmdline);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let child = cmd
        .spawn()
        .map_err(|e| format!("{what} could not start: {e}"))?;
    let pid = child.id();
    match tokio::time::timeout(HOOK_TIME_LIMIT, child.wait_with_output()).await {
        Ok(Ok(out)) if out.status.success() => Ok(()),
        Ok(Ok(out)) => Err(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => {
            kill_group(pid);
            Err(format!(
                "{what} ran past {HOOK_TIME_LIMIT:?} and was killed"
            ))
        }
    }
}

/// Runs one job in its own process (`sh -c body`).
pub async fn run_one(body: &str, t: &Task) -> Finished {
    run_command(shell(body), t).await
}

/// Runs one job with `cmd` (which should have its own process group, as
/// [`shell`] sets up): the job's identity in its environment, the payload
/// on stdin, its output read as [`super::output`] says, killed with its
/// group at the time limit or when the lease is lost.
pub async fn run_command(mut cmd: tokio::process::Command, t: &Task) -> Finished {
    task_env(&mut cmd, t);
    // Removed when the run ends, whichever way.
    let _waited_file = match waited_env(&mut cmd, t) {
        Ok(f) => f,
        Err(e) => {
            return Finished::Done(Outcome::error(&format!(
                "cannot write the job's JOBSTORE_WAITED_FILE: {e}"
            )));
        }
    };
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return Finished::Done(Outcome::error(&format!("cannot start the handler: {e}"))),
    };
    let pid = child.id();
    let mut stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let data = t.data.clone();
    // The payload goes in while the output comes out, so a large payload
    // cannot deadlock against a full stdout pipe.
    let feed = async move {
        if let Some(mut w) = stdin.take() {
            // A job that does not read its stdin is fine.
            let _ = w.write_all(&data).await;
            let _ = w.shutdown().await;
        }
    };
    let parser = std::sync::Arc::new(Mutex::new(OutputParser::default()));
    let read_out = read_into(stdout, parser.clone());
    let read_err = read_into(stderr, parser.clone());
    let run = async {
        let (_, _, _, status) = tokio::join!(feed, read_out, read_err, child.wait());
        status
    };
    let ended = tokio::select! {
        status = run => Ok(status),
        _ = tokio::time::sleep(t.time_limit) => Err(false),
        _ = t.lost.cancelled() => Err(true),
    };
    let mut parser = std::mem::take(&mut *parser.lock().unwrap_or_else(|e| e.into_inner()));
    match ended {
        Ok(Ok(status)) => {
            let code = parser
                .status()
                .unwrap_or(if status.success() { 200 } else { 500 });
            if parser.status().is_none() && !status.success() {
                parser.note(&format!("the handler exited with {status}"));
            }
            Finished::Done(Outcome::new(code, parser.finish()))
        }
        Ok(Err(e)) => Finished::Done(Outcome::error(&format!("waiting for the handler: {e}"))),
        Err(lost) => {
            kill_group(pid);
            if lost {
                Finished::Lost
            } else {
                parser.note(&format!(
                    "the job ran past its time limit of {:?} and was killed",
                    t.time_limit
                ));
                Finished::Done(Outcome::new(500, parser.finish()))
            }
        }
    }
}

/// The most bytes of a waiter's message passed in `JOBSTORE_WAITED`;
/// a longer one goes in a file named by `JOBSTORE_WAITED_FILE`.
pub const MAX_WAITED_ENV: usize = 32 << 10;

/// Puts a waiter's message in the command's environment: in
/// `JOBSTORE_WAITED`, or when longer than [`MAX_WAITED_ENV`] in a new
/// file of the temporary directory (a random name, readable by the
/// daemon's user only) named by `JOBSTORE_WAITED_FILE`, which the
/// returned guard removes. Neither is inherited from the daemon.
fn waited_env(
    cmd: &mut tokio::process::Command,
    t: &Task,
) -> std::io::Result<Option<tempfile::NamedTempFile>> {
    cmd.env_remove("JOBSTORE_WAITED")
        .env_remove("JOBSTORE_WAITED_FILE");
    let Some(text) = &t.waited else {
        return Ok(None);
    };
    if text.len() <= MAX_WAITED_ENV {
        cmd.env("JOBSTORE_WAITED", &**text);
        return Ok(None);
    }
    let mut file = tempfile::Builder::new()
        .prefix("jobstore-waited-")
        .suffix(".json")
        .tempfile()?;
    std::io::Write::write_all(&mut file, text.as_bytes())?;
    cmd.env("JOBSTORE_WAITED_FILE", file.path());
    Ok(Some(file))
}

async fn read_into<R: AsyncRead + Unpin>(
    r: Option<R>,
    parser: std::sync::Arc<Mutex<OutputParser>>,
) {
    let Some(r) = r else { return };
    let mut r = BufReader::new(r);
    let mut line = Vec::new();
    while let Ok(true) = read_line_capped(&mut r, &mut line, MAX_LINE).await {
        parser.lock().unwrap_or_else(|e| e.into_inner()).line(&line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::Class;
    use jobstore_api::TraceContext;

    fn task(data: &str, limit: Duration) -> Task {
        Task {
            id: "acme-1".into(),
            local_id: "1".into(),
            jobtype: "acme-t".into(),
            local_type: "t".into(),
            client: "acme".into(),
            attempt: 2,
            data: data.as_bytes().to_vec(),
            time_limit: limit,
            lost: CancellationToken::new(),
            waited: None,
            trace: None,
        }
    }

    fn done(f: Finished) -> Outcome {
        match f {
            Finished::Done(o) => o,
            other => panic!("expected a finished job, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn exit_codes_status_lines_and_children() {
        let t = task("payload", Duration::from_secs(10));
        let o = done(
            run_one(
                "cat; echo; echo \"$JOBSTORE_JOB_ID $JOBSTORE_ATTEMPT $JOBSTORE_CLIENT\"",
                &t,
            )
            .await,
        );
        assert_eq!((o.status, o.class), (200, Class::Ok));
        assert_eq!(String::from_utf8_lossy(&o.output), "payload\n1 2 acme\n");
        let o = done(run_one("echo 'S: 404'; echo 'J: next|more'", &t).await);
        assert_eq!((o.status, o.class), (404, Class::Failed));
        assert_eq!(o.children.len(), 1);
        let o = done(run_one("echo oops >&2; exit 3", &t).await);
        assert_eq!((o.status, o.class), (500, Class::Error));
        assert!(String::from_utf8_lossy(&o.output).contains("oops"));
        let o = done(run_one("echo 'S: 102'; exit 1", &t).await);
        assert_eq!((o.status, o.class), (102, Class::Retry));
    }

    /// The run's trace context is in `TRACEPARENT` and `TRACESTATE`; a
    /// job without one has neither.
    #[tokio::test]
    async fn the_trace_context_is_in_the_environment() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let mut t = task("", Duration::from_secs(10));
        let show = "echo \"[${TRACEPARENT-unset}] [${TRACESTATE-unset}]\"";
        let o = done(run_one(show, &t).await);
        assert_eq!(String::from_utf8_lossy(&o.output), "[unset] [unset]\n");
        t.trace = Some(TraceContext::parse(tp, None).unwrap());
        let o = done(run_one(show, &t).await);
        assert_eq!(
            String::from_utf8_lossy(&o.output),
            format!("[{tp}] [unset]\n")
        );
        t.trace = Some(TraceContext::parse(tp, Some("a=1, b=x y")).unwrap());
        let o = done(run_one(show, &t).await);
        assert_eq!(
            String::from_utf8_lossy(&o.output),
            format!("[{tp}] [a=1, b=x y]\n")
        );
    }

    #[tokio::test]
    async fn time_limit_kills_the_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("grandchild");
        let t = task("", Duration::from_millis(300));
        let body = format!("(sleep 2; touch {}) & sleep 30", marker.display());
        let start = std::time::Instant::now();
        let o = done(run_one(&body, &t).await);
        assert!(start.elapsed() < Duration::from_secs(5));
        assert_eq!(o.status, 500);
        assert!(String::from_utf8_lossy(&o.output).contains("time limit"));
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(!marker.exists(), "the grandchild was killed with the group");
    }

    #[tokio::test]
    async fn a_lost_lease_kills_the_job() {
        let t = task("", Duration::from_secs(30));
        let lost = t.lost.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            lost.cancel();
        });
        assert!(matches!(run_one("sleep 30", &t).await, Finished::Lost));
    }

    #[tokio::test]
    async fn a_large_payload_does_not_deadlock() {
        let big = "x".repeat(4 << 20);
        let t = task(&big, Duration::from_secs(30));
        let o = done(run_one("wc -c", &t).await);
        assert_eq!(
            String::from_utf8_lossy(&o.output).trim(),
            (4 << 20).to_string()
        );
    }
}
