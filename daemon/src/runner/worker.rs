//! Long-lived workers: a `process` handler with an `eid` runs in an
//! execution context shared by every jobtype of the same client with that
//! `eid` (and the same command). The context is a small pool of worker
//! processes (`sh -c BODY`), each fed one job at a time over a line
//! protocol on stdin/stdout, reused across jobs and batches.
//!
//! # Protocol (version 1)
//!
//! The daemon writes one JSON object per line to the worker's stdin:
//!
//! - `{"op":"job","id":…,"type":…,"client":…,"attempt":N,"data":"…"}` (or
//!   `"data_base64"` when the payload is not UTF-8);
//! - `{"op":"before","code":…}` once when the worker starts, if the handler
//!   has `before`; `{"op":"before_each","code":…}` and
//!   `{"op":"after_each","code":…}` around each batch, if set.
//!
//! The worker answers each message with output lines, read as a process's
//! output (`S: NNN` sets the status, `J: type|payload` adds a job of the
//! same client, other lines are logs) and ends the answer with a line
//! `D: NNN` (done, with status NNN; `D:` alone means the status of the last
//! `S:` line, or 200). Standard error is logged by the daemon, not kept.
//! A worker that exits or breaks the protocol is replaced; the job it was
//! running counts as an error (500). A job past its time limit, or whose
//! lease was lost, has the worker's process group killed.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use jobstore_api::Handler;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::{Mutex, Semaphore};
use tokio_util::sync::CancellationToken;

use super::process::HOOK_TIME_LIMIT;
use super::{
    Finished, MAX_LINE, Outcome, OutputParser, Results, Task, kill_group, read_line_capped, shell,
};

/// Workers per context when the handler sets no concurrency: one per CPU.
pub fn default_pool() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}
/// Most workers per context.
pub const MAX_POOL: usize = 256;

/// A context: the client, the eid and the command identify it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    client: String,
    eid: String,
    body: String,
    before: Option<String>,
}

struct Pool {
    idle: Mutex<Vec<Worker>>,
    slots: Semaphore,
    size: usize,
}

/// Every execution context of a daemon.
#[derive(Default)]
pub struct Workers {
    pools: Mutex<HashMap<Key, Arc<Pool>>>,
}

impl Workers {
    /// Runs a batch on the workers of its context: the batch is split into
    /// one contiguous chunk per worker (at most the pool's size), and each
    /// worker runs `before_each`, its chunk's jobs one at a time, and
    /// `after_each`.
    pub async fn run_batch(
        &self,
        handler: &Handler,
        tasks: Vec<Task>,
        stop: &CancellationToken,
        results: &Results,
    ) {
        let Some(first) = tasks.first() else { return };
        let key = Key {
            client: first.client.clone(),
            eid: handler.eid.clone().unwrap_or_default(),
            body: handler.body.clone(),
            before: handler.before.clone(),
        };
        let pool = {
            let mut pools = self.pools.lock().await;
            pools
                .entry(key.clone())
                .or_insert_with(|| {
                    let size = pool_size(handler);
                    Arc::new(Pool {
                        idle: Mutex::new(Vec::new()),
                        slots: Semaphore::new(size),
                        size,
                    })
                })
                .clone()
        };
        let parts = pool.size.min(tasks.len()).max(1);
        let per = tasks.len().div_ceil(parts);
        let mut chunks = Vec::with_capacity(parts);
        let mut rest = tasks.into_iter();
        loop {
            let chunk: Vec<Task> = rest.by_ref().take(per).collect();
            if chunk.is_empty() {
                break;
            }
            chunks.push(chunk);
        }
        futures::future::join_all(
            chunks
                .into_iter()
                .map(|chunk| run_chunk(&key, &pool, handler, chunk, stop, results)),
        )
        .await;
    }
}

