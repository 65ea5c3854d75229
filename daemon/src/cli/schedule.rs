//! `jobstore schedule …`: schedules' rules. `next` previews a rule offline,
//! with no daemon.

use clap::{Args, Subcommand};
use serde::Serialize;

use super::CliError;
use super::client::print_json;
use crate::schedules::Rule;
use crate::schedules::rule::{rfc3339, zoned};

/// `jobstore schedule …`.
#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Print a rule's next firing times (offline: no daemon needed).
    Next(ScheduleNextArgs),
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
pub fn schedule(command: ScheduleCommand) -> Result<(), CliError> {
    match command {
        ScheduleCommand::Next(a) => next(&a),
    }
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
