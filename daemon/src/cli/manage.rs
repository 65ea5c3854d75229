//! `jobstore jobs list|retry|delete|cancel|edit`, `jobstore pause|resume`,
//! `jobstore failures`: the management routes from the command line, with
//! tables, `--json`, and a progress bar on bulk actions.

use std::time::Duration;

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use reqwest::Method;
use serde::Serialize;

use super::client::{Api, CliError, Remote, print_json};
use super::output;
use crate::http::manage::{
    BulkResponse, CancelResponse, EditResponse, Failures, JobFilter, JobList, PauseResponse,
};

/// `jobstore jobs …`.
#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// List jobs of one state, filtered, newest archived first.
    List(ListArgs),
    /// Run archived jobs again (by ids, or every job the filter selects).
    Retry(BulkArgs),
    /// Delete jobs that are not running (by ids or by filter).
    Delete(BulkArgs),
    /// Cancel jobs, running ones included (by ids or by filter).
    Cancel(BulkArgs),
    /// Unblock blocked jobs: they pass over the dependencies they still
    /// wait for (pending or held) and wait at once (by ids, or every
    /// blocked job the filter selects).
    Unblock(BulkArgs),
    /// Change a waiting or scheduled job's priority, due time or payload.
    Edit(EditArgs),
}

/// Filters shared by list and the bulk actions.
#[derive(Debug, Args, Clone, Default)]
pub struct FilterArgs {
    /// Jobtypes (repeat, or comma-separated); default every jobtype.
    #[arg(long = "type", value_name = "TYPE")]
    jobtype: Vec<String>,
    /// waiting, scheduled, running, expired, blocked or archived.
    #[arg(long)]
    state: Option<String>,
    /// Result codes of archived jobs (repeat, or comma-separated).
    #[arg(long)]
    code: Vec<String>,
    /// Created at or after (epoch ms or RFC 3339).
    #[arg(long)]
    created_from: Option<String>,
    /// Created before.
    #[arg(long)]
    created_to: Option<String>,
    /// Archived at or after.
    #[arg(long)]
    archived_from: Option<String>,
    /// Archived before.
    #[arg(long)]
    archived_to: Option<String>,
    /// Only jobs with this tag.
    #[arg(long)]
    tag: Option<String>,
    /// Archived jobs whose result has this status (a failure group's).
    #[arg(long)]
    status: Option<u16>,
    /// Archived jobs whose output's first line is this (a failure
    /// group's, as `jobstore failures` prints it).
    #[arg(long)]
    message: Option<String>,
}

impl FilterArgs {
    fn is_empty(&self) -> bool {
        self.jobtype.is_empty()
            && self.state.is_none()
            && self.code.is_empty()
            && self.created_from.is_none()
            && self.created_to.is_none()
            && self.archived_from.is_none()
            && self.archived_to.is_none()
            && self.tag.is_none()
            && self.status.is_none()
            && self.message.is_none()
    }

    fn filter(&self, default_state: Option<&str>) -> JobFilter {
        let join = |v: &[String]| (!v.is_empty()).then(|| v.join(","));
        JobFilter {
            state: self
                .state
                .clone()
                .or_else(|| default_state.map(str::to_owned)),
            jobtype: join(&self.jobtype),
            code: join(&self.code),
            created_from: self.created_from.clone(),
            created_to: self.created_to.clone(),
            archived_from: self.archived_from.clone(),
            archived_to: self.archived_to.clone(),
            tag: self.tag.clone(),
            status: self.status,
            message: self.message.clone(),
        }
    }
}

/// `jobstore jobs list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    remote: Remote,
    /// The client.
    client: String,
    #[command(flatten)]
    filter: FilterArgs,
    /// Jobs per page (1 to 1000).
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// Every page, not just the first.
    #[arg(long)]
    all: bool,
    /// Start after this cursor (the `next` a page printed).
    #[arg(long)]
    cursor: Option<String>,
    /// Include payloads.
    #[arg(long)]
    data: bool,
}

