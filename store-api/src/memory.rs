//! [`MemoryStore`]: the reference implementation of the contract.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::broadcast;

use crate::error::{Error, Result};
use crate::flow::{
    DependencyFailure, Duplicate, EdgeState, FlowState, OnConflict, Refusal, Unique, WaitEdge,
    Waits,
};
use crate::history::{EventKind, JobEvent};
use crate::limits::DEFAULT_POLL_INTERVAL;
use crate::manage::*;
use crate::schedule::{Schedule, ScheduleAdvance, ScheduleRecord};
use crate::stats::{Durations, StatsBucket, StatsDelta, StatsQuery, StatsResolution};
use crate::store::JobStore;
use crate::types::*;
use crate::validate;
use crate::watch::{WorkNotice, WorkWatcher};

/// An in-process store, kept in a mutex. It is the executable spec: every
/// method is the contract written as plain code, with no attention to speed
/// (claims scan every job). Useful for tests and single-process tools;
/// nothing survives the process.
#[derive(Debug)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
    notices: broadcast::Sender<WorkNotice>,
}

#[derive(Debug, Default)]
struct Inner {
    jobs: HashMap<String, Job>,
    /// Per jobtype, versions in the order they were set.
    handlers: BTreeMap<String, Vec<HandlerVersion>>,
    sysids: HashMap<String, SysidLease>,
    paused: std::collections::BTreeSet<String>,
    /// Stats buckets by (resolution, jobtype, start).
    stats: BTreeMap<(StatsResolution, String, Millis), (Durations, Durations)>,
    next_version: u64,
    schedules: BTreeMap<String, ScheduleRecord>,
    /// Per waiter, its dependencies by target id and how each stands.
    waits: HashMap<String, BTreeMap<String, EdgeState>>,
    /// Per dependency, the waiters whose edge to it is open (pending or held).
    waiters: HashMap<String, std::collections::BTreeSet<String>>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// The largest payload a `MemoryStore` accepts: 64 MiB.
    pub const MAX_PAYLOAD: usize = 64 << 20;

