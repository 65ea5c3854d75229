//! `jobstore schedule …`: schedules (recurring jobs). `set`, `list`,
//! `show`, `delete`, `pause`, `resume` and `trigger` speak to a daemon;
//! `next` previews a rule offline, with no daemon.

use clap::{Args, Subcommand};
use reqwest::Method;
use serde::Serialize;

use super::CliError;
use super::client::{Api, Remote, print_json};
use super::output;
use crate::http::schedules::{
    ScheduleDeleteResponse, ScheduleList, SchedulePauseResponse, ScheduleSpec, ScheduleView,
    TriggerResponse,
};
use crate::schedules::Rule;
use crate::schedules::rule::{rfc3339, zoned};

/// `jobstore schedule …`.
#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Create or replace a schedule; prints its next five slots.
    Set(Box<ScheduleSetArgs>),
    /// List a client's schedules.
    List(ScheduleListArgs),
    /// Show one schedule: its rule, its firing state and next slots.
    Show(ScheduleNameArgs),
    /// Delete a schedule (the jobs it added stay).
    Delete(ScheduleNameArgs),
    /// Pause a schedule on every daemon: it fires nothing until resumed.
    Pause(ScheduleNameArgs),
    /// Resume a paused schedule; missed slots follow its catch-up policy.
    Resume(ScheduleNameArgs),
    /// Add one job of the schedule now, outside its slots.
    Trigger(ScheduleNameArgs),
    /// Print a rule's next firing times (offline: no daemon needed).
    Next(ScheduleNextArgs),
}

/// `jobstore schedule set`.
#[derive(Debug, Args)]
pub struct ScheduleSetArgs {
    #[command(flatten)]
    remote: Remote,
    /// The client.
    client: String,
    /// The schedule's name.
    name: String,
    /// The rule: a cron pattern of 5 or 6 fields (`0 6 * * MON-FRI`) or a
    /// repeat rule (`FINISHED, +1 DAY, START OF DAY, +6 HOURS`, `DAILY`).
    #[arg(long)]
    rule: String,
    /// The IANA time zone the rule's wall times are in.
    #[arg(long, default_value = "UTC", value_name = "ZONE")]
    time_zone: String,
    /// The jobtype of the jobs it adds.
    #[arg(long = "type", value_name = "TYPE")]
    jobtype: String,
    /// Their payload (text).
    #[arg(long, conflicts_with = "file")]
    data: Option<String>,
    /// Their payload, read from a file.
    #[arg(long, value_name = "PATH")]
    file: Option<std::path::PathBuf>,
    /// Their priority.
    #[arg(long, allow_negative_numbers = true)]
    priority: Option<i32>,
    /// Their tags (repeat, or comma-separated).
    #[arg(long = "tag", value_delimiter = ',')]
    tags: Vec<String>,
    /// Missed slots: `all` fires each, `last` the newest, `none` only those
    /// on time.
    #[arg(long, value_name = "POLICY", value_parser = ["all", "last", "none"])]
    catch_up: Option<String>,
    /// Slots older than this are never fired (`1h`, `2days`).
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    catch_up_window: Option<std::time::Duration>,
    /// A slot while the previous slot's job runs: `allow` or `skip`.
    #[arg(long, value_name = "POLICY", value_parser = ["allow", "skip"])]
    overlap: Option<String>,
    /// No slot before this time (RFC 3339 or epoch ms).
    #[arg(long, value_name = "TIME")]
    start: Option<String>,
    /// No slot at or after this time (RFC 3339 or epoch ms).
    #[arg(long, value_name = "TIME")]
    end: Option<String>,
}

/// `jobstore schedule list`.
#[derive(Debug, Args)]
pub struct ScheduleListArgs {
    #[command(flatten)]
    remote: Remote,
    /// The client.
    client: String,
}

/// A `jobstore schedule` subcommand that names one schedule.
#[derive(Debug, Args)]
pub struct ScheduleNameArgs {
    #[command(flatten)]
    remote: Remote,
    /// The client.
    client: String,
    /// The schedule's name.
    name: String,
}

/// `jobstore schedule next`.
#[derive(Debug, Args)]
pub struct ScheduleNextArgs {
    /// The rule: a cron pattern of 5 or 6 fields (`0 6 * * MON-FRI`) or a
    /// repeat rule (`FINISHED, +1 DAY, START OF DAY, +6 HOURS`, `DAILY`).
    rule: String,
    /// The IANA time zone the rule's wall times are in.
    #[arg(long, default_value = "UTC", value_name = "ZONE")]
    time_zone: String,
    /// Count from this time (RFC 3339, or epoch milliseconds); the default
    /// is now. A repeat rule is applied to it as its base, then to each
    /// result in turn: for a `STARTED` or `FINISHED` rule, as if every job
    /// started or finished at its own firing time.
    #[arg(long, value_name = "TIME", allow_negative_numbers = true)]
    from: Option<String>,
    /// How many times to print (1 to 100).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=100))]
    count: u16,
    /// Print a JSON array instead of lines.
    #[arg(long)]
    json: bool,
}

/// One firing time, as `--json` prints it.
#[derive(Debug, Serialize)]
struct Firing {
    /// Epoch milliseconds.
    at: i64,
    /// RFC 3339 in UTC.
    utc: String,
    /// RFC 3339 in the rule's zone, with the zone's name.
    local: String,
}

