//! `jobstore bench`: how fast a store and a daemon on it are, measured the
//! same way on every backend. The `jobstore` binary links this crate; the
//! daemon does not. Also here: the bare [reference](mod@reference) queues
//! the bench compares the stores with, what store servers report about
//! themselves ([`server`]), and `jobstore noop-worker`, the worker of the
//! bench's jobs.
//!
//! Every mode works in a namespace of its own on the given store (a
//! PostgreSQL schema, a Redis key prefix, a MongoDB collection prefix, a
//! SQLite file beside the given one; see [`factory::with_namespace`]) and
//! drops it at the end, after an error or Ctrl-C too, so a bench never
//! touches the jobs already there. Daemons run in this process, on the
//! same store handle, with their journal in a temporary directory.

mod daemon;
mod dashboard;
mod noop;
mod queue;
pub mod reference;
pub mod server;

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use jobstore_api::{Handler, JobCounts, JobStore, ResultCode, now_millis};
use serde_json::{Map, Value, json};

use jobstore_daemon::cli::CliError;
use jobstore_daemon::config::{FileConfig, ServeArgs, redact_url};
use jobstore_daemon::metrics::Metrics;
use jobstore_daemon::{Config, Daemon, factory};
pub use noop::{NoopArgs, noop_worker};

/// The client (tenant) every bench job belongs to.
const CLIENT: &str = "bench";

/// `jobstore bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// What to measure.
    #[arg(value_enum)]
    pub mode: Mode,
    /// The store to measure (a namespace of its own is made in it and
    /// dropped after). Default: an embedded SQLite file in a temporary
    /// directory.
    #[arg(long, env = "JOBSTORE_STORE", hide_env_values = true)]
    pub store: Option<String>,
    /// Where the daemons' journals (and the default SQLite store) go: a
    /// directory made inside it and removed after. Default: the system's
    /// temporary directory.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Jobs per run (store, drain, e2e at full speed, intake per phase).
    #[arg(long, default_value_t = 20_000)]
    pub jobs: usize,
    /// Jobs of each single-add phase of intake (one client, then
    /// `--clients`); default: `--jobs`.
    #[arg(long)]
    pub single_jobs: Option<usize>,
    /// Jobtypes the jobs are spread over (store, drain; dashboard: per
    /// client).
    #[arg(long, default_value_t = 1)]
    pub jobtypes: usize,
    /// Clients (tenants) the jobs are spread over (dashboard).
    #[arg(long, default_value_t = 4)]
    pub tenants: usize,
    /// Concurrent claimers, and adding tasks (store, soak).
    #[arg(long, default_value_t = 4)]
    pub claimers: usize,
    /// Jobs per claim (store, scale, soak).
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// Jobs per add call when preloading.
    #[arg(long, default_value_t = 1000)]
    pub add_batch: usize,
    /// Payload size in bytes.
    #[arg(long, default_value_t = 64)]
    pub payload: usize,
    /// Every job carries a unique key of its own (store), so the figures
    /// are those of keyed adds, claims and archives (never a duplicate).
    #[arg(long)]
    pub unique: bool,
    /// Every job repeats (`HOURLY`) and each claimed job is released with
    /// a repeat an hour ahead instead of an archive (store), so the figures
    /// are those of repeating adds and claim+repeat; the store must support
    /// repeating jobs.
    #[arg(long)]
    pub repeat: bool,
    /// Jobs per second: the fixed-rate phase of e2e, the steady load of
    /// soak.
    #[arg(long, default_value_t = 100)]
    pub rate: u32,
    /// How long the fixed-rate phase of e2e lasts.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub rate_duration: Duration,
    /// Concurrent HTTP clients (e2e at full speed, intake).
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Lines per body in intake's batched phase and e2e at full speed.
    #[arg(long, default_value_t = 100)]
    pub lines: usize,
    /// Waiting jobs at which scale measures claims, archived jobs at which
    /// query and dashboard measure reads (comma list).
    #[arg(long, value_delimiter = ',', default_value = "10000,100000,1000000")]
    pub sizes: Vec<usize>,
    /// Archived jobs scale puts beside the largest backlog (default: as
    /// many as the largest size).
    #[arg(long)]
    pub archive: Option<usize>,
    /// Claims measured per point (scale); reads per point (query); loads
    /// of each page per point and token (dashboard).
    #[arg(long, default_value_t = 200)]
    pub samples: usize,
    /// How long soak runs.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// The window soak reports per.
    #[arg(long, default_value = "1m", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    /// Waiting jobs soak keeps standing while it runs, and query and
    /// dashboard keep beside the archive.
    #[arg(long, default_value_t = 10_000)]
    pub backlog: usize,
    /// Archived jobs older than this are purged during soak, as a daemon's
    /// retention does.
    #[arg(long, default_value = "1m", value_parser = humantime::parse_duration)]
    pub retention: Duration,
    /// Soak on PostgreSQL: keep one transaction open beside the load, from
    /// its start, for this long (at most the soak's `--duration`), as a
    /// forgotten session or a long report would. While it is open, vacuum
    /// removes no row version that became dead after it began. See
    /// `--hold-kind`.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub hold_xmin: Option<Duration>,
    /// What `--hold-xmin` keeps open: `xid`, a read-committed transaction
    /// that took a transaction id (`BEGIN; SELECT pg_current_xact_id()`,
    /// as a forgotten write), or `snapshot`, a repeatable-read transaction
    /// that only read (its snapshot holds the horizon without an id).
    #[arg(long, value_enum, default_value_t = HoldKind::Xid, requires = "hold_xmin")]
    pub hold_kind: HoldKind,
    /// The daemon's --max-running (drain, e2e).
    #[arg(long, default_value_t = 256)]
    pub max_running: u32,
    /// The daemon's --claim-batch (drain, e2e).
    #[arg(long, default_value_t = 128)]
    pub claim_batch: u32,
    /// The daemons' --job-log (drain, e2e, intake): measures the job log's
    /// cost. A file, or `-` for stderr.
    #[arg(long, value_name = "FILE")]
    pub job_log: Option<PathBuf>,
    /// The daemons' --otlp-endpoint (drain, e2e, intake): measures the
    /// span export's cost against an OTLP/HTTP receiver.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// Print one JSON object instead of a table (and no progress bar).
    #[arg(long)]
    pub json: bool,
}

