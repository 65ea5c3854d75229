//! Completions: the one way a finished job's result reaches the store.
//! The jobs its run asked for are appended to the journal and durable
//! first; then one `release_jobs` call per batch releases every job of the
//! batch, each with its own result, and the jobs the store took are counted
//! by outcome (`lost` for those it no longer gave this owner).
//!
//! This daemon's runs are gathered into batches over a short window by
//! [`run`], which retries while the journal or the store is unavailable: a
//! finished job is not forgotten while it can still be released. A remote
//! worker's finish is a batch of its own, tried once and answered with the
//! store's verdict ([`complete`] with [`Patience::Once`]): the worker
//! retries.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use jobstore_api::{JobRelease, Release, now_millis};
use tokio::sync::{Notify, mpsc};

use super::Core;
use super::held::{HeldMap, lock};
use crate::events::{By, Detail, Entry, JobRef, ReleaseEnd, Source};
use crate::journal::{JournalError, Record};
use crate::metrics::OutcomeLabels;

/// Most jobs released in one call.
const MAX_RELEASE: usize = 1000;

/// Most finished jobs waiting for their release (queued or in the call
/// under way) before claims stop.
pub const MAX_BACKLOG: usize = MAX_RELEASE;

/// The finished jobs of this daemon's runners queued for release or being
/// released. No claim is made while the backlog is at [`MAX_BACKLOG`]: with
/// a store slower than the runners it would otherwise grow without bound,
/// and every job in it runs again after a crash.
#[derive(Debug, Default)]
pub(super) struct Backlog {
    queued: AtomicUsize,
    drained: Notify,
}

