//! Running jobs: the claim loop, lease renewal and batched completions.
//!
//! One loop asks the [`Scheduler`] which jobtype to claim whenever capacity
//! frees up or the store says new work arrived ([`JobStore::watch`], with
//! the poll interval as the fallback), claims a small batch under the
//! daemon's sysid, and hands it to the runner of the jobtype's handler. It
//! claims nothing while the daemon does not hold its sysid.
//!
//! Every job from claim to release is *held*: a renewer extends the leases
//! of all held jobs in one `renew_locks` call per tick (a third of the
//! lease); a job the store no longer gives back is lost to this daemon, so
//! its run is killed and it is never released. A completer releases
//! finished jobs in one `release_jobs` call per short window, each with its
//! own result ([`policy`]), after appending the jobs their runs asked for
//! (`J:` lines) to the journal and waiting until they are durable.
//!
//! On a graceful stop: claim nothing more, let running jobs finish within
//! the grace period, hand back (unget) claimed jobs that never started,
//! kill what still runs at the deadline and release it as retry, flush the
//! completer.

mod completer;
pub mod policy;
mod renewer;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobstore_api::{HandlerVersion, Job, JobStore, Release, Wakeup, WorkWatcher, now_millis};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::journal::{Journal, Record};
use crate::metrics::{Metrics, OutcomeLabels};
use crate::remote::WorkHub;
use crate::runner::{Finished, Outcome, OutputParser, Runners, Task};
use crate::scheduler::SchedulerConfig;
use crate::sysid::SysidHandle;
use crate::tenant::{self, Client};
pub use completer::MAX_BACKLOG;
use completer::{Backlog, Completion};
pub use policy::Limits;

/// How the executor runs jobs.
#[derive(Debug, Clone)]
pub struct ExecSettings {
    /// Lease of a claimed job; renewed every third of it.
    pub lease: Duration,
    /// Slots, caps and batch size.
    pub scheduler: SchedulerConfig,
    /// Defaults for what handlers leave unset.
    pub limits: Limits,
    /// How long archived jobs are kept: `None` forever; zero deletes ok
    /// jobs at completion instead of archiving them.
    pub retention: Option<Duration>,
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
            purge_every: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(30),
            handler_ttl: Duration::from_secs(2),
            complete_window: Duration::from_millis(2),
            worker_idle: Duration::from_secs(300),
            poll: Duration::from_secs(1),
            local: true,
            process_handlers: false,
        }
    }
}

/// A held job: claimed and not yet released.
struct Held {
    lost: CancellationToken,
    /// Killed by the shutdown deadline rather than a lost lease: released
    /// as retry.
    aborted: bool,
    /// Finished and queued for release: the completer forgets it.
    releasing: bool,
    created: i64,
    limits: Limits,
}

type HeldMap = Arc<Mutex<HashMap<String, Held>>>;

/// Shortest time between two reads of the waiting jobtypes while busy.
const REFRESH_MIN: Duration = Duration::from_millis(100);

fn lock(held: &HeldMap) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
    held.lock().unwrap_or_else(|e| e.into_inner())
}

/// The parts the executor works with.
pub struct Executor {
    /// The store.
    pub store: Arc<dyn JobStore>,
    /// Where `J:` jobs go.
    pub journal: Journal,
    /// The sysid claims are made under.
    pub sysid: SysidHandle,
    /// The runners.
    pub runners: Arc<Runners>,
    /// Settings.
    pub settings: ExecSettings,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// The scheduler and the remote workers' registry.
    pub hub: Arc<WorkHub>,
}

struct Loop {
    ex: Executor,
    owner: String,
    hub: Arc<WorkHub>,
    /// Jobs handed to this daemon's runners and not yet finished.
    local_running: usize,
    held: HeldMap,
    /// Every handler, as of `handlers_read`.
    handlers: HashMap<String, HandlerVersion>,
    handlers_read: Option<Instant>,
    /// Jobtypes found without a handler, and when.
    missing: HashMap<String, Instant>,
    done_tx: mpsc::UnboundedSender<(Task, Finished)>,
    complete_tx: mpsc::UnboundedSender<Completion>,
    /// Finished jobs not yet released.
    backlog: Arc<Backlog>,
    batch_stop: CancellationToken,
    /// The store's last answer held a count at its cap (stores may cap
    /// waiting counts): more jobs may wait than the scheduler knows of.
    capped: bool,
}