/// `jobstore jobs retry|delete|cancel`.
#[derive(Debug, Args)]
pub struct BulkArgs {
    #[command(flatten)]
    remote: Remote,
    /// The client.
    client: String,
    /// Job ids; without them, the filter selects the jobs.
    ids: Vec<String>,
    #[command(flatten)]
    filter: FilterArgs,
    /// Count what would change; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Retry only: make the jobs due after this delay (e.g. 5m).
    #[arg(long, value_parser = humantime::parse_duration)]
    delay: Option<Duration>,
    /// Jobs per request when acting on a filter (1 to 1000).
    #[arg(long, default_value_t = 1000)]
    batch: usize,
}

/// `jobstore jobs edit`.
#[derive(Debug, Args)]
pub struct EditArgs {
    #[command(flatten)]
    remote: Remote,
    /// The client.
    client: String,
    /// The job id.
    id: String,
    /// A new priority.
    #[arg(long, allow_negative_numbers = true)]
    priority: Option<i32>,
    /// A new due time (epoch ms or RFC 3339).
    #[arg(long)]
    run_at: Option<String>,
    /// A new payload.
    #[arg(long)]
    data: Option<String>,
}

/// `jobstore pause|resume`.
#[derive(Debug, Args)]
pub struct PauseArgs {
    #[command(flatten)]
    remote: Remote,
    /// The client.
    client: String,
    /// The jobtype.
    #[arg(value_name = "TYPE")]
    jobtype: String,
}

/// `jobstore failures`.
#[derive(Debug, Args)]
pub struct FailuresArgs {
    #[command(flatten)]
    remote: Remote,
    /// The client.
    client: String,
    /// Jobtypes (repeat, or comma-separated); default every jobtype.
    #[arg(long = "type", value_name = "TYPE")]
    jobtype: Vec<String>,
    /// How many of the newest failures to group.
    #[arg(long, default_value_t = 10_000)]
    scan: usize,
}

/// Runs `jobstore jobs …`.
pub async fn jobs(cmd: JobsCommand) -> Result<(), CliError> {
    match cmd {
        JobsCommand::List(a) => list(a).await,
        JobsCommand::Retry(a) => bulk(a, Action::Retry).await,
        JobsCommand::Delete(a) => bulk(a, Action::Delete).await,
        JobsCommand::Cancel(a) => bulk(a, Action::Cancel).await,
        JobsCommand::Unblock(a) => bulk(a, Action::Unblock).await,
        JobsCommand::Edit(a) => edit(a).await,
    }
}

async fn list(a: ListArgs) -> Result<(), CliError> {
    let api = Api::new(&a.remote)?;
    let filter = a.filter.filter(None);
    if filter.state.is_none() {
        return Err(CliError::usage(
            "--state is required: waiting, scheduled, running, expired, blocked or archived",
        ));
    }
    let mut cursor = a.cursor.clone();
    let mut all = Vec::new();
    loop {
        let mut query: Vec<(&str, String)> = Vec::new();
        let f = &filter;
        for (k, v) in [
            ("state", &f.state),
            ("type", &f.jobtype),
            ("code", &f.code),
            ("created_from", &f.created_from),
            ("created_to", &f.created_to),
            ("archived_from", &f.archived_from),
            ("archived_to", &f.archived_to),
            ("tag", &f.tag),
            ("message", &f.message),
        ] {
            if let Some(v) = v {
                query.push((k, v.clone()));
            }
        }
        if let Some(status) = f.status {
            query.push(("status", status.to_string()));
        }
        query.push(("limit", a.limit.to_string()));
        if a.data {
            query.push(("data", "true".into()));
        }
        if let Some(c) = &cursor {
            query.push(("cursor", c.clone()));
        }
        let req = api.request(Method::GET, &[&a.client, "jobs"]).query(&query);
        let page: JobList = api.send(req).await?;
        let next = page.next.clone();
        if a.remote.json && !a.all {
            print_json(&page);
            return Ok(());
        }
        if !a.remote.json {
            println!("{}", output::job_list(&page.jobs));
        }
        all.extend(page.jobs);
        match next {
            Some(c) if a.all => cursor = Some(c),
            Some(c) => {
                if !a.remote.json {
                    println!("more: --cursor {c}");
                }
                break;
            }
            None => break,
        }
    }
    if a.remote.json {
        print_json(&all);
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Action {
    Retry,
    Delete,
    Cancel,
    Unblock,
}

impl Action {
    fn path(self) -> &'static str {
        match self {
            Action::Retry => "rerun",
            Action::Delete => "delete",
            Action::Cancel => "cancel",
            Action::Unblock => "unblock",
        }
    }

    fn verb(self) -> &'static str {
        match self {
            Action::Retry => "run again",
            Action::Delete => "deleted",
            Action::Cancel => "cancelled",
            Action::Unblock => "unblocked",
        }
    }

    fn default_state(self) -> Option<&'static str> {
        match self {
            Action::Retry => Some("archived"),
            Action::Unblock => Some("blocked"),
            _ => None,
        }
    }
}

