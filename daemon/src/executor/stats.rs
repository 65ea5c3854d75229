//! Timing stats: every claim's wait (from when the job was due to its
//! claim) and every run's length (from its claim to its result), summed
//! here per jobtype and minute and added to the store's stats
//! ([`JobStore::add_stats`](jobstore_api::JobStore::add_stats)) in one
//! call every [`ExecSettings::stats_every`](super::ExecSettings::stats_every),
//! and once more when the executor stops. Every daemon on a store adds its
//! own, so the store holds them all; a crash loses at most the sums not
//! yet sent. A store without [`Capabilities::stats`](jobstore_api::Capabilities::stats)
//! gets nothing and nothing is summed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jobstore_api::limits::MAX_BATCH;
use jobstore_api::{Millis, StatsDelta, StatsResolution, now_millis};
use tokio_util::sync::CancellationToken;

use super::Core;

/// Most (jobtype, minute) sums held while the store cannot take them;
/// past it, new samples are dropped (and counted as an error).
const MAX_PENDING: usize = 4 * MAX_BATCH;

/// The sums not yet sent, by (jobtype, minute).
#[derive(Debug)]
pub(super) struct StatsSink {
    enabled: bool,
    pending: Mutex<HashMap<(String, Millis), StatsDelta>>,
}

/// Which duration a sample is.
#[derive(Debug, Clone, Copy)]
enum Sample {
    Wait,
    Run,
}

impl StatsSink {
    /// A sink that sums samples when `enabled` (the store keeps stats).
    pub(super) fn new(enabled: bool) -> Self {
        StatsSink {
            enabled,
            pending: Mutex::default(),
        }
    }

    /// A claim at `at` of a job of `jobtype` due at `due`.
    pub(super) fn waited(&self, jobtype: &str, due: Millis, at: Millis) -> bool {
        self.sample(Sample::Wait, jobtype, at - due, at)
    }

    /// A run of a job of `jobtype` claimed at `claimed` ended at `at`.
    pub(super) fn ran(&self, jobtype: &str, claimed: Millis, at: Millis) -> bool {
        self.sample(Sample::Run, jobtype, at - claimed, at)
    }

    /// Adds one sample; false when it was dropped (too many pending sums).
    fn sample(&self, which: Sample, jobtype: &str, ms: Millis, at: Millis) -> bool {
        if !self.enabled {
            return true;
        }
        let minute = StatsResolution::Minute.start_of(at);
        let mut pending = self.lock();
        let key = (jobtype.to_owned(), minute);
        if !pending.contains_key(&key) && pending.len() >= MAX_PENDING {
            return false;
        }
        let delta = pending
            .entry(key)
            .or_insert_with(|| StatsDelta::new(jobtype, minute));
        let ms = ms.max(0) as u64;
        match which {
            Sample::Wait => delta.wait.record(ms),
            Sample::Run => delta.run.record(ms),
        }
        true
    }

    /// Takes every pending sum, oldest minute first.
    fn take(&self) -> Vec<StatsDelta> {
        let mut deltas: Vec<StatsDelta> = self.lock().drain().map(|(_, d)| d).collect();
        deltas.sort_by(|a, b| (a.minute, &a.jobtype).cmp(&(b.minute, &b.jobtype)));
        deltas
    }

    /// Puts sums the store did not take back, added to what came since.
    fn put_back(&self, deltas: Vec<StatsDelta>) {
        let mut pending = self.lock();
        for d in deltas {
            let key = (d.jobtype.clone(), d.minute);
            if let Some(now) = pending.get_mut(&key) {
                now.wait.merge(&d.wait);
                now.run.merge(&d.run);
            } else if pending.len() < MAX_PENDING {
                pending.insert(key, d);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, Millis), StatsDelta>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Sends the pending sums every `stats_every` until `done`, then once
/// more.
pub(super) async fn run(core: Arc<Core>, done: CancellationToken) {
    if !core.stats.enabled {
        return;
    }
    loop {
        tokio::select! {
            _ = done.cancelled() => break,
            _ = tokio::time::sleep(core.settings.stats_every) => {}
        }
        flush(&core).await;
    }
    flush(&core).await;
}

/// Sends the pending sums, at most [`MAX_BATCH`] per call; what an
/// unavailable store did not take is kept for the next flush.
pub(super) async fn flush(core: &Core) {
    let deltas = core.stats.take();
    let mut chunks = deltas.chunks(MAX_BATCH);
    while let Some(chunk) = chunks.next() {
        match core.store.add_stats(chunk, now_millis()).await {
            Ok(()) => {}
            Err(e) if e.is_retryable() => {
                tracing::warn!(error = %e, "cannot add timing stats to the store; kept for the next try");
                core.metrics.error("stats", "add");
                let mut rest = chunk.to_vec();
                rest.extend(chunks.flatten().cloned());
                core.stats.put_back(rest);
                return;
            }
            Err(e) => {
                tracing::error!(error = %e, deltas = chunk.len(), "the store refused timing stats; they are dropped");
                core.metrics.error("stats", "add");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: Millis = 1_700_000_040_000;

    #[test]
    fn samples_sum_per_jobtype_and_minute() {
        let sink = StatsSink::new(true);
        assert!(sink.waited("a", M - 500, M + 10));
        assert!(sink.waited("a", M + 20, M + 59_999));
        assert!(sink.ran("a", M, M + 60_000));
        assert!(sink.ran("b", M + 5, M + 1));
        let got = sink.take();
        assert_eq!(got.len(), 3);
        assert_eq!((got[0].jobtype.as_str(), got[0].minute), ("a", M));
        assert_eq!(got[0].wait, jobstore_api::Durations::of(&[510, 59_979]));
        assert!(got[0].run.is_empty());
        assert_eq!((got[1].jobtype.as_str(), got[1].minute), ("b", M));
        assert_eq!(
            got[1].run,
            jobstore_api::Durations::of(&[0]),
            "clamped at 0"
        );
        assert_eq!((got[2].jobtype.as_str(), got[2].minute), ("a", M + 60_000));
        assert_eq!(got[2].run, jobstore_api::Durations::of(&[60_000]));
        assert!(sink.take().is_empty());
    }

    #[test]
    fn put_back_merges_with_newer_samples() {
        let sink = StatsSink::new(true);
        sink.waited("a", M, M + 1);
        let taken = sink.take();
        sink.waited("a", M, M + 2);
        sink.put_back(taken);
        let got = sink.take();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].wait, jobstore_api::Durations::of(&[1, 2]));
    }

    #[test]
    fn disabled_sink_keeps_nothing() {
        let sink = StatsSink::new(false);
        assert!(sink.waited("a", M, M + 1));
        assert!(sink.take().is_empty());
    }

    #[test]
    fn pending_sums_are_bounded() {
        let sink = StatsSink::new(true);
        for i in 0..MAX_PENDING {
            assert!(sink.waited(&format!("t{i}"), M, M));
        }
        assert!(!sink.waited("one-more", M, M), "dropped past the bound");
        assert!(sink.waited("t0", M, M), "an existing sum still grows");
        assert_eq!(sink.take().len(), MAX_PENDING);
    }
}