impl Executor {
    /// Runs jobs until `stop`, then stops gracefully (see the module docs).
    pub async fn run(self, stop: CancellationToken) {
        let owner = self.sysid.sysid();
        let held: HeldMap = Arc::default();
        let (done_tx, mut done_rx) = mpsc::unbounded_channel();
        let (complete_tx, complete_rx) = mpsc::unbounded_channel();
        let backlog = Arc::new(Backlog::default());
        let completer = tokio::spawn(completer::run(
            completer::Completer {
                store: self.store.clone(),
                journal: self.journal.clone(),
                owner: owner.clone(),
                held: held.clone(),
                backlog: backlog.clone(),
                metrics: self.metrics.clone(),
                window: self.settings.complete_window,
            },
            complete_rx,
        ));
        let background = CancellationToken::new();
        let renewer = tokio::spawn(renewer::run(
            self.store.clone(),
            owner.clone(),
            self.settings.lease,
            held.clone(),
            self.metrics.clone(),
            background.clone(),
        ));
        let sweeper = {
            let (hub, stop) = (self.hub.clone(), background.clone());
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => hub.sweep(now_millis()),
                    }
                }
            })
        };
        let housekeeping = tokio::spawn(housekeeping(
            self.store.clone(),
            self.runners.clone(),
            self.settings.clone(),
            background.clone(),
        ));
        let watcher = match self.store.watch().await {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, "no store notifications; polling");
                WorkWatcher::polling(self.settings.poll)
            }
        };
        // The store's notices go to every listener through the hub: this
        // loop, and long-polling fetches (the ingest loop adds its own).
        let mut notices = self.hub.notices.subscribe();
        let pump = tokio::spawn(pump_notices(
            watcher,
            self.hub.clone(),
            self.settings.poll,
            background.clone(),
        ));
        let mut l = Loop {
            hub: self.hub.clone(),
            local_running: 0,
            ex: self,
            owner,
            held,
            handlers: HashMap::new(),
            handlers_read: None,
            missing: HashMap::new(),
            done_tx,
            complete_tx,
            backlog,
            batch_stop: CancellationToken::new(),
            capped: false,
        };
        let mut refresh = true;
        let mut last_refresh = Instant::now();
        let mut store_backoff: Option<Instant> = None;
        let mut found_work = false;
        let mut sysid_was_held = true;
        loop {
            if stop.is_cancelled() {
                break;
            }
            while let Ok((task, fin)) = done_rx.try_recv() {
                l.finish(task, fin);
            }
            let now = now_millis();
            let held_now = l.ex.sysid.held_at(now);
            if held_now != sysid_was_held {
                if held_now {
                    tracing::info!("sysid held: claiming again");
                } else {
                    tracing::warn!("sysid not held: claiming stops until it is");
                }
                sysid_was_held = held_now;
            }
            let store_ok = store_backoff.is_none_or(|t| Instant::now() >= t);
            // Counts the scheduler knows run out as jobs are claimed: with
            // free slots, look again, at most every REFRESH_MIN while jobs
            // keep ending, or at once while claims succeed and the store
            // capped a count (a claim round takes every job the scheduler
            // knows of, so more are likely waiting).
            let free = l.hub.sched().free();
            // Finished jobs waiting for their release hold claims back.
            let backlog_full = l.backlog.is_full();
            let look_now = l.capped && found_work;
            refresh |= free > 0 && (look_now || last_refresh.elapsed() >= REFRESH_MIN);
            if l.ex.settings.local && held_now && store_ok && free > 0 && !backlog_full {
                if refresh {
                    last_refresh = Instant::now();
                }
                match l.claim_round(refresh).await {
                    Ok(claimed) => {
                        store_backoff = None;
                        // Only a fresh look at the store says work ran out.
                        if refresh || claimed > 0 {
                            found_work = claimed > 0;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot claim; retrying shortly");
                        store_backoff = Some(Instant::now() + Duration::from_millis(500));
                    }
                }
                refresh = false;
            }
            // While jobs are being found, look again soon: the counts the
            // scheduler knows run out (stores cap them), and nothing else
            // would wake the loop once the claimed jobs are done.
            let wait = if backlog_full {
                l.ex.settings.poll
            } else if found_work && l.capped && l.hub.sched().free() > 0 {
                Duration::ZERO
            } else if found_work && l.hub.sched().free() > 0 {
                REFRESH_MIN.saturating_sub(last_refresh.elapsed())
            } else {
                l.ex.settings.poll
            };
            let backlog = l.backlog.clone();
            tokio::select! {
                Some((task, fin)) = done_rx.recv() => l.finish(task, fin),
                () = backlog.drained(), if backlog_full => {}
                n = tokio::time::timeout(wait, notices.recv()) => {
                    let mut next = match n {
                        Ok(Ok(jt)) => Some(jt),
                        // Timed out, or notices were missed: look at the store.
                        _ => None,
                    };
                    let now = now_millis();
                    loop {
                        match next {
                            Some(jt) if !jt.is_empty() => l.hub.sched().hint(&jt, now),
                            _ => refresh = true,
                        }
                        next = match notices.try_recv() {
                            Ok(jt) => Some(jt),
                            Err(tokio::sync::broadcast::error::TryRecvError::Empty) => break,
                            Err(_) => None,
                        };
                    }
                }
                _ = stop.cancelled() => break,
            }
        }

        // Graceful stop.
        l.batch_stop.cancel();
        let deadline = tokio::time::Instant::now() + l.ex.settings.shutdown_grace;
        let mut aborted = false;
        while l.local_running > 0 {
            tokio::select! {
                Some((task, fin)) = done_rx.recv() => l.finish(task, fin),
                _ = tokio::time::sleep_until(deadline), if !aborted => {
                    aborted = true;
                    let mut held = lock(&l.held);
                    tracing::warn!(jobs = held.len(), "grace period over: stopping running jobs; they will run again");
                    for h in held.values_mut() {
                        h.aborted = true;
                        h.lost.cancel();
                    }
                }
                _ = tokio::time::sleep_until(deadline + Duration::from_secs(10)), if aborted => {
                    tracing::error!("runs did not stop after being killed; leaving them to their leases");
                    break;
                }
            }
        }
        let Loop {
            ex, complete_tx, ..
        } = l;
        drop(complete_tx);
        if completer.await.is_err() {
            tracing::error!("completer failed");
        }
        background.cancel();
        let _ = renewer.await;
        let _ = housekeeping.await;
        let _ = sweeper.await;
        let _ = pump.await;
        ex.runners.shutdown().await;
    }
}