#[derive(Debug, Default, Serialize)]
struct BulkBody {
    #[serde(skip_serializing_if = "Option::is_none")]
    ids: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    filter: Option<JobFilter>,
    dry_run: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    cursor: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delay_ms: Option<u64>,
}

/// One answer of a bulk route, whichever its shape.
fn unify(action: Action, v: serde_json::Value) -> Result<BulkResponse, CliError> {
    let bad = |e: serde_json::Error| CliError::local(format!("unexpected answer: {e}"));
    if action == Action::Cancel {
        let c: CancelResponse = serde_json::from_value(v).map_err(bad)?;
        Ok(BulkResponse {
            matched: c.matched,
            done: c.cancelled,
            cancelling: c.cancelling,
            not_done: c.not_cancelled,
            next: c.next,
        })
    } else {
        serde_json::from_value(v).map_err(bad)
    }
}

async fn bulk(a: BulkArgs, action: Action) -> Result<(), CliError> {
    let api = Api::new(&a.remote)?;
    if a.delay.is_some() && action != Action::Retry {
        return Err(CliError::usage("--delay goes with retry only"));
    }
    let delay_ms = a.delay.map(|d| d.as_millis() as u64);
    let send = |body: BulkBody| {
        let api = api.clone();
        let client = a.client.clone();
        async move {
            let req = api
                .request(Method::POST, &[&client, "jobs", action.path()])
                .json(&body);
            let v: serde_json::Value = api.send(req).await?;
            unify(action, v)
        }
    };
    if !a.ids.is_empty() {
        if !a.filter.is_empty() {
            return Err(CliError::usage("give job ids or filters, not both"));
        }
        let out = send(BulkBody {
            ids: Some(a.ids.clone()),
            dry_run: a.dry_run,
            delay_ms,
            ..BulkBody::default()
        })
        .await?;
        report(&a, action, &out, out.matched)?;
        if !a.dry_run && out.done.is_empty() && out.cancelling.is_empty() {
            return Err(CliError::not_found(format!("no job was {}", action.verb())));
        }
        return Ok(());
    }
    if a.filter.is_empty() && action != Action::Retry && action != Action::Unblock {
        return Err(CliError::usage(
            "give job ids, or a filter (--state, --type, --code, …); a bulk action never acts on everything by default",
        ));
    }
    let filter = a.filter.filter(action.default_state());
    // The count first: it sizes the progress bar, and is the answer of a
    // dry run.
    let count = send(BulkBody {
        filter: Some(filter.clone()),
        dry_run: true,
        ..BulkBody::default()
    })
    .await?
    .matched;
    if a.dry_run {
        if a.remote.json {
            print_json(&serde_json::json!({ "matched": count }));
        } else {
            println!("{count} jobs would be {}", action.verb());
        }
        return Ok(());
    }
    let bar = if a.remote.json || count == 0 {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new(count);
        bar.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} jobs {msg} ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    };
    let mut total = BulkResponse::default();
    let mut cursor = None;
    loop {
        let out = send(BulkBody {
            filter: Some(filter.clone()),
            cursor: cursor.clone(),
            limit: Some(a.batch),
            delay_ms,
            ..BulkBody::default()
        })
        .await?;
        bar.inc(out.matched);
        total.matched += out.matched;
        total.done.extend(out.done);
        total.cancelling.extend(out.cancelling);
        total.not_done.extend(out.not_done);
        match out.next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    bar.finish_and_clear();
    report(&a, action, &total, count)
}

