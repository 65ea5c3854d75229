//! Long-lived workers: a `process` handler with an `eid` runs in an
//! execution context shared by every jobtype of the same client with that
//! `eid` (and the same command). The context is a small pool of worker
//! processes (`sh -c BODY`), each running one job at a time over a line
//! protocol on stdin/stdout (job lines written ahead of the running one),
//! reused across jobs and batches.
//!
//! # Protocol (version 1)
//!
//! The daemon writes one JSON object per line to the worker's stdin:
//!
//! - `{"op":"job","id":…,"type":…,"client":…,"attempt":N,"data":"…"}` (or
//!   `"data_base64"` when the payload is not UTF-8), with
//!   `"traceparent":…` (and `"tracestate":…`) when the job has a W3C trace
//!   context: the run continues that trace;
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

use std::collections::{HashMap, VecDeque};
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

/// Most jobs written to a worker ahead of the one it is running.
const PIPELINE: usize = 32;
/// Most bytes of job lines written ahead, kept below a pipe's capacity
/// (64 KiB on Linux) so that writing never waits for the worker: it cannot
/// read while it is blocked writing an answer nobody reads yet.
const PIPELINE_BYTES: usize = 32 * 1024;

/// A job written to a worker and not yet answered.
struct Sent {
    task: Task,
    bytes: usize,
}

/// How the job at the head of a worker's pipeline ended.
enum End {
    /// Answered with this status.
    Done(u16),
    /// The worker exited (or broke the protocol) first.
    Died,
    /// Writing the job failed: the worker was gone.
    Unsent,
    /// Its time limit passed.
    TimeLimit,
    /// Its lease was lost.
    Lost,
}