/// Runs one chunk of a batch on one worker of the pool.
async fn run_chunk(
    key: &Key,
    pool: &Pool,
    handler: &Handler,
    tasks: Vec<Task>,
    stop: &CancellationToken,
    results: &Results,
) {
    let Ok(_slot) = pool.slots.acquire().await else {
        for t in tasks {
            let _ = results.send((t, Finished::NotStarted));
        }
        return;
    };
    let mut worker = pool.idle.lock().await.pop();
    let mut tasks = tasks.into_iter();
    let mut hooks_done = false;
    while let Some(t) = tasks.next() {
        if stop.is_cancelled() {
            let _ = results.send((t, Finished::NotStarted));
            continue;
        }
        let w = match worker.take().and_then(|mut w| w.alive().then_some(w)) {
            Some(w) => w,
            None => match Worker::start(key, &t.client).await {
                Ok(w) => w,
                Err(e) => {
                    let _ = results.send((t, Finished::Done(Outcome::error(&e))));
                    for rest in tasks.by_ref() {
                        let _ = results.send((rest, Finished::Done(Outcome::error(&e))));
                    }
                    return;
                }
            },
        };
        let mut w = w;
        if !hooks_done {
            hooks_done = true;
            if let Some(code) = &handler.before_each
                && let Err(e) = w.hook("before_each", code).await
            {
                let _ = results.send((t, Finished::Done(Outcome::error(&e))));
                for rest in tasks.by_ref() {
                    let _ = results.send((rest, Finished::Done(Outcome::error(&e))));
                }
                return;
            }
        }
        let (finished, alive) = w.run(&t).await;
        let _ = results.send((t, finished));
        if alive {
            worker = Some(w);
        } else {
            w.kill();
        }
    }
    if let (Some(code), Some(w)) = (&handler.after_each, worker.as_mut())
        && let Err(e) = w.hook("after_each", code).await
    {
        tracing::warn!(error = %e, eid = %key.eid, "after_each failed");
    }
    if let Some(mut w) = worker
        && w.alive()
    {
        pool.idle.lock().await.push(w);
    }
}

impl Workers {
    /// Stops workers idle for longer than `idle`; forgets empty contexts.
    pub async fn reap_idle(&self, idle: Duration) {
        let mut pools = self.pools.lock().await;
        let mut empty = Vec::new();
        for (key, pool) in pools.iter() {
            let mut workers = pool.idle.lock().await;
            workers.retain(|w| w.last_used.elapsed() < idle);
            if workers.is_empty() && pool.slots.available_permits() == pool.size {
                empty.push(key.clone());
            }
        }
        for key in empty {
            pools.remove(&key);
        }
    }

    /// Stops every idle worker (closing stdin asks it to exit; it is killed
    /// when dropped).
    pub async fn shutdown(&self) {
        let pools: Vec<Arc<Pool>> = self.pools.lock().await.values().cloned().collect();
        for pool in pools {
            pool.slots.close();
            pool.idle.lock().await.clear();
        }
    }
}

/// Workers per context: the handler's `concurrency` (which also caps its
/// jobs in flight), else one per CPU; at most [`MAX_POOL`].
fn pool_size(handler: &Handler) -> usize {
    handler
        .limits
        .concurrency
        .map_or_else(default_pool, |c| c as usize)
        .clamp(1, MAX_POOL)
}

/// One worker process.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pid: Option<u32>,
    last_used: Instant,
    broken: bool,
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Its stdin closes with it; make sure the group goes too.
        kill_group(self.pid);
    }
}

