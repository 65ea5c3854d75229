//! `jobstore work`: a remote worker. It fetches jobs from a daemon (long
//! poll), runs a command per job as the `process` runner does locally
//! (payload on stdin, `JOBSTORE_*`, and `TRACEPARENT`/`TRACESTATE` for a
//! job with a trace context, in the environment, `S:` and `J:` lines
//! read from its output), renews the leases while the commands run, and
//! reports every result in one call per batch.

use std::collections::HashMap;
use std::time::Duration;

use clap::Args;
use reqwest::Method;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::client::{Api, CliError, Remote};
use crate::http::workers::{FetchResponse, FetchedJob, HeartbeatResponse};
use crate::runner::{Finished, Task, process};

/// `jobstore work`.
#[derive(Debug, Args)]
pub struct WorkArgs {
    #[command(flatten)]
    remote: Remote,
    /// The client.
    client: String,
    /// Jobtypes to work on (repeat the flag, or a comma list).
    #[arg(long = "type", required = true, value_delimiter = ',')]
    types: Vec<String>,
    /// Jobs run at once (and fetched at once).
    #[arg(long, default_value_t = 1)]
    concurrency: u32,
    /// This worker's name [default: the daemon names it].
    #[arg(long)]
    name: Option<String>,
    /// Longest one job may run before it is killed (an error).
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    time_limit: Duration,
    /// Lease of fetched jobs; renewed every third of it while they run.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    lease: Duration,
    /// How long each fetch waits for work.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    wait: Duration,
    /// Stop after this many jobs.
    #[arg(long)]
    jobs: Option<u64>,
    /// Stop when a fetch comes back empty.
    #[arg(long)]
    exit_when_idle: bool,
    /// The command (and its arguments) run per job.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// Runs the worker until `--jobs`, `--exit-when-idle`, or Ctrl-C/SIGTERM
/// (the jobs running then are finished and reported first).
pub async fn work(a: WorkArgs) -> Result<(), CliError> {
    if a.concurrency == 0 || a.concurrency > 1000 {
        return Err(CliError::usage("--concurrency must be within 1..=1000"));
    }
    let api = Api::new(&a.remote)?;
    let stop = CancellationToken::new();
    {
        let stop = stop.clone();
        tokio::spawn(async move {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut term), Ok(mut int)) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) else {
                return;
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            eprintln!("jobstore work: stopping after the running jobs");
            stop.cancel();
        });
    }
    let types = a.types.join(",");
    let mut lease: Option<String> = None;
    let mut done: u64 = 0;
    while !stop.is_cancelled() && a.jobs.is_none_or(|n| done < n) {
        let want = a.jobs.map_or(a.concurrency, |n| {
            a.concurrency.min((n - done) as u32).max(1)
        });
        let mut query: Vec<(&str, String)> = vec![
            ("max", want.to_string()),
            ("wait", a.wait.as_millis().to_string()),
            ("lease_ms", a.lease.as_millis().to_string()),
        ];
        match (&lease, &a.name) {
            (Some(l), _) => query.push(("lease", l.clone())),
            (None, Some(n)) => query.push(("worker", n.clone())),
            (None, None) => {}
        }
        let req = api
            .request(Method::POST, &[&a.client, "job", &types, "get"])
            .query(&query);
        let fetched: FetchResponse = tokio::select! {
            r = api.send(req) => r?,
            _ = stop.cancelled() => break,
        };
        if lease.is_none() {
            eprintln!("jobstore work: worker {} fetching {types}", fetched.worker);
        }
        lease = Some(fetched.lease.clone());
        if fetched.jobs.is_empty() {
            if a.exit_when_idle {
                break;
            }
            continue;
        }
        done += fetched.jobs.len() as u64;
        run_batch(&api, &a, &fetched.lease, fetched.jobs).await?;
    }
    Ok(())
}

