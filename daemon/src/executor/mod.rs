//! The daemon's core: every claim and every completion, for this daemon's
//! own runners and for remote workers alike. The HTTP API, the CLI and the
//! daemon's wiring call an [`Executor`]; nothing in here knows of them.
//!
//! **Claims.** One loop (of this daemon's runners) asks the [`Scheduler`]
//! which jobtype to claim whenever capacity frees up or a [notice](notices)
//! says new work arrived (the store's [`JobStore::watch`], with the poll
//! interval as the fallback, and this daemon's ingest), claims a small batch
//! under the daemon's sysid, and hands it to the runner of the jobtype's
//! handler. A remote worker's fetch ([`Executor::fetch`]) asks the same
//! scheduler for a grant of the jobtype it names
//! ([`admit`](scheduler::Scheduler::admit)), under the worker's lease token.
//! Both go through one claim path: nothing is claimed while the daemon does
//! not hold its sysid or while [`MAX_BACKLOG`] finished jobs wait for their
//! release, every grant is settled with what the store gave, and handlers
//! (their caps and limits) come from one [cache](handler_cache).
//!
//! **Completions.** A run's [`Outcome`](crate::runner::Outcome) becomes a release by one rule
//! ([`policy`]); the jobs it asked for (`J:` lines, a remote finish's
//! `jobs`) are journaled and durable before the release is sent; releases
//! go out as one `release_jobs` call per batch and owner.
//! This daemon's runs are gathered into batches over a short window; a
//! remote worker's finish is a batch of its own, answered with what the
//! store took.
//!
//! **Leases.** Every job of this daemon's runners from claim to release is
//! *held*: a renewer extends the leases of all held jobs in one
//! `renew_locks` call per tick (a third of the lease); a job the store no
//! longer gives back is lost to this daemon, so its run is killed and it is
//! never released. Remote workers renew their own leases with heartbeats;
//! the [registry] of remote workers gives their slots back when their jobs
//! end or their leases run out.
//!
//! On a graceful stop: claim nothing more, let running jobs finish within
//! the grace period, hand back (unget) claimed jobs that never started,
//! kill what still runs at the deadline and release it as retry, flush the
//! completer.

mod completer;
pub mod handler_cache;
mod held;
mod local;
pub mod notices;
pub mod policy;
pub mod registry;
mod remote_workers;
mod renewer;
pub mod scheduler;
mod stats;
pub mod waited;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use jobstore_api::{Job, JobStore, Millis, now_millis};
use tokio_util::sync::CancellationToken;

use crate::events::{By, JobEvents, JobRef};
use crate::journal::Journal;
use crate::metrics::Metrics;
use crate::runner::Runners;
use crate::sysid::SysidHandle;
use completer::Backlog;
use handler_cache::HandlerCache;
use notices::Notices;
use registry::{WorkerRegistry, WorkerView};
use scheduler::{Grant, Scheduler, SchedulerConfig};

pub use completer::MAX_BACKLOG;
pub use policy::Limits;
pub use remote_workers::{
    FetchRequest, Fetched, FinishReport, Heartbeat, RemoteError, RemoteResult,
};

/// How the executor runs jobs.
#[derive(Debug, Clone)]
pub struct ExecSettings {
    /// Lease of a claimed job; renewed every third of it.
    pub lease: Duration,
    /// Slots, caps and batch size.
    pub scheduler: SchedulerConfig,
    /// Defaults for what handlers leave unset.
    pub limits: Limits,
    /// How long archived ok jobs are kept: `None` forever; zero deletes
    /// ok jobs at completion instead of archiving them.
    pub retention: Option<Duration>,
    /// How long archived jobs that did not end ok (failed, error, timeout,
    /// cancelled) are kept, so their output still says why: `None`
    /// forever.
    pub retention_failed: Option<Duration>,
    /// How often archived jobs past the retention are purged.
    pub purge_every: Duration,
    /// How long a graceful stop waits for running jobs.
    pub shutdown_grace: Duration,
    /// How long a handler read from the store is used before it is read
    /// again (a new handler takes effect within this).
    pub handler_ttl: Duration,
    /// How long the completer waits to gather finished jobs into one call.
    pub complete_window: Duration,
    /// Long-lived workers idle this long are stopped.
    pub worker_idle: Duration,
    /// Longest wait between two looks at the store for due work.
    pub poll: Duration,
    /// How often the timing stats summed here are added to the store.
    pub stats_every: Duration,
    /// How often due schedules are looked for and fired.
    pub schedule_tick: Duration,
    /// Whether this daemon's own runners claim jobs (false: intake and
    /// remote workers only).
    pub local: bool,
    /// Whether this daemon runs process handlers (`--allow-process-handlers`).
    /// Without it, jobtypes whose handler is a process (set through another
    /// daemon on the same store) are never claimed here: they are left to
    /// daemons that allow them.
    pub process_handlers: bool,
}

