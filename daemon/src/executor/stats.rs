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
use std::time::Duration;

use jobstore_api::limits::MAX_BATCH;
use jobstore_api::{JobStore, Millis, StatsDelta, StatsResolution, now_millis};
use tokio_util::sync::CancellationToken;

use super::Core;
use crate::metrics::Metrics;

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
    send_every(
        &core.stats,
        &*core.store,
        &core.metrics,
        core.settings.stats_every,
        done,
    )
    .await;
}

/// [`run`]'s loop: `sink`'s sums sent to `store` every `every` until
/// `done`, then once more; nothing when the sink is disabled.
async fn send_every(
    sink: &StatsSink,
    store: &dyn JobStore,
    metrics: &Metrics,
    every: Duration,
    done: CancellationToken,
) {
    if !sink.enabled {
        return;
    }
    loop {
        tokio::select! {
            _ = done.cancelled() => break,
            _ = tokio::time::sleep(every) => {}
        }
        send(sink, store, metrics).await;
    }
    send(sink, store, metrics).await;
}

/// Sends the pending sums, at most [`MAX_BATCH`] per call; what an
/// unavailable store did not take is kept for the next send. Errors are
/// counted in `metrics`.
async fn send(sink: &StatsSink, store: &dyn JobStore, metrics: &Metrics) {
    let deltas = sink.take();
    let mut chunks = deltas.chunks(MAX_BATCH);
    while let Some(chunk) = chunks.next() {
        match store.add_stats(chunk, now_millis()).await {
            Ok(()) => {}
            Err(e) if e.is_retryable() => {
                tracing::warn!(error = %e, "cannot add timing stats to the store; kept for the next try");
                metrics.error("stats", "add");
                let mut rest = chunk.to_vec();
                rest.extend(chunks.flatten().cloned());
                sink.put_back(rest);
                return;
            }
            Err(e) => {
                tracing::error!(error = %e, deltas = chunk.len(), "the store refused timing stats; they are dropped");
                metrics.error("stats", "add");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use jobstore_api::MemoryStore;

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
        assert_eq!(MAX_PENDING, 40_000);
        let sink = StatsSink::new(true);
        for i in 0..MAX_PENDING {
            assert!(sink.waited(&format!("t{i}"), M, M));
        }
        assert!(!sink.waited("one-more", M, M), "dropped past the bound");
        assert!(sink.waited("t0", M, M), "an existing sum still grows");
        assert_eq!(sink.take().len(), MAX_PENDING);
    }

    #[test]
    fn put_back_keeps_new_sums_up_to_the_bound() {
        let sink = StatsSink::new(true);
        for i in 0..MAX_PENDING - 2 {
            sink.waited(&format!("t{i}"), M, M);
        }
        let back = vec![delta("x", M, 7), delta("y", M, 8), delta("z", M, 9)];
        sink.put_back(back);
        let got = sink.take();
        assert_eq!(got.len(), MAX_PENDING, "one sum dropped at the bound");
        let kept: Vec<&str> = got
            .iter()
            .map(|d| d.jobtype.as_str())
            .filter(|t| !t.starts_with('t'))
            .collect();
        assert_eq!(kept, ["x", "y"]);
        sink.put_back(vec![delta("x", M, 7)]);
        assert_eq!(sink.take(), [delta("x", M, 7)], "into an empty sink");
    }

    /// A delta of one wait of `ms`.
    fn delta(jobtype: &str, minute: Millis, ms: u64) -> StatsDelta {
        let mut d = StatsDelta::new(jobtype, minute);
        d.wait.record(ms);
        d
    }

    /// A memory store whose `add_stats` fails with the errors queued in
    /// `fail` (one per call, first in first), and counts its calls.
    #[derive(Debug, Default)]
    struct Failing {
        inner: MemoryStore,
        fail: Mutex<Vec<jobstore_api::Error>>,
        calls: Mutex<Vec<usize>>,
    }

    #[async_trait::async_trait]
    impl jobstore_api::layer::StoreLayer for Failing {
        type Inner = MemoryStore;

        fn inner(&self) -> &MemoryStore {
            &self.inner
        }

        async fn add_stats(&self, deltas: &[StatsDelta], now: Millis) -> jobstore_api::Result<()> {
            self.calls.lock().unwrap().push(deltas.len());
            let failure = {
                let mut fail = self.fail.lock().unwrap();
                (!fail.is_empty()).then(|| fail.remove(0))
            };
            match failure {
                Some(e) => Err(e),
                None => self.inner.add_stats(deltas, now).await,
            }
        }
    }

    fn unavailable() -> jobstore_api::Error {
        jobstore_api::Error::unavailable("down", "injected")
    }

    /// Every jobtype's wait count in the store's minute buckets.
    async fn stored(store: &dyn JobStore) -> HashMap<String, u64> {
        let query = jobstore_api::StatsQuery::new(StatsResolution::Minute);
        let mut counts = HashMap::new();
        for b in store.job_stats(&query, now_millis()).await.unwrap() {
            *counts.entry(b.jobtype).or_default() += b.wait.count;
        }
        counts
    }

    fn errors_counted(metrics: &Metrics) -> usize {
        let text = metrics.render();
        let line = "jobstore_errors_total{source=\"stats\",kind=\"add\"} ";
        text.lines()
            .find_map(|l| l.strip_prefix(line))
            .map_or(0, |n| n.parse().unwrap())
    }

    #[tokio::test]
    async fn send_adds_every_sum_in_batches() {
        let (sink, store, metrics) = (StatsSink::new(true), Failing::default(), Metrics::new());
        let now = now_millis();
        for i in 0..=MAX_BATCH {
            sink.waited(&format!("t{i}"), now, now);
        }
        send(&sink, &store, &metrics).await;
        assert_eq!(*store.calls.lock().unwrap(), [MAX_BATCH, 1]);
        assert_eq!(stored(&store).await.len(), MAX_BATCH + 1);
        assert!(sink.take().is_empty());
        assert_eq!(errors_counted(&metrics), 0);
    }

    #[tokio::test]
    async fn an_unavailable_store_gets_the_sums_at_the_next_send() {
        let (sink, store, metrics) = (StatsSink::new(true), Failing::default(), Metrics::new());
        let now = now_millis();
        for i in 0..=MAX_BATCH {
            sink.waited(&format!("t{i}"), now, now);
        }
        *store.fail.lock().unwrap() = vec![unavailable()];
        send(&sink, &store, &metrics).await;
        assert_eq!(
            *store.calls.lock().unwrap(),
            [MAX_BATCH],
            "stops at the error"
        );
        assert_eq!(errors_counted(&metrics), 1);
        assert!(stored(&store).await.is_empty());
        sink.waited("t0", now, now);
        send(&sink, &store, &metrics).await;
        let counts = stored(&store).await;
        assert_eq!(counts.len(), MAX_BATCH + 1, "nothing lost");
        assert_eq!(counts["t0"], 2, "kept sums merge with newer ones");
        assert!(sink.take().is_empty());
    }

    #[tokio::test]
    async fn sums_the_store_refuses_are_dropped() {
        let (sink, store, metrics) = (StatsSink::new(true), Failing::default(), Metrics::new());
        let now = now_millis();
        for i in 0..=MAX_BATCH {
            sink.waited(&format!("t{i}"), now, now);
        }
        *store.fail.lock().unwrap() = vec![jobstore_api::Error::invalid("refused")];
        send(&sink, &store, &metrics).await;
        assert_eq!(*store.calls.lock().unwrap(), [MAX_BATCH, 1], "goes on");
        assert_eq!(errors_counted(&metrics), 1);
        assert_eq!(stored(&store).await.len(), 1, "the second batch added");
        assert!(sink.take().is_empty(), "the first one dropped");
    }

    #[tokio::test]
    async fn send_every_sends_on_its_period_and_once_more_at_the_end() {
        let (sink, store, metrics) = (StatsSink::new(true), Failing::default(), Metrics::new());
        let done = CancellationToken::new();
        let now = now_millis();
        sink.waited("a", now, now);
        let every = Duration::from_millis(20);
        let sends = async {
            let mut waited = 0;
            while stored(&store).await.is_empty() {
                assert!(waited < 5_000, "no send within 5 s");
                tokio::time::sleep(Duration::from_millis(10)).await;
                waited += 10;
            }
            sink.waited("b", now, now);
            done.cancel();
        };
        tokio::join!(
            send_every(&sink, &store, &metrics, every, done.clone()),
            sends
        );
        assert_eq!(
            stored(&store).await.len(),
            2,
            "the last sums sent at the end"
        );

        let sink = StatsSink::new(true);
        let store = Failing::default();
        sink.waited("c", now, now);
        let done = CancellationToken::new();
        done.cancel();
        send_every(&sink, &store, &metrics, Duration::from_secs(3_600), done).await;
        assert_eq!(stored(&store).await.len(), 1, "sent when stopped");
    }

    #[tokio::test]
    async fn a_disabled_sink_sends_nothing() {
        let (sink, store, metrics) = (StatsSink::new(false), Failing::default(), Metrics::new());
        let never = CancellationToken::new();
        let every = Duration::from_millis(1);
        tokio::time::timeout(
            Duration::from_secs(5),
            send_every(&sink, &store, &metrics, every, never),
        )
        .await
        .expect("returns at once");
        assert!(store.calls.lock().unwrap().is_empty());
    }
}
