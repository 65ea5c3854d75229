//! OTLP spans of job events, exported over OTLP/HTTP (protobuf) by the
//! `opentelemetry-otlp` exporter on the daemon's own HTTP client.
//!
//! Per job: `add` (an HTTP add, from the request to its journal fsync),
//! `ingest` (the store call that took it from the journal), `claim` (the
//! claim call), `run` (from the hand-over to a runner or remote worker to
//! its result) and `release` (the release call that stored the result).
//! Each is a child of the job's context ([`JobContext`]): the producer's
//! span when the job was added with a `traceparent`, else the job's own
//! `add` span, the root of a trace derived from its id. A run's span is
//! made when the run is handed out, so the runner continues the trace from
//! it (its `TRACEPARENT`).
//!
//! Spans are gathered by one task and exported in batches of up to
//! [`EXPORT_BATCH`], at least every [`EXPORT_EVERY`]; an export that
//! fails is counted in `jobstore_errors_total{source="otlp"}` and its
//! spans are dropped (the exporter's own retries came first).

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter, SpanLinks};
use tokio::sync::mpsc;

use super::context::{JobContext, new_span_id};
use super::{Batch, Detail, EventsError, Kind, Msg, taken};
use crate::metrics::Metrics;
use crate::tenant;

/// Most spans in one export.
pub const EXPORT_BATCH: usize = 512;

/// Longest a span waits for its export.
pub const EXPORT_EVERY: Duration = Duration::from_millis(500);

/// Where spans go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpConfig {
    /// The OTLP/HTTP endpoint: a base URL (`http://collector:4318`, to
    /// which `/v1/traces` is added) or the full traces URL (any URL with a
    /// path).
    pub endpoint: String,
    /// Longest one export may take.
    pub timeout: Duration,
}

impl OtlpConfig {
    /// `endpoint` with a 10 s export timeout.
    pub fn new(endpoint: impl Into<String>) -> Self {
        OtlpConfig {
            endpoint: endpoint.into(),
            timeout: Duration::from_secs(10),
        }
    }

    /// The traces URL: `/v1/traces` added to a URL without a path.
    pub fn traces_url(&self) -> Result<String, String> {
        let url = url::Url::parse(&self.endpoint).map_err(|e| e.to_string())?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "the scheme is {:?}; OTLP/HTTP needs http or https",
                url.scheme()
            ));
        }
        if url.path() == "/" || url.path().is_empty() {
            let mut u = url;
            u.set_path("/v1/traces");
            Ok(u.to_string())
        } else {
            Ok(url.to_string())
        }
    }
}

/// Builds the exporter and starts the task that exports spans.
pub(super) fn start(
    config: &OtlpConfig,
    sysid: &str,
    queued: Arc<AtomicUsize>,
    metrics: Arc<Metrics>,
) -> Result<(mpsc::UnboundedSender<Msg>, tokio::task::JoinHandle<()>), EventsError> {
    let fail = |message: String| EventsError::Otlp {
        endpoint: config.endpoint.clone(),
        message,
    };
    let url = config.traces_url().map_err(fail)?;
    let client = crate::http_client::builder()
        .timeout(config.timeout)
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url)
        .with_timeout(config.timeout)
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("jobstore");
    }
    exporter.set_resource(
        &resource
            .with_attribute(KeyValue::new("service.instance.id", sysid.to_owned()))
            .build(),
    );
    let (tx, rx) = mpsc::unbounded_channel();
    let builder = SpanBuilder {
        scope: InstrumentationScope::builder("jobstore")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
        sysid: Arc::from(sysid),
    };
    let task = tokio::spawn(run(exporter, builder, rx, queued, metrics));
    Ok((tx, task))
}

/// Gathers spans and exports them in batches until told to stop.
async fn run(
    exporter: opentelemetry_otlp::SpanExporter,
    builder: SpanBuilder,
    mut rx: mpsc::UnboundedReceiver<Msg>,
    queued: Arc<AtomicUsize>,
    metrics: Arc<Metrics>,
) {
    let mut out = Exports {
        exporter,
        metrics,
        last_warning: None,
    };
    let mut pending: Vec<SpanData> = Vec::new();
    let mut due = tokio::time::Instant::now();
    loop {
        tokio::select! {
            msg = rx.recv() => match msg {
                Some(Msg::Batch(b)) => {
                    if pending.is_empty() {
                        due = tokio::time::Instant::now() + EXPORT_EVERY;
                    }
                    builder.spans_of(&b, &mut pending);
                    taken(&queued, &b);
                    while pending.len() >= EXPORT_BATCH {
                        let rest = pending.split_off(EXPORT_BATCH);
                        out.export(std::mem::replace(&mut pending, rest)).await;
                    }
                }
                Some(Msg::Stop(ack)) => {
                    out.export(pending).await;
                    let _ = out.exporter.shutdown();
                    let _ = ack.send(());
                    return;
                }
                None => {
                    out.export(pending).await;
                    return;
                }
            },
            () = tokio::time::sleep_until(due), if !pending.is_empty() => {
                out.export(std::mem::take(&mut pending)).await;
            }
        }
    }
}