impl Worker {
    async fn start(key: &Key, client: &str) -> Result<Worker, String> {
        let mut cmd = shell(&key.body);
        cmd.env("JOBSTORE_EID", &key.eid)
            .env("JOBSTORE_CLIENT", client)
            .env("JOBSTORE_PROTOCOL", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start the worker: {e}"))?;
        let pid = child.id();
        let stdin = child.stdin.take().ok_or("worker has no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("worker has no stdout")?);
        if let Some(stderr) = child.stderr.take() {
            let eid = key.eid.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::info!(eid = %eid, pid, "worker: {line}");
                }
            });
        }
        let mut w = Worker {
            child,
            stdin,
            stdout,
            pid,
            last_used: Instant::now(),
            broken: false,
        };
        if let Some(code) = &key.before {
            w.hook("before", code).await?;
        }
        tracing::debug!(eid = %key.eid, pid, "worker started");
        Ok(w)
    }

    fn alive(&mut self) -> bool {
        !self.broken && matches!(self.child.try_wait(), Ok(None))
    }

    fn kill(mut self) {
        self.broken = true;
        kill_group(self.pid);
    }

    async fn send(&mut self, msg: &serde_json::Value) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.stdin.write_all(&line).await?;
        self.stdin.flush().await
    }

    /// Reads an answer up to its `D:` line. `None` if the worker died.
    async fn answer(&mut self, parser: &mut OutputParser) -> Option<u16> {
        let mut line = Vec::new();
        loop {
            match read_line_capped(&mut self.stdout, &mut line, MAX_LINE).await {
                Ok(true) => {}
                _ => return None,
            }
            if let Some(rest) = line.strip_prefix(b"D:") {
                let rest = String::from_utf8_lossy(rest);
                let rest = rest.trim();
                if rest.is_empty() {
                    return Some(parser.status().unwrap_or(200));
                }
                return match rest.parse::<u16>() {
                    Ok(s) if (100..=599).contains(&s) => Some(s),
                    _ => {
                        parser.note(&format!("malformed done line D: {rest}"));
                        Some(500)
                    }
                };
            }
            parser.line(&line);
        }
    }

    async fn hook(&mut self, op: &str, code: &str) -> Result<(), String> {
        let mut parser = OutputParser::default();
        let sent = self.send(&json!({"op": op, "code": code})).await;
        let status = match sent {
            Ok(()) => tokio::time::timeout(HOOK_TIME_LIMIT, self.answer(&mut parser))
                .await
                .ok()
                .flatten(),
            Err(_) => None,
        };
        match status {
            Some(s) if (200..300).contains(&s) => Ok(()),
            Some(s) => Err(format!(
                "{op} failed with status {s}: {}",
                String::from_utf8_lossy(&parser.finish().output).trim()
            )),
            None => {
                self.broken = true;
                Err(format!("the worker died or hung during {op}"))
            }
        }
    }

    /// Runs one job; the end, and whether the worker can be reused.
    async fn run(&mut self, t: &Task) -> (Finished, bool) {
        self.last_used = Instant::now();
        let mut msg = json!({
            "op": "job",
            "id": t.local_id,
            "type": t.local_type,
            "client": t.client,
            "attempt": t.attempt,
        });
        match std::str::from_utf8(&t.data) {
            Ok(s) => msg["data"] = json!(s),
            Err(_) => {
                msg["data_base64"] =
                    json!(base64::engine::general_purpose::STANDARD.encode(&t.data))
            }
        }
        let mut parser = OutputParser::default();
        if self.send(&msg).await.is_err() {
            parser.note("the worker was gone before the job was sent");
            return (Finished::Done(Outcome::new(500, parser.finish())), false);
        }
        let ended = tokio::select! {
            s = self.answer(&mut parser) => Ok(s),
            _ = tokio::time::sleep(t.time_limit) => Err(false),
            _ = t.lost.cancelled() => Err(true),
        };
        self.last_used = Instant::now();
        match ended {
            Ok(Some(status)) => (Finished::Done(Outcome::new(status, parser.finish())), true),
            Ok(None) => {
                parser.note("the worker exited during the job; it is replaced");
                (Finished::Done(Outcome::new(500, parser.finish())), false)
            }
            Err(true) => (Finished::Lost, false),
            Err(false) => {
                parser.note(&format!(
                    "the job ran past its time limit of {:?}; the worker was killed",
                    t.time_limit
                ));
                (Finished::Done(Outcome::new(500, parser.finish())), false)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::Class;
    use tokio::sync::mpsc;

    const WORKER: &str = r#"
count=0
while IFS= read -r line; do
  case "$line" in
    *'"op":"before"'*) echo "ready"; echo "D: 200" ;;
    *'"op":"job"'*)
      count=$((count + 1))
      case "$line" in
        *'"data":"fail"'*) echo "S: 404"; echo "D:" ;;
        *'"data":"die"'*) exit 1 ;;
        *'"data":"hang"'*) sleep 30 ;;
        *) echo "job $count pid $$"; echo "J: next|$count"; echo "D: 200" ;;
      esac ;;
    *) echo "D: 200" ;;
  esac