impl Default for ExecSettings {
    fn default() -> Self {
        ExecSettings {
            lease: Duration::from_secs(30),
            scheduler: SchedulerConfig::default(),
            limits: Limits::default(),
            retention: Some(Duration::from_secs(7 * 24 * 3600)),
            retention_failed: Some(Duration::from_secs(30 * 24 * 3600)),
            purge_every: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(30),
            handler_ttl: Duration::from_secs(2),
            complete_window: Duration::from_millis(2),
            worker_idle: Duration::from_secs(300),
            poll: Duration::from_secs(1),
            stats_every: Duration::from_secs(5),
            schedule_tick: Duration::from_secs(1),
            local: true,
            process_handlers: false,
        }
    }
}

/// What an executor is made of.
pub struct ExecutorParts {
    /// The store.
    pub store: Arc<dyn JobStore>,
    /// Where the jobs that runs ask for go.
    pub journal: Journal,
    /// The sysid claims are made under.
    pub sysid: SysidHandle,
    /// This daemon's runners.
    pub runners: Arc<Runners>,
    /// Settings.
    pub settings: ExecSettings,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// The largest payload a new job may have (the store's limit).
    pub max_payload: usize,
    /// How long a remote worker may stay silent before it counts as gone.
    pub worker_expiry: Duration,
    /// The job events seam (claims, runs, releases report here).
    pub events: JobEvents,
}

/// The core (see the module docs): a cheap handle, shared by the daemon's
/// claim loop ([`run`](Executor::run)) and every caller of its remote
/// workers' operations.
#[derive(Clone)]
pub struct Executor {
    core: Arc<Core>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor").finish_non_exhaustive()
    }
}

/// What the claim loop, the completer and the remote workers' operations
/// share.
struct Core {
    store: Arc<dyn JobStore>,
    journal: Journal,
    sysid: SysidHandle,
    runners: Arc<Runners>,
    settings: ExecSettings,
    metrics: Arc<Metrics>,
    max_payload: usize,
    sched: Mutex<Scheduler>,
    notices: Notices,
    registry: WorkerRegistry,
    handlers: HandlerCache,
    /// Finished jobs of this daemon's runners not yet released.
    backlog: Arc<Backlog>,
    /// Timing stats not yet added to the store.
    stats: stats::StatsSink,
    /// Whether the store keeps tags (read once).
    tags: bool,
    /// The job events seam.
    events: JobEvents,
}

/// Why no claim may be made now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closed {
    /// The daemon does not hold its sysid.
    Sysid,
    /// [`MAX_BACKLOG`] finished jobs wait for their release.
    Backlog,
}

impl Executor {
    /// An executor; nothing runs until [`run`](Self::run).
    pub fn new(parts: ExecutorParts) -> Self {
        let handlers =
            HandlerCache::new(parts.settings.handler_ttl, parts.settings.process_handlers);
        let caps = parts.store.capabilities();
        Executor {
            core: Arc::new(Core {
                sched: Mutex::new(Scheduler::new(parts.settings.scheduler.clone())),
                store: parts.store,
                journal: parts.journal,
                sysid: parts.sysid,
                runners: parts.runners,
                settings: parts.settings,
                metrics: parts.metrics,
                max_payload: parts.max_payload,
                notices: Notices::default(),
                registry: WorkerRegistry::new(parts.worker_expiry),
                handlers,
                backlog: Arc::default(),
                stats: stats::StatsSink::new(caps.stats),
                tags: caps.tags,
                events: parts.events,
            }),
        }
    }