/// What soak's `--hold-xmin` keeps open beside the load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HoldKind {
    /// A transaction with a transaction id.
    Xid,
    /// A repeatable-read transaction that only read: a snapshot.
    Snapshot,
}

impl HoldKind {
    fn as_str(self) -> &'static str {
        match self {
            HoldKind::Xid => "xid",
            HoldKind::Snapshot => "snapshot",
        }
    }
}

/// The benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Store calls only: batched adds, then concurrent claim+archive.
    Store,
    /// A daemon draining jobs already in the store with a no-op worker.
    Drain,
    /// A daemon running jobs added over HTTP, at a fixed rate and at full
    /// speed: jobs/s and add-to-start latency.
    E2e,
    /// Adds over HTTP to a daemon that runs nothing: acknowledged adds/s
    /// and acknowledgement latency.
    Intake,
    /// Claim latency with growing backlogs, and with an archive beside.
    Scale,
    /// A steady add+claim+archive load: claim latency and memory per
    /// window.
    Soak,
    /// The `store` load on a bare reference queue on the same server
    /// (PostgreSQL `SKIP LOCKED`, Redis `ZPOPMIN`), for ratios.
    Reference,
    /// An operator's reads as the archive grows: a page of 100 failed jobs
    /// and the job counts, at each archive size of `--sizes`, beside
    /// `--backlog` waiting jobs.
    Query,
    /// The dashboard's pages as a browser loads them (their API calls,
    /// in parallel where the page makes them so), over HTTP against a
    /// daemon with an admin and a client token: p50/p99 per page at each
    /// archive size of `--sizes`, `--tenants` clients of `--jobtypes`
    /// jobtypes, one archived job in ten failed, `--backlog` waiting.
    Dashboard,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Store => "store",
            Mode::Drain => "drain",
            Mode::E2e => "e2e",
            Mode::Intake => "intake",
            Mode::Scale => "scale",
            Mode::Soak => "soak",
            Mode::Reference => "reference",
            Mode::Query => "query",
            Mode::Dashboard => "dashboard",
        }
    }
}

