//! The claim loop of this daemon's own runners, and the tasks beside it:
//! the completer, the lease renewer, the sweep of the remote workers'
//! registry, housekeeping (purges, idle workers) and the pump of the
//! store's notices.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jobstore_api::{HandlerVersion, Job, Release, WorkWatcher, now_millis};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::completer::{self, Completion, EventMeta};
use super::held::{Held, HeldMap, lock};
use super::notices::{self, Notice};
use super::{Closed, Core, policy, renewer};
use crate::events::By;
use crate::runner::{Class, Finished, Outcome, OutputParser, Task};
use crate::tenant::{self, Client};

/// Shortest time between two reads of the waiting jobtypes while busy.
const REFRESH_MIN: Duration = Duration::from_millis(100);

struct Loop {
    core: Arc<Core>,
    owner: String,
    /// Jobs handed to this daemon's runners and not yet finished.
    running: usize,
    held: HeldMap,
    done_tx: mpsc::UnboundedSender<(Task, Finished)>,
    complete_tx: mpsc::UnboundedSender<Completion>,
    batch_stop: CancellationToken,
    /// The store's last answer held a count at its cap (stores may cap
    /// waiting counts): more jobs may wait than the scheduler knows of.
    capped: bool,
}

/// Runs until `stop`, then stops gracefully (see the executor's docs).
pub(super) async fn run(core: Arc<Core>, stop: CancellationToken) {
    let owner = core.sysid.sysid();
    let held: HeldMap = Arc::default();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel();
    let (complete_tx, complete_rx) = mpsc::unbounded_channel();
    let completer = tokio::spawn(completer::run(core.clone(), held.clone(), complete_rx));
    let background = CancellationToken::new();
    let renewer = tokio::spawn(renewer::run(
        core.store.clone(),
        owner.clone(),
        core.settings.lease,
        held.clone(),
        core.metrics.clone(),
        background.clone(),
    ));
    let sweeper = tokio::spawn(sweep_registry(core.clone(), background.clone()));
    let housekeeping = tokio::spawn(housekeeping(core.clone(), background.clone()));
    let flow_sweep = tokio::spawn(flow_sweep(core.clone(), background.clone()));
    let watcher = match core.store.watch().await {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "no store notifications; polling");
            WorkWatcher::polling(core.settings.poll)
        }
    };
    // The store's notices go to every listener through the bus: this
    // loop, and long-polling fetches (ingest adds its own).
    let mut notices = core.notices.listen();
    let pump = tokio::spawn(notices::pump(
        watcher,
        core.notices.clone(),
        core.settings.poll,
        background.clone(),
    ));
    let mut l = Loop {
        core,
        owner,
        running: 0,
        held,
        done_tx,
        complete_tx,
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
        let gate = l.core.claim_gate(now_millis());
        let sysid_held = gate != Err(Closed::Sysid);
        if sysid_held != sysid_was_held {
            if sysid_held {
                tracing::info!("sysid held: claiming again");
            } else {
                tracing::warn!("sysid not held: claiming stops until it is");
            }
            sysid_was_held = sysid_held;
        }
        let store_ok = store_backoff.is_none_or(|t| Instant::now() >= t);
        // Counts the scheduler knows run out as jobs are claimed: with
        // free slots, look again, at most every REFRESH_MIN while jobs
        // keep ending, or at once while claims succeed and the store
        // capped a count (a claim round takes every job the scheduler
        // knows of, so more are likely waiting).
        let free = l.core.sched().free();
        // Finished jobs waiting for their release hold claims back.
        let backlog_full = gate == Err(Closed::Backlog);
        let look_now = l.capped && found_work;
        refresh |= free > 0 && (look_now || last_refresh.elapsed() >= REFRESH_MIN);
        if l.core.settings.local && gate.is_ok() && store_ok && free > 0 {
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
            l.core.settings.poll
        } else if found_work && l.capped && l.core.sched().free() > 0 {
            Duration::ZERO
        } else if found_work && l.core.sched().free() > 0 {
            REFRESH_MIN.saturating_sub(last_refresh.elapsed())
        } else {
            l.core.settings.poll
        };
        let core = l.core.clone();
        tokio::select! {
            Some((task, fin)) = done_rx.recv() => l.finish(task, fin),
            () = core.backlog.drained(), if backlog_full => {}
            n = tokio::time::timeout(wait, notices.next()) => {
                // Timed out: look at the store.
                let mut next = n.unwrap_or(Notice::Anything);
                let now = now_millis();
                loop {
                    match next {
                        Notice::Jobtype(jt) => l.core.sched().hint(&jt, now),
                        Notice::Anything => refresh = true,
                    }
                    match notices.try_next() {
                        Some(n) => next = n,
                        None => break,
                    }
                }
            }
            _ = stop.cancelled() => break,
        }
    }

    // Graceful stop.
    l.batch_stop.cancel();
    let deadline = tokio::time::Instant::now() + l.core.settings.shutdown_grace;
    let mut aborted = false;
    while l.running > 0 {
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
        core, complete_tx, ..
    } = l;
    drop(complete_tx);
    if completer.await.is_err() {
        tracing::error!("completer failed");
    }
    background.cancel();
    let _ = renewer.await;
    let _ = housekeeping.await;
    let _ = flow_sweep.await;
    let _ = sweeper.await;
    let _ = pump.await;
    core.runners.shutdown().await;
}

