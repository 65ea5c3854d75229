//! Ingest: moves journal records into the store.
//!
//! One loop reserves a batch of records, adds them to the store in one
//! `add_jobs` call, and only then syncs the reservation, so the journal's
//! read point moves past records the store has confirmed. While the store
//! is unreachable the loop retries with backoff and the records stay in the
//! journal; a replay after a crash is harmless because adds are idempotent
//! by id.
//!
//! A record the store refuses for good (a non-retryable error on that one
//! record, after retries) is never dropped silently: it is appended to
//! `rejected.jsonl` in the data dir with the error, counted and logged.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use jobstore_api::{JobStore, NewJob, now_millis};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::events::{JobEvents, JobRef};
use crate::executor::notices::Notices;
use crate::journal::{Journal, Record};
use crate::metrics::{Metrics, OutcomeLabels};

/// What the store said of a journaled job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It was inserted.
    New,
    /// A job with its id already existed; nothing changed.
    Existing,
    /// The store refused it for good (see `rejected.jsonl`).
    Rejected(String),
    /// Another job (its store id) holds its unique key: nothing was added;
    /// `replaced` when that job got its payload.
    Duplicate {
        /// The job holding the key.
        existing: String,
        /// Whether the holder's payload was replaced.
        replaced: bool,
    },
    /// A dependency is not a job of the store: nothing was added (the job
    /// is kept in `rejected.jsonl`).
    Refused {
        /// The field at fault (`depends_on[i]`).
        field: String,
        /// Why.
        reason: String,
    },
}

/// Requests waiting for the store's verdict on ids they journaled (adds
/// with client-chosen ids, which must say which ids already existed).
#[derive(Debug, Default)]
pub struct Outcomes {
    waiters: Mutex<HashMap<String, VecDeque<oneshot::Sender<Verdict>>>>,
    any: AtomicBool,
}

impl Outcomes {
    /// Registers interest in `id`'s verdict; register before appending the
    /// record, so the verdict cannot come first.
    pub fn register(&self, id: &str) -> oneshot::Receiver<Verdict> {
        let (tx, rx) = oneshot::channel();
        let mut w = self.lock();
        w.entry(id.to_owned()).or_default().push_back(tx);
        self.any.store(true, Ordering::Release);
        rx
    }