/// Runs a `schedule` subcommand.
pub async fn schedule(command: ScheduleCommand) -> Result<(), CliError> {
    match command {
        ScheduleCommand::Set(a) => set(*a).await,
        ScheduleCommand::List(a) => list(a).await,
        ScheduleCommand::Show(a) => show(a).await,
        ScheduleCommand::Delete(a) => delete(a).await,
        ScheduleCommand::Pause(a) => pause(a, "pause").await,
        ScheduleCommand::Resume(a) => pause(a, "resume").await,
        ScheduleCommand::Trigger(a) => trigger(a).await,
        ScheduleCommand::Next(a) => next(&a),
    }
}

async fn set(a: ScheduleSetArgs) -> Result<(), CliError> {
    let api = Api::new(&a.remote)?;
    let (data, data_base64) = match (&a.data, &a.file) {
        (Some(d), _) => (Some(d.clone()), None),
        (None, Some(path)) => {
            let bytes = std::fs::read(path)
                .map_err(|e| CliError::local(format!("reading {}: {e}", path.display())))?;
            match String::from_utf8(bytes) {
                Ok(text) => (Some(text), None),
                Err(e) => {
                    use base64::Engine;
                    let b64 = base64::engine::general_purpose::STANDARD.encode(e.as_bytes());
                    (None, Some(b64))
                }
            }
        }
        (None, None) => (None, None),
    };
    let spec = ScheduleSpec {
        rule: a.rule,
        time_zone: Some(a.time_zone),
        jobtype: a.jobtype,
        data,
        data_base64,
        priority: a.priority,
        tags: (!a.tags.is_empty()).then_some(a.tags),
        catch_up: a.catch_up,
        catch_up_window_ms: a
            .catch_up_window
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        overlap: a.overlap,
        start_at: a.start,
        end_at: a.end,
    };
    let req = api
        .request(Method::PUT, &[&a.client, "schedules", &a.name])
        .json(&spec);
    let v: ScheduleView = api.send(req).await?;
    if a.remote.json {
        print_json(&v);
    } else {
        println!("{}", output::schedule(&v));
    }
    Ok(())
}

async fn list(a: ScheduleListArgs) -> Result<(), CliError> {
    let api = Api::new(&a.remote)?;
    let req = api.request(Method::GET, &[&a.client, "schedules"]);
    let v: ScheduleList = api.send(req).await?;
    if a.remote.json {
        print_json(&v);
    } else if v.schedules.is_empty() {
        println!("no schedules");
    } else {
        println!("{}", output::schedules(&v.schedules));
    }
    Ok(())
}

async fn show(a: ScheduleNameArgs) -> Result<(), CliError> {
    let api = Api::new(&a.remote)?;
    let req = api.request(Method::GET, &[&a.client, "schedules", &a.name]);
    let v: ScheduleView = api.send(req).await?;
    if a.remote.json {
        print_json(&v);
    } else {
        println!("{}", output::schedule(&v));
    }
    Ok(())
}

async fn delete(a: ScheduleNameArgs) -> Result<(), CliError> {
    let api = Api::new(&a.remote)?;
    let req = api.request(Method::DELETE, &[&a.client, "schedules", &a.name]);
    let v: ScheduleDeleteResponse = api.send(req).await?;
    if a.remote.json {
        print_json(&v);
    } else if v.deleted {
        println!("schedule {} deleted", v.name);
    } else {
        return Err(CliError::not_found(format!("no schedule {}", v.name)));
    }
    Ok(())
}

async fn pause(a: ScheduleNameArgs, verb: &str) -> Result<(), CliError> {
    let api = Api::new(&a.remote)?;
    let req = api.request(Method::POST, &[&a.client, "schedules", &a.name, verb]);
    let v: SchedulePauseResponse = api.send(req).await?;
    if a.remote.json {
        print_json(&v);
    } else {
        let state = if v.paused { "paused" } else { "resumed" };
        let note = if v.changed { "" } else { " (it already was)" };
        println!("schedule {} {state}{note}", v.name);
    }
    Ok(())
}

async fn trigger(a: ScheduleNameArgs) -> Result<(), CliError> {
    let api = Api::new(&a.remote)?;
    let req = api.request(Method::POST, &[&a.client, "schedules", &a.name, "trigger"]);
    let v: TriggerResponse = api.send(req).await?;
    if a.remote.json {
        print_json(&v);
    } else {
        println!("{}", v.id);
    }
    Ok(())
}

fn next(a: &ScheduleNextArgs) -> Result<(), CliError> {
    let from = match &a.from {
        Some(s) => parse_time(s)?,
        None => now(),
    };
    let rule = Rule::parse_checked(&a.rule, &a.time_zone, from)
        .map_err(|e| CliError::usage(e.to_string()))?;
    let tz = rule.time_zone();
    let in_utc = a.time_zone == "UTC";
    let firings: Vec<Firing> = rule
        .next_n(from, usize::from(a.count))
        .into_iter()
        .map(|at| Firing {
            at,
            utc: rfc3339(at),
            local: zoned(at, tz).map_or_else(|| rfc3339(at), |z| z.to_string()),
        })
        .collect();
    if a.json {
        print_json(&firings);
    } else {
        for f in &firings {
            if in_utc {
                println!("{}", f.utc);
            } else {
                println!("{}  {}", f.utc, f.local);
            }
        }
    }
    Ok(())
}

/// RFC 3339 (with an offset) or epoch milliseconds.
fn parse_time(s: &str) -> Result<i64, CliError> {
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    s.parse::<jiff::Timestamp>()
        .map(|t| t.as_millisecond())
        .map_err(|e| {
            CliError::usage(format!(
                "from: `{s}` is neither RFC 3339 nor epoch milliseconds ({e})"
            ))
        })
}

fn now() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}