impl Loop {
    /// Claims while the scheduler grants; returns how many jobs it claimed.
    async fn claim_round(&mut self, refresh: bool) -> jobstore_api::Result<usize> {
        let core = self.core.clone();
        let mut claimed_total = 0;
        core.handlers.refresh(&*core.store, &core.sched).await?;
        let now = now_millis();
        if refresh {
            let waiting = core.store.waiting_jobtypes(now).await?;
            tracing::trace!(?waiting, "waiting jobtypes");
            let cap = core.store.capabilities().waiting_count_cap;
            self.capped = cap.is_some_and(|cap| waiting.iter().any(|w| w.count >= cap));
            core.sched().set_waiting(&waiting, now);
        }
        loop {
            let grant = core.sched().select(now);
            let Some(grant) = grant else { break };
            tracing::trace!(?grant, "claiming");
            let handler = match core
                .handlers
                .get(&*core.store, &core.sched, &grant.jobtype)
                .await
            {
                Ok(h) => h,
                Err(e) => {
                    core.sched().jobs_started(grant, 0, now);
                    return Err(e);
                }
            };
            // Remote workers or other daemons run it (learnt just now: the
            // scheduler knows from here on).
            if handler
                .as_ref()
                .is_some_and(|h| !core.handlers.runs_here(h))
            {
                core.sched().jobs_started(grant, 0, now);
                continue;
            }
            // A cap learnt just now (a handler read on its own) may be
            // below the grant.
            let cap = handler
                .as_ref()
                .and_then(|h| h.handler.limits.concurrency)
                .unwrap_or(u32::MAX);
            let want = grant.count.min(cap.max(1));
            let jobs = core
                .claim(grant, want, &self.owner, core.settings.lease, By::Daemon)
                .await?;
            tracing::trace!(got = jobs.len(), "claimed");
            claimed_total += jobs.len();
            if !jobs.is_empty() {
                let waited = super::waited::messages(&*core.store, &jobs).await;
                self.start(jobs, handler, waited);
            }
        }
        Ok(claimed_total)
    }