impl Loop {
    /// Claims while the scheduler grants; returns how many jobs it claimed.
    async fn claim_round(&mut self, refresh: bool) -> jobstore_api::Result<usize> {
        let mut claimed_total = 0;
        self.refresh_handlers().await?;
        let now = now_millis();
        if refresh {
            let waiting = self.ex.store.waiting_jobtypes(now).await?;
            tracing::trace!(?waiting, "waiting jobtypes");
            let cap = self.ex.store.capabilities().waiting_count_cap;
            self.capped = cap.is_some_and(|cap| waiting.iter().any(|w| w.count >= cap));
            self.hub.sched().set_waiting(&waiting, now);
        }
        loop {
            let grant = self.hub.sched().select(now);
            let Some(grant) = grant else { break };
            tracing::trace!(?grant, "claiming");
            let handler = match self.handler(&grant.jobtype).await {
                Ok(h) => h,
                Err(e) => {
                    self.hub.sched().jobs_started(grant, 0, now);
                    return Err(e);
                }
            };
            // Remote workers or other daemons run it (learnt just now: the
            // scheduler knows from here on).
            if handler
                .as_ref()
                .is_some_and(|h| !runs_here(&h.handler, self.ex.settings.process_handlers))
            {
                self.hub.sched().jobs_started(grant, 0, now);
                continue;
            }
            // A cap learnt just now (a handler read on its own) may be
            // below the grant.
            let cap = handler
                .as_ref()
                .and_then(|h| h.handler.limits.concurrency)
                .unwrap_or(u32::MAX);
            let want = grant.count.min(cap.max(1));
            let claimed = self
                .ex
                .store
                .claim_jobs(
                    &grant.jobtype,
                    want as usize,
                    &self.owner,
                    self.ex.settings.lease,
                    now_millis(),
                )
                .await;
            match claimed {
                Ok(jobs) => {
                    tracing::trace!(got = jobs.len(), "claimed");
                    claimed_total += jobs.len();
                    self.hub
                        .sched()
                        .jobs_started(grant, jobs.len() as u32, now_millis());
                    if !jobs.is_empty() {
                        self.start(jobs, handler);
                    }
                }
                Err(e) => {
                    self.hub.sched().jobs_started(grant, 0, now_millis());
                    return Err(e);
                }
            }
        }
        Ok(claimed_total)
    }

