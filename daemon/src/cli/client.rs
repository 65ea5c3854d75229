//! The client subcommands: requests to a daemon's HTTP API.

use std::io::{BufRead, IsTerminal};
use std::time::Duration;

use clap::Args;
use futures::{StreamExt, TryStreamExt};
use indicatif::{ProgressBar, ProgressStyle};
use reqwest::{Method, RequestBuilder, StatusCode};
use serde::de::DeserializeOwned;

use super::output;
use super::{AddArgs, CancelArgs, HandlerCommand, JobArgs, StatsArgs};
use crate::http::error::ErrorBody;
use crate::http::jobs::{AddResponse, AllStats, ClientStats, JobView};
use crate::http::jobtype_handlers::{DeleteResponse, HandlerList, HandlerView};
use crate::http::manage::CancelResponse;
use crate::http::timing::StatsHistory;

/// Where the daemon is, and how to speak to it.
#[derive(Debug, Clone, Args)]
pub struct Remote {
    /// The daemon's URL.
    #[arg(long, env = "JOBSTORE_URL", default_value = "http://127.0.0.1:7070")]
    pub url: String,
    /// The bearer token.
    #[arg(long, env = "JOBSTORE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Request timeout.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// A failed client command: a message and the process exit code.
#[derive(Debug)]
pub struct CliError {
    /// The exit code (see the module docs).
    pub code: u8,
    /// What went wrong.
    pub message: String,
    /// The daemon's HTTP status, when it answered with an error.
    pub status: Option<u16>,
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

impl CliError {
    /// Exit code 1.
    pub fn local(message: impl Into<String>) -> Self {
        CliError {
            code: 1,
            message: message.into(),
            status: None,
        }
    }

    /// Not found (exit code 3).
    pub fn not_found(message: impl Into<String>) -> Self {
        CliError {
            code: 3,
            message: message.into(),
            status: None,
        }
    }

    /// A usage error (exit code 2).
    pub fn usage(message: impl Into<String>) -> Self {
        CliError {
            code: 2,
            message: message.into(),
            status: None,
        }
    }

    fn from_status(status: StatusCode, message: String) -> Self {
        let code = match status.as_u16() {
            404 => 3,
            401 | 403 => 4,
            400..=499 => 5,
            _ => 6,
        };
        CliError {
            code,
            message,
            status: Some(status.as_u16()),
        }
    }

    fn unreachable(url: &str, e: &reqwest::Error) -> Self {
        CliError {
            code: 7,
            message: format!("cannot reach the daemon at {url}: {e}"),
            status: None,
        }
    }
}

#[derive(Clone)]
pub(super) struct Api {
    remote: Remote,
    http: reqwest::Client,
    base: url::Url,
}

impl Api {
    pub(super) fn new(remote: &Remote) -> Result<Api, CliError> {
        let base = url::Url::parse(&remote.url)
            .map_err(|e| CliError::usage(format!("--url {:?}: {e}", remote.url)))?;
        if base.cannot_be_a_base() {
            return Err(CliError::usage(format!(
                "--url {:?} is not an http URL",
                remote.url
            )));
        }
        let http = crate::http_client::builder()
            .timeout(remote.timeout)
            .build()
            .map_err(|e| CliError::local(format!("HTTP client: {e}")))?;
        Ok(Api {
            remote: remote.clone(),
            http,
            base,
        })
    }

    pub(super) fn request(&self, method: Method, segments: &[&str]) -> RequestBuilder {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("checked in Api::new")
            .pop_if_empty()
            .extend(segments);
        let mut req = self.http.request(method, url);
        if let Some(token) = &self.remote.token {
            req = req.bearer_auth(token);
        }
        req
    }

    pub(super) async fn send<T: DeserializeOwned>(
        &self,
        req: RequestBuilder,
    ) -> Result<T, CliError> {
        let response = req
            .send()
            .await
            .map_err(|e| CliError::unreachable(&self.remote.url, &e))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| CliError::unreachable(&self.remote.url, &e))?;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| {
                CliError::from_status(
                    StatusCode::BAD_GATEWAY,
                    format!("unexpected answer from the daemon ({e})"),
                )
            });
        }
        let message = match serde_json::from_slice::<ErrorBody>(&bytes) {
            Ok(body) => format!("{} ({})", body.error.message, status.as_u16()),
            Err(_) => format!(
                "{status}: {}",
                String::from_utf8_lossy(&bytes)
                    .chars()
                    .take(500)
                    .collect::<String>()
            ),
        };
        Err(CliError::from_status(status, message))
    }
}

pub(super) fn print_json<T: serde::Serialize>(value: &T) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| "null".to_owned())
    );
}

