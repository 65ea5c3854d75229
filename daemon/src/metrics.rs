//! Prometheus metrics, and [`MeteredStore`]: the store wrapper that times
//! every store call and tracks whether the store is reachable.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use jobstore_api::layer::StoreFuture;
use jobstore_api::*;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::journal::JournalStats;

/// Labels of HTTP request counters.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The route template (`/{client}/job/{type}/add`).
    pub route: String,
    /// The method.
    pub method: String,
    /// The status code.
    pub status: u16,
}

/// Labels naming a store operation.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabels {
    /// The `JobStore` method.
    pub op: &'static str,
}

/// Labels of a state gauge.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    /// The state.
    pub state: &'static str,
}

/// Labels of error counters.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// Where: `store`, `http`, `ingest`, `journal`.
    pub source: &'static str,
    /// The error kind.
    pub kind: String,
}

/// Labels of outcomes (ingest: `new`, `existing`, `duplicate`, `rejected`; runs: see
/// [`Metrics::jobs_finished`]).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// The outcome.
    pub outcome: &'static str,
}

/// Labels naming a job events sink.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkLabels {
    /// `log` (the job log) or `otlp` (spans).
    pub sink: &'static str,
}

/// Labels naming an HTTP header.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HeaderLabels {
    /// The header's name (`traceparent`, `tracestate`).
    pub header: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 50 µs .. ~26 s
    Histogram::new(exponential_buckets(0.000_05, 2.0, 20))
}