    /// Reads every handler (one `list_handlers` call) when the last read is
    /// older than `handler_ttl`, and gives the scheduler their concurrency
    /// caps, so that caps hold before the first claim of a jobtype.
    async fn refresh_handlers(&mut self) -> jobstore_api::Result<()> {
        if self
            .handlers_read
            .is_some_and(|at| at.elapsed() < self.ex.settings.handler_ttl)
        {
            return Ok(());
        }
        let list = self.ex.store.list_handlers().await?;
        let mut fresh: HashMap<String, HandlerVersion> = HashMap::with_capacity(list.len());
        {
            let mut sched = self.hub.sched();
            for v in list {
                apply_handler(&mut sched, &v, self.ex.settings.process_handlers);
                fresh.insert(v.jobtype.clone(), v);
            }
            for gone in self.handlers.keys().filter(|jt| !fresh.contains_key(*jt)) {
                sched.set_jobtype_cap(gone, None);
                sched.set_remote_only(gone, false);
            }
        }
        self.handlers = fresh;
        self.handlers_read = Some(Instant::now());
        self.missing.clear();
        Ok(())
    }

    /// The jobtype's handler from the last read; a jobtype without one is
    /// looked up on its own (once per `handler_ttl`), so a handler set just
    /// before its jobs were added is found at once.
    async fn handler(&mut self, jobtype: &str) -> jobstore_api::Result<Option<HandlerVersion>> {
        if let Some(h) = self.handlers.get(jobtype) {
            return Ok(Some(h.clone()));
        }
        let ttl = self.ex.settings.handler_ttl;
        if self
            .missing
            .get(jobtype)
            .is_some_and(|at| at.elapsed() < ttl)
        {
            return Ok(None);
        }
        match self.ex.store.get_handler(jobtype).await? {
            Some(v) => {
                apply_handler(&mut self.hub.sched(), &v, self.ex.settings.process_handlers);
                self.handlers.insert(jobtype.to_owned(), v.clone());
                Ok(Some(v))
            }
            None => {
                if self.missing.len() > 10_000 {
                    self.missing.retain(|_, at| at.elapsed() < ttl);
                }
                self.missing.insert(jobtype.to_owned(), Instant::now());
                Ok(None)
            }
        }
    }

    /// Hands claimed jobs to their runner.
    fn start(&mut self, jobs: Vec<Job>, handler: Option<HandlerVersion>) {
        let limits = match &handler {
            Some(h) => self.ex.settings.limits.with(&h.handler.limits),
            None => self.ex.settings.limits,
        };
        let now = now_millis();
        let mut tasks = Vec::with_capacity(jobs.len());
        {
            let mut held = lock(&self.held);
            for job in jobs {
                if job.attempts == 1 {
                    self.ex
                        .metrics
                        .start_delay
                        .observe((now - job.create_dt).max(0) as f64 / 1000.0);
                }
                let lost = CancellationToken::new();
                held.insert(
                    job.id.clone(),
                    Held {
                        lost: lost.clone(),
                        aborted: false,
                        releasing: false,
                        created: job.create_dt,
                        limits,
                    },
                );
                tasks.push(Task {
                    local_id: tenant::local_of(&job.id).to_owned(),
                    local_type: tenant::local_of(&job.jobtype).to_owned(),
                    client: tenant::tenant_of(&job.jobtype).to_owned(),
                    id: job.id,
                    jobtype: job.jobtype,
                    attempt: job.attempts,
                    data: job.data,
                    time_limit: limits.time_limit,
                    lost,
                });
            }
        }
        self.ex.metrics.jobs_started.inc_by(tasks.len() as u64);
        self.local_running += tasks.len();
        let done = self.done_tx.clone();
        match handler {
            None => {
                for t in tasks {
                    let mut p = OutputParser::default();
                    p.note(&format!(
                        "no handler for jobtype {:?}; the job waits for one until it times out",
                        t.local_type
                    ));
                    let mut o = Outcome::new(100, p.finish());
                    o.class = crate::runner::Class::Retry;
                    let _ = done.send((t, Finished::Done(o)));
                }
            }
            Some(h) => {
                let runners = self.ex.runners.clone();
                let stop = self.batch_stop.clone();
                tokio::spawn(async move {
                    runners.run_batch(&h.handler, tasks, &stop, &done).await;
                });
            }
        }
    }

