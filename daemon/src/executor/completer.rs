//! Batched completions: finished jobs are released in one store call per
//! short window, each with its own result, after the jobs their runs asked
//! for are durable in the journal.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use jobstore_api::{JobRelease, JobStore, Release, now_millis};
use tokio::sync::{Notify, mpsc};

use super::{HeldMap, lock};
use crate::journal::{Journal, JournalError, Record};
use crate::metrics::Metrics;
use std::sync::Arc;

/// Most jobs released in one call.
const MAX_RELEASE: usize = 1000;

/// Most finished jobs waiting for their release (queued or in the call
/// under way) before the claim loop stops claiming.
pub const MAX_BACKLOG: usize = MAX_RELEASE;

/// The finished jobs queued for release or being released, shared by the
/// claim loop and the completer. The loop claims nothing while the backlog
/// is at [`MAX_BACKLOG`]: with a store slower than the runners it would
/// otherwise grow without bound, and every job in it runs again after a
/// crash.
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

    /// Whether the claim loop must wait for releases first.
    pub(super) fn is_full(&self) -> bool {
        self.queued.load(Ordering::Relaxed) >= MAX_BACKLOG
    }

    /// Returns once a batch has been released since the last call.
    pub(super) async fn drained(&self) {
        self.drained.notified().await;
    }
}

/// A finished job to release.
pub(super) struct Completion {
    pub id: String,
    pub how: Release,
    /// New jobs from its `J:` lines, journaled before the release.
    pub children: Vec<Record>,
}

/// What the completer works with.
pub(super) struct Completer {
    pub store: Arc<dyn JobStore>,
    pub journal: Journal,
    pub owner: String,
    pub held: HeldMap,
    pub backlog: Arc<Backlog>,
    pub metrics: Arc<Metrics>,
    /// How long a batch waits for more completions.
    pub window: Duration,
}

/// Releases completions until the channel closes and is drained.
pub(super) async fn run(c: Completer, mut rx: mpsc::UnboundedReceiver<Completion>) {
    let Completer {
        store,
        journal,
        owner,
        held,
        backlog,
        metrics,
        window,
    } = c;
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
        let children: Vec<Record> = batch
            .iter_mut()
            .flat_map(|c| std::mem::take(&mut c.children))
            .collect();
        if !children.is_empty() {
            append(&journal, children, &metrics).await;
        }
        let releases: Vec<JobRelease> = batch
            .into_iter()
            .map(|c| JobRelease::new(c.id, c.how))
            .collect();
        release(&*store, &owner, &releases, &metrics).await;
        {
            let mut held = lock(&held);
            for r in &releases {
                held.remove(&r.id);
            }
        }
        backlog.released(releases.len());
    }
}

/// Appends the jobs runs asked for; retries until the journal takes them
/// (a parent is released only once its children are durable).
async fn append(journal: &Journal, records: Vec<Record>, metrics: &Metrics) {
    let mut backoff = Duration::from_millis(50);
    loop {
        match journal.append(records.clone()).await {
            Ok(()) => {
                metrics.jobs_acknowledged.inc_by(records.len() as u64);
                return;
            }
            Err(JournalError::Closed) => {
                tracing::error!(
                    jobs = records.len(),
                    "journal closed: new jobs from J: lines are lost; their parents run again"
                );
                return;
            }
            Err(e) => {
                metrics.error("journal", "append");
                tracing::error!(error = %e, "cannot journal jobs from J: lines; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// One `release_jobs` call, retried while the store is unavailable.
async fn release(store: &dyn JobStore, owner: &str, releases: &[JobRelease], metrics: &Metrics) {
    let mut backoff = Duration::from_millis(50);
    loop {
        match store.release_jobs(releases, owner, now_millis()).await {
            Ok(released) => {
                let fenced = releases.len() - released.len();
                if fenced > 0 {
                    tracing::warn!(
                        jobs = fenced,
                        "finished jobs were no longer held by this daemon (lease lost); their results were not stored"
                    );
                    metrics.error("executor", "fenced");
                }
                return;
            }
            Err(e) if e.is_retryable() => {
                tracing::warn!(error = %e, jobs = releases.len(), "cannot release finished jobs; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            Err(e) => {
                tracing::error!(error = %e, jobs = releases.len(), "the store refused to release finished jobs; they run again after their leases");
                return;
            }
        }
    }
}