/// Runs fetched jobs at once, renewing their leases, then reports them.
async fn run_batch(
    api: &Api,
    a: &WorkArgs,
    lease: &str,
    jobs: Vec<FetchedJob>,
) -> Result<(), CliError> {
    let tasks: Vec<Task> =
        jobs.into_iter()
            .map(|j| Task {
                waited: j.waited.as_ref().map(|w| w.to_string().into()),
                id: j.id.clone(),
                local_id: j.id,
                jobtype: j.jobtype.clone(),
                local_type: j.jobtype,
                client: a.client.clone(),
                attempt: j.attempt,
                data: match (j.data, j.data_base64) {
                    (Some(d), _) => d.into_bytes(),
                    (None, Some(b)) => {
                        use base64::Engine;
                        base64::engine::general_purpose::STANDARD
                            .decode(b)
                            .unwrap_or_default()
                    }
                    (None, None) => Vec::new(),
                },
                time_limit: a.time_limit,
                lost: CancellationToken::new(),
                // As the daemon sent it (it checked it at add); the command
                // gets it as TRACEPARENT and TRACESTATE.
                trace: j.traceparent.as_deref().and_then(|tp| {
                    jobstore_api::TraceContext::parse(tp, j.tracestate.as_deref()).ok()
                }),
            })
            .collect();
    let tokens: HashMap<String, CancellationToken> = tasks
        .iter()
        .map(|t| (t.id.clone(), t.lost.clone()))
        .collect();
    let heartbeats = CancellationToken::new();
    let beat = {
        let (api, stop) = (api.clone(), heartbeats.clone());
        let (client, lease) = (a.client.clone(), lease.to_owned());
        let every = (a.lease / 3).max(Duration::from_millis(200));
        let lease_ms = a.lease.as_millis() as u64;
        tokio::spawn(async move {
            let mut held: Vec<String> = tokens.keys().cloned().collect();
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(every) => {}
                }
                let req = api
                    .request(Method::POST, &[&client, "jobs", "heartbeat"])
                    .json(&json!({"lease": lease, "ids": held, "lease_ms": lease_ms}));
                match api.send::<HeartbeatResponse>(req).await {
                    Ok(r) => {
                        for id in &r.lost {
                            eprintln!(
                                "jobstore work: job {id} lost (its lease was taken over); stopping it"
                            );
                            if let Some(t) = tokens.get(id) {
                                t.cancel();
                            }
                        }
                        held = r.held;
                    }
                    Err(e) if e.status == Some(409) => {
                        for t in tokens.values() {
                            t.cancel();
                        }
                        return;
                    }
                    Err(e) if e.code == 4 || e.code == 5 => {
                        eprintln!("jobstore work: heartbeat refused: {e}");
                        return;
                    }
                    Err(e) => eprintln!("jobstore work: heartbeat failed: {e}"),
                }
            }
        })
    };
    let command = &a.command;
    let results = futures::future::join_all(tasks.iter().map(|t| async move {
        let mut cmd = tokio::process::Command::new(&command[0]);
        cmd.args(&command[1..]).process_group(0).kill_on_drop(true);
        for k in crate::runner::SECRET_ENV {
            cmd.env_remove(k);
        }
        process::run_command(cmd, t).await
    }))
    .await;
    heartbeats.cancel();
    let _ = beat.await;

    let mut report = Vec::new();
    for (t, r) in tasks.iter().zip(results) {
        match r {
            Finished::Done(o) => {
                eprintln!("jobstore work: job {} ended with status {}", t.id, o.status);
                let children: Vec<_> = o
                    .children
                    .iter()
                    .map(|c| json!({"type": c.jobtype, "data": String::from_utf8_lossy(&c.data)}))
                    .collect();
                let mut entry = json!({
                    "id": t.id,
                    "status": o.status,
                    "output": String::from_utf8_lossy(&o.output),
                    "jobs": children,
                });
                if let Some(d) = o.retry_after {
                    entry["retry_in_ms"] = json!(d.as_millis() as u64);
                }
                report.push(entry);
            }
            Finished::Lost | Finished::NotStarted => {}
        }
    }
    if report.is_empty() {
        return Ok(());
    }
    let req = api
        .request(Method::POST, &[&a.client, "jobs", "finish"])
        .json(&json!({"lease": lease, "jobs": report}));
    match api.send::<crate::http::workers::FinishResponse>(req).await {
        Ok(r) => {
            for id in r.lost {
                eprintln!("jobstore work: the result of job {id} was refused: its lease was lost");
            }
            Ok(())
        }
        Err(e) if e.status == Some(409) => {
            eprintln!("jobstore work: results refused, the leases were lost: {e}");
            Ok(())
        }
        Err(e) => Err(e),
    }
}