    /// An empty store.
    pub fn new() -> Self {
        MemoryStore {
            inner: Mutex::new(Inner::default()),
            notices: broadcast::channel(1024).0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a job half-changed:
        // every change below is a single assignment of whole values.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn notify(&self, jobtype: &str) {
        // No receivers is fine: nobody is waiting.
        let _ = self.notices.send(jobtype.to_owned());
    }
}

#[async_trait]
impl JobStore for MemoryStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(Self::MAX_PAYLOAD)
            .with_notifications()
            .with_management()
            .with_tags_and_history()
            .with_stats()
            .with_trace()
            .with_schedules()
            .with_unique_jobs()
            .with_repeat()
            .with_dependencies()
    }

    async fn add_jobs(&self, jobs: &[NewJob], now: Millis) -> Result<AddOutcome> {
        validate::new_jobs(jobs, &self.capabilities(), now)?;
        let mut outcome = AddOutcome::default();
        let mut inner = self.lock();
        // Jobs of this call are not yet jobs a dependency may name.
        let mut added_now = std::collections::HashSet::new();
        for job in jobs {
            if inner.jobs.contains_key(&job.id) {
                outcome.existing.push(job.id.clone());
                continue;
            }
            if let Some(u) = job.unique_key()
                && let Some(holder) = key_holder(&inner, &job.jobtype, u, now)
            {
                let holder = inner.jobs.get_mut(&holder).expect("holder exists");
                let replaced = u.on_conflict == OnConflict::ReplaceData && holder.lock == LOCK_FREE;
                if replaced {
                    holder.data = job.data.clone();
                    record(holder, now, "", EventKind::Edited);
                }
                outcome.duplicates.push(Duplicate {
                    id: job.id.clone(),
                    existing: holder.id.clone(),
                    replaced,
                });
                continue;
            }
            let deps = job.dependencies();
            if let Some((i, dep)) = deps
                .iter()
                .enumerate()
                .find(|(_, d)| added_now.contains(d.as_str()) || !inner.jobs.contains_key(*d))
            {
                outcome
                    .refused
                    .push(Refusal::unknown_dependency(&job.id, i, dep));
                continue;
            }
            added_now.insert(job.id.as_str());
            inner.jobs.insert(
                job.id.clone(),
                Job {
                    id: job.id.clone(),
                    jobtype: job.jobtype.clone(),
                    data: job.data.clone(),
                    priority: job.priority,
                    dt: job.run_at.unwrap_or(now),
                    lock: LOCK_FREE.to_owned(),
                    attempts: 0,
                    create_dt: now,
                    done_dt: None,
                    result: None,
                    cancel_requested: false,
                    tags: job.tags.clone(),
                    history: vec![JobEvent::new(now, "", 0, EventKind::Added)],
                    claimed_due: None,
                    trace: job.trace.clone(),
                    flow: job.flow.as_deref().and_then(FlowState::of),
                },
            );
            if !deps.is_empty() {
                link(&mut inner, &job.id, deps, now);
            }
            outcome.new.push(job.id.clone());
        }
        drop(inner);
        let mut notified: Vec<&str> = jobs.iter().map(|j| j.jobtype.as_str()).collect();
        notified.sort_unstable();
        notified.dedup();
        notified.into_iter().for_each(|jt| self.notify(jt));
        Ok(outcome)
    }

    async fn waiting_jobtypes(&self, now: Millis) -> Result<Vec<WaitingJobtype>> {
        validate::time("now", now)?;
        let inner = self.lock();
        let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
        for job in inner
            .jobs
            .values()
            .filter(|j| j.is_eligible(now) && !inner.paused.contains(&j.jobtype))
        {
            *counts.entry(&job.jobtype).or_default() += 1;
        }
        Ok(counts
            .into_iter()
            .map(|(jobtype, count)| WaitingJobtype {
                jobtype: jobtype.to_owned(),
                count,
            })
            .collect())
    }

    async fn claim_jobs(
        &self,
        jobtype: &str,
        limit: usize,
        owner: &str,
        lease: Duration,
        now: Millis,
    ) -> Result<Vec<Job>> {
        validate::claim(jobtype, limit, owner, lease, now)?;
        let mut inner = self.lock();
        if inner.paused.contains(jobtype) {
            return Ok(Vec::new());
        }
        let mut eligible: Vec<&Job> = inner
            .jobs
            .values()
            .filter(|j| j.jobtype == jobtype && j.is_eligible(now))
            .collect();
        eligible.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then(a.dt.cmp(&b.dt))
                .then(a.id.cmp(&b.id))
        });
        let picked: Vec<String> = eligible
            .into_iter()
            .take(limit)
            .map(|j| j.id.clone())
            .collect();
        let mut claimed = Vec::with_capacity(picked.len());
        for id in picked {
            let job = inner.jobs.get_mut(&id).expect("picked from the map");
            let due = job.dt;
            job.lock = owner.to_owned();
            job.dt = now + duration_ms(lease);
            job.attempts += 1;
            record(job, now, owner, EventKind::Claimed);
            claimed.push(Job {
                claimed_due: Some(due),
                ..job.clone()
            });
        }
        Ok(claimed)
    }

    async fn renew_locks(
        &self,
        ids: &[String],
        owner: &str,
        lease: Duration,
        now: Millis,
    ) -> Result<Renewal> {
        validate::renew(ids, owner, lease, now)?;
        let mut inner = self.lock();
        let mut renewal = Renewal::default();
        for id in ids {
            if let Some(job) = inner.jobs.get_mut(id).filter(|j| j.lock == owner) {
                job.dt = now + duration_ms(lease);
                renewal.renewed.push(id.clone());
                if job.cancel_requested {
                    renewal.cancelled.push(id.clone());
                }
            }
        }
        Ok(renewal)
    }

    async fn release_jobs(
        &self,
        releases: &[JobRelease],
        owner: &str,
        now: Millis,
    ) -> Result<Vec<String>> {
        validate::release(releases, owner, now, &self.capabilities())?;
        let mut inner = self.lock();
        let mut released = Vec::new();
        let mut freed_jobtypes = Vec::new();
        let mut ended = Vec::new();
        for JobRelease { id, how, status } in releases {
            let Some(job) = inner.jobs.get_mut(id).filter(|j| j.lock == owner) else {
                continue;
            };
            job.cancel_requested = false;
            match how {
                Release::Retry { delay } => {
                    job.lock = LOCK_FREE.to_owned();
                    job.dt = now + duration_ms(*delay);
                    let delay_ms = duration_ms(*delay) as u64;
                    let what = EventKind::Retried {
                        delay_ms,
                        status: *status,
                    };
                    record(job, now, owner, what);
                    freed_jobtypes.push(job.jobtype.clone());
                }
                Release::Unget => {
                    job.lock = LOCK_FREE.to_owned();
                    job.dt = now;
                    job.attempts = job.attempts.saturating_sub(1);
                    record(job, now, owner, EventKind::HandedBack);
                    freed_jobtypes.push(job.jobtype.clone());
                }
                Release::Archive(result) => {
                    job.lock = LOCK_DONE.to_owned();
                    job.done_dt = Some(now);
                    job.result = Some(result.clone());
                    job.dt = now + ARCHIVE_HORIZON_MS;
                    let what = EventKind::Archived {
                        code: result.code,
                        status: result.status,
                    };
                    record(job, now, owner, what);
                    ended.push((id.clone(), result.code, result.status));
                }
                Release::Delete => {
                    inner.jobs.remove(id);
                    forget_waiter(&mut inner, id);
                    ended.push((id.clone(), ResultCode::Cancelled, 0));
                }
                Release::Repeat { at, result, data } => {
                    let what = EventKind::Repeated {
                        code: result.code,
                        status: result.status,
                        next_ms: *at,
                    };
                    record(job, now, owner, what);
                    job.lock = LOCK_FREE.to_owned();
                    job.dt = *at;
                    job.attempts = 0;
                    job.result = Some(result.clone());
                    if let Some(data) = data {
                        job.data = data.clone();
                    }
                    freed_jobtypes.push(job.jobtype.clone());
                }
            }
            released.push(id.clone());
        }
        for (id, code, status) in ended {
            end_edges(&mut inner, &id, code, status, now, &mut freed_jobtypes);
        }
        drop(inner);
        freed_jobtypes.sort_unstable();
        freed_jobtypes.dedup();
        freed_jobtypes.iter().for_each(|jt| self.notify(jt));
        Ok(released)
    }

    async fn update_data(&self, id: &str, owner: &str, data: &[u8], now: Millis) -> Result<bool> {
        validate::update_data(id, owner, data, &self.capabilities(), now)?;
        let mut inner = self.lock();
        match inner.jobs.get_mut(id).filter(|j| j.lock == owner) {
            Some(job) => {
                job.data = data.to_vec();
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn cancel_jobs(&self, ids: &[String], now: Millis) -> Result<CancelOutcome> {
        validate::cancel(ids, now)?;
        let mut inner = self.lock();
        let mut outcome = CancelOutcome::default();
        let mut woken = Vec::new();
        for id in ids {
            let Some(job) = inner.jobs.get_mut(id) else {
                continue;
            };
            if job.lock == LOCK_FREE || job.lock == LOCK_BLOCKED {
                job.lock = LOCK_DONE.to_owned();
                job.done_dt = Some(now);
                job.result = Some(JobResult::cancelled());
                job.dt = now + ARCHIVE_HORIZON_MS;
                record(job, now, "", EventKind::Cancelled);
                outcome.cancelled.push(id.clone());
                end_edges(&mut inner, id, ResultCode::Cancelled, 0, now, &mut woken);
            } else if is_locked(&job.lock) {
                job.cancel_requested = true;
                record(job, now, "", EventKind::CancelRequested);
                outcome.marked.push(id.clone());
            }
        }
        drop(inner);
        woken.sort_unstable();
        woken.dedup();
        woken.iter().for_each(|jt| self.notify(jt));
        Ok(outcome)
    }

    async fn get_job(&self, id: &str) -> Result<Option<Job>> {
        validate::id(id)?;
        Ok(self.lock().jobs.get(id).cloned())
    }

    async fn get_jobs(&self, ids: &[String]) -> Result<Vec<Job>> {
        validate::ids(ids)?;
        let inner = self.lock();
        Ok(ids
            .iter()
            .filter_map(|id| inner.jobs.get(id).cloned())
            .collect())
    }

    async fn purge_archived(&self, before: Millis, codes: &[ResultCode]) -> Result<u64> {
        validate::time("before", before)?;
        let mut inner = self.lock();
        let n = inner.jobs.len();
        let mut purged = Vec::new();
        inner.jobs.retain(|id, j| {
            let gone = j.lock == LOCK_DONE
                && j.done_dt.is_some_and(|d| d < before)
                && codes.contains(&result_code(j));
            if gone {
                purged.push(id.clone());
            }
            !gone
        });
        for id in &purged {
            forget_waiter(&mut inner, id);
            inner.waiters.remove(id);
        }
        Ok((n - inner.jobs.len()) as u64)
    }

    async fn job_counts(&self, now: Millis) -> Result<Vec<JobCounts>> {
        validate::time("now", now)?;
        let inner = self.lock();
        let mut by_type: BTreeMap<&str, JobCounts> = BTreeMap::new();
        for job in inner.jobs.values() {
            let c = by_type.entry(&job.jobtype).or_insert_with(|| JobCounts {
                jobtype: job.jobtype.clone(),
                ..JobCounts::default()
            });
            match job.state(now) {
                JobState::Waiting | JobState::Expired => c.waiting += 1,
                JobState::Scheduled => c.scheduled += 1,
                JobState::Running => c.running += 1,
                JobState::Blocked => c.blocked += 1,
                JobState::Archived => {
                    *c.archived.entry(result_code(job)).or_default() += 1;
                }
            }
        }
        Ok(by_type.into_values().collect())
    }

    async fn list_jobs(&self, query: &JobQuery, now: Millis) -> Result<JobPage> {
        validate::job_query(query, now)?;
        let inner = self.lock();
        let mut jobs: Vec<&Job> = inner
            .jobs
            .values()
            .filter(|j| query.matches(j, now) && query.after_cursor(j))
            .collect();
        jobs.sort_by(|a, b| query.compare(&query.key_of(a), &query.key_of(b)));
        jobs.truncate(query.limit + 1);
        let jobs = jobs.into_iter().cloned().collect();
        Ok(JobPage::from_sorted(query, jobs))
    }

    async fn rerun_jobs(
        &self,
        ids: &[String],
        delay: Duration,
        now: Millis,
    ) -> Result<Vec<String>> {
        validate::rerun(ids, delay, now)?;
        let mut inner = self.lock();
        let mut rerun = Vec::new();
        let mut jobtypes = Vec::new();
        for id in ids {
            let Some(job) = inner.jobs.get(id).filter(|j| j.lock == LOCK_DONE) else {
                continue;
            };
            if let Some(key) = stored_key(job) {
                let held = inner.jobs.values().any(|j| {
                    j.lock != LOCK_DONE && j.jobtype == job.jobtype && stored_key(j) == Some(key)
                });
                if held {
                    continue;
                }
            }
            if let Some(job) = inner.jobs.get_mut(id) {
                job.lock = LOCK_FREE.to_owned();
                job.dt = now + duration_ms(delay);
                job.attempts = 0;
                job.done_dt = None;
                let delay_ms = duration_ms(delay) as u64;
                record(job, now, "", EventKind::Rerun { delay_ms });
                rerun.push(id.clone());
                jobtypes.push(job.jobtype.clone());
            }
        }
        drop(inner);
        jobtypes.sort_unstable();
        jobtypes.dedup();
        jobtypes.iter().for_each(|jt| self.notify(jt));
        Ok(rerun)
    }

    async fn delete_jobs(&self, ids: &[String], now: Millis) -> Result<DeleteOutcome> {
        validate::ids(ids)?;
        validate::time("now", now)?;
        let mut inner = self.lock();
        let mut outcome = DeleteOutcome::default();
        let mut woken = Vec::new();
        for id in ids {
            match inner.jobs.get(id) {
                None => {}
                Some(job) if is_locked(&job.lock) => outcome.running.push(id.clone()),
                Some(job) => {
                    let live = job.lock != LOCK_DONE;
                    inner.jobs.remove(id);
                    forget_waiter(&mut inner, id);
                    if live {
                        end_edges(&mut inner, id, ResultCode::Cancelled, 0, now, &mut woken);
                    }
                    // Edges held on it stay held for good (rerun is gone).
                    inner.waiters.remove(id);
                    outcome.deleted.push(id.clone());
                }
            }
        }
        drop(inner);
        woken.sort_unstable();
        woken.dedup();
        woken.iter().for_each(|jt| self.notify(jt));
        Ok(outcome)
    }

    async fn edit_jobs(&self, edits: &[JobEdit], now: Millis) -> Result<Vec<String>> {
        validate::edits(edits, &self.capabilities(), now)?;
        let mut inner = self.lock();
        let mut edited = Vec::new();
        let mut due = Vec::new();
        for edit in edits {
            let Some(job) = inner
                .jobs
                .get_mut(&edit.id)
                .filter(|j| j.lock == LOCK_FREE || j.lock == LOCK_BLOCKED)
            else {
                continue;
            };
            if let Some(p) = edit.priority {
                job.priority = p;
            }
            if let Some(dt) = edit.run_at {
                job.dt = dt;
            }
            if let Some(data) = &edit.data {
                job.data = data.clone();
            }
            record(job, now, "", EventKind::Edited);
            if job.dt <= now && job.lock == LOCK_FREE {
                due.push(job.jobtype.clone());
            }
            edited.push(edit.id.clone());
        }
        drop(inner);
        due.sort_unstable();
        due.dedup();
        due.iter().for_each(|jt| self.notify(jt));
        Ok(edited)
    }

    async fn unblock_jobs(&self, ids: &[String], now: Millis) -> Result<Vec<String>> {
        validate::cancel(ids, now)?;
        let mut inner = self.lock();
        let mut unblocked = Vec::new();
        let mut woken = Vec::new();
        for id in ids {
            if inner.jobs.get(id).is_none_or(|j| j.lock != LOCK_BLOCKED) {
                continue;
            }
            let mut open = Vec::new();
            if let Some(edges) = inner.waits.get_mut(id) {
                for (target, state) in edges.iter_mut().filter(|(_, s)| s.is_open()) {
                    *state = EdgeState::Skipped;
                    open.push(target.clone());
                }
            }
            for target in open {
                if let Some(ws) = inner.waiters.get_mut(&target) {
                    ws.remove(id);
                    if ws.is_empty() {
                        inner.waiters.remove(&target);
                    }
                }
            }
            let job = inner.jobs.get_mut(id).expect("checked above");
            job.flow.get_or_insert_with(Default::default).pending = 0;
            job.lock = LOCK_FREE.to_owned();
            job.dt = job.dt.max(now);
            record(job, now, "", EventKind::Unblocked);
            woken.push(job.jobtype.clone());
            unblocked.push(id.clone());
        }
        drop(inner);
        woken.sort_unstable();
        woken.dedup();
        woken.iter().for_each(|jt| self.notify(jt));
        Ok(unblocked)
    }

    async fn job_waits(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<Waits>> {
        validate::waits(id, after, limit)?;
        let inner = self.lock();
        if !inner.jobs.contains_key(id) {
            return Ok(None);
        }
        let edges = inner.waits.get(id).into_iter().flatten();
        let edges = edges.map(|(target, state)| WaitEdge {
            target: target.clone(),
            state: *state,
        });
        Ok(Some(Waits::page(id, edges, after, limit)))
    }

    async fn pause_jobtype(&self, jobtype: &str, paused: bool, now: Millis) -> Result<bool> {
        validate::pause(jobtype, now)?;
        let mut inner = self.lock();
        let changed = if paused {
            inner.paused.insert(jobtype.to_owned())
        } else {
            inner.paused.remove(jobtype)
        };
        drop(inner);
        if changed && !paused {
            self.notify(jobtype);
        }
        Ok(changed)
    }

    async fn paused_jobtypes(&self) -> Result<Vec<String>> {
        Ok(self.lock().paused.iter().cloned().collect())
    }

    async fn add_stats(&self, deltas: &[StatsDelta], now: Millis) -> Result<()> {
        validate::stats_deltas(deltas, now)?;
        let mut inner = self.lock();
        for d in deltas {
            for res in [StatsResolution::Minute, StatsResolution::Day] {
                let start = res.start_of(d.minute);
                if start < res.oldest_kept(now) {
                    continue;
                }
                let (wait, run) = inner
                    .stats
                    .entry((res, d.jobtype.clone(), start))
                    .or_default();
                wait.merge(&d.wait);
                run.merge(&d.run);
            }
        }
        inner
            .stats
            .retain(|(res, _, start), _| *start >= res.oldest_kept(now));
        Ok(())
    }

    async fn job_stats(&self, query: &StatsQuery, now: Millis) -> Result<Vec<StatsBucket>> {
        validate::stats_query(query, now)?;
        let oldest = query.resolution.oldest_kept(now);
        Ok(self
            .lock()
            .stats
            .iter()
            .filter(|((res, jobtype, start), _)| {
                *res == query.resolution && *start >= oldest && query.jobtypes.matches(jobtype)
            })
            .map(|((_, jobtype, start), (wait, run))| StatsBucket {
                jobtype: jobtype.clone(),
                start: *start,
                wait: wait.clone(),
                run: run.clone(),
            })
            .collect())
    }

    async fn watch(&self) -> Result<WorkWatcher> {
        Ok(WorkWatcher::notified(
            self.notices.subscribe(),
            DEFAULT_POLL_INTERVAL,
            None,
        ))
    }

    async fn set_handler(
        &self,
        jobtype: &str,
        handler: &Handler,
        now: Millis,
    ) -> Result<HandlerVersion> {
        validate::handler(jobtype, handler, now)?;
        let mut inner = self.lock();
        inner.next_version += 1;
        let version = HandlerVersion {
            id: format!("v{}", inner.next_version),
            jobtype: jobtype.to_owned(),
            dt: now,
            handler: handler.clone(),
        };
        inner
            .handlers
            .entry(jobtype.to_owned())
            .or_default()
            .push(version.clone());
        Ok(version)
    }

    async fn get_handler(&self, jobtype: &str) -> Result<Option<HandlerVersion>> {
        validate::jobtype(jobtype)?;
        Ok(self
            .lock()
            .handlers
            .get(jobtype)
            .and_then(|v| newest(v))
            .cloned())
    }

    async fn delete_handler(&self, jobtype: &str) -> Result<bool> {
        validate::jobtype(jobtype)?;
        Ok(self.lock().handlers.remove(jobtype).is_some())
    }

    async fn list_handlers(&self) -> Result<Vec<HandlerVersion>> {
        Ok(self
            .lock()
            .handlers
            .values()
            .filter_map(|v| newest(v))
            .cloned()
            .collect())
    }

    async fn set_schedule(
        &self,
        s: &Schedule,
        next_due: Option<Millis>,
        now: Millis,
    ) -> Result<ScheduleRecord> {
        validate::schedule(s, next_due, &self.capabilities(), now)?;
        let mut inner = self.lock();
        let rec = match inner.schedules.get(&s.name) {
            Some(old) => ScheduleRecord {
                schedule: s.clone(),
                version: old.version + 1,
                updated_dt: now,
                next_due,
                ..old.clone()
            },
            None => ScheduleRecord {
                schedule: s.clone(),
                version: 1,
                paused: false,
                created_dt: now,
                updated_dt: now,
                fired_through: None,
                last_job: None,
                next_due,
                fired: 0,
                skipped: 0,
            },
        };
        inner.schedules.insert(s.name.clone(), rec.clone());
        Ok(rec)
    }

    async fn get_schedule(&self, name: &str) -> Result<Option<ScheduleRecord>> {
        validate::schedule_name(name)?;
        Ok(self.lock().schedules.get(name).cloned())
    }

    async fn list_schedules(&self, prefix: &str) -> Result<Vec<ScheduleRecord>> {
        validate::schedule_prefix(prefix)?;
        Ok(self
            .lock()
            .schedules
            .range(prefix.to_owned()..)
            .take_while(|(name, _)| name.starts_with(prefix))
            .map(|(_, rec)| rec.clone())
            .collect())
    }

    async fn delete_schedule(&self, name: &str) -> Result<bool> {
        validate::schedule_name(name)?;
        Ok(self.lock().schedules.remove(name).is_some())
    }

    async fn pause_schedule(
        &self,
        name: &str,
        paused: bool,
        next_due: Option<Millis>,
        now: Millis,
    ) -> Result<bool> {
        validate::schedule_pause(name, next_due, now)?;
        let mut inner = self.lock();
        let Some(rec) = inner.schedules.get_mut(name).filter(|r| r.paused != paused) else {
            return Ok(false);
        };
        rec.paused = paused;
        rec.updated_dt = now;
        if !paused {
            rec.next_due = next_due;
        }
        Ok(true)
    }

    async fn due_schedules(&self, now: Millis, limit: usize) -> Result<Vec<ScheduleRecord>> {
        validate::due_schedules(now, limit)?;
        let inner = self.lock();
        let mut due: Vec<&ScheduleRecord> = inner
            .schedules
            .values()
            .filter(|r| !r.paused && r.next_due.is_some_and(|t| t <= now))
            .collect();
        due.sort_by(|a, b| (a.next_due, &a.schedule.name).cmp(&(b.next_due, &b.schedule.name)));
        Ok(due.into_iter().take(limit).cloned().collect())
    }

    async fn advance_schedule(
        &self,
        name: &str,
        version: u64,
        advance: &ScheduleAdvance,
        now: Millis,
    ) -> Result<bool> {
        validate::schedule_advance(name, version, advance, now)?;
        let mut inner = self.lock();
        match inner.schedules.get_mut(name) {
            Some(rec) if rec.version == version && advance.applies_after(rec.fired_through) => {
                advance.apply(rec);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn reserve_sysid(&self, sysid: &str, ttl: Duration, now: Millis) -> Result<SysidLease> {
        validate::sysid_lease(sysid, ttl, now)?;
        let mut inner = self.lock();
        if let Some(held) = inner.sysids.get(sysid).filter(|l| l.expires > now) {
            return Err(Error::conflict(format!(
                "sysid {sysid:?} is held until {}",
                held.expires
            )));
        }
        let lease = SysidLease {
            sysid: sysid.to_owned(),
            token: crate::new_token(),
            expires: now + duration_ms(ttl),
        };
        inner.sysids.insert(sysid.to_owned(), lease.clone());
        Ok(lease)
    }

    async fn renew_sysid(
        &self,
        lease: &SysidLease,
        ttl: Duration,
        now: Millis,
    ) -> Result<SysidLease> {
        validate::sysid_lease(&lease.sysid, ttl, now)?;
        let mut inner = self.lock();
        match inner
            .sysids
            .get_mut(&lease.sysid)
            .filter(|l| l.token == lease.token)
        {
            Some(held) => {
                held.expires = now + duration_ms(ttl);
                Ok(held.clone())
            }
            None => Err(Error::sysid_lost(&lease.sysid)),
        }
    }

    async fn release_sysid(&self, lease: &SysidLease) -> Result<bool> {
        validate::sysid(&lease.sysid)?;
        let mut inner = self.lock();
        if inner
            .sysids
            .get(&lease.sysid)
            .is_some_and(|l| l.token == lease.token)
        {
            inner.sysids.remove(&lease.sysid);
            return Ok(true);
        }
        Ok(false)
    }
}

/// Appends an event to the job's history (its attempts as they are now).
/// The job a new job with key `u` of `jobtype` is a duplicate of: the
/// live holder, else (with a window) the most recently archived job with
/// the key if that was inside the window.
fn key_holder(inner: &Inner, jobtype: &str, u: &Unique, now: Millis) -> Option<String> {
    let with_key = || {
        inner
            .jobs
            .values()
            .filter(move |j| j.jobtype == jobtype && stored_key(j) == Some(u.key.as_str()))
    };
    if let Some(live) = with_key().find(|j| j.lock != LOCK_DONE) {
        return Some(live.id.clone());
    }
    let since = now - duration_ms(u.window?);
    with_key()
        .filter_map(|j| Some((j.done_dt?, j)))
        .max_by(|(a, x), (b, y)| a.cmp(b).then_with(|| x.id.cmp(&y.id)))
        .filter(|(done, _)| *done > since)
        .map(|(_, j)| j.id.clone())
}

/// A stored job's unique key.
fn stored_key(job: &Job) -> Option<&str> {
    job.flow.as_ref()?.unique_key.as_deref()
}

fn record(job: &mut Job, now: Millis, by: &str, what: EventKind) {
    let event = JobEvent::new(now, by, job.attempts, what);
    crate::history::push_event(&mut job.history, event);
}

/// Registers the edges of new job `id` to `deps` (all stored) and sets
/// its state: archived `cancelled` when a dependency already ended other
/// than `ok` under the `Cancel` policy, blocked while any is live, free
/// otherwise.
fn link(inner: &mut Inner, id: &str, deps: &[String], now: Millis) {
    let mut edges = BTreeMap::new();
    let mut failed = None;
    for dep in deps {
        let target = &inner.jobs[dep];
        let state = if target.lock == LOCK_DONE {
            let (code, status) = target
                .result
                .as_ref()
                .map_or((ResultCode::Ok, 0), |r| (r.code, r.status));
            if code != ResultCode::Ok && failed.is_none() {
                failed = Some((dep.clone(), code));
            }
            let policy = inner.jobs[id]
                .flow
                .as_ref()
                .map_or_else(DependencyFailure::default, |f| f.on_dependency_failure);
            if code != ResultCode::Ok && policy == DependencyFailure::Hold {
                inner
                    .waiters
                    .entry(dep.clone())
                    .or_default()
                    .insert(id.to_owned());
                EdgeState::Held { code, status }
            } else {
                EdgeState::Done { code, status }
            }
        } else {
            inner
                .waiters
                .entry(dep.clone())
                .or_default()
                .insert(id.to_owned());
            EdgeState::Pending
        };
        edges.insert(dep.clone(), state);
    }
    let pending = edges.values().filter(|e| e.is_open()).count();
    inner.waits.insert(id.to_owned(), edges);
    let job = inner.jobs.get_mut(id).expect("just added");
    let flow = job.flow.get_or_insert_with(Default::default);
    flow.pending = pending as u32;
    let cancel = flow.on_dependency_failure == DependencyFailure::Cancel;
    match failed {
        Some((dep, code)) if cancel => cancel_for_dependency(job, &dep, code, now),
        _ if pending > 0 => job.lock = LOCK_BLOCKED.to_owned(),
        _ => {}
    }
}

/// Archives blocked (or new) job `job` as `cancelled` because its
/// dependency `dep` ended with `code`.
fn cancel_for_dependency(job: &mut Job, dep: &str, code: ResultCode, now: Millis) {
    let note = format!("[jobstore] dependency {dep} ended {code}\n");
    job.lock = LOCK_DONE.to_owned();
    job.done_dt = Some(now);
    job.result = Some(JobResult::cancelled().with_output(note.into_bytes()));
    job.dt = now + ARCHIVE_HORIZON_MS;
    record(job, now, "", EventKind::Cancelled);
}

/// Ends the open edges to `target`, which left the live states with
/// `code` and `status`, and applies what follows: blocked waiters under
/// `Cancel` whose dependency did not end `ok` are archived `cancelled`
/// (whose own edges end in turn), those under `Hold` keep the edge open
/// as held, the others are unblocked once no edge is open. The jobtypes
/// of unblocked jobs are pushed to `woken`.
fn end_edges(
    inner: &mut Inner,
    target: &str,
    code: ResultCode,
    status: u16,
    now: Millis,
    woken: &mut Vec<String>,
) {
    let mut queue = std::collections::VecDeque::from([(target.to_owned(), code, status)]);
    while let Some((t, code, status)) = queue.pop_front() {
        let Some(waiters) = inner.waiters.remove(&t) else {
            continue;
        };
        for w in waiters {
            let Some(job) = inner.jobs.get_mut(&w) else {
                continue;
            };
            let flow = job.flow.get_or_insert_with(Default::default);
            let hold = job.lock == LOCK_BLOCKED
                && code != ResultCode::Ok
                && flow.on_dependency_failure == DependencyFailure::Hold;
            if hold {
                if let Some(edge) = inner.waits.get_mut(&w).and_then(|e| e.get_mut(&t)) {
                    *edge = EdgeState::Held { code, status };
                }
                inner.waiters.entry(t.clone()).or_default().insert(w);
                continue;
            }
            if let Some(edge) = inner.waits.get_mut(&w).and_then(|e| e.get_mut(&t)) {
                *edge = EdgeState::Done { code, status };
            }
            let Some(job) = inner.jobs.get_mut(&w) else {
                continue;
            };
            let flow = job.flow.get_or_insert_with(Default::default);
            flow.pending = flow.pending.saturating_sub(1);
            if job.lock != LOCK_BLOCKED {
                continue;
            }
            if code != ResultCode::Ok && flow.on_dependency_failure == DependencyFailure::Cancel {
                cancel_for_dependency(job, &t, code, now);
                queue.push_back((w, ResultCode::Cancelled, 0));
            } else if flow.pending == 0 {
                job.lock = LOCK_FREE.to_owned();
                job.dt = job.dt.max(now);
                record(job, now, "", EventKind::Unblocked);
                woken.push(job.jobtype.clone());
            }
        }
    }
}

/// Drops the edges of waiter `id` (deleted or purged).
fn forget_waiter(inner: &mut Inner, id: &str) {
    let Some(edges) = inner.waits.remove(id) else {
        return;
    };
    for (target, state) in edges {
        if state.is_open()
            && let Some(ws) = inner.waiters.get_mut(&target)
        {
            ws.remove(id);
            if ws.is_empty() {
                inner.waiters.remove(&target);
            }
        }
    }
}

/// The result code an archived job counts and purges under (every archive
/// stores a result; a job without one counts as `ok`).
fn result_code(job: &Job) -> ResultCode {
    job.result.as_ref().map_or(ResultCode::Ok, |r| r.code)
}

/// The newest version: greatest `dt`, the last set among equals.
fn newest(versions: &[HandlerVersion]) -> Option<&HandlerVersion> {
    versions.iter().max_by_key(|v| v.dt)
}