done
"#;

    fn task(i: usize, data: &str) -> Task {
        Task {
            id: format!("acme-{i}"),
            local_id: i.to_string(),
            jobtype: "acme-t".into(),
            local_type: "t".into(),
            client: "acme".into(),
            attempt: 1,
            data: data.as_bytes().to_vec(),
            time_limit: Duration::from_millis(1500),
            lost: CancellationToken::new(),
        }
    }

    /// A context of one worker.
    fn handler() -> Handler {
        let mut h = Handler::new("process", WORKER);
        h.eid = Some("ctx".into());
        h.before = Some("setup".into());
        h.limits.concurrency = Some(1);
        h
    }

    async fn run(w: &Workers, h: &Handler, tasks: Vec<Task>) -> Vec<Finished> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let n = tasks.len();
        w.run_batch(h, tasks, &CancellationToken::new(), &tx).await;
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(rx.recv().await.unwrap().1);
        }
        out
    }

    fn outcome(f: &Finished) -> &Outcome {
        match f {
            Finished::Done(o) => o,
            other => panic!("not done: {other:?}"),
        }
    }

    #[tokio::test]
    async fn one_worker_serves_many_jobs_and_batches() {
        let w = Workers::default();
        let h = handler();
        let first = run(&w, &h, (0..3).map(|i| task(i, "x")).collect()).await;
        let second = run(&w, &h, (3..5).map(|i| task(i, "y")).collect()).await;
        let texts: Vec<String> = first
            .iter()
            .chain(&second)
            .map(|f| String::from_utf8_lossy(&outcome(f).output).into_owned())
            .collect();
        let pid = |s: &str| s.split("pid ").nth(1).unwrap().trim().to_owned();
        assert!(
            texts.iter().all(|t| pid(t) == pid(&texts[0])),
            "one process: {texts:?}"
        );
        assert!(
            texts[4].starts_with("job 5 "),
            "state kept across batches: {texts:?}"
        );
        assert_eq!(outcome(&second[1]).children[0].data, b"5");
    }

    #[tokio::test]
    async fn a_batch_is_spread_over_the_pool() {
        let w = Workers::default();
        let mut h = handler();
        h.limits.concurrency = Some(3);
        let out = run(&w, &h, (0..9).map(|i| task(i, "x")).collect()).await;
        let pids: std::collections::BTreeSet<String> = out
            .iter()
            .map(|f| {
                let text = String::from_utf8_lossy(&outcome(f).output).into_owned();
                text.split("pid ").nth(1).unwrap().trim().to_owned()
            })
            .collect();
        assert_eq!(pids.len(), 3, "three workers shared the batch: {pids:?}");
    }

    #[tokio::test]
    async fn failures_deaths_and_time_limits() {
        let w = Workers::default();
        let h = handler();
        let out = run(
            &w,
            &h,
            vec![
                task(0, "fail"),
                task(1, "die"),
                task(2, "ok"),
                task(3, "hang"),
                task(4, "ok"),
            ],
        )
        .await;
        assert_eq!(outcome(&out[0]).class, Class::Failed);
        assert_eq!(
            outcome(&out[1]).status,
            500,
            "a dead worker's job is an error"
        );
        let after_death = String::from_utf8_lossy(&outcome(&out[2]).output).into_owned();
        assert!(
            after_death.starts_with("job 1 "),
            "a fresh worker: {after_death}"
        );
        let hung = outcome(&out[3]);
        assert_eq!(hung.status, 500);
        assert!(String::from_utf8_lossy(&hung.output).contains("time limit"));
        assert_eq!(
            outcome(&out[4]).status,
            200,
            "replaced after the time limit"
        );
    }
}
