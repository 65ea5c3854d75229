//! The daemon's commands of the `jobstore` command line (the binary adds
//! `bench`): `jobstore serve` runs the daemon; the other subcommands talk
//! to a running daemon over its HTTP API.
//!
//! `jobstore schedule next` needs no daemon: it previews a rule.
//!
//! Exit codes: 0 done; 1 a local failure (a file that cannot be read);
//! 2 bad usage; 3 not found; 4 refused by authentication (401/403);
//! 5 refused as invalid (another 4xx); 6 the daemon failed or is
//! unavailable (5xx); 7 the daemon cannot be reached.

mod client;
mod manage;
mod output;
mod schedule;
mod work;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};

use crate::config::ServeArgs;
pub use client::{CliError, Remote};
pub use manage::{FailuresArgs, JobsCommand, PauseArgs};
pub use schedule::{ScheduleCommand, ScheduleNextArgs};

/// The daemon's subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon.
    Serve(Box<ServeArgs>),
    /// Add jobs: payloads from arguments, a file (--file) or stdin.
    Add(AddArgs),
    /// Set, show, list or delete handlers.
    #[command(subcommand)]
    Handler(HandlerCommand),
    /// Show a job: state, attempts, result and output.
    Job(JobArgs),
    /// Cancel jobs by id: waiting and scheduled ones at once, running ones
    /// at their next lease renewal.
    Cancel(CancelArgs),
    /// List, run again, delete, cancel or edit jobs (by ids or filters).
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// Pause a jobtype on every daemon of the store (adds still land).
    Pause(PauseArgs),
    /// Resume a paused jobtype.
    Resume(PauseArgs),
    /// A client's failed jobs grouped by jobtype, status and first line of
    /// output.
    Failures(FailuresArgs),
    /// Job counts by jobtype and state (one client, or every client with
    /// the admin token).
    Stats(StatsArgs),
    /// Print a new random token and the SHA-256 to put in the config file.
    Token,
    /// Work as a remote worker: fetch jobs from a daemon and run a command
    /// per job (`jobstore work acme --type resize -- ./resize.sh`).
    Work(Box<work::WorkArgs>),
    /// Schedules (recurring jobs): set, list, show, delete, pause, resume,
    /// trigger; `next` previews a rule's firing times offline.
    #[command(subcommand)]
    Schedule(ScheduleCommand),
}

/// `jobstore add`.
#[derive(Debug, Args)]
pub struct AddArgs {
    #[command(flatten)]
    remote: Remote,
    /// The client (tenant).
    client: String,
    /// The jobtype.
    #[arg(value_name = "TYPE")]
    jobtype: String,
    /// Payloads, one job each. Without them (and without --file) payloads
    /// are read from stdin, one per line.
    payloads: Vec<String>,
    /// Read payloads from this file, one per line (`-` for stdin).
    #[arg(long, short, value_name = "FILE")]
    file: Option<PathBuf>,
    /// Lines per request.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 4)]
    parallel: usize,
    /// Priority of every job (higher runs first).
    #[arg(long, allow_negative_numbers = true)]
    priority: Option<i32>,
    /// Run the jobs after this delay (e.g. 30s, 5m).
    #[arg(long, value_parser = humantime::parse_duration)]
    delay: Option<Duration>,
    /// Tag every job (repeat for several; at most 8).
    #[arg(long = "tag", value_name = "TAG")]
    tags: Vec<String>,
    /// A unique key (per jobtype): while a job holding it is waiting,
    /// scheduled or running, nothing is added and that job's id is
    /// printed instead. With several payloads only the first is added.
    #[arg(long, value_name = "KEY")]
    unique_key: Option<String>,
    /// With --unique-key: also while a job with the key was archived less
    /// than this long ago (e.g. 1h).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    unique_window: Option<Duration>,
    /// With --unique-key: a waiting or scheduled job holding the key gets
    /// this payload.
    #[arg(long)]
    replace_data: bool,
    /// Make every job repeat by this rule (cron, or the repeat syntax such
    /// as 'FINISHED, +1 HOUR'): each run that ends ok makes it due again at
    /// the rule's next time instead of archiving it.
    #[arg(long, value_name = "RULE")]
    repeat: Option<String>,
    /// With --repeat: the IANA time zone the rule counts in (default UTC).
    #[arg(long, value_name = "ZONE")]
    repeat_tz: Option<String>,
    /// Every job waits for this job (repeat for several; ids as the adds
    /// answered them): blocked until each has been archived.
    #[arg(long = "depends-on", value_name = "ID")]
    depends_on: Vec<String>,
    /// With --depends-on: what a dependency that ends other than ok does,
    /// `cancel` (default), `run` or `hold` (stay blocked until it is run
    /// again and ends ok, or `jobstore jobs unblock`).
    #[arg(long, value_name = "POLICY")]
    on_dependency_failure: Option<String>,
    /// With --depends-on: hand each run its dependencies' outputs too
    /// (in JOBSTORE_WAITED).
    #[arg(long)]
    with_outputs: bool,
    /// The W3C trace context the jobs continue (their runs get it as
    /// TRACEPARENT): from a job's own run, or a traced program, it is
    /// already in the environment.
    #[arg(long, env = "TRACEPARENT", value_name = "TRACEPARENT")]
    traceparent: Option<String>,
    /// The W3C tracestate that goes with --traceparent.
    #[arg(long, env = "TRACESTATE", value_name = "TRACESTATE")]
    tracestate: Option<String>,
    /// Print nothing but errors (not the ids).
    #[arg(long, short)]
    quiet: bool,
}