/// Every metric the daemon exports.
pub struct Metrics {
    registry: Registry,
    /// HTTP requests by route, method and status.
    pub requests: Family<RequestLabels, Counter>,
    /// Jobs acknowledged to clients (durable in the journal).
    pub jobs_acknowledged: Counter,
    /// Jobs moved from the journal into the store, by outcome.
    pub jobs_ingested: Family<OutcomeLabels, Counter>,
    /// Jobs handed to runners.
    pub jobs_started: Counter,
    /// Jobs whose run ended, by what became of them (`ok`, `failed`,
    /// `retry`, `error`, `timeout`, `lost`, `not_started`, `stopped`).
    pub jobs_finished: Family<OutcomeLabels, Counter>,
    /// Time from a job's insert into the store to its first start.
    pub start_delay: Histogram,
    /// How long the oldest record still in the journal has been waiting
    /// for ingest (0 when the journal is drained).
    pub ingest_lag_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// Store call latencies by operation.
    pub store_latency: HistogramFamily<OpLabels>,
    /// Errors by where they happened and their kind.
    pub errors: Family<ErrorLabels, Counter>,
    /// 1 while the last store call reached the store.
    pub store_up: Gauge,
    /// 1 while the daemon holds its sysid.
    pub sysid_held: Gauge,
    /// Remote workers by state (`active`, `gone`).
    pub remote_workers: Family<StateLabels, Gauge>,
    /// Job events a sink dropped: its queue was full, or (spans) their
    /// export failed.
    pub job_events_dropped: Family<SinkLabels, Counter>,
    /// Spans exported over OTLP.
    pub spans_exported: Counter,
    /// Jobs remote workers hold.
    pub remote_jobs_held: Gauge,
    /// Adds whose malformed `traceparent` or `tracestate` header was
    /// ignored (W3C Trace Context), by header.
    pub trace_headers_ignored: Family<HeaderLabels, Counter>,
    /// Schedule slots this daemon planned, by outcome (`fired`: its add
    /// made the job; `existing`: another daemon's did; `skipped`).
    pub schedule_slots: Family<OutcomeLabels, Counter>,
    journal_appended_records: Counter,
    journal_appended_bytes: Counter,
    journal_fsyncs: Counter,
    journal_damaged: Counter,
    journal_backlog_records: Gauge,
    journal_backlog_bytes: Gauge,
    journal_segments: Gauge,
    journal_last: Mutex<JournalStats>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A registry with every metric, prefixed `jobstore_`.
    pub fn new() -> Self {
        let mut root = Registry::with_prefix("jobstore");
        let m = Metrics {
            requests: Family::default(),
            jobs_acknowledged: Counter::default(),
            jobs_ingested: Family::default(),
            jobs_started: Counter::default(),
            jobs_finished: Family::default(),
            start_delay: latency_histogram(),
            ingest_lag_seconds: Gauge::default(),
            store_latency: Family::new_with_constructor(latency_histogram),
            errors: Family::default(),
            store_up: Gauge::default(),
            sysid_held: Gauge::default(),
            remote_workers: Family::default(),
            job_events_dropped: Family::default(),
            spans_exported: Counter::default(),
            remote_jobs_held: Gauge::default(),
            trace_headers_ignored: Family::default(),
            schedule_slots: Family::default(),
            journal_appended_records: Counter::default(),
            journal_appended_bytes: Counter::default(),
            journal_fsyncs: Counter::default(),
            journal_damaged: Counter::default(),
            journal_backlog_records: Gauge::default(),
            journal_backlog_bytes: Gauge::default(),
            journal_segments: Gauge::default(),
            journal_last: Mutex::new(JournalStats::default()),
            registry: Registry::default(),
        };
        let r = &mut root;
        r.register(
            "http_requests",
            "HTTP requests by route, method and status",
            m.requests.clone(),
        );
        r.register(
            "jobs_acknowledged",
            "Jobs acknowledged to clients once durable in the journal",
            m.jobs_acknowledged.clone(),
        );
        r.register(
            "schedule_slots",
            "Schedule slots planned by this daemon, by outcome (fired, existing, skipped)",
            m.schedule_slots.clone(),
        );
        r.register(
            "jobs_ingested",
            "Journal records added to the store, by outcome (new, existing, duplicate: another job holds its unique key, rejected)",
            m.jobs_ingested.clone(),
        );
        r.register(
            "jobs_started",
            "Jobs handed to runners",
            m.jobs_started.clone(),
        );
        r.register(
            "jobs_finished",
            "Jobs whose run ended, by what became of them",
            m.jobs_finished.clone(),
        );
        r.register(
            "job_start_delay_seconds",
            "Time from a job's insert into the store to its first start",
            m.start_delay.clone(),
        );
        r.register(
            "ingest_lag_seconds",
            "How long the journal has held records not yet in the store",
            m.ingest_lag_seconds.clone(),
        );
        r.register(
            "store_call_duration_seconds",
            "Store call latency by operation",
            m.store_latency.clone(),
        );
        r.register("errors", "Errors by source and kind", m.errors.clone());
        r.register(
            "store_up",
            "1 while the last store call reached the store",
            m.store_up.clone(),
        );
        r.register(
            "sysid_held",
            "1 while this daemon holds its sysid",
            m.sysid_held.clone(),
        );
        r.register(
            "remote_workers",
            "Remote workers this daemon heard from, by state",
            m.remote_workers.clone(),
        );
        r.register(
            "remote_jobs_held",
            "Jobs remote workers hold",
            m.remote_jobs_held.clone(),
        );
        r.register(
            "job_events_dropped",
            "Job events a sink dropped (log: its queue was full; otlp: its queue was full or the export failed)",
            m.job_events_dropped.clone(),
        );
        r.register(
            "spans_exported",
            "Spans of job events exported over OTLP",
            m.spans_exported.clone(),
        );
        r.register(
            "trace_headers_ignored",
            "Adds whose malformed traceparent or tracestate header was ignored, by header",
            m.trace_headers_ignored.clone(),
        );
        r.register(
            "journal_appended_records",
            "Records appended to the journal",
            m.journal_appended_records.clone(),
        );
        r.register(
            "journal_appended_bytes",
            "Bytes appended to the journal",
            m.journal_appended_bytes.clone(),
        );
        r.register(
            "journal_fsyncs",
            "Journal fsyncs (one per group of concurrent appends)",
            m.journal_fsyncs.clone(),
        );
        r.register(
            "journal_damaged_records",
            "Damaged journal records skipped",
            m.journal_damaged.clone(),
        );
        r.register(
            "journal_backlog_records",
            "Durable journal records not yet synced into the store",
            m.journal_backlog_records.clone(),
        );
        r.register(
            "journal_backlog_bytes",
            "Bytes of journal records not yet synced into the store",
            m.journal_backlog_bytes.clone(),
        );
        r.register(
            "journal_segments",
            "Journal segment files on disk",
            m.journal_segments.clone(),
        );
        Metrics {
            registry: root,
            ..m
        }
    }