/// Runs a bench and prints its report.
pub async fn bench(args: BenchArgs) -> Result<(), CliError> {
    check(&args)?;
    let token = jobstore_api::new_token();
    let ns = format!("bench_{}", &token[..12]);
    let base = args.data_dir.clone().unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("jobstore-{ns}"));
    std::fs::create_dir_all(&dir)
        .map_err(|e| CliError::local(format!("cannot create {}: {e}", dir.display())))?;
    let result = run_in(&args, &ns, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn check(a: &BenchArgs) -> Result<(), CliError> {
    let positive = [
        ("--jobs", a.jobs),
        ("--jobtypes", a.jobtypes),
        ("--tenants", a.tenants),
        ("--claimers", a.claimers),
        ("--batch", a.batch),
        ("--add-batch", a.add_batch),
        ("--clients", a.clients),
        ("--lines", a.lines),
        ("--samples", a.samples),
        ("--single-jobs", a.single_jobs.unwrap_or(a.jobs)),
    ];
    for (flag, v) in positive {
        if v == 0 {
            return Err(CliError::usage(format!("{flag} must be above 0")));
        }
    }
    if a.batch > jobstore_api::limits::MAX_CLAIM {
        return Err(CliError::usage(format!(
            "--batch must be at most {}",
            jobstore_api::limits::MAX_CLAIM
        )));
    }
    if a.add_batch > jobstore_api::limits::MAX_BATCH {
        return Err(CliError::usage(format!(
            "--add-batch must be at most {}",
            jobstore_api::limits::MAX_BATCH
        )));
    }
    if a.rate == 0 {
        return Err(CliError::usage("--rate must be above 0"));
    }
    if a.sizes.is_empty() || a.sizes.contains(&0) {
        return Err(CliError::usage("--sizes must list sizes above 0"));
    }
    if a.interval.is_zero() || a.duration < a.interval {
        return Err(CliError::usage(
            "--interval must be above 0 and --duration at least one interval",
        ));
    }
    if a.unique && a.mode != Mode::Store {
        return Err(CliError::usage("--unique is for the store mode"));
    }
    if a.repeat && a.mode != Mode::Store {
        return Err(CliError::usage("--repeat is for the store mode"));
    }
    if let Some(hold) = a.hold_xmin {
        if a.mode != Mode::Soak {
            return Err(CliError::usage("--hold-xmin is for the soak mode"));
        }
        let scheme = a
            .store
            .as_deref()
            .and_then(|s| s.split_once(':'))
            .map(|(s, _)| s);
        if !matches!(scheme, Some("postgres" | "postgresql")) {
            return Err(CliError::usage(
                "--hold-xmin needs a PostgreSQL store (--store postgres://...)",
            ));
        }
        if hold.is_zero() {
            return Err(CliError::usage("--hold-xmin must be above 0"));
        }
    }
    Ok(())
}

/// Opens the namespace, runs the mode, prints its report, and drops the
/// namespace whatever happened (Ctrl-C included: the first stops the run
/// and cleans up, a second exits at once). The report is printed before
/// the namespace is dropped, so a drop that fails (a busy server) loses no
/// figures: it is a warning on stderr that names what is left.
async fn run_in(args: &BenchArgs, ns: &str, dir: &std::path::Path) -> Result<(), CliError> {
    let url = factory::with_namespace(args.store.as_deref(), dir, ns)
        .map_err(|e| CliError::usage(format!("--store: {e}")))?;
    let store = factory::open(Some(&url), dir)
        .await
        .map_err(|e| CliError::local(format!("cannot open the store: {e}")))?;
    let ctx = Ctx {
        args: args.clone(),
        store,
        url: url.clone(),
        backend: factory::backend_name(args.store.as_deref()),
        ns: ns.to_owned(),
        dir: dir.to_owned(),
        daemons: Mutex::new(Vec::new()),
        reference: Mutex::new(None),
        show_progress: !args.json && std::io::stderr().is_terminal(),
        started: Instant::now(),
    };
    let mut result = tokio::select! {
        r = run_mode(&ctx) => r,
        _ = stop_signal() => {
            tokio::spawn(async {
                stop_signal().await;
                std::process::exit(130);
            });
            eprintln!("jobstore: interrupted; removing the bench namespace (a second signal exits at once)");
            Err(CliError {
                code: 130,
                message: "interrupted".into(),
                status: None,
            })
        }
    };
    ctx.stop_daemons().await;
    // Aborted tasks let go of the store as the runtime drops them; drop the
    // namespace once none holds it, so no late write recreates it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Arc::strong_count(&ctx.store) > 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let reference = ctx.reference.lock().ok().and_then(|mut r| r.take());
    let started = ctx.started;
    drop(ctx);
    if let Ok(report) = &mut result {
        report.seconds = started.elapsed().as_secs_f64();
        if args.json {
            println!("{}", report.json());
        } else {
            println!("{}", report.table());
        }
    }
    let mut dropped = drop_namespace(&url).await;
    if let Some(q) = reference {
        dropped = dropped.and(q.remove().await);
    }
    if let Err(e) = dropped {
        eprintln!(
            "jobstore: warning: the report is complete, but the bench namespace {ns} was not \
             dropped: {e}"
        );
    }
    result.map(|_| ())
}

/// Drops the namespace of `url`: on a single Redis server in bounded
/// batches that wait out a busy server ([`server::drop_redis_namespace`]),
/// elsewhere as the store factory does.
async fn drop_namespace(url: &str) -> jobstore_api::Result<()> {
    #[cfg(feature = "redis")]
    if matches!(
        url.split_once(':').map(|(s, _)| s),
        Some("redis" | "rediss")
    ) {
        return server::drop_redis_namespace(url).await.map(|_| ());
    }
    factory::drop_namespace(url).await
}

/// Spawns one of a run's tasks, aborted when its handle is dropped: a run
/// stopped by a signal leaves no task writing to the namespace being
/// dropped.
fn spawn<F>(task: F) -> tokio_util::task::AbortOnDropHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio_util::task::AbortOnDropHandle::new(tokio::spawn(task))
}