/// `jobstore handler …`.
#[derive(Debug, Subcommand)]
pub enum HandlerCommand {
    /// Set a jobtype's handler.
    Set(Box<HandlerSetArgs>),
    /// Show a jobtype's handler.
    Get(HandlerRef),
    /// Delete a jobtype's handler.
    Delete(HandlerRef),
    /// List a client's handlers.
    List(ClientRef),
}

/// `jobstore handler set`.
#[derive(Debug, Args)]
pub struct HandlerSetArgs {
    #[command(flatten)]
    remote: Remote,
    /// The client.
    client: String,
    /// The jobtype.
    #[arg(value_name = "TYPE")]
    jobtype: String,
    /// The runner: process or http.
    #[arg(long)]
    method: String,
    /// What it runs: a command line (process) or a URL (http).
    body: String,
    /// Execution-context id (jobtypes with the same eid share a worker).
    #[arg(long)]
    eid: Option<String>,
    /// Run once when an execution context starts.
    #[arg(long)]
    before: Option<String>,
    /// Run before each batch.
    #[arg(long)]
    before_each: Option<String>,
    /// Run after each batch.
    #[arg(long)]
    after_each: Option<String>,
    /// Hand-outs before a failing job is archived as timeout.
    #[arg(long)]
    max_attempts: Option<u32>,
    /// Age after which a failing job is archived as timeout (e.g. 2d).
    #[arg(long, value_parser = humantime::parse_duration)]
    max_age: Option<Duration>,
    /// Longest one run may take (e.g. 30s).
    #[arg(long, value_parser = humantime::parse_duration)]
    time_limit: Option<Duration>,
    /// Most jobs of the jobtype running at once per daemon.
    #[arg(long)]
    concurrency: Option<u32>,
    /// First retry delay (e.g. 500ms).
    #[arg(long, value_parser = humantime::parse_duration)]
    backoff_base: Option<Duration>,
    /// Longest retry delay (e.g. 10m).
    #[arg(long, value_parser = humantime::parse_duration)]
    backoff_max: Option<Duration>,
}

/// A client and a jobtype.
#[derive(Debug, Args)]
pub struct HandlerRef {
    #[command(flatten)]
    remote: Remote,
    /// The client.
    client: String,
    /// The jobtype.
    #[arg(value_name = "TYPE")]
    jobtype: String,
}

/// A client.
#[derive(Debug, Args)]
pub struct ClientRef {
    #[command(flatten)]
    remote: Remote,
    /// The client.
    client: String,
}

/// `jobstore job`.
#[derive(Debug, Args)]
pub struct JobArgs {
    #[command(flatten)]
    remote: Remote,
    /// The client.
    client: String,
    /// The job id.
    id: String,
}

/// `jobstore cancel`.
#[derive(Debug, Args)]
pub struct CancelArgs {
    #[command(flatten)]
    remote: Remote,
    /// The client.
    client: String,
    /// Job ids.
    #[arg(required = true)]
    ids: Vec<String>,
}

/// `jobstore stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    #[command(flatten)]
    remote: Remote,
    /// The client; without it, every client (needs the admin token when
    /// tokens are configured).
    client: Option<String>,
    /// Wait and run times over time instead of counts: per `day` (the last
    /// 30 days; the default) or per `minute` (the last hour). Needs a
    /// client.
    #[arg(long, value_name = "RESOLUTION", num_args = 0..=1, default_missing_value = "day",
          value_parser = ["day", "minute"], requires = "client")]
    history: Option<String>,
    /// With --history: only these jobtypes (repeat or comma-separate).
    #[arg(long = "type", value_name = "TYPE", requires = "history")]
    types: Vec<String>,
}

/// Runs a client subcommand (anything but `serve`).
pub async fn run_client(command: Command) -> Result<(), CliError> {
    match command {
        Command::Serve(_) => Err(CliError::usage("serve is not a client command")),
        Command::Token => {
            let token = crate::auth::new_token();
            let hash = crate::auth::TokenHash::of(&token).to_hex();
            println!("token:  {token}");
            println!("sha256: {hash}");
            println!();
            println!("Give the token to the client; put the hash in the config file:");
            println!("  [[auth.clients]]\n  name = \"CLIENT\"\n  token_sha256 = \"{hash}\"");
            Ok(())
        }
        Command::Add(a) => client::add(a).await,
        Command::Handler(h) => client::handler(h).await,
        Command::Job(j) => client::job(j).await,
        Command::Cancel(c) => client::cancel(c).await,
        Command::Jobs(j) => manage::jobs(j).await,
        Command::Pause(p) => manage::pause(p, true).await,
        Command::Resume(p) => manage::pause(p, false).await,
        Command::Failures(f) => manage::failures(f).await,
        Command::Stats(s) => client::stats(s).await,
        Command::Work(w) => work::work(*w).await,
        Command::Schedule(s) => schedule::schedule(s).await,
    }
}