/// Runs one chunk of a batch on one worker of the pool.
///
/// Jobs are pipelined: up to [`PIPELINE`] job lines (at most
/// [`PIPELINE_BYTES`] between them; a larger line goes alone) are written
/// ahead, and the answers read in order. The worker still reads and runs
/// one job at a time; writing ahead only saves a round trip between the
/// processes per job. The job at the head (the one the worker runs) has
/// its time limit counted from the end of the previous answer. When a
/// worker dies or runs past a time limit, the jobs written after the head
/// never started: they go to a fresh worker. A head whose lease is lost is
/// reported lost (never done, even if its answer came) and its worker
/// killed; the worker may already have begun the next job, which then
/// runs again on the fresh worker, as after any crash.
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
    let mut pending: VecDeque<Task> = tasks.into();
    let mut sent: VecDeque<Sent> = VecDeque::new();
    let mut sent_bytes = 0;
    let mut hooks_done = false;
    // When the head of `sent` began running.
    let mut head_since = Instant::now();
    loop {
        // A stop sends nothing more; a job whose lease is gone is dropped
        // unsent.
        while let Some(t) = pending.front() {
            let why = if stop.is_cancelled() {
                Finished::NotStarted
            } else if t.lost.is_cancelled() {
                Finished::Lost
            } else {
                break;
            };
            let t = pending.pop_front().expect("front");
            let _ = results.send((t, why));
        }
        if sent.is_empty() {
            if pending.is_empty() {
                break;
            }
            let alive = worker.take().and_then(|mut w| w.alive().then_some(w));
            let mut w = match alive {
                Some(w) => w,
                None => match Worker::start(key, &pending[0].client).await {
                    Ok(w) => w,
                    Err(e) => {
                        for t in pending.drain(..) {
                            let _ = results.send((t, Finished::Done(Outcome::error(&e))));
                        }
                        return;
                    }
                },
            };
            if !hooks_done {
                hooks_done = true;
                if let Some(code) = &handler.before_each
                    && let Err(e) = w.hook("before_each", code).await
                {
                    for t in pending.drain(..) {
                        let _ = results.send((t, Finished::Done(Outcome::error(&e))));
                    }
                    return;
                }
            }
            worker = Some(w);
        }
        let Some(w) = worker.as_mut() else { break };
        // Write ahead.
        let mut out = Vec::new();
        while sent.len() < PIPELINE {
            let Some(t) = pending.front() else { break };
            if t.lost.is_cancelled() || stop.is_cancelled() {
                break; // dropped at the top of the loop
            }
            let line = job_line(t);
            if !sent.is_empty() && sent_bytes + out.len() + line.len() > PIPELINE_BYTES {
                break;
            }
            out.extend_from_slice(&line);
            let task = pending.pop_front().expect("front");
            if sent.is_empty() {
                head_since = Instant::now();
            }
            sent.push_back(Sent {
                task,
                bytes: line.len(),
            });
        }
        let mut parser = OutputParser::default();
        let ended = if out.is_empty() || w.write(&out).await.is_ok() {
            sent_bytes += out.len();
            let Some(head) = sent.front() else { continue };
            let deadline = tokio::time::Instant::from_std(head_since + head.task.time_limit);
            // A lost lease wins over an answer already read: a job written
            // ahead may have run before its turn came here, and its result
            // is no longer this daemon's to store.
            tokio::select! {
                biased;
                _ = head.task.lost.cancelled() => End::Lost,
                s = w.answer(&mut parser) => s.map_or(End::Died, End::Done),
                _ = tokio::time::sleep_until(deadline) => End::TimeLimit,
            }
        } else {
            End::Unsent
        };
        let Sent { task, bytes } = sent.pop_front().expect("a job was sent");
        sent_bytes -= bytes.min(sent_bytes);
        head_since = Instant::now();
        w.last_used = head_since;
        let finished = match ended {
            End::Done(status) => {
                let _ = results.send((task, Finished::Done(Outcome::new(status, parser.finish()))));
                continue;
            }
            End::Unsent => {
                parser.note("the worker was gone before the job was sent");
                Finished::Done(Outcome::new(500, parser.finish()))
            }
            End::Died => {
                parser.note("the worker exited during the job; it is replaced");
                Finished::Done(Outcome::new(500, parser.finish()))
            }
            End::Lost => Finished::Lost,
            End::TimeLimit => {
                parser.note(&format!(
                    "the job ran past its time limit of {:?}; the worker was killed",
                    task.time_limit
                ));
                Finished::Done(Outcome::new(500, parser.finish()))
            }
        };
        let _ = results.send((task, finished));
        // The worker is gone or killed: what was written after the head
        // never started, and runs on a fresh worker.
        if let Some(w) = worker.take() {
            w.kill();
        }
        while let Some(Sent { task, .. }) = sent.pop_back() {
            pending.push_front(task);
        }
        sent_bytes = 0;
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

/// A job's protocol line.
fn job_line(t: &Task) -> Vec<u8> {
    let mut msg = json!({
        "op": "job",
        "id": t.local_id,
        "type": t.local_type,
        "client": t.client,
        "attempt": t.attempt,
    });
    if let Some(trace) = &t.trace {
        msg["traceparent"] = json!(trace.traceparent);
        if let Some(state) = &trace.tracestate {
            msg["tracestate"] = json!(state);
        }
    }
    if let Some(waited) = t
        .waited
        .as_deref()
        .and_then(|w| serde_json::from_str::<serde_json::Value>(w).ok())
    {
        msg["waited"] = waited;
    }
    match std::str::from_utf8(&t.data) {
        Ok(s) => msg["data"] = json!(s),
        Err(_) => {
            msg["data_base64"] = json!(base64::engine::general_purpose::STANDARD.encode(&t.data))
        }
    }
    let mut line = serde_json::to_vec(&msg).unwrap_or_default();
    line.push(b'\n');
    line
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
        self.write(&line).await
    }

    async fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stdin.write_all(bytes).await?;
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
            waited: None,
            trace: None,
        }
    }

    /// A job line carries the run's trace context when it has one.
    #[test]
    fn job_lines_carry_the_trace_context() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let line =
            |t: &Task| -> serde_json::Value { serde_json::from_slice(&job_line(t)).unwrap() };
        let mut t = task(1, "x");
        let plain = line(&t);
        assert!(plain.get("traceparent").is_none() && plain.get("tracestate").is_none());
        t.trace = Some(jobstore_api::TraceContext::parse(tp, None).unwrap());
        assert_eq!(line(&t)["traceparent"], tp);
        assert!(line(&t).get("tracestate").is_none());
        t.trace = Some(jobstore_api::TraceContext::parse(tp, Some("a=\"1\"")).unwrap());
        let full = line(&t);
        assert_eq!(
            (full["traceparent"].as_str(), full["tracestate"].as_str()),
            (Some(tp), Some("a=\"1\""))
        );
        assert_eq!(full["data"], "x");
    }

    /// A context of one worker.
    fn handler() -> Handler {
        let mut h = Handler::new("process", WORKER);
        h.eid = Some("ctx".into());
        h.before = Some("setup".into());
        h.limits.concurrency = Some(1);
        h
    }

    /// A context of one worker running `body`.
    fn one_worker(eid: &str, body: &str) -> Handler {
        let mut h = Handler::new("process", body);
        h.eid = Some(eid.into());
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

    /// Pipelined jobs: each job's time limit counts from the end of the
    /// previous answer, not from when its line was written.
    #[tokio::test]
    async fn time_limits_count_from_the_start_of_each_job() {
        let w = Workers::default();
        let h = one_worker(
            "slow",
            "while IFS= read -r line; do sleep 0.4; echo 'D: 200'; done",
        );
        let tasks: Vec<Task> = (0..5)
            .map(|i| Task {
                time_limit: Duration::from_secs(1),
                ..task(i, "x")
            })
            .collect();
        let out = run(&w, &h, tasks).await;
        let statuses: Vec<u16> = out.iter().map(|f| outcome(f).status).collect();
        assert_eq!(statuses, vec![200; 5], "2 s of jobs, each within its 1 s");
    }

    /// A job written ahead whose lease is lost before it starts is never
    /// answered as done; the jobs before it keep their results and the
    /// jobs after it run on a fresh worker.
    #[tokio::test]
    async fn a_queued_job_whose_lease_is_lost() {
        let w = Workers::default();
        let mut h = handler();
        h.before = None;
        let tasks: Vec<Task> = (0..4)
            .map(|i| task(i, if i == 0 { "slow" } else { "x" }))
            .collect();
        let lost = tasks[1].lost.clone();
        let mut h2 = h.clone();
        h2.body = WORKER.replace(
            "*'\"data\":\"hang\"'*) sleep 30 ;;",
            "*'\"data\":\"hang\"'*) sleep 30 ;;\n        *'\"data\":\"slow\"'*) sleep 0.5; echo \"D: 200\" ;;",
        );
        assert_ne!(h2.body, h.body);
        let (tx, mut rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            lost.cancel();
        });
        w.run_batch(&h2, tasks, &CancellationToken::new(), &tx)
            .await;
        drop(tx);
        let mut by_id = std::collections::BTreeMap::new();
        while let Some((t, f)) = rx.recv().await {
            by_id.insert(t.local_id.clone(), f);
        }
        assert_eq!(by_id.len(), 4, "every job ended once: {by_id:?}");
        assert_eq!(outcome(&by_id["0"]).status, 200, "the running job");
        assert!(matches!(by_id["1"], Finished::Lost), "{:?}", by_id["1"]);
        let after: Vec<String> = ["2", "3"]
            .iter()
            .map(|i| String::from_utf8_lossy(&outcome(&by_id[*i]).output).into_owned())
            .collect();
        assert!(after[0].starts_with("job 1 "), "a fresh worker: {after:?}");
        assert!(after[1].starts_with("job 2 "), "{after:?}");
    }

    /// Large payloads and large answers: writing ahead never waits on a
    /// worker that is itself waiting for its answer to be read.
    #[tokio::test]
    async fn large_payloads_and_answers_do_not_block() {
        let w = Workers::default();
        let h = one_worker(
            "big",
            "while IFS= read -r line; do seq 1 20000; echo 'D: 200'; done",
        );
        let payload = "p".repeat(20 * 1024);
        let tasks: Vec<Task> = (0..12)
            .map(|i| Task {
                time_limit: Duration::from_secs(10),
                ..task(i, &payload)
            })
            .collect();
        let started = Instant::now();
        let out = run(&w, &h, tasks).await;
        let statuses: Vec<u16> = out.iter().map(|f| outcome(f).status).collect();
        assert_eq!(statuses, vec![200; 12]);
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    /// `before_each` and `after_each` run once around each chunk, in
    /// order with the jobs written ahead between them.
    #[tokio::test]
    async fn hooks_run_around_each_chunk() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("ops.log");
        let mut h = one_worker(
            "hooks",
            &format!(
                r#"while IFS= read -r line; do
  case "$line" in
    *'"op":"job"'*) echo job >> '{0}' ;;
    *'"op":"before_each"'*) echo before_each >> '{0}' ;;
    *'"op":"after_each"'*) echo after_each >> '{0}' ;;
  esac
  echo "D: 200"