    /// Takes the journal's counters into the exported metrics.
    pub fn observe_journal(&self, s: &JournalStats) {
        let mut last = self.journal_last.lock().unwrap_or_else(|e| e.into_inner());
        self.journal_appended_records
            .inc_by(s.appended_records.saturating_sub(last.appended_records));
        self.journal_appended_bytes
            .inc_by(s.appended_bytes.saturating_sub(last.appended_bytes));
        self.journal_fsyncs
            .inc_by(s.fsyncs.saturating_sub(last.fsyncs));
        self.journal_damaged
            .inc_by(s.damaged_records.saturating_sub(last.damaged_records));
        self.journal_backlog_records
            .set(i64::try_from(s.backlog_records).unwrap_or(i64::MAX));
        self.journal_backlog_bytes
            .set(i64::try_from(s.backlog_bytes).unwrap_or(i64::MAX));
        self.journal_segments
            .set(i64::try_from(s.segments).unwrap_or(i64::MAX));
        *last = s.clone();
    }

    /// Counts `n` job events `sink` dropped.
    pub fn job_events_dropped(&self, sink: &'static str, n: u64) {
        self.job_events_dropped
            .get_or_create(&SinkLabels { sink })
            .inc_by(n);
    }

    /// Counts an error.
    pub fn error(&self, source: &'static str, kind: impl ToString) {
        self.errors
            .get_or_create(&ErrorLabels {
                source,
                kind: kind.to_string(),
            })
            .inc();
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        out
    }
}

/// What the daemon knows of the store's reachability, from its own calls.
#[derive(Debug, Default)]
pub struct StoreHealth {
    down: AtomicBool,
    last_error: Mutex<Option<String>>,
}

impl StoreHealth {
    /// Whether the last store call reached the store.
    pub fn reachable(&self) -> bool {
        !self.down.load(Ordering::Relaxed)
    }

    /// The last "unavailable" error, while the store is down.
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn record<T>(&self, result: &Result<T>) {
        match result {
            Err(e) if e.is_retryable() => {
                self.down.store(true, Ordering::Relaxed);
                *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
            }
            // Any answer from the store, even a refusal, means it is reachable.
            _ => {
                if self.down.swap(false, Ordering::Relaxed) {
                    *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = None;
                }
            }
        }
    }
}

/// A [`JobStore`] that times every call into [`Metrics::store_latency`],
/// counts errors by kind and keeps [`StoreHealth`] current: a
/// [`StoreLayer`](jobstore_api::layer::StoreLayer) whose `around` hook
/// observes each call of the store it wraps.
#[derive(Debug)]
pub struct MeteredStore {
    inner: Arc<dyn JobStore>,
    metrics: Arc<Metrics>,
    health: Arc<StoreHealth>,
}

impl MeteredStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn JobStore>, metrics: Arc<Metrics>, health: Arc<StoreHealth>) -> Self {
        MeteredStore {
            inner,
            metrics,
            health,
        }
    }

    fn observe<T>(&self, op: &'static str, start: Instant, result: &Result<T>) {
        self.metrics
            .store_latency
            .get_or_create(&OpLabels { op })
            .observe(start.elapsed().as_secs_f64());
        if let Err(e) = result {
            self.metrics.error("store", e.kind());
        }
        self.health.record(result);
        self.metrics
            .store_up
            .set(i64::from(self.health.reachable()));
    }
}

/// Every forwarded call is timed, and its error counted, by `around`; no
/// method is written out.
impl jobstore_api::layer::StoreLayer for MeteredStore {
    type Inner = dyn JobStore;

    fn inner(&self) -> &Self::Inner {
        &*self.inner
    }

    fn around<'a, T: Send + 'a>(
        &'a self,
        op: &'static str,
        call: StoreFuture<'a, T>,
    ) -> StoreFuture<'a, T> {
        Box::pin(async move {
            let start = Instant::now();
            let result = call.await;
            self.observe(op, start, &result);
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn metered_store_times_calls_and_renders() {
        let metrics = Arc::new(Metrics::new());
        let health = Arc::new(StoreHealth::default());
        let store = MeteredStore::new(
            Arc::new(MemoryStore::new()),
            metrics.clone(),
            health.clone(),
        );
        store.job_counts(0).await.unwrap();
        assert!(store.get_job("").await.is_err());
        assert!(health.reachable());
        let text = metrics.render();
        assert!(
            text.contains("jobstore_store_call_duration_seconds_count{op=\"job_counts\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("jobstore_errors_total{source=\"store\",kind=\"invalid input\"} 1"),
            "{text}"
        );
    }
}