fn report(a: &BulkArgs, action: Action, out: &BulkResponse, matched: u64) -> Result<(), CliError> {
    if a.remote.json {
        print_json(out);
        return Ok(());
    }
    if a.dry_run {
        println!("{matched} jobs would be {}", action.verb());
        return Ok(());
    }
    // The first ids of each list, then how many more (the totals follow).
    let shown = 20;
    let more = |ids: &[String], what: &str| {
        if ids.len() > shown {
            println!("{:<14} … and {} more", what, ids.len() - shown);
        }
    };
    for id in out.done.iter().take(shown) {
        println!("{:<14} {id}", action.verb());
    }
    more(&out.done, action.verb());
    for id in out.cancelling.iter().take(shown) {
        println!(
            "{:<14} {id} (running: stopped at its next lease renewal)",
            "cancelling"
        );
    }
    more(&out.cancelling, "cancelling");
    for id in out.not_done.iter().take(shown) {
        let why = match action {
            Action::Retry => "not archived, or unknown",
            Action::Delete => "running, or unknown",
            Action::Cancel => "archived, or unknown",
            Action::Unblock => "not blocked, or unknown",
        };
        println!("{:<14} {id} ({why})", "not changed");
    }
    more(&out.not_done, "not changed");
    let cancelling = if action == Action::Cancel {
        format!(", {} cancelling", out.cancelling.len())
    } else {
        String::new()
    };
    println!(
        "{} {}{cancelling}, {} not changed (of {matched} selected)",
        out.done.len(),
        action.verb(),
        out.not_done.len()
    );
    Ok(())
}

async fn edit(a: EditArgs) -> Result<(), CliError> {
    if a.priority.is_none() && a.run_at.is_none() && a.data.is_none() {
        return Err(CliError::usage("give --priority, --run-at or --data"));
    }
    let api = Api::new(&a.remote)?;
    let body = serde_json::json!({ "edits": [{
        "id": a.id,
        "priority": a.priority,
        "run_at": a.run_at,
        "data": a.data,
    }]});
    let req = api
        .request(Method::POST, &[&a.client, "jobs", "edit"])
        .json(&body);
    let v: EditResponse = api.send(req).await?;
    if a.remote.json {
        print_json(&v);
    } else if v.edited.is_empty() {
        return Err(CliError::not_found(format!(
            "job {} was not edited: it is running, archived, or unknown",
            a.id
        )));
    } else {
        println!("edited {}", a.id);
    }
    Ok(())
}

/// Runs `jobstore pause` (`paused = true`) or `jobstore resume`.
pub async fn pause(a: PauseArgs, paused: bool) -> Result<(), CliError> {
    let api = Api::new(&a.remote)?;
    let verb = if paused { "pause" } else { "resume" };
    let req = api.request(Method::POST, &[&a.client, "jobtypes", &a.jobtype, verb]);
    let v: PauseResponse = api.send(req).await?;
    if a.remote.json {
        print_json(&v);
    } else {
        let state = if paused { "paused" } else { "resumed" };
        let note = if v.changed { "" } else { " (it already was)" };
        println!("{} {state}{note}", a.jobtype);
    }
    Ok(())
}

/// Runs `jobstore failures`.
pub async fn failures(a: FailuresArgs) -> Result<(), CliError> {
    let api = Api::new(&a.remote)?;
    let mut query = vec![("scan", a.scan.to_string())];
    if !a.jobtype.is_empty() {
        query.push(("type", a.jobtype.join(",")));
    }
    let req = api
        .request(Method::GET, &[&a.client, "failures"])
        .query(&query);
    let v: Failures = api.send(req).await?;
    if a.remote.json {
        print_json(&v);
    } else {
        println!("{}", output::failures(&v.groups));
        let total: u64 = v.groups.iter().map(|g| g.count).sum();
        let scope = if v.complete {
            "every failure".to_owned()
        } else {
            format!("the newest {} failures (raise --scan for more)", v.scanned)
        };
        let groups = match v.groups.len() {
            1 => "1 group".to_owned(),
            n => format!("{n} groups"),
        };
        let jobs = if total == 1 { "job" } else { "jobs" };
        println!("{total} failed {jobs} in {groups}, from {scope}");
    }
    Ok(())
}