done"#,
                log.display()
            ),
        );
        h.before_each = Some("b".into());
        h.after_each = Some("a".into());
        let w = Workers::default();
        run(&w, &h, (0..3).map(|i| task(i, "x")).collect()).await;
        run(&w, &h, (3..5).map(|i| task(i, "x")).collect()).await;
        let ops = std::fs::read_to_string(&log).unwrap();
        let ops: Vec<&str> = ops.lines().collect();
        assert_eq!(
            ops,
            [
                "before_each",
                "job",
                "job",
                "job",
                "after_each",
                "before_each",
                "job",
                "job",
                "after_each"
            ]
        );
    }

    /// A job whose lease is lost before its line is written is dropped
    /// unsent: the worker is not killed for it, and runs the rest.
    #[tokio::test]
    async fn a_job_lost_before_it_is_written_is_never_sent() {
        let w = Workers::default();
        let mut h = handler();
        h.before = None;
        // Lost before the chunk starts: the first write-ahead stops at it.
        let n = 12;
        let tasks: Vec<Task> = (0..n).map(|i| task(i, "x")).collect();
        let lost_at = 3;
        tasks[lost_at].lost.cancel();
        let (tx, mut rx) = mpsc::unbounded_channel();
        w.run_batch(&h, tasks, &CancellationToken::new(), &tx).await;
        drop(tx);
        let mut pids = std::collections::BTreeSet::new();
        let mut ended = 0;
        while let Some((t, f)) = rx.recv().await {
            ended += 1;
            if t.local_id == lost_at.to_string() {
                assert!(matches!(f, Finished::Lost), "{f:?}");
                continue;
            }
            let text = String::from_utf8_lossy(&outcome(&f).output).into_owned();
            pids.insert(text.split("pid ").nth(1).unwrap().trim().to_owned());
        }
        assert_eq!(ended, n);
        assert_eq!(pids.len(), 1, "one worker ran every other job: {pids:?}");
    }

    /// A worker that, on its first two jobs, waits and then reports how
    /// many more job lines were already written to it (`ahead N`).
    const AHEAD_WORKER: &str = r#"python3 -c '