    /// The notice bus: ingest names the jobtypes of new jobs on it.
    pub fn notices(&self) -> Notices {
        self.core.notices.clone()
    }

    /// Runs this daemon's jobs, renews their leases, releases them, and
    /// keeps the remote workers' registry, until `stop`; then stops
    /// gracefully (see the module docs). Call it once.
    pub async fn run(&self, stop: CancellationToken) {
        let done = CancellationToken::new();
        let stats = tokio::spawn(stats::run(self.core.clone(), done.clone()));
        let firer = tokio::spawn(crate::schedules::firer::run(
            self.core.store.clone(),
            self.core.metrics.clone(),
            self.core.settings.schedule_tick,
            stop.clone(),
        ));
        local::run(self.core.clone(), stop).await;
        // Runs still end during the graceful stop: their stats go last.
        done.cancel();
        let _ = stats.await;
        let _ = firer.await;
    }

    /// The remote workers of `client` this daemon heard from.
    pub fn workers(&self, client: &str, now: Millis) -> Vec<WorkerView> {
        self.core.registry.workers(client, now)
    }

    /// (active workers, gone workers, jobs they hold) over every client.
    pub fn worker_totals(&self, now: Millis) -> (usize, usize, usize) {
        self.core.registry.totals(now)
    }
}

impl Core {
    /// The scheduler (hold the guard briefly, never across an await).
    fn sched(&self) -> MutexGuard<'_, Scheduler> {
        self.sched.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a claim may be made at `now`.
    fn claim_gate(&self, now: Millis) -> Result<(), Closed> {
        if !self.sysid.held_at(now) {
            Err(Closed::Sysid)
        } else if self.backlog.is_full() {
            Err(Closed::Backlog)
        } else {
            Ok(())
        }
    }

    /// The one claim call: up to `want` (at most the grant) jobs of the
    /// grant's jobtype under `owner`, for `by`; the grant is settled with
    /// what the store gave, also on an error.
    async fn claim(
        &self,
        grant: Grant,
        want: u32,
        owner: &str,
        lease: Duration,
        by: By<'_>,
    ) -> jobstore_api::Result<Vec<Job>> {
        let want = want.min(grant.count);
        let began = self.events.on().map(|_| SystemTime::now());
        let at = now_millis();
        let claimed = self
            .store
            .claim_jobs(&grant.jobtype, want as usize, owner, lease, at)
            .await;
        let got = claimed.as_ref().map_or(0, Vec::len);
        let now = now_millis();
        self.sched().jobs_started(grant, got as u32, now);
        if let Ok(jobs) = &claimed {
            if let (Some(ev), Some(began)) = (self.events.on(), began) {
                ev.claimed(jobs.iter().map(JobRef::of_job), by, began);
            }
            for job in jobs {
                if let Some(due) = job.claimed_due
                    && !self.stats.waited(&job.jobtype, due, at)
                {
                    self.metrics.error("stats", "dropped");
                }
            }
            self.metrics.jobs_started.inc_by(jobs.len() as u64);
            for job in jobs.iter().filter(|j| j.attempts == 1) {
                self.metrics
                    .start_delay
                    .observe((now - job.create_dt).max(0) as f64 / 1000.0);
            }
        }
        claimed
    }

    /// A run of a job of `jobtype` claimed at `claimed` ended at `at` with a
    /// result the store took: its length goes into the timing stats.
    fn ran(&self, jobtype: &str, claimed: Millis, at: Millis) {
        if !self.stats.ran(jobtype, claimed, at) {
            self.metrics.error("stats", "dropped");
        }
    }

    /// The limits for jobs of a jobtype with `handler`.
    fn limits(&self, handler: Option<&jobstore_api::HandlerVersion>) -> Limits {
        match handler {
            Some(h) => self.settings.limits.with(&h.handler.limits),
            None => self.settings.limits,
        }
    }
}