struct Exports {
    exporter: opentelemetry_otlp::SpanExporter,
    metrics: Arc<Metrics>,
    last_warning: Option<Instant>,
}

impl Exports {
    async fn export(&mut self, spans: Vec<SpanData>) {
        if spans.is_empty() {
            return;
        }
        let n = spans.len() as u64;
        match self.exporter.export(spans).await {
            Ok(()) => {
                self.metrics.spans_exported.inc_by(n);
            }
            Err(e) => {
                self.metrics.error("otlp", "export");
                self.metrics.job_events_dropped("otlp", n);
                // At most one warning a minute while the receiver is down.
                if self
                    .last_warning
                    .is_none_or(|t| t.elapsed() > Duration::from_secs(60))
                {
                    tracing::warn!(error = %e, spans = n, "cannot export spans over OTLP; they are dropped");
                    self.last_warning = Some(Instant::now());
                }
            }
        }
    }
}

/// Turns job events into spans.
struct SpanBuilder {
    scope: InstrumentationScope,
    sysid: Arc<str>,
}

impl SpanBuilder {
    /// The spans of `batch` (none for `started`: a run's span ends with
    /// it), appended to `out`.
    fn spans_of(&self, batch: &Batch, out: &mut Vec<SpanData>) {
        let (name, kind): (&'static str, SpanKind) = match batch.kind {
            Kind::Added => ("add", SpanKind::Producer),
            Kind::Ingested | Kind::Rejected => ("ingest", SpanKind::Internal),
            Kind::Claimed => ("claim", SpanKind::Internal),
            Kind::Started => return,
            Kind::Finished => ("run", SpanKind::Consumer),
            Kind::Released | Kind::Lost => ("release", SpanKind::Internal),
        };
        for e in &batch.jobs {
            let Some(job) = JobContext::of(&e.id, e.trace.as_deref()) else {
                continue;
            };
            let mut span_id = new_span_id();
            let mut parent = job.parent;
            let mut remote = job.remote;
            let mut start = batch.start;
            let mut status = Status::Unset;
            let mut attributes = vec![
                KeyValue::new("jobstore.client", tenant::tenant_of(&e.jobtype).to_owned()),
                KeyValue::new("jobstore.jobtype", tenant::local_of(&e.jobtype).to_owned()),
                KeyValue::new("jobstore.job.id", tenant::local_of(&e.id).to_owned()),
                KeyValue::new("jobstore.sysid", self.sysid.to_string()),
            ];
            if e.attempt > 0 {
                attributes.push(KeyValue::new("jobstore.attempt", i64::from(e.attempt)));
            }
            if let Some(w) = &batch.worker {
                attributes.push(KeyValue::new("jobstore.worker", w.clone()));
            }
            match &e.detail {
                Detail::None | Detail::Started(_) => {}
                Detail::Added(source) => {
                    attributes.push(KeyValue::new("jobstore.source", source.as_str()));
                    // A job without a producer's trace: its add span is
                    // the root of its own.
                    if let Some(id) = job.add_span {
                        span_id = id;
                        parent = SpanId::INVALID;
                        remote = false;
                    }
                }
                Detail::Ingested { new } => {
                    attributes.push(KeyValue::new("jobstore.ingest.new", *new));
                }
                Detail::Rejected(error) => {
                    status = Status::error(error.clone());
                }
                Detail::Finished(end) => {
                    start = end.began;
                    if let Some(run) = end.run {
                        span_id = run.span_id;
                        parent = run.parent;
                    }
                    if end.status > 0 {
                        attributes.push(KeyValue::new("jobstore.status", i64::from(end.status)));
                    }
                    attributes.push(KeyValue::new("jobstore.outcome", end.outcome));
                    if !matches!(end.outcome, "ok" | "failed") {
                        status = Status::error(end.outcome);
                    }
                }
                Detail::Released(r) => {
                    attributes.push(KeyValue::new("jobstore.release", r.release));
                    attributes.push(KeyValue::new("jobstore.outcome", r.outcome));
                    if let Some(code) = r.code {
                        attributes.push(KeyValue::new("jobstore.code", code));
                    }
                    if let Some(s) = r.status {
                        attributes.push(KeyValue::new("jobstore.status", i64::from(s)));
                    }
                    if let Some(d) = r.delay {
                        attributes.push(KeyValue::new(
                            "jobstore.delay_ms",
                            i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
                        ));
                    }
                    if batch.kind == Kind::Lost {
                        status = Status::error("the lease was lost: the result was not stored");
                    }
                }
            }
            out.push(SpanData {
                span_context: SpanContext::new(
                    job.trace_id,
                    span_id,
                    TraceFlags::SAMPLED,
                    false,
                    TraceState::NONE,
                ),
                parent_span_id: parent,
                parent_span_is_remote: remote && parent != SpanId::INVALID,
                span_kind: kind.clone(),
                name: Cow::Borrowed(name),
                start_time: start.min(batch.end),
                end_time: batch.end,
                attributes,
                dropped_attributes_count: 0,
                events: SpanEvents::default(),
                links: SpanLinks::default(),
                status,
                instrumentation_scope: self.scope.clone(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::events::{Entry, JobRef, RunEnd, Source};

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn builder() -> SpanBuilder {
        SpanBuilder {
            scope: InstrumentationScope::builder("jobstore").build(),
            sysid: Arc::from("node-1"),
        }
    }

    fn batch(kind: Kind, trace: Option<&str>, detail: Detail) -> Batch {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        Batch {
            kind,
            start: t0,
            end: t0 + Duration::from_millis(5),
            worker: None,
            jobs: vec![Entry::new(
                JobRef {
                    id: "acme-1",
                    jobtype: "acme-mail",
                    attempt: 1,
                    trace,
                },
                detail,
            )],
        }
    }

    #[test]
    fn spans_are_children_of_the_producers_span() {
        let b = builder();
        let mut out = Vec::new();
        b.spans_of(
            &batch(Kind::Added, Some(TP), Detail::Added(Source::Http)),
            &mut out,
        );
        b.spans_of(&batch(Kind::Claimed, Some(TP), Detail::None), &mut out);
        let run = JobContext::of("acme-1", Some(TP)).unwrap().run();
        let began = SystemTime::UNIX_EPOCH + Duration::from_secs(1_799_999_999);
        b.spans_of(
            &batch(
                Kind::Finished,
                Some(TP),
                Detail::Finished(RunEnd {
                    status: 200,
                    outcome: "ok",
                    began,
                    run: Some(run),
                }),
            ),
            &mut out,
        );
        assert_eq!(out.len(), 3);
        for s in &out {
            assert_eq!(
                format!("{:032x}", s.span_context.trace_id()),
                "4bf92f3577b34da6a3ce929d0e0e4736"
            );
            assert_eq!(format!("{:016x}", s.parent_span_id), "00f067aa0ba902b7");
            assert!(s.parent_span_is_remote);
        }
        assert_eq!(out[2].name, "run");
        assert_eq!(out[2].span_context.span_id(), run.span_id);
        assert_eq!(out[2].start_time, began);
        assert_eq!(out[2].status, Status::Unset);
    }

    #[test]
    fn a_job_without_a_trace_has_its_add_span_as_root() {
        let b = builder();
        let mut out = Vec::new();
        b.spans_of(
            &batch(Kind::Added, None, Detail::Added(Source::Http)),
            &mut out,
        );
        b.spans_of(&batch(Kind::Claimed, None, Detail::None), &mut out);
        let add = &out[0];
        assert_eq!(add.parent_span_id, SpanId::INVALID);
        assert_eq!(out[1].parent_span_id, add.span_context.span_id());
        assert_eq!(out[1].span_context.trace_id(), add.span_context.trace_id());
        assert!(!out[1].parent_span_is_remote);
    }

    #[test]
    fn unsampled_jobs_and_starts_make_no_span() {
        let b = builder();
        let mut out = Vec::new();
        let unsampled = TP.replace("-01", "-00");
        b.spans_of(
            &batch(Kind::Claimed, Some(&unsampled), Detail::None),
            &mut out,
        );
        b.spans_of(
            &batch(Kind::Started, Some(TP), Detail::Started(None)),
            &mut out,
        );
        assert!(out.is_empty());
    }

    #[test]
    fn traces_urls() {
        let url = |e: &str| OtlpConfig::new(e).traces_url();
        assert_eq!(
            url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            url("https://otel.example/custom/traces").unwrap(),
            "https://otel.example/custom/traces"
        );
        assert!(url("grpc://x:4317").is_err());
        assert!(url("not a url").is_err());
    }
}