impl Backlog {
    /// A completion was queued.
    pub(super) fn queued(&self) {
        self.queued.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` completions were released (or given up on).
    fn released(&self, n: usize) {
        self.queued.fetch_sub(n, Ordering::Relaxed);
        self.drained.notify_one();
    }

    /// Whether claims must wait for releases first.
    pub(super) fn is_full(&self) -> bool {
        self.queued.load(Ordering::Relaxed) >= MAX_BACKLOG
    }

    /// Returns once a batch has been released after the call.
    pub(super) async fn drained(&self) {
        self.drained.notified().await;
    }
}

/// A finished job to release.
#[derive(Debug)]
pub(super) struct Completion {
    pub id: String,
    pub how: Release,
    /// The jobs its run asked for, journaled before the release.
    pub children: Vec<Record>,
    /// What it is counted as once released.
    pub outcome: &'static str,
    /// For a run that ended with a result: its jobtype and when it was
    /// claimed (its length goes into the timing stats once released).
    pub ran: Option<(String, jobstore_api::Millis)>,
    /// What the release's job event names, while job events are on.
    pub meta: Option<Box<EventMeta>>,
}

/// What a release's job event says of its job.
#[derive(Debug)]
pub(super) struct EventMeta {
    /// The store jobtype.
    pub jobtype: String,
    /// Its hand-out number.
    pub attempt: u32,
    /// Its stored `traceparent`.
    pub trace: Option<String>,
    /// The status of the run the release ends.
    pub status: Option<u16>,
}

/// How long a completion keeps trying while the journal or the store is
/// unavailable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Patience {
    /// Until it succeeds (or fails for good).
    UntilDone,
    /// Once: the caller (a remote worker) tries again.
    Once,
}

/// Why a completion did not reach the store.
#[derive(Debug, thiserror::Error)]
pub(super) enum CompleteError {
    /// The journal did not take the jobs the runs asked for: nothing was
    /// released, the jobs run again after their leases.
    #[error("cannot journal the new jobs: {0}")]
    Journal(#[from] JournalError),
    /// The store refused or could not be reached.
    #[error(transparent)]
    Store(#[from] jobstore_api::Error),
}

/// Journals the batch's new jobs, then releases the batch under `owner`
/// in one call; returns the ids the store released.
pub(super) async fn complete(
    core: &Core,
    owner: &str,
    mut batch: Vec<Completion>,
    patience: Patience,
    by: By<'_>,
) -> Result<Vec<String>, CompleteError> {
    let asked: Vec<bool> = batch.iter().map(|c| !c.children.is_empty()).collect();
    let children: Vec<Record> = batch
        .iter_mut()
        .flat_map(|c| std::mem::take(&mut c.children))
        .collect();
    if !children.is_empty() {
        let adding = core.events.on().map(|ev| {
            ev.adding(
                children.iter().map(JobRef::of_record),
                Source::Run,
                SystemTime::now(),
            )
        });
        match append(core, children, patience).await {
            Ok(()) => {
                if let (Some(adding), Some(ev)) = (adding, core.events.on()) {
                    adding.durable(ev);
                }
            }
            // Only a closed journal ends the patient wait: the runs that
            // asked for new jobs are not released (they run again after
            // their leases), the others are.
            Err(e) if patience == Patience::UntilDone => {
                tracing::error!(error = %e, "the journal is closed: runs that asked for new jobs run again after their leases");
                batch = batch
                    .into_iter()
                    .zip(asked)
                    .filter_map(|(c, asked)| (!asked).then_some(c))
                    .collect();
                if batch.is_empty() {
                    return Ok(Vec::new());
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    let mut outcomes = Vec::with_capacity(batch.len());
    let releases: Vec<JobRelease> = batch
        .into_iter()
        .map(|c| {
            outcomes.push((c.outcome, c.ran, c.meta));
            JobRelease::new(c.id, c.how)
        })
        .collect();
    let began = core.events.on().map(|_| SystemTime::now());
    let released = release(core, owner, &releases, patience).await?;
    let taken: std::collections::HashSet<&str> = released.iter().map(String::as_str).collect();
    let now = now_millis();
    let mut events = Vec::new();
    for (r, (outcome, ran, meta)) in releases.iter().zip(outcomes) {
        if let Some(m) = meta {
            let job = JobRef {
                id: &r.id,
                jobtype: &m.jobtype,
                attempt: m.attempt,
                trace: m.trace.as_deref(),
            };
            let end = ReleaseEnd::of(&r.how, m.status, outcome);
            events.push((
                Entry::new(job, Detail::Released(end)),
                taken.contains(r.id.as_str()),
            ));
        }
        let outcome = if taken.contains(r.id.as_str()) {
            if let Some((jobtype, claimed)) = ran {
                core.ran(&jobtype, claimed, now);
            }
            outcome
        } else {
            "lost"
        };
        core.metrics
            .jobs_finished
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }
    if let (Some(ev), Some(began)) = (core.events.on(), began) {
        let worker = match by {
            By::Daemon => None,
            By::Worker(w) => Some(w),
        };
        ev.released(events, worker, began);
    }
    let fenced = releases.len() - released.len();
    if fenced > 0 {
        tracing::warn!(
            jobs = fenced,
            "finished jobs were no longer held under their lease; their results were not stored"
        );
        core.metrics.error("executor", "fenced");
    }
    Ok(released)
}

/// Releases this daemon's finished jobs in batches until the channel closes
/// and is drained.
pub(super) async fn run(
    core: Arc<Core>,
    held: HeldMap,
    mut rx: mpsc::UnboundedReceiver<Completion>,
) {
    let owner = core.sysid.sysid();
    let window = core.settings.complete_window;
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + window;
        while batch.len() < MAX_RELEASE {
            match rx.try_recv() {
                Ok(c) => batch.push(c),
                Err(mpsc::error::TryRecvError::Disconnected) => break,
                Err(mpsc::error::TryRecvError::Empty) => {
                    match tokio::time::timeout_at(deadline, rx.recv()).await {
                        Ok(Some(c)) => batch.push(c),
                        _ => break,
                    }
                }
            }
        }
        let ids: Vec<String> = batch.iter().map(|c| c.id.clone()).collect();
        if let Err(e) = complete(&core, &owner, batch, Patience::UntilDone, By::Daemon).await {
            tracing::error!(error = %e, jobs = ids.len(), "finished jobs were not released; they run again after their leases");
        }
        {
            let mut held = lock(&held);
            for id in &ids {
                held.remove(id);
            }
        }
        core.backlog.released(ids.len());
    }
}

/// Appends the jobs runs asked for (a parent is released only once its
/// children are durable).
async fn append(core: &Core, records: Vec<Record>, patience: Patience) -> Result<(), JournalError> {
    let mut backoff = Duration::from_millis(50);
    let n = records.len() as u64;
    loop {
        match core.journal.append(records.clone()).await {
            Ok(()) => {
                core.metrics.jobs_acknowledged.inc_by(n);
                return Ok(());
            }
            Err(JournalError::Closed) => return Err(JournalError::Closed),
            Err(e) => {
                core.metrics.error("journal", "append");
                if patience == Patience::Once {
                    return Err(e);
                }
                tracing::error!(error = %e, "cannot journal jobs that runs asked for; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// One `release_jobs` call, retried while the store is unavailable.
async fn release(
    core: &Core,
    owner: &str,
    releases: &[JobRelease],
    patience: Patience,
) -> jobstore_api::Result<Vec<String>> {
    let mut backoff = Duration::from_millis(50);
    loop {
        match core.store.release_jobs(releases, owner, now_millis()).await {
            Ok(released) => return Ok(released),
            Err(e) if e.is_retryable() && patience == Patience::UntilDone => {
                tracing::warn!(error = %e, jobs = releases.len(), "cannot release finished jobs; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(e),
        }
    }
}