    /// Drops waiters whose requests went away (timed out or disconnected).
    pub fn forget(&self, ids: &[String]) {
        let mut w = self.lock();
        for id in ids {
            if let Some(q) = w.get_mut(id) {
                q.retain(|tx| !tx.is_closed());
                if q.is_empty() {
                    w.remove(id);
                }
            }
        }
        self.any.store(!w.is_empty(), Ordering::Release);
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, VecDeque<oneshot::Sender<Verdict>>>> {
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn resolve(&self, verdicts: &[(&str, Verdict)]) {
        if !self.any.load(Ordering::Acquire) {
            return;
        }
        let mut w = self.lock();
        for (id, verdict) in verdicts {
            if let Some(q) = w.get_mut(*id) {
                if let Some(tx) = q.pop_front() {
                    let _ = tx.send(verdict.clone());
                }
                if q.is_empty() {
                    w.remove(*id);
                }
            }
        }
        self.any.store(!w.is_empty(), Ordering::Release);
    }
}

/// The ingest loop's settings and shared state.
pub struct Ingest {
    /// Source.
    pub journal: Journal,
    /// Destination.
    pub store: Arc<dyn JobStore>,
    /// Verdict waiters.
    pub outcomes: Arc<Outcomes>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Records per batch.
    pub batch: usize,
    /// Reservation timeout.
    pub reserve_timeout: Duration,
    /// Where rejected records go.
    pub rejected_file: PathBuf,
    /// Told the jobtype of every new job, so that this daemon's claim loop
    /// and long-polling fetches wake at once, whatever the store's own
    /// notifications do.
    pub notices: Option<Notices>,
    /// The job events seam: told of each batch the store took.
    pub events: JobEvents,
}

const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Attempts at a single record that keeps failing with a non-retryable
/// error before it is rejected.
const POISON_ATTEMPTS: u32 = 3;

impl Ingest {
    /// Runs until `stop` is cancelled and then, in drain mode, until the
    /// journal has nothing readable left or `drain` is cancelled too.
    pub async fn run(self, stop: CancellationToken, drain: CancellationToken) {
        let mut backlog_since: Option<Instant> = None;
        loop {
            if drain.is_cancelled() {
                break;
            }
            let token = match self.journal.reserve(self.batch, self.reserve_timeout).await {
                Ok(t) => t,
                Err(e) => {
                    tracing::error!(error = %e, "journal reserve failed");
                    self.metrics.error("journal", "reserve");
                    if sleep_or(&drain, BACKOFF_MAX).await {
                        break;
                    }
                    continue;
                }
            };
            let Some(token) = token else {
                backlog_since = None;
                self.metrics.ingest_lag_seconds.set(0.0);
                if stop.is_cancelled() {
                    break;
                }
                tokio::select! {
                    _ = self.journal.readable() => {}
                    _ = stop.cancelled() => {}
                    _ = drain.cancelled() => break,
                }
                continue;
            };
            let since = *backlog_since.get_or_insert_with(Instant::now);
            let records = match self.journal.read(token) {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(error = %e, "journal reservation lost before reading");
                    continue;
                }
            };
            let Some(verdicts) = self.ingest(&records, since, &drain).await else {
                break; // drain deadline while the store was down
            };
            match self.journal.sync(token).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::debug!(
                        "journal reservation expired before sync; its records will be added again (harmless)"
                    )
                }
                Err(e) => {
                    tracing::error!(error = %e, "journal sync failed");
                    self.metrics.error("journal", "sync");
                }
            }
            let refs: Vec<(&str, Verdict)> = records
                .iter()
                .zip(verdicts)
                .map(|(r, v)| (r.id.as_str(), v))
                .collect();
            self.outcomes.resolve(&refs);
            self.metrics
                .ingest_lag_seconds
                .set(since.elapsed().as_secs_f64());
        }
    }

    /// Adds `records` to the store; the verdict of each, in order. `None`
    /// if `drain` was cancelled before the store took them.
    async fn ingest(
        &self,
        records: &[Record],
        since: Instant,
        drain: &CancellationToken,
    ) -> Option<Vec<Verdict>> {
        // The same id can be journaled twice (concurrent requests with one
        // idempotency key); a store batch may hold an id once. The first
        // occurrence is added, later ones are existing.
        let mut seen = HashSet::with_capacity(records.len());
        let mut jobs = Vec::with_capacity(records.len());
        let mut first = Vec::with_capacity(records.len());
        for r in records {
            let is_first = seen.insert(r.id.as_str());
            first.push(is_first);
            if is_first {
                let job = NewJob {
                    id: r.id.clone(),
                    jobtype: r.jobtype.clone(),
                    data: r.data.clone(),
                    priority: r.priority,
                    run_at: r.run_at,
                    tags: r.tags.clone(),
                    trace: r.trace.clone(),
                    flow: None,
                };
                let job = match &r.unique {
                    Some(u) => job.unique(u.clone()),
                    None => job,
                };
                let job = match &r.repeat {
                    Some(rule) => job.repeat(rule.clone()),
                    None => job,
                };
                jobs.push(if r.depends_on.is_empty() {
                    job
                } else {
                    let job = job
                        .depends_on(r.depends_on.iter().cloned())
                        .on_dependency_failure(r.on_dependency_failure);
                    if r.with_outputs {
                        job.with_outputs()
                    } else {
                        job
                    }
                });
            }
        }
        let mut verdicts: HashMap<String, Verdict> = HashMap::with_capacity(jobs.len());
        self.add_all(jobs, &mut verdicts, since, drain).await?;
        let mut out = Vec::with_capacity(records.len());
        for (r, is_first) in records.iter().zip(first) {
            out.push(if is_first {
                verdicts.remove(&r.id).unwrap_or(Verdict::Existing)
            } else {
                Verdict::Existing
            });
        }
        Some(out)
    }

    /// Adds `jobs`, retrying while the store is unavailable; a batch that
    /// fails for good is split to find the records the store refuses.
    async fn add_all(
        &self,
        jobs: Vec<NewJob>,
        verdicts: &mut HashMap<String, Verdict>,
        since: Instant,
        drain: &CancellationToken,
    ) -> Option<()> {
        let mut stack = vec![(jobs, 0u32)];
        let mut backoff = BACKOFF_MIN;
        while let Some((jobs, failures)) = stack.pop() {
            if jobs.is_empty() {
                continue;
            }
            let began = self.events.on().map(|_| SystemTime::now());
            match self.store.add_jobs(&jobs, now_millis()).await {
                Ok(outcome) => {
                    backoff = BACKOFF_MIN;
                    if let (Some(ev), Some(began)) = (self.events.on(), began) {
                        let new: HashSet<&str> = outcome.new.iter().map(String::as_str).collect();
                        ev.ingested(
                            jobs.iter().map(JobRef::of_new),
                            |id| new.contains(id),
                            began,
                        );
                    }
                    if let Some(tx) = &self.notices
                        && !outcome.new.is_empty()
                    {
                        let new: HashSet<&str> = outcome.new.iter().map(String::as_str).collect();
                        let mut types: Vec<&str> = jobs
                            .iter()
                            .filter(|j| new.contains(j.id.as_str()))
                            .map(|j| j.jobtype.as_str())
                            .collect();
                        types.sort_unstable();
                        types.dedup();
                        for jt in types {
                            tx.jobtype(jt);
                        }
                    }
                    let new = outcome.new.len() as u64;
                    let existing = outcome.existing.len() as u64;
                    self.count("new", new);
                    self.count("existing", existing);
                    self.count("duplicate", outcome.duplicates.len() as u64);
                    self.count("refused", outcome.refused.len() as u64);
                    for r in &outcome.refused {
                        let reason = format!("{}: {}", r.field, r.reason);
                        if let Some(job) = jobs.iter().find(|j| j.id == r.id) {
                            tracing::warn!(id = %r.id, reason = %reason, file = %self.rejected_file.display(), "the store refused this job; it is kept in the rejected file");
                            self.reject(job, &reason);
                        }
                    }
                    verdicts.extend(outcome.refused.into_iter().map(|r| {
                        let verdict = Verdict::Refused {
                            field: r.field,
                            reason: r.reason,
                        };
                        (r.id, verdict)
                    }));
                    verdicts.extend(outcome.duplicates.into_iter().map(|d| {
                        let verdict = Verdict::Duplicate {
                            existing: d.existing,
                            replaced: d.replaced,
                        };
                        (d.id, verdict)
                    }));
                    verdicts.extend(outcome.new.into_iter().map(|id| (id, Verdict::New)));
                    verdicts.extend(
                        outcome
                            .existing
                            .into_iter()
                            .map(|id| (id, Verdict::Existing)),
                    );
                }
                Err(e) if e.is_retryable() => {
                    tracing::warn!(error = %e, jobs = jobs.len(), retry_in = ?backoff, "store unavailable; the jobs stay in the journal");
                    self.metrics.error("ingest", e.kind());
                    self.metrics
                        .ingest_lag_seconds
                        .set(since.elapsed().as_secs_f64());
                    if sleep_or(drain, jitter(backoff)).await {
                        return None;
                    }
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    stack.push((jobs, failures));
                }
                Err(e) if jobs.len() > 1 => {
                    tracing::warn!(error = %e, jobs = jobs.len(), "store refused a batch; splitting it to find the records at fault");
                    self.metrics.error("ingest", e.kind());
                    let mut jobs = jobs;
                    let tail = jobs.split_off(jobs.len() / 2);
                    stack.push((tail, 0));
                    stack.push((jobs, 0));
                }
                Err(e) if failures + 1 < POISON_ATTEMPTS => {
                    self.metrics.error("ingest", e.kind());
                    if sleep_or(drain, jitter(backoff)).await {
                        return None;
                    }
                    stack.push((jobs, failures + 1));
                }
                Err(e) => {
                    self.metrics.error("ingest", e.kind());
                    let job = &jobs[0];
                    tracing::error!(id = %job.id, jobtype = %job.jobtype, error = %e, file = %self.rejected_file.display(), "the store refuses this job; it is kept in the rejected file");
                    self.reject(job, &e.to_string());
                    if let (Some(ev), Some(began)) = (self.events.on(), began) {
                        ev.rejected(JobRef::of_new(job), &e.to_string(), began);
                    }
                    self.count("rejected", 1);
                    verdicts.insert(job.id.clone(), Verdict::Rejected(e.to_string()));
                }
            }
        }
        Some(())
    }

    fn count(&self, outcome: &'static str, n: u64) {
        if n > 0 {
            self.metrics
                .jobs_ingested
                .get_or_create(&OutcomeLabels { outcome })
                .inc_by(n);
        }
    }

    fn reject(&self, job: &NewJob, error: &str) {
        let line = serde_json::json!({
            "id": job.id,
            "jobtype": job.jobtype,
            "priority": job.priority,
            "run_at": job.run_at,
            "data": String::from_utf8_lossy(&job.data),
            "data_hex": hex::encode(&job.data),
            "error": error,
            "at": now_millis(),
        });
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.rejected_file)
            .and_then(|mut f| {
                writeln!(f, "{line}")?;
                f.sync_data()
            });
        if let Err(e) = written {
            tracing::error!(error = %e, record = %line, "cannot write the rejected file; the record is in this log line");
        }
    }
}

fn jitter(d: Duration) -> Duration {
    d.mul_f64(rand::random_range(0.5..1.0))
}

/// Sleeps `d`; true if `cancel` fired first.
async fn sleep_or(cancel: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        _ = cancel.cancelled() => true,
        _ = tokio::time::sleep(d) => false,
    }
}