    /// A run ended: free its slot and queue its release.
    fn finish(&mut self, task: Task, fin: Finished) {
        let now = now_millis();
        self.hub.sched().jobs_stopped(&task.jobtype, 1, now);
        self.local_running = self.local_running.saturating_sub(1);
        let (created, limits, aborted) = match lock(&self.held).get(&task.id) {
            Some(h) => (h.created, h.limits, h.aborted),
            None => {
                // Lost and already forgotten by the renewer.
                self.count("lost");
                return;
            }
        };
        let (how, children) = match fin {
            Finished::Lost if aborted => {
                self.count("stopped");
                (
                    Release::Retry {
                        delay: Duration::ZERO,
                    },
                    Vec::new(),
                )
            }
            Finished::Lost => {
                lock(&self.held).remove(&task.id);
                self.count("lost");
                return;
            }
            Finished::NotStarted => {
                self.count("not_started");
                (Release::Unget, Vec::new())
            }
            Finished::Done(mut outcome) => {
                let children = self.children(&task, &mut outcome);
                let delete_ok = self.ex.settings.retention == Some(Duration::ZERO);
                let how =
                    policy::release_for(&outcome, &limits, task.attempt, created, now, delete_ok);
                self.count(match &how {
                    Release::Archive(r) => r.code.as_str(),
                    Release::Delete => "ok",
                    Release::Retry { .. } => match outcome.class {
                        crate::runner::Class::Retry => "retry",
                        _ => "error",
                    },
                    Release::Unget => "not_started",
                });
                (how, children)
            }
        };
        if let Some(h) = lock(&self.held).get_mut(&task.id) {
            h.releasing = true;
        }
        self.backlog.queued();
        let _ = self.complete_tx.send(Completion {
            id: task.id,
            how,
            children,
        });
    }

    /// The journal records of a run's `J:` lines, for the same client.
    /// A line naming an invalid jobtype is noted in the output and dropped.
    fn children(&self, task: &Task, outcome: &mut Outcome) -> Vec<Record> {
        if outcome.children.is_empty() {
            return Vec::new();
        }
        let Ok(client) = Client::new(&task.client) else {
            return Vec::new();
        };
        let mut records = Vec::with_capacity(outcome.children.len());
        let mut notes = Vec::new();
        for child in std::mem::take(&mut outcome.children) {
            match client.jobtype(&child.jobtype) {
                Ok(jobtype) => records.push(Record {
                    id: crate::http::jobs::new_id(&client),
                    jobtype,
                    priority: 0,
                    run_at: None,
                    data: child.data,
                }),
                Err(e) => notes.push(format!("[jobstore] J: line dropped: {e}\n")),
            }
        }
        for n in notes {
            if outcome.output.len() + n.len() <= jobstore_api::limits::MAX_OUTPUT {
                outcome.output.extend_from_slice(n.as_bytes());
            }
        }
        records
    }

    fn count(&self, outcome: &'static str) {
        self.ex
            .metrics
            .jobs_finished
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }
}

/// Forwards the store's wake-ups to the hub's notices until `stop`: a
/// jobtype per notice, `""` when anything may have changed.
async fn pump_notices(
    mut watcher: WorkWatcher,
    hub: Arc<WorkHub>,
    poll: Duration,
    stop: CancellationToken,
) {
    loop {
        let w = tokio::select! {
            _ = stop.cancelled() => return,
            w = watcher.wait(poll) => w,
        };
        match w {
            Wakeup::Work(types) => {
                for jt in types {
                    let _ = hub.notices.send(jt);
                }
            }
            Wakeup::Unknown => {
                let _ = hub.notices.send(String::new());
            }
            Wakeup::TimedOut => {}
        }
    }
}

/// Gives the scheduler what a handler says: its concurrency cap, and
/// whether this daemon's runners leave its jobs to others (remote workers,
/// or daemons that allow process handlers).
fn apply_handler(sched: &mut crate::scheduler::Scheduler, v: &HandlerVersion, processes: bool) {
    sched.set_jobtype_cap(&v.jobtype, v.handler.limits.concurrency);
    sched.set_remote_only(&v.jobtype, !runs_here(&v.handler, processes));
}

/// Whether this daemon's runners run jobs of `handler`: not remote ones
/// (remote workers claim those), and process handlers only where allowed.
fn runs_here(handler: &jobstore_api::Handler, processes: bool) -> bool {
    match handler.lang.as_str() {
        "remote" => false,
        "process" => processes,
        _ => true,
    }
}

/// Purges archived jobs past the retention, and stops idle workers.
async fn housekeeping(
    store: Arc<dyn JobStore>,
    runners: Arc<Runners>,
    settings: ExecSettings,
    stop: CancellationToken,
) {
    let every = settings.purge_every;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        // A retention of zero deletes ok jobs at completion; what is still
        // archived (failed, timed out, cancelled) goes at the next purge.
        if let Some(keep) = settings.retention {
            let before = now_millis() - jobstore_api::duration_ms(keep);
            match store
                .purge_archived(before, &jobstore_api::ResultCode::ALL)
                .await
            {
                Ok(n) if n > 0 => {
                    tracing::info!(jobs = n, "purged archived jobs past the retention")
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "purge failed"),
            }
        }
        runners.reap_idle(settings.worker_idle).await;
    }
}