/// `jobstore add`.
pub async fn add(a: AddArgs) -> Result<(), CliError> {
    if a.batch == 0 || a.parallel == 0 {
        return Err(CliError::usage("--batch and --parallel must be above 0"));
    }
    let api = Api::new(&a.remote)?;
    let mut query: Vec<(&str, String)> = Vec::new();
    if let Some(p) = a.priority {
        query.push(("priority", p.to_string()));
    }
    if !a.tags.is_empty() {
        query.push(("tags", a.tags.join(",")));
    }
    if let Some(d) = a.delay {
        query.push(("delay_ms", d.as_millis().to_string()));
    }
    if let Some(key) = &a.unique_key {
        query.push(("unique_key", key.clone()));
        if let Some(w) = a.unique_window {
            query.push(("unique_window_ms", w.as_millis().to_string()));
        }
        if a.replace_data {
            query.push(("on_conflict", "replace_data".to_owned()));
        }
    } else if a.unique_window.is_some() || a.replace_data {
        return Err(CliError::usage(
            "--unique-window and --replace-data go with --unique-key",
        ));
    }
    if let Some(rule) = &a.repeat {
        query.push(("repeat", rule.clone()));
        if let Some(tz) = &a.repeat_tz {
            query.push(("repeat_tz", tz.clone()));
        }
    } else if a.repeat_tz.is_some() {
        return Err(CliError::usage("--repeat-tz goes with --repeat"));
    }
    if !a.depends_on.is_empty() {
        if let Some(d) = a.depends_on.iter().find(|d| d.contains(',')) {
            return Err(CliError::usage(format!(
                "--depends-on {d:?}: an id with a comma needs a JSON add"
            )));
        }
        query.push(("depends_on", a.depends_on.join(",")));
        if let Some(p) = &a.on_dependency_failure {
            query.push(("on_dependency_failure", p.clone()));
        }
        if a.with_outputs {
            query.push(("with_outputs", "true".to_owned()));
        }
    } else if a.on_dependency_failure.is_some() || a.with_outputs {
        return Err(CliError::usage(
            "--on-dependency-failure and --with-outputs go with --depends-on",
        ));
    }
    // Checked here: the daemon ignores a malformed header, as W3C Trace
    // Context asks, and the jobs would lose their trace without a word.
    // A tracestate alone (a stray $TRACESTATE) means nothing and is left.
    let trace = match a.traceparent.as_deref() {
        None => None,
        Some(tp) => Some(
            jobstore_api::TraceContext::parse(tp, a.tracestate.as_deref())
                .map_err(|e| CliError::usage(format!("--traceparent or $TRACEPARENT: {e}")))?,
        ),
    };

    // Batches of lines, from the arguments, a file or stdin.
    let (lines, total_bytes): (Lines, Option<u64>) = if !a.payloads.is_empty() {
        if a.file.is_some() {
            return Err(CliError::usage(
                "give payloads as arguments or --file, not both",
            ));
        }
        if let Some(bad) = a.payloads.iter().find(|p| p.contains('\n') || p.is_empty()) {
            return Err(CliError::usage(format!(
                "payload {bad:?} is empty or holds a newline; use the JSON API for such payloads"
            )));
        }
        let v: Vec<_> = a
            .payloads
            .iter()
            .map(|p| Ok(p.as_bytes().to_vec()))
            .collect();
        (Box::new(v.into_iter()), None)
    } else {
        match a.file.as_deref() {
            Some(p) if p.as_os_str() != "-" => {
                let f = std::fs::File::open(p)
                    .map_err(|e| CliError::local(format!("{}: {e}", p.display())))?;
                let size = f.metadata().ok().map(|m| m.len());
                (Box::new(split_lines(std::io::BufReader::new(f))), size)
            }
            _ => {
                if a.file.is_none() && std::io::stdin().is_terminal() {
                    return Err(CliError::usage(
                        "no payloads: give them as arguments, with --file, or on stdin",
                    ));
                }
                (
                    Box::new(split_lines(std::io::BufReader::new(std::io::stdin()))),
                    None,
                )
            }
        }
    };

    let progress = match total_bytes {
        Some(n) => ProgressBar::new(n).with_style(
            ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {per_sec} eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        ),
        None => ProgressBar::new_spinner(),
    };
    if a.quiet || a.payloads.len() == 1 {
        progress.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }

    // Read batches on a blocking thread; send up to --parallel at once,
    // keeping the answers in order.
    // With a unique key, requests go one at a time, so the first payload
    // is the one added (and with --replace-data the last one wins).
    let parallel = if a.unique_key.is_some() {
        1
    } else {
        a.parallel
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<(Vec<u8>, u64), CliError>>(parallel * 2);
    let batch = a.batch;
    let reader = tokio::task::spawn_blocking(move || {
        let mut body = Vec::new();
        let mut n = 0;
        let mut bytes = 0u64;
        for line in lines {
            match line {
                Ok(l) => {
                    bytes += l.len() as u64 + 1;
                    if l.is_empty() {
                        continue;
                    }
                    body.extend_from_slice(&l);
                    body.push(b'\n');
                    n += 1;
                    if n == batch {
                        if tx
                            .blocking_send(Ok((std::mem::take(&mut body), bytes)))
                            .is_err()
                        {
                            return;
                        }
                        n = 0;
                        bytes = 0;
                    }
                }
                Err(e) => {
                    let _ =
                        tx.blocking_send(Err(CliError::local(format!("reading payloads: {e}"))));
                    return;
                }
            }
        }
        if n > 0 {
            let _ = tx.blocking_send(Ok((body, bytes)));
        }
    });
    let mut all = AddResponse {
        ids: Vec::new(),
        existing: Vec::new(),
        pending: Vec::new(),
        rejected: Vec::new(),
        duplicates: Vec::new(),
        refused: Vec::new(),
    };
    let segments = [a.client.as_str(), "job", a.jobtype.as_str(), "add"];
    let mut answers = tokio_stream_from(rx)
        .map_ok(|(body, bytes)| {
            let mut req = api
                .request(Method::POST, &segments)
                .query(&query)
                .header(reqwest::header::CONTENT_TYPE, "text/plain")
                .body(body);
            if let Some(t) = &trace {
                req = req.header("traceparent", &t.traceparent);
                if let Some(state) = &t.tracestate {
                    req = req.header("tracestate", state);
                }
            }
            let api = &api;
            async move { api.send::<AddResponse>(req).await.map(|r| (r, bytes)) }
        })
        .try_buffered(parallel);
    let json = a.remote.json;
    let quiet = a.quiet;
    let stdout_is_tty = std::io::stdout().is_terminal();
    while let Some(answer) = answers.next().await {
        let (r, bytes) = answer?;
        progress.inc(if total_bytes.is_some() {
            bytes
        } else {
            r.ids.len() as u64
        });
        if !json && !quiet {
            // A duplicate prints the job holding its key: the id that
            // carries the work.
            let holders: std::collections::HashMap<&str, &str> = r
                .duplicates
                .iter()
                .map(|d| (d.id.as_str(), d.existing.as_str()))
                .collect();
            for id in &r.ids {
                let shown = holders.get(id.as_str()).copied().unwrap_or(id);
                if stdout_is_tty {
                    progress.suspend(|| println!("{shown}"));
                } else {
                    println!("{shown}");
                }
            }
            for d in &r.duplicates {
                let replaced = if d.replaced {
                    ", its payload replaced"
                } else {
                    ""
                };
                progress.suspend(|| {
                    eprintln!(
                        "not added: job {} holds the unique key{replaced}",
                        d.existing
                    )
                });
            }
            for f in &r.refused {
                progress
                    .suspend(|| eprintln!("not added: job {}: {}: {}", f.id, f.field, f.reason));
            }
        }
        all.ids.extend(r.ids);
        all.existing.extend(r.existing);
        all.pending.extend(r.pending);
        all.rejected.extend(r.rejected);
        all.duplicates.extend(r.duplicates);
        all.refused.extend(r.refused);
    }
    let _ = reader.await;
    progress.finish_and_clear();
    if json {
        print_json(&all);
    } else if !quiet && all.ids.len() > 1 {
        eprintln!("{} jobs added", all.ids.len());
    }
    Ok(())
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

type Lines = Box<dyn Iterator<Item = std::io::Result<Vec<u8>>> + Send>;

fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

fn split_lines<R: BufRead + Send + 'static>(
    reader: R,
) -> impl Iterator<Item = std::io::Result<Vec<u8>>> + Send {
    reader.split(b'\n').map(|line| {
        line.map(|mut l| {
            if l.last() == Some(&b'\r') {
                l.pop();
            }
            l
        })
    })
}

/// `jobstore handler …`.
pub async fn handler(cmd: HandlerCommand) -> Result<(), CliError> {
    match cmd {
        HandlerCommand::Set(h) => {
            let api = Api::new(&h.remote)?;
            let spec = crate::http::jobtype_handlers::HandlerSpec {
                method: h.method,
                body: h.body,
                eid: h.eid,
                before: h.before,
                before_each: h.before_each,
                after_each: h.after_each,
                limits: crate::http::jobtype_handlers::LimitsSpec {
                    max_attempts: h.max_attempts,
                    max_age_ms: h.max_age.map(ms),
                    time_limit_ms: h.time_limit.map(ms),
                    concurrency: h.concurrency,
                    backoff_base_ms: h.backoff_base.map(ms),
                    backoff_max_ms: h.backoff_max.map(ms),
                },
            };
            let req = api
                .request(
                    Method::POST,
                    &[&h.client, "handler", "add", &h.jobtype, "add"],
                )
                .json(&spec);
            let v: HandlerView = api.send(req).await?;
            if h.remote.json {
                print_json(&v);
            } else {
                println!("{}", output::handler(&v));
            }
        }
        HandlerCommand::Get(h) => {
            let api = Api::new(&h.remote)?;
            let req = api.request(Method::GET, &[&h.client, "handler", "get", &h.jobtype]);
            let v: HandlerView = api.send(req).await?;
            if h.remote.json {
                print_json(&v);
            } else {
                println!("{}", output::handler(&v));
            }
        }
        HandlerCommand::Delete(h) => {
            let api = Api::new(&h.remote)?;
            let req = api.request(
                Method::DELETE,
                &[&h.client, "handler", "del", &h.jobtype, "delete"],
            );
            let v: DeleteResponse = api.send(req).await?;
            if h.remote.json {
                print_json(&v);
            } else {
                println!("handler of {} deleted", h.jobtype);
            }
        }
        HandlerCommand::List(c) => {
            let api = Api::new(&c.remote)?;
            let req = api.request(Method::GET, &[&c.client, "handlers"]);
            let v: HandlerList = api.send(req).await?;
            if c.remote.json {
                print_json(&v);
            } else {
                println!("{}", output::handler_list(&v));
            }
        }
    }
    Ok(())
}

/// `jobstore job`.
pub async fn job(j: JobArgs) -> Result<(), CliError> {
    let api = Api::new(&j.remote)?;
    let req = api.request(Method::GET, &[&j.client, "jobs", &j.id]);
    let v: JobView = api.send(req).await?;
    if j.remote.json {
        print_json(&v);
    } else {
        println!("{}", output::job(&v));
    }
    Ok(())
}

/// `jobstore cancel`.
pub async fn cancel(c: CancelArgs) -> Result<(), CliError> {
    let api = Api::new(&c.remote)?;
    let req = api
        .request(Method::POST, &[&c.client, "jobs", "cancel"])
        .json(&serde_json::json!({ "ids": c.ids }));
    let v: CancelResponse = api.send(req).await?;
    if c.remote.json {
        print_json(&v);
    } else {
        for id in &v.cancelled {
            println!("cancelled      {id}");
        }
        for id in &v.cancelling {
            println!("cancelling     {id} (running: stopped at its next lease renewal)");
        }
        for id in &v.not_cancelled {
            println!("not cancelled  {id} (archived or unknown)");
        }
    }
    if v.cancelled.is_empty() && v.cancelling.is_empty() {
        return Err(CliError {
            code: 3,
            message: "nothing was cancelled".to_owned(),
            status: None,
        });
    }
    Ok(())
}

/// `jobstore stats`.
pub async fn stats(s: StatsArgs) -> Result<(), CliError> {
    let api = Api::new(&s.remote)?;
    if let (Some(client), Some(resolution)) = (&s.client, &s.history) {
        let mut query = vec![("resolution", resolution.clone())];
        if !s.types.is_empty() {
            query.push(("type", s.types.join(",")));
        }
        let req = api
            .request(Method::GET, &[client, "stats", "history"])
            .query(&query);
        let v: StatsHistory = api.send(req).await?;
        if s.remote.json {
            print_json(&v);
        } else if v.jobtypes.is_empty() {
            println!(
                "no runs of {client}'s jobs in the last {}",
                if resolution == "minute" {
                    "hour"
                } else {
                    "30 days"
                }
            );
        } else {
            println!("{}", output::stats_history(&v));
        }
        return Ok(());
    }
    match &s.client {
        Some(client) => {
            let req = api.request(Method::GET, &[client, "stats"]);
            let v: ClientStats = api.send(req).await?;
            if s.remote.json {
                print_json(&v);
            } else {
                println!("{}", output::stats(std::slice::from_ref(&v)));
            }
        }
        None => {
            let req = api.request(Method::GET, &["stats"]);
            let v: AllStats = api.send(req).await?;
            if s.remote.json {
                print_json(&v);
            } else {
                println!("{}", output::stats(&v.clients));
            }
        }
    }
    Ok(())
}