import os, select, time
buf, n = b"", 0
while True:
    while b"\n" not in buf:
        chunk = os.read(0, 65536)
        if not chunk:
            raise SystemExit
        buf += chunk
    line, buf = buf.split(b"\n", 1)
    n += 1
    if n <= 2:
        time.sleep(0.3)
        while select.select([0], [], [], 0)[0]:
            chunk = os.read(0, 65536)
            if not chunk:
                break
            buf += chunk
        print("ahead", buf.count(b"\n"))
    print("D: 200", flush=True)
'"#;

    /// What the first two jobs' answers said.
    fn ahead(out: &[Finished]) -> [String; 2] {
        [0, 1].map(|i| {
            String::from_utf8_lossy(&outcome(&out[i]).output)
                .trim()
                .to_owned()
        })
    }

    /// The write-ahead stops at [`PIPELINE`] jobs, and at
    /// [`PIPELINE_BYTES`] bytes of unanswered lines, a line that ends
    /// exactly at the limit included; each answer makes room for more.
    #[tokio::test]
    async fn the_write_ahead_is_bounded_by_jobs_and_bytes() {
        let mut h = one_worker("ahead", AHEAD_WORKER);
        let out = run(
            &Workers::default(),
            &h,
            (0..PIPELINE + 8).map(|i| task(i, "x")).collect(),
        )
        .await;
        let full = format!("ahead {}", PIPELINE - 1);
        assert_eq!(ahead(&out), [full.clone(), full]);

        // Ten lines of exactly 4 KiB: eight fill the byte budget.
        let base = job_line(&task(0, "")).len();
        let payload = "p".repeat(4096 - base);
        let tasks: Vec<Task> = (0..10).map(|i| task(i, &payload)).collect();
        assert!(tasks.iter().all(|t| job_line(t).len() == 4096));
        h.eid = Some("ahead-bytes".into());
        let out = run(&Workers::default(), &h, tasks).await;
        // Seven behind the first; its answer makes room for one more.
        let full = format!("ahead {}", PIPELINE_BYTES / 4096 - 1);
        assert_eq!(ahead(&out), [full.clone(), full]);
        assert!(out.iter().all(|f| outcome(f).status == 200));
    }
}