    /// Hands claimed jobs to their runner.
    fn start(
        &mut self,
        jobs: Vec<Job>,
        handler: Option<HandlerVersion>,
        mut waited: std::collections::HashMap<String, String>,
    ) {
        let limits = self.core.limits(handler.as_ref());
        let mut tasks = Vec::with_capacity(jobs.len());
        let mut marked = Vec::new();
        let now = now_millis();
        let events = self.core.events.on();
        let mut started = Vec::new();
        {
            let mut held = lock(&self.held);
            for job in jobs {
                let lost = CancellationToken::new();
                let run = events.map(|ev| Box::new(ev.run_start(&job)));
                let trace = crate::trace::run_trace(&job, run.as_deref());
                if let Some(r) = &run
                    && !job.cancel_requested
                {
                    started.push((job.id.clone(), job.jobtype.clone(), job.attempts, r.clone()));
                }
                held.insert(
                    job.id.clone(),
                    Held {
                        lost: lost.clone(),
                        aborted: false,
                        releasing: false,
                        cancelled: job.cancel_requested,
                        created: job.create_dt,
                        claimed: now,
                        limits,
                        run,
                        repeat: policy::Repeating::of(&job, now),
                    },
                );
                let to = if job.cancel_requested {
                    &mut marked
                } else {
                    &mut tasks
                };
                to.push(Task {
                    waited: waited.remove(&job.id).map(Into::into),
                    trace,
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
        if let Some(ev) = events {
            ev.started(
                started
                    .iter()
                    .map(|(id, jobtype, attempt, r)| (r.job(id, jobtype, *attempt), r.run)),
            );
        }
        self.running += tasks.len() + marked.len();
        let done = self.done_tx.clone();
        // Cancelled before this claim (their holder's lease ran out): never
        // started, archived as cancelled.
        for t in marked {
            let _ = done.send((t, Finished::NotStarted));
        }
        match handler {
            None => {
                for t in tasks {
                    let mut p = OutputParser::default();
                    p.note(&format!(
                        "no handler for jobtype {:?}; the job waits for one until it times out",
                        t.local_type
                    ));
                    let mut o = Outcome::new(100, p.finish());
                    o.class = Class::Retry;
                    let _ = done.send((t, Finished::Done(o)));
                }
            }
            Some(h) => {
                let runners = self.core.runners.clone();
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
        self.core.sched().jobs_stopped(&task.jobtype, 1, now);
        self.running = self.running.saturating_sub(1);
        let (created, claimed, limits, aborted, cancelled, run, repeat) =
            match lock(&self.held).get_mut(&task.id) {
                Some(h) => (
                    h.created,
                    h.claimed,
                    h.limits,
                    h.aborted,
                    h.cancelled,
                    h.run.take(),
                    h.repeat.take(),
                ),
                None => {
                    // Lost and already forgotten by the renewer.
                    self.count("lost");
                    return;
                }
            };
        let ran = matches!(fin, Finished::Done(_)) && !cancelled;
        let status = match &fin {
            Finished::Done(o) => o.status,
            _ => 0,
        };
        // A run that began (not one handed back unstarted) ends here.
        let began = !matches!(fin, Finished::NotStarted);
        let ended = |outcome: &'static str| {
            if let (Some(ev), Some(run)) = (self.core.events.on(), &run)
                && began
            {
                ev.finished(
                    [(
                        run.job(&task.id, &task.jobtype, task.attempt),
                        run.end(status, outcome),
                    )],
                    By::Daemon,
                );
            }
        };
        let (how, children, outcome) = match fin {
            _ if cancelled => {
                let output = match &fin {
                    Finished::Done(o) => o.output.as_slice(),
                    _ => &[],
                };
                (policy::cancelled(output), Vec::new(), "cancelled")
            }
            Finished::Lost if aborted => (
                Release::Retry {
                    delay: Duration::ZERO,
                },
                Vec::new(),
                "stopped",
            ),
            Finished::Lost => {
                lock(&self.held).remove(&task.id);
                self.count("lost");
                ended("lost");
                return;
            }
            Finished::NotStarted => (Release::Unget, Vec::new(), "not_started"),
            Finished::Done(mut outcome) => {
                // Claimed jobs are of valid clients; the check is the
                // rule's, and only runs for jobs that asked for new ones.
                let children = if outcome.children.is_empty() {
                    Vec::new()
                } else {
                    match Client::new(&task.client) {
                        Ok(client) => {
                            policy::follow_on_jobs(
                                &client,
                                &mut outcome,
                                self.core.max_payload,
                                self.core.tags,
                                task.trace.as_ref(),
                            )
                            .0
                        }
                        Err(_) => Vec::new(),
                    }
                };
                let delete_ok = self.core.settings.retention == Some(Duration::ZERO);
                let repeat = repeat.as_deref().map(|r| (r, self.core.max_payload));
                let (how, label) = policy::settle(
                    &mut outcome,
                    &limits,
                    task.attempt,
                    created,
                    now,
                    delete_ok,
                    repeat,
                );
                (how, children, label)
            }
        };
        ended(outcome);
        if let Some(h) = lock(&self.held).get_mut(&task.id) {
            h.releasing = true;
        }
        self.core.backlog.queued();
        let meta = run.map(|r| {
            Box::new(EventMeta {
                jobtype: task.jobtype.clone(),
                attempt: task.attempt,
                trace: r.trace,
                status: (status > 0).then_some(status),
            })
        });
        let _ = self.complete_tx.send(Completion {
            id: task.id,
            how,
            children,
            outcome,
            ran: ran.then_some((task.jobtype, claimed)),
            meta,
        });
    }

    fn count(&self, outcome: &'static str) {
        self.core
            .metrics
            .jobs_finished
            .get_or_create(&crate::metrics::OutcomeLabels { outcome })
            .inc();
    }
}

/// Forgets remote jobs whose lease ran out, every second, and gives their
/// slots back.
async fn sweep_registry(core: Arc<Core>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        let now = now_millis();
        let gone = core.registry.sweep(now);
        let mut sched = core.sched();
        for jobtype in gone {
            sched.jobs_stopped(&jobtype, 1, now);
        }
    }
}

/// Purges archived jobs past their retention, and stops idle workers.
async fn housekeeping(core: Arc<Core>, stop: CancellationToken) {
    let settings = &core.settings;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(settings.purge_every) => {}
        }
        let now = now_millis();
        for (keep, codes, what) in [
            (
                settings.retention,
                &[jobstore_api::ResultCode::Ok][..],
                "ok",
            ),
            (settings.retention_failed, &NOT_OK[..], "not ok"),
        ] {
            let Some(keep) = keep else { continue };
            let before = now - jobstore_api::duration_ms(keep);
            match core.store.purge_archived(before, codes).await {
                Ok(n) if n > 0 => {
                    tracing::info!(
                        jobs = n,
                        codes = what,
                        "purged archived jobs past their retention"
                    )
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "purge failed"),
            }
        }
        core.runners.reap_idle(settings.worker_idle).await;
    }
}

/// How often every daemon finishes the deliveries to waiters that a crash
/// left undone ([`jobstore_api::JobStore::settle_flows`]).
const FLOW_SWEEP: Duration = Duration::from_secs(10);

/// Deliveries settled per call; called again while a call comes back full.
const FLOW_SWEEP_BATCH: usize = 1_000;

/// Every [`FLOW_SWEEP`], on a store that keeps dependencies: settles what
/// a crash between a dependency's end and its delivery left undone.
async fn flow_sweep(core: Arc<Core>, stop: CancellationToken) {
    if !core.store.capabilities().dependencies {
        return;
    }
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(FLOW_SWEEP) => {}
        }
        loop {
            match core
                .store
                .settle_flows(now_millis(), FLOW_SWEEP_BATCH)
                .await
            {
                Ok(n) if n as usize >= FLOW_SWEEP_BATCH => continue,
                Ok(n) => {
                    if n > 0 {
                        tracing::info!(
                            delivered = n,
                            "settled interrupted deliveries to waiting jobs"
                        );
                    }
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "settling deliveries to waiting jobs failed");
                    break;
                }
            }
        }
    }
}

/// The result codes kept for `retention_failed`: every code but ok.
const NOT_OK: [jobstore_api::ResultCode; 5] = [
    jobstore_api::ResultCode::Failed,
    jobstore_api::ResultCode::Retry,
    jobstore_api::ResultCode::Error,
    jobstore_api::ResultCode::Cancelled,
    jobstore_api::ResultCode::Timeout,
];
