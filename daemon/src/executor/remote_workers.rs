//! What remote workers ask of the core: fetch jobs (long-polling), renew
//! their leases, finish jobs, update a running job's payload. Fetches claim
//! through the same path as this daemon's runners (the scheduler's caps,
//! the sysid, the release backlog); finishes complete through the same path
//! (the outcome rules, new jobs journaled before the release, one
//! `release_jobs` call per finish). See [`registry`](super::registry) for
//! lease tokens.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

use jobstore_api::{Job, Millis, duration_ms, now_millis};
use tokio::time::Instant;

use super::completer::{self, CompleteError, Completion, EventMeta, Patience};
use super::notices::Notice;
use super::policy::{self, Dropped};
use super::registry::RemoteJob;
use super::{Closed, Executor, Limits};
use crate::events::{By, RunStart, trace_of_job};
use crate::runner::Outcome;
use crate::tenant::Client;

/// Why a remote worker's call was refused.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// None of the jobs named is held under the lease any more (finished,
    /// cancelled, or handed to another worker after the lease ran out).
    #[error(
        "none of these jobs is held under this lease any more (finished, cancelled, or handed to \
         another worker after the lease ran out)"
    )]
    NotHeld,
    /// This daemon hands out no jobs right now.
    #[error("this daemon does not hold its sysid right now; it hands out no jobs")]
    NoSysid,
    /// The jobs a finish asked for could not be journaled; nothing was
    /// released.
    #[error("cannot journal the new jobs: {0}")]
    Journal(#[from] crate::journal::JournalError),
    /// The store refused or could not be reached.
    #[error(transparent)]
    Store(#[from] jobstore_api::Error),
}

impl From<CompleteError> for RemoteError {
    fn from(e: CompleteError) -> Self {
        match e {
            CompleteError::Journal(e) => RemoteError::Journal(e),
            CompleteError::Store(e) => RemoteError::Store(e),
        }
    }
}

/// A fetch, checked by the caller.
#[derive(Debug, Clone)]
pub struct FetchRequest {
    /// The client.
    pub client: Client,
    /// Store jobtypes of the client, taken in order, without repeats.
    pub jobtypes: Vec<String>,
    /// Most jobs (1..=`MAX_CLAIM`).
    pub max: u32,
    /// How long to wait for work to arrive.
    pub wait: Duration,
    /// The lease token the jobs are held under.
    pub owner: String,
    /// The worker's name.
    pub worker: String,
    /// The lease length.
    pub lease: Duration,
}

/// What a fetch got.
#[derive(Debug)]
pub struct Fetched {
    /// The jobs; empty when none arrived within the wait.
    pub jobs: Vec<Job>,
    /// When their lease runs out unless renewed.
    pub lease_expires: Millis,
    /// The trace context each job's run continues
    /// ([`crate::trace::run_trace`]), in the order of `jobs`.
    pub traces: Vec<Option<jobstore_api::TraceContext>>,
    /// The messages of the jobs that waited for other jobs, by store id
    /// (compact JSON, [`super::waited`]).
    pub waited: HashMap<String, String>,
}

/// What a heartbeat kept.
#[derive(Debug)]
pub struct Heartbeat {
    /// Still held, renewed until `lease_expires` (store ids).
    pub held: Vec<String>,
    /// Cancelled while the worker ran them (store ids): archived as
    /// `cancelled`; the worker stops them, and their finish is refused.
    pub cancelled: Vec<String>,
    /// No longer held (store ids).
    pub lost: Vec<String>,
    /// When the renewed leases run out.
    pub lease_expires: Millis,
}

/// One finished job of a remote worker.
#[derive(Debug)]
pub struct RemoteResult {
    /// The store id.
    pub id: String,
    /// How its run ended, with the jobs it asked for in `children`.
    pub outcome: Outcome,
}

/// What a finish did.
#[derive(Debug)]
pub struct FinishReport {
    /// Results stored (store ids).
    pub finished: Vec<String>,
    /// Not held under the lease any more: their results were refused.
    pub lost: Vec<String>,
    /// Store ids of the new jobs, in order.
    pub created: Vec<String>,
    /// New jobs dropped: the place of the finished job among the results
    /// (from 1), and which of its new jobs and why.
    pub dropped: Vec<(usize, Dropped)>,
}

impl Executor {
    /// Hands out up to `max` jobs of the request's jobtypes under its
    /// lease, waiting up to `wait` for work to arrive. Subject to the same
    /// caps as the daemon's own runners.
    pub async fn fetch(&self, req: FetchRequest) -> Result<Fetched, RemoteError> {
        let core = &self.core;
        if core.claim_gate(now_millis()) == Err(Closed::Sysid) {
            return Err(RemoteError::NoSysid);
        }
        core.registry
            .seen(req.client.as_str(), &req.worker, now_millis());
        // Listen before the first look, so an add between the look and the
        // wait still wakes us.
        let mut notices = core.notices.listen();
        // Caps and limits as the store has them now (a no-op within the
        // cache's TTL): a daemon that runs nothing itself reads them here.
        core.handlers.refresh(&*core.store, &core.sched).await?;
        let deadline = Instant::now() + req.wait;
        let mut limits_of: HashMap<String, Limits> = HashMap::new();
        let mut jobs: Vec<Job> = Vec::new();
        loop {
            for jt in &req.jobtypes {
                let want = req.max - jobs.len() as u32;
                if want == 0 || core.claim_gate(now_millis()).is_err() {
                    break;
                }
                // A store error after some jobs were claimed hands those
                // out (they hold slots and leases); with none, it is the
                // answer.
                let claimed = async {
                    if !limits_of.contains_key(jt) {
                        let handler = core.handlers.get(&*core.store, &core.sched, jt).await?;
                        limits_of.insert(jt.clone(), core.limits(handler.as_ref()));
                    }
                    let grant = core.sched().admit(jt, want, now_millis());
                    let Some(grant) = grant else {
                        return Ok(Vec::new());
                    };
                    let count = grant.count;
                    core.claim(grant, count, &req.owner, req.lease, By::Worker(&req.worker))
                        .await
                }
                .await;
                match claimed {
                    Ok(got) => jobs.extend(got),
                    Err(e) if jobs.is_empty() => return Err(e.into()),
                    Err(e) => {
                        tracing::warn!(error = %e, "fetch: handing out the jobs claimed before the error");
                        break;
                    }
                }
            }
            if !jobs.is_empty() {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            // Wait for a notice about one of our jobtypes (or "anything"),
            // at most a second: jobs also become due by time alone.
            let until = deadline.min(now + Duration::from_secs(1));
            while let Ok(n) = tokio::time::timeout_at(until, notices.next()).await {
                match n {
                    Notice::Anything => break,
                    Notice::Jobtype(jt) if req.jobtypes.contains(&jt) => break,
                    Notice::Jobtype(_) => {}
                }
            }
        }
        // Jobs cancelled before this claim (their holder's lease ran out)
        // are archived as cancelled, not handed out.
        if jobs.iter().any(|j| j.cancel_requested) {
            let (marked, kept): (Vec<Job>, Vec<Job>) =
                jobs.into_iter().partition(|j| j.cancel_requested);
            jobs = kept;
            let batch = marked
                .iter()
                .map(|j| Completion {
                    id: j.id.clone(),
                    how: policy::cancelled(b""),
                    children: Vec::new(),
                    outcome: "cancelled",
                    ran: None,
                    meta: core.events.on().map(|_| {
                        Box::new(EventMeta {
                            jobtype: j.jobtype.clone(),
                            attempt: j.attempts,
                            trace: trace_of_job(j).map(str::to_owned),
                            status: None,
                        })
                    }),
                })
                .collect();
            let by = By::Worker(&req.worker);
            if let Err(e) = completer::complete(core, &req.owner, batch, Patience::Once, by).await {
                tracing::warn!(error = %e, "fetch: cannot archive cancelled jobs; they are claimed again after their lease");
            }
            let now = now_millis();
            let mut sched = core.sched();
            for j in &marked {
                sched.jobs_stopped(&j.jobtype, 1, now);
            }
        }
        let now = now_millis();
        let client = req.client.as_str();
        let mut traces = Vec::with_capacity(jobs.len());
        let replaced = core.registry.handed_out(
            client,
            &req.worker,
            jobs.iter()
                .map(|j| {
                    let run = core.events.on().map(|ev| Box::new(ev.run_start(j)));
                    let trace = crate::trace::run_trace(j, run.as_deref());
                    traces.push(trace.clone());
                    (
                        j.id.clone(),
                        RemoteJob {
                            jobtype: j.jobtype.clone(),
                            owner: req.owner.clone(),
                            worker: (client.to_owned(), req.worker.clone()),
                            expires: j.dt,
                            attempt: j.attempts,
                            created: j.create_dt,
                            claimed: Some(now),
                            repeat: policy::Repeating::of(j, now),
                            trace,
                            limits: limits_of
                                .get(&j.jobtype)
                                .copied()
                                .unwrap_or(core.settings.limits),
                            run,
                        },
                    )
                })
                .collect(),
            now,
        );
        {
            let mut sched = core.sched();
            for jobtype in replaced {
                sched.jobs_stopped(&jobtype, 1, now);
            }
        }
        let waited = super::waited::messages(&*core.store, &jobs).await;
        Ok(Fetched {
            lease_expires: jobs.first().map_or(now + duration_ms(req.lease), |j| j.dt),
            jobs,
            traces,
            waited,
        })
    }

    /// Renews the leases of `ids` (store ids) held under `owner`.
    pub async fn heartbeat(
        &self,
        client: &Client,
        worker: &str,
        owner: &str,
        ids: &[String],
        lease: Duration,
    ) -> Result<Heartbeat, RemoteError> {
        let core = &self.core;
        let now = now_millis();
        let renewal = core.store.renew_locks(ids, owner, lease, now).await?;
        let expires = now + duration_ms(lease);
        let cancelled = self
            .archive_cancelled(worker, owner, &renewal.cancelled)
            .await?;
        let gone: HashSet<&str> = cancelled.iter().map(String::as_str).collect();
        let renewed: Vec<String> = renewal
            .renewed
            .into_iter()
            .filter(|id| !gone.contains(id.as_str()))
            .collect();
        core.registry.renewed(&renewed, expires);
        let kept: HashSet<&str> = renewed.iter().map(String::as_str).collect();
        let lost: Vec<String> = ids
            .iter()
            .filter(|id| !kept.contains(id.as_str()) && !gone.contains(id.as_str()))
            .cloned()
            .collect();
        self.settle(&lost, false, now);
        if renewed.is_empty() && cancelled.is_empty() {
            return Err(RemoteError::NotHeld);
        }
        // Only a worker that holds something is recorded as seen.
        core.registry.seen(client.as_str(), worker, now);
        Ok(Heartbeat {
            held: renewed,
            cancelled,
            lost,
            lease_expires: expires,
        })
    }

    /// Stores the results of jobs held under `owner`, after the jobs they
    /// asked for are durable, in one release.
    pub async fn finish(
        &self,
        client: &Client,
        worker: &str,
        owner: &str,
        results: Vec<RemoteResult>,
    ) -> Result<FinishReport, RemoteError> {
        let core = &self.core;
        let now = now_millis();
        let known = self.hand_outs(client, worker, &results).await?;
        let delete_ok = core.settings.retention == Some(Duration::ZERO);
        let mut batch = Vec::with_capacity(results.len());
        let mut created = Vec::new();
        let mut dropped = Vec::new();
        let ids: Vec<String> = results.iter().map(|r| r.id.clone()).collect();
        let mut runs = Vec::new();
        for (i, mut r) in results.into_iter().enumerate() {
            let trace = known.get(&r.id).and_then(|j| j.trace.as_ref());
            let (children, lost) =
                policy::follow_on_jobs(client, &mut r.outcome, core.max_payload, core.tags, trace);
            dropped.extend(lost.into_iter().map(|d| (i + 1, d)));
            created.extend(children.iter().map(|c| c.id.clone()));
            let (attempt, created_at, limits) = known
                .get(&r.id)
                .map_or((1, now, core.settings.limits), |j| {
                    (j.attempt, j.created, j.limits)
                });
            let ran = known
                .get(&r.id)
                .and_then(|j| Some((j.jobtype.clone(), j.claimed?)));
            let repeat = known.get(&r.id).and_then(|j| j.repeat.as_deref());
            let (how, outcome) = policy::settle(
                &mut r.outcome,
                &limits,
                attempt,
                created_at,
                now,
                delete_ok,
                repeat.map(|rp| (rp, core.max_payload)),
            );
            let meta = match (core.events.on(), known.get(&r.id)) {
                (Some(_), Some(j)) => {
                    let run = j.run.as_deref();
                    if let Some(run) = run {
                        runs.push((
                            r.id.clone(),
                            j.jobtype.clone(),
                            attempt,
                            run.clone(),
                            r.outcome.status,
                            outcome,
                        ));
                    }
                    Some(Box::new(EventMeta {
                        jobtype: j.jobtype.clone(),
                        attempt,
                        trace: run.and_then(|r| r.trace.clone()),
                        status: Some(r.outcome.status),
                    }))
                }
                _ => None,
            };
            batch.push(Completion {
                id: r.id,
                how,
                children,
                outcome,
                ran,
                meta,
            });
        }
        if let Some(ev) = core.events.on() {
            ev.finished(
                runs.iter()
                    .map(|(id, jobtype, attempt, run, status, outcome)| {
                        (run.job(id, jobtype, *attempt), run.end(*status, outcome))
                    }),
                By::Worker(worker),
            );
        }
        let released =
            completer::complete(core, owner, batch, Patience::Once, By::Worker(worker)).await?;
        self.settle(&ids, true, now);
        if released.is_empty() {
            return Err(RemoteError::NotHeld);
        }
        core.registry.seen(client.as_str(), worker, now);
        let done: HashSet<&str> = released.iter().map(String::as_str).collect();
        let lost = ids
            .iter()
            .filter(|id| !done.contains(id.as_str()))
            .cloned()
            .collect();
        Ok(FinishReport {
            finished: released,
            lost,
            created,
            dropped,
        })
    }

    /// Replaces the payload of job `id` (a store id) held under `owner`.
    pub async fn update(
        &self,
        client: &Client,
        worker: &str,
        owner: &str,
        id: &str,
        data: &[u8],
    ) -> Result<(), RemoteError> {
        let core = &self.core;
        if core
            .store
            .update_data(id, owner, data, now_millis())
            .await?
        {
            core.registry.seen(client.as_str(), worker, now_millis());
            Ok(())
        } else {
            Err(RemoteError::NotHeld)
        }
    }

    /// The hand-out of each job (attempt, age, limits): from the registry,
    /// or, for a job handed out by another daemon, from the store and its
    /// handler.
    async fn hand_outs(
        &self,
        client: &Client,
        worker: &str,
        results: &[RemoteResult],
    ) -> Result<HashMap<String, RemoteJob>, RemoteError> {
        let core = &self.core;
        let mut known = HashMap::with_capacity(results.len());
        for r in results {
            if let Some(j) = core.registry.job(&r.id) {
                known.insert(r.id.clone(), j);
            } else if let Some(job) = core.store.get_job(&r.id).await? {
                let handler = core
                    .handlers
                    .get(&*core.store, &core.sched, &job.jobtype)
                    .await?;
                // Handed out by another daemon, or before a restart: its
                // last claim in its history.
                let claimed = job.history.iter().rev().find_map(|e| {
                    matches!(e.what, jobstore_api::EventKind::Claimed).then_some(e.at)
                });
                // Its run's span, if any, was another daemon's.
                let run = core.events.on().map(|_| {
                    Box::new(RunStart {
                        began: claimed.map_or_else(SystemTime::now, |ms| {
                            SystemTime::UNIX_EPOCH + duration_of_ms(ms)
                        }),
                        trace: trace_of_job(&job).map(str::to_owned),
                        run: None,
                    })
                });
                // Its due time is not kept past its claim: a SCHEDULED
                // rule counts from the claim.
                let repeat = policy::Repeating::of(&job, claimed.unwrap_or_else(now_millis));
                known.insert(
                    r.id.clone(),
                    RemoteJob {
                        limits: core.limits(handler.as_ref()),
                        trace: crate::trace::run_trace(&job, None),
                        jobtype: job.jobtype,
                        owner: job.lock,
                        worker: (client.to_string(), worker.to_owned()),
                        expires: job.dt,
                        attempt: job.attempts,
                        created: job.create_dt,
                        repeat,
                        claimed,
                        run,
                    },
                );
            }
        }
        Ok(known)
    }

    /// Archives as `cancelled` the jobs of `ids` held under `owner` (the
    /// store marked them), in one release, and gives their slots back;
    /// returns the ids archived.
    async fn archive_cancelled(
        &self,
        worker: &str,
        owner: &str,
        ids: &[String],
    ) -> Result<Vec<String>, RemoteError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let core = &self.core;
        let batch = ids
            .iter()
            .map(|id| Completion {
                id: id.clone(),
                how: policy::cancelled(b""),
                children: Vec::new(),
                outcome: "cancelled",
                ran: None,
                meta: core.events.on().and_then(|_| {
                    let j = core.registry.job(id)?;
                    Some(Box::new(EventMeta {
                        trace: j.run.and_then(|r| r.trace),
                        jobtype: j.jobtype,
                        attempt: j.attempt,
                        status: None,
                    }))
                }),
            })
            .collect();
        let done =
            completer::complete(core, owner, batch, Patience::Once, By::Worker(worker)).await?;
        self.settle(&done, true, now_millis());
        Ok(done)
    }

    /// Jobs left their worker: their slots are given back.
    fn settle(&self, ids: &[String], finished: bool, now: Millis) {
        let gone = self.core.registry.settle(ids, finished);
        let mut sched = self.core.sched();
        for jobtype in gone {
            sched.jobs_stopped(&jobtype, 1, now);
        }
    }
}

/// `ms` (epoch milliseconds, not negative) as a duration.
fn duration_of_ms(ms: Millis) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}