/// Ctrl-C or SIGTERM.
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

async fn run_mode(ctx: &Ctx) -> Result<Report, CliError> {
    let mut report = Report::new(ctx);
    match ctx.args.mode {
        Mode::Store => queue::store(ctx, &mut report).await?,
        Mode::Scale => queue::scale(ctx, &mut report).await?,
        Mode::Soak => queue::soak(ctx, &mut report).await?,
        Mode::Reference => queue::reference(ctx, &mut report).await?,
        Mode::Query => queue::query(ctx, &mut report).await?,
        Mode::Dashboard => dashboard::dashboard(ctx, &mut report).await?,
        Mode::Drain => daemon::drain(ctx, &mut report).await?,
        Mode::E2e => daemon::e2e(ctx, &mut report).await?,
        Mode::Intake => daemon::intake(ctx, &mut report).await?,
    }
    Ok(report)
}

/// What every mode works with.
pub(crate) struct Ctx {
    args: BenchArgs,
    store: Arc<dyn JobStore>,
    /// The namespace's URL.
    url: String,
    backend: &'static str,
    ns: String,
    dir: PathBuf,
    daemons: Mutex<Vec<Option<Daemon>>>,
    /// The reference queue, removed with the namespace.
    reference: Mutex<Option<Arc<dyn reference::RefQueue>>>,
    show_progress: bool,
    started: Instant,
}

/// A daemon started by [`Ctx::start_daemon`].
pub(crate) struct DaemonRef {
    index: usize,
    addr: SocketAddr,
    metrics: Arc<Metrics>,
}

/// CPU used so far by this process (every thread: the bench's own calls,
/// and the daemon where one runs in this process; not its worker
/// processes) and by the store's server, where it reports it.
#[derive(Debug, Clone, Copy)]
struct CpuMark {
    own: Option<Duration>,
    server: Option<Duration>,
}

/// This process's CPU time (user and system, every thread).
fn own_cpu() -> Option<Duration> {
    use nix::sys::resource::{UsageWho, getrusage};
    let u = getrusage(UsageWho::RUSAGE_SELF).ok()?;
    let tv = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec().max(0) as u64)
            + Duration::from_micros(t.tv_usec().max(0) as u64)
    };
    Some(tv(u.user_time()) + tv(u.system_time()))
}

impl Ctx {
    /// CPU used so far (see [`CpuMark`]).
    async fn cpu_mark(&self) -> CpuMark {
        CpuMark {
            own: own_cpu(),
            server: server::server_cpu(&self.url).await.ok().flatten(),
        }
    }

    /// The store jobtype of the bench client's jobtype `k`.
    fn jobtype(&self, k: usize) -> String {
        format!("{CLIENT}-noop{k}")
    }

    /// A progress bar on stderr, hidden when it is not a terminal or with
    /// `--json`.
    fn bar(&self, len: u64, what: &str) -> ProgressBar {
        if !self.show_progress {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::new(len).with_style(
            ProgressStyle::with_template("{msg:>14} {bar:36} {pos}/{len} {per_sec:>12} eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(what.to_owned());
        bar
    }

    /// A no-op long-lived worker for every bench jobtype: this binary's
    /// `noop-worker`, answering each job at once (with `stamp`, printing
    /// the time it received the job, in µs since the epoch).
    async fn set_noop_handlers(&self, jobtypes: usize, stamp: bool) -> Result<(), CliError> {
        let exe = std::env::current_exe()
            .map_err(|e| CliError::local(format!("cannot find this executable: {e}")))?;
        let mut body = shell_quote(&exe.to_string_lossy());
        body.push_str(" noop-worker");
        if stamp {
            body.push_str(" --stamp");
        }
        let handler = Handler {
            eid: Some("noop".into()),
            ..Handler::new("process", body)
        };
        for k in 0..jobtypes {
            self.store
                .set_handler(&self.jobtype(k), &handler, now_millis())
                .await
                .map_err(store_err("set_handler"))?;
        }
        Ok(())
    }

    /// Starts a daemon in this process on the bench store; it runs jobs
    /// unless `execute` is false.
    async fn start_daemon(&self, execute: bool) -> Result<DaemonRef, CliError> {
        self.start_daemon_with(execute, FileConfig::default()).await
    }

    /// [`Ctx::start_daemon`] with the settings of a config file (tokens).
    async fn start_daemon_with(
        &self,
        execute: bool,
        file: FileConfig,
    ) -> Result<DaemonRef, CliError> {
        let index = self.daemons.lock().map(|d| d.len()).unwrap_or(0);
        let args = ServeArgs {
            data_dir: Some(self.dir.join(format!("daemon{index}"))),
            listen: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
            sysid: Some(format!("{}-d{index}", self.ns)),
            no_execute: !execute,
            max_running: Some(self.args.max_running),
            max_running_per_jobtype: Some(self.args.max_running),
            claim_batch: Some(self.args.claim_batch),
            // Its handlers are this binary's no-op worker, set by the bench.
            allow_process_handlers: true,
            job_log: self.args.job_log.clone(),
            otlp_endpoint: self.args.otlp_endpoint.clone(),
            ..ServeArgs::default()
        };
        let mut config = Config::resolve(&args, file)
            .map_err(|e| CliError::usage(format!("daemon settings: {e}")))?;
        config.store_url = Some(self.url.clone());
        let daemon = Daemon::start_with_store(config, self.store.clone())
            .await
            .map_err(|e| CliError::local(format!("cannot start the daemon: {e}")))?;
        let r = DaemonRef {
            index,
            addr: daemon.local_addr(),
            metrics: daemon.metrics(),
        };
        if let Ok(mut d) = self.daemons.lock() {
            d.push(Some(daemon));
        }
        Ok(r)
    }

    /// Stops a daemon gracefully and waits for it.
    async fn stop_daemon(&self, d: &DaemonRef) {
        let daemon = self
            .daemons
            .lock()
            .ok()
            .and_then(|mut v| v.get_mut(d.index).and_then(Option::take));
        if let Some(daemon) = daemon {
            daemon.shutdown();
            daemon.wait().await;
        }
    }

    async fn stop_daemons(&self) {
        let all: Vec<Daemon> = self
            .daemons
            .lock()
            .map(|mut v| v.iter_mut().filter_map(Option::take).collect())
            .unwrap_or_default();
        for d in all {
            d.shutdown();
            d.wait().await;
        }
    }

    /// The bench jobtypes' counts, summed.
    async fn counts(&self) -> Result<JobCounts, CliError> {
        let all = self
            .store
            .job_counts(now_millis())
            .await
            .map_err(store_err("job_counts"))?;
        let mut sum = JobCounts::default();
        for c in all {
            sum.waiting += c.waiting;
            sum.scheduled += c.scheduled;
            sum.running += c.running;
            for (code, n) in c.archived {
                *sum.archived.entry(code).or_default() += n;
            }
        }
        Ok(sum)
    }
}

/// Single quotes for `sh -c`.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Maps a store error to a local failure naming the call.
fn store_err(call: &'static str) -> impl Fn(jobstore_api::Error) -> CliError {
    move |e| CliError::local(format!("store {call}: {e}"))
}

/// Archived-as-ok count.
fn archived_ok(c: &JobCounts) -> u64 {
    c.archived.get(&ResultCode::Ok).copied().unwrap_or(0)
}

/// Fails unless the counts are exactly `expect` (waiting, archived ok),
/// with nothing else in any state.
fn expect_counts(c: &JobCounts, waiting: u64, ok: u64) -> Result<(), CliError> {
    if c.waiting == waiting
        && archived_ok(c) == ok
        && c.scheduled == 0
        && c.running == 0
        && c.total() == waiting + ok
    {
        Ok(())
    } else {
        Err(CliError::local(format!(
            "the store's counts are off: expected {waiting} waiting and {ok} archived ok, found {c:?}"
        )))
    }
}

/// Latencies of one kind of call.
#[derive(Debug, Default, Clone)]
pub(crate) struct Latencies(Vec<Duration>);

impl Latencies {
    fn push(&mut self, d: Duration) {
        self.0.push(d);
    }

    fn extend(&mut self, other: Latencies) {
        self.0.extend(other.0);
    }

    /// The value at quantile `q` (nearest rank), in ms.
    fn quantile_ms(sorted: &[Duration], q: f64) -> f64 {
        if sorted.is_empty() {
            return 0.0;
        }
        let rank = (q * sorted.len() as f64).ceil() as usize;
        sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1e3
    }

    /// `{"calls", "p50_ms", "p99_ms", "max_ms"}`.
    fn summary(&self) -> Value {
        let mut v = self.0.clone();
        v.sort_unstable();
        json!({
            "calls": v.len(),
            "p50_ms": round3(Self::quantile_ms(&v, 0.5)),
            "p99_ms": round3(Self::quantile_ms(&v, 0.99)),
            "max_ms": round3(v.last().map_or(0.0, |d| d.as_secs_f64() * 1e3)),
        })
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn rate(n: usize, elapsed: Duration) -> f64 {
    let s = elapsed.as_secs_f64();
    if s > 0.0 { (n as f64 / s).round() } else { 0.0 }
}

/// A bench's figures, in the order they were measured.
pub(crate) struct Report {
    mode: Mode,
    backend: &'static str,
    store: String,
    namespace: String,
    parameters: Map<String, Value>,
    figures: Vec<(String, Value)>,
    notes: Vec<String>,
    seconds: f64,
}

impl Report {
    fn new(ctx: &Ctx) -> Self {
        let a = &ctx.args;
        let mut parameters = Map::new();
        let mut p = |k: &str, v: Value| {
            parameters.insert(k.to_owned(), v);
        };
        match a.mode {
            Mode::Store | Mode::Reference => {
                p("jobs", json!(a.jobs));
                p("jobtypes", json!(a.jobtypes));
                p("claimers", json!(a.claimers));
                p("batch", json!(a.batch));
                p("add_batch", json!(a.add_batch));
                if a.unique {
                    p("unique", json!(true));
                }
                if a.mode == Mode::Store {
                    p(
                        "release",
                        json!(if a.repeat { "repeat" } else { "archive" }),
                    );
                }
            }
            Mode::Drain => {
                p("jobs", json!(a.jobs));
                p("jobtypes", json!(a.jobtypes));
                p("add_batch", json!(a.add_batch));
                p("max_running", json!(a.max_running));
                p("claim_batch", json!(a.claim_batch));
            }
            Mode::E2e => {
                p("jobs", json!(a.jobs));
                p("rate", json!(a.rate));
                p("rate_seconds", json!(a.rate_duration.as_secs_f64()));
                p("clients", json!(a.clients));
                p("lines", json!(a.lines));
                p("max_running", json!(a.max_running));
                p("claim_batch", json!(a.claim_batch));
            }
            Mode::Intake => {
                p("jobs", json!(a.jobs));
                p("single_jobs", json!(a.single_jobs.unwrap_or(a.jobs)));
                p("clients", json!(a.clients));
                p("lines", json!(a.lines));
            }
            Mode::Dashboard => {
                p("sizes", json!(a.sizes));
                p("backlog", json!(a.backlog));
                p("samples", json!(a.samples));
                p("tenants", json!(a.tenants));
                p("jobtypes_per_tenant", json!(a.jobtypes));
                p("add_batch", json!(a.add_batch));
                p("claimers", json!(a.claimers));
            }
            Mode::Query => {
                p("sizes", json!(a.sizes));
                p("backlog", json!(a.backlog));
                p("samples", json!(a.samples));
                p("add_batch", json!(a.add_batch));
            }
            Mode::Scale => {
                p("sizes", json!(a.sizes));
                p(
                    "archive",
                    json!(
                        a.archive
                            .unwrap_or_else(|| a.sizes.iter().copied().max().unwrap_or(0))
                    ),
                );
                p("batch", json!(a.batch));
                p("samples", json!(a.samples));
                p("add_batch", json!(a.add_batch));
            }
            Mode::Soak => {
                p("rate", json!(a.rate));
                p("duration_seconds", json!(a.duration.as_secs_f64()));
                p("interval_seconds", json!(a.interval.as_secs_f64()));
                p("backlog", json!(a.backlog));
                p("claimers", json!(a.claimers));
                p("batch", json!(a.batch));
                p("retention_seconds", json!(a.retention.as_secs_f64()));
                if let Some(hold) = a.hold_xmin {
                    p("hold_xmin_seconds", json!(hold.as_secs_f64()));
                    p("hold_kind", json!(a.hold_kind.as_str()));
                }
            }
        }
        p("payload_bytes", json!(a.payload));
        if let Some(log) = &a.job_log {
            p("job_log", json!(log.display().to_string()));
        }
        if let Some(otlp) = &a.otlp_endpoint {
            p("otlp_endpoint", json!(otlp));
        }
        Report {
            mode: a.mode,
            backend: ctx.backend,
            store: a
                .store
                .as_deref()
                .map_or_else(|| "embedded SQLite".to_owned(), redact_url),
            namespace: ctx.ns.clone(),
            parameters,
            figures: Vec::new(),
            notes: Vec::new(),
            seconds: 0.0,
        }
    }

    fn figure(&mut self, name: &str, v: impl Into<Value>) {
        self.figures.push((name.to_owned(), v.into()));
    }

    /// CPU per job between two marks, in µs: this process's as
    /// `{own}_cpu_us_per_job`, and the store server's (where it reports
    /// it) as `server_cpu_us_per_job`.
    fn cpu_figures(&mut self, own: &str, from: CpuMark, to: CpuMark, jobs: usize) {
        let per_job = |a: Option<Duration>, b: Option<Duration>| {
            let (a, b) = (a?, b?);
            (jobs > 0).then(|| round3(b.saturating_sub(a).as_secs_f64() * 1e6 / jobs as f64))
        };
        if let Some(v) = per_job(from.own, to.own) {
            self.figure(&format!("{own}_cpu_us_per_job"), v);
        }
        if let Some(v) = per_job(from.server, to.server) {
            self.figure("server_cpu_us_per_job", v);
        }
    }

    fn note(&mut self, text: impl Into<String>) {
        self.notes.push(text.into());
    }

    fn json(&self) -> Value {
        let figures: Map<String, Value> = self.figures.iter().cloned().collect();
        json!({
            "mode": self.mode.name(),
            "backend": self.backend,
            "store": self.store,
            "namespace": self.namespace,
            "parameters": self.parameters,
            "figures": figures,
            "notes": self.notes,
            "seconds": round3(self.seconds),
        })
    }

    fn table(&self) -> String {
        let mut t = comfy_table::Table::new();
        t.load_style(comfy_table::presets::UTF8_FULL_CONDENSED);
        t.set_header(vec!["figure", "value"]);
        for (name, v) in &self.figures {
            t.add_row(vec![name.replace('_', " "), show(v)]);
        }
        let params = self
            .parameters
            .iter()
            .map(|(k, v)| format!("{} {}", k.replace('_', " "), show(v)))
            .collect::<Vec<_>>()
            .join(", ");
        let mut out = format!(
            "jobstore bench {} on {} ({}, namespace {}, dropped after): {params}; {:.1} s\n{t}",
            self.mode.name(),
            self.backend,
            self.store,
            self.namespace,
            self.seconds
        );
        for n in &self.notes {
            out.push_str("\nnote: ");
            out.push_str(n);
        }
        out
    }
}

/// A figure for the table: latency summaries on one line, numbers with
/// thousands separators.
fn show(v: &Value) -> String {
    match v {
        Value::Object(m) if m.contains_key("p50_ms") => {
            let f = |k: &str| m.get(k).and_then(Value::as_f64).unwrap_or(0.0);
            format!(
                "p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({} calls)",
                f("p50_ms"),
                f("p99_ms"),
                f("max_ms"),
                m.get("calls").map_or_else(String::new, show)
            )
        }
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| format!("{} {}", k.replace('_', " "), show(v)))
            .collect::<Vec<_>>()
            .join("; "),
        Value::Array(a) if a.iter().any(Value::is_object) => {
            a.iter().map(show).collect::<Vec<_>>().join("\n")
        }
        Value::Array(a) => a.iter().map(show).collect::<Vec<_>>().join(", "),
        Value::Number(n) => match (n.as_u64(), n.as_f64()) {
            (Some(u), _) => thousands(u),
            (None, Some(f)) if f.abs() >= 100.0 => thousands(f.round() as u64),
            (None, Some(f)) => format!("{f:.3}"),
            _ => n.to_string(),
        },
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let mut l = Latencies::default();
        for ms in 1..=100 {
            l.push(Duration::from_millis(ms));
        }
        let s = l.summary();
        assert_eq!(s["calls"], 100);
        assert_eq!(s["p50_ms"], 50.0);
        assert_eq!(s["p99_ms"], 99.0);
        assert_eq!(s["max_ms"], 100.0);
        assert_eq!(Latencies::default().summary()["p99_ms"], 0.0);
    }

    #[test]
    fn table_values() {
        assert_eq!(show(&json!(1234567)), "1,234,567");
        assert_eq!(show(&json!(0.25)), "0.250");
        assert_eq!(show(&json!(12345.6)), "12,346");
        assert_eq!(shell_quote("/a b/it's"), r"'/a b/it'\''s'");
    }
}
