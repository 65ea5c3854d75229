//! Job events: the one seam where the daemon reports a job entering,
//! running and leaving, and the two sinks it can feed.
//!
//! The core calls [`JobEvents`] at five points, each with a batch of jobs:
//!
//! | event | where | span |
//! |---|---|---|
//! | `added` | an HTTP add, once its records are durable in the journal; the jobs a run asked for (`J:` lines, a remote finish's `jobs`), once journaled | `add` |
//! | `ingested`, `rejected` | ingest, once the store took (or refused for good) a batch of records | `ingest` |
//! | `claimed` | the executor's claim, for this daemon's runners and remote workers' fetches alike | `claim` |
//! | `started`, `finished` | a run of this daemon's runners handed its jobs, and a job's run ended (for remote workers, the finish they report) | `run`, from the claim's hand-over to the end |
//! | `released`, `lost` | the completer, once the store took a batch of releases (archived with a code, retried with a delay, handed back, deleted), or refused them (the lease was lost) | `release` |
//!
//! Two sinks can listen, each optional:
//!
//! - the **job log** ([`log`]): one JSON line per job and event, written
//!   by a thread of its own to a file rotated by size (or to stderr);
//! - **OTLP spans** ([`otlp`]): per job, spans `add`, `ingest`, `claim`,
//!   `run` and `release`, children of the job's stored W3C `traceparent`,
//!   exported in batches over OTLP/HTTP.
//!
//! **No cost when off.** [`JobEvents`] is an `Option`: with neither sink
//! set, each point is one branch on it, and nothing is allocated or
//! timed. With a sink set, the point builds a batch of the jobs' names and
//! hands it to each sink's queue without waiting: a sink that falls behind
//! never slows claims or releases. Each queue holds at most
//! [`MAX_QUEUED`] job events; past that, a new batch is dropped whole and
//! its events counted in `jobstore_job_events_dropped_total{sink}`.

pub mod context;
pub mod log;
pub mod otlp;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use jobstore_api::{Job, NewJob, Release};

use crate::journal::Record;
use crate::metrics::Metrics;
pub use context::{JobContext, RunContext};

/// Most job events a sink's queue holds; a batch that would go past it is
/// dropped (and counted).
pub const MAX_QUEUED: usize = 65_536;

/// What a job event is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Durable in the journal (acknowledged, or asked for by a run).
    Added,
    /// Taken by the store from the journal: new, or already there.
    Ingested,
    /// Refused by the store for good (kept in `rejected.jsonl`).
    Rejected,
    /// Claimed under a lease, by this daemon's runners or a remote worker.
    Claimed,
    /// Handed to one of this daemon's runners.
    Started,
    /// Its run ended with a status.
    Finished,
    /// Released by the store: archived, retried, handed back or deleted.
    Released,
    /// Its release was refused: the lease was no longer held.
    Lost,
}

impl Kind {
    /// Its name in the job log.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Added => "added",
            Kind::Ingested => "ingested",
            Kind::Rejected => "rejected",
            Kind::Claimed => "claimed",
            Kind::Started => "started",
            Kind::Finished => "finished",
            Kind::Released => "released",
            Kind::Lost => "lost",
        }
    }
}

/// Who acted on the jobs of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By<'a> {
    /// This daemon's own runners (the sysid).
    Daemon,
    /// A remote worker, by the name it fetched with.
    Worker(&'a str),
}

/// Where added jobs came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// An HTTP add.
    Http,
    /// A run's `J:` lines or a remote finish's `jobs`.
    Run,
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Source::Http => "http",
            Source::Run => "run",
        }
    }
}

/// One job of a batch, as the caller knows it.
#[derive(Debug, Clone, Copy)]
pub struct JobRef<'a> {
    /// The store id.
    pub id: &'a str,
    /// The store jobtype.
    pub jobtype: &'a str,
    /// Its hand-out number (0 before its first claim).
    pub attempt: u32,
    /// Its stored W3C `traceparent`.
    pub trace: Option<&'a str>,
}

impl<'a> JobRef<'a> {
    /// A claimed job.
    pub fn of_job(job: &'a Job) -> Self {
        JobRef {
            id: &job.id,
            jobtype: &job.jobtype,
            attempt: job.attempts,
            trace: trace_of_job(job),
        }
    }

    /// A job being journaled.
    pub fn of_record(record: &'a Record) -> Self {
        JobRef {
            id: &record.id,
            jobtype: &record.jobtype,
            attempt: 0,
            trace: trace_of_record(record),
        }
    }

    /// A job on its way into the store.
    pub fn of_new(job: &'a NewJob) -> Self {
        JobRef {
            id: &job.id,
            jobtype: &job.jobtype,
            attempt: 0,
            trace: trace_of_new(job),
        }
    }
}

/// The stored `traceparent` of a job.
pub fn trace_of_job(job: &Job) -> Option<&str> {
    job.trace.as_ref().map(|t| t.traceparent.as_str())
}

/// The `traceparent` a journaled job will be stored with.
pub fn trace_of_record(record: &Record) -> Option<&str> {
    record.trace.as_ref().map(|t| t.traceparent.as_str())
}

/// The `traceparent` a new job will be stored with.
pub fn trace_of_new(job: &NewJob) -> Option<&str> {
    job.trace.as_ref().map(|t| t.traceparent.as_str())
}

/// What one job event says beyond the job's names.
#[derive(Debug, Clone)]
pub enum Detail {
    /// Nothing more.
    None,
    /// Added from `source`.
    Added(Source),
    /// Ingested: whether the store created it (else it already existed).
    Ingested {
        /// Created now.
        new: bool,
    },
    /// Rejected by the store, and why.
    Rejected(String),
    /// Handed to a runner: the run's span, when spans are exported.
    Started(Option<RunContext>),
    /// A run ended.
    Finished(RunEnd),
    /// Released (or lost, when the store refused the release).
    Released(ReleaseEnd),
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunEnd {
    /// The status the run reported (0 when it ended without one: lost,
    /// stopped, not started).
    pub status: u16,
    /// What it counts as: `ok`, `failed`, `retry`, `error`, `timeout`,
    /// `cancelled`, `not_started`, `stopped`, `lost`.
    pub outcome: &'static str,
    /// When it began (handed to the runner, or to a remote worker).
    pub began: SystemTime,
    /// The run's span, when spans are exported.
    pub run: Option<RunContext>,
}

/// What a release did.
#[derive(Debug, Clone)]
pub struct ReleaseEnd {
    /// `archive`, `retry`, `unget` or `delete`.
    pub release: &'static str,
    /// The result code of an archive.
    pub code: Option<&'static str>,
    /// The status of the run it ends, when there was one.
    pub status: Option<u16>,
    /// The delay before a retry runs again.
    pub delay: Option<Duration>,
    /// What it counts as (`ok`, `failed`, `error`, `timeout`, `cancelled`,
    /// `not_started`, `stopped`, ...).
    pub outcome: &'static str,
}

impl ReleaseEnd {
    /// The release `how`, of a run that ended with `status`, counted as
    /// `outcome`.
    pub fn of(how: &Release, status: Option<u16>, outcome: &'static str) -> Self {
        let (release, code, delay, status) = match how {
            Release::Retry { delay } => ("retry", None, Some(*delay), status),
            Release::Unget => ("unget", None, None, status),
            Release::Archive(r) => ("archive", Some(r.code.as_str()), None, Some(r.status)),
            Release::Delete => ("delete", None, None, status),
            Release::Repeat { result, .. } => (
                "repeat",
                Some(result.code.as_str()),
                None,
                Some(result.status),
            ),
        };
        ReleaseEnd {
            release,
            code,
            status,
            delay,
            outcome,
        }
    }
}

/// A run as it was handed out, kept with the job until the run ends
/// (only while a sink is set).
#[derive(Debug, Clone)]
pub struct RunStart {
    /// When it was handed out.
    pub began: SystemTime,
    /// The job's stored `traceparent`.
    pub trace: Option<String>,
    /// The run's span, when spans are exported.
    pub run: Option<RunContext>,
}

impl RunStart {
    /// The job as events name it.
    pub fn job<'a>(&'a self, id: &'a str, jobtype: &'a str, attempt: u32) -> JobRef<'a> {
        JobRef {
            id,
            jobtype,
            attempt,
            trace: self.trace.as_deref(),
        }
    }

    /// How the run ended: `status` (0 for none), counted as `outcome`.
    pub fn end(&self, status: u16, outcome: &'static str) -> RunEnd {
        RunEnd {
            status,
            outcome,
            began: self.began,
            run: self.run,
        }
    }
}

/// One job of a batch, owned.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The store id.
    pub id: String,
    /// The store jobtype.
    pub jobtype: String,
    /// Its hand-out number (0 before its first claim).
    pub attempt: u32,
    /// Its stored `traceparent`.
    pub trace: Option<String>,
    /// What the event says of it.
    pub detail: Detail,
}

impl Entry {
    /// An entry of `job` with `detail`.
    pub fn new(job: JobRef<'_>, detail: Detail) -> Self {
        Entry {
            id: job.id.to_owned(),
            jobtype: job.jobtype.to_owned(),
            attempt: job.attempt,
            trace: job.trace.map(str::to_owned),
            detail,
        }
    }
}

/// A batch of job events of one kind, from one operation.
#[derive(Debug)]
pub struct Batch {
    /// The event.
    pub kind: Kind,
    /// When the operation began (the span's start).
    pub start: SystemTime,
    /// When it ended (the job log line's time, the span's end).
    pub end: SystemTime,
    /// The remote worker that acted, if one did.
    pub worker: Option<String>,
    /// The jobs.
    pub jobs: Vec<Entry>,
}

/// What a job's sink queue carries.
#[derive(Debug)]
pub(crate) enum Msg {
    /// Events.
    Batch(Arc<Batch>),
    /// Write or export what is pending, then answer and stop.
    Stop(std::sync::mpsc::Sender<()>),
}

/// A sink's queue: unbounded underneath, bounded by a count of the job
/// events in it, so a batch is refused without blocking when it is full.
struct Queue<S> {
    tx: S,
    queued: Arc<AtomicUsize>,
    sink: &'static str,
}

/// The sending half of a sink's queue.
trait SinkTx {
    /// Sends `msg`; false if the sink is gone.
    fn put(&self, msg: Msg) -> bool;
}

impl SinkTx for std::sync::mpsc::Sender<Msg> {
    fn put(&self, msg: Msg) -> bool {
        self.send(msg).is_ok()
    }
}

impl SinkTx for tokio::sync::mpsc::UnboundedSender<Msg> {
    fn put(&self, msg: Msg) -> bool {
        self.send(msg).is_ok()
    }
}

impl<S: SinkTx> Queue<S> {
    /// Queues `batch` unless the queue is full; false if it was dropped.
    fn offer(&self, batch: &Arc<Batch>) -> bool {
        let n = batch.jobs.len();
        let before = self.queued.fetch_add(n, Ordering::AcqRel);
        if before + n > MAX_QUEUED && before > 0 {
            self.queued.fetch_sub(n, Ordering::AcqRel);
            return false;
        }
        if self.tx.put(Msg::Batch(batch.clone())) {
            true
        } else {
            self.queued.fetch_sub(n, Ordering::AcqRel);
            false
        }
    }
}

/// Marks a batch as taken off a queue.
pub(crate) fn taken(queued: &AtomicUsize, batch: &Batch) {
    queued.fetch_sub(batch.jobs.len(), Ordering::AcqRel);
}

/// Which sinks to start.
#[derive(Debug, Clone, Default)]
pub struct EventsConfig {
    /// The job log.
    pub job_log: Option<log::JobLogConfig>,
    /// The OTLP/HTTP endpoint to export spans to.
    pub otlp: Option<otlp::OtlpConfig>,
}

impl EventsConfig {
    /// Whether any sink is set.
    pub fn any(&self) -> bool {
        self.job_log.is_some() || self.otlp.is_some()
    }
}

/// Why the sinks could not start.
#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    /// The job log could not be opened.
    #[error("job log {path}: {source}")]
    JobLog {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The OTLP exporter could not be built.
    #[error("OTLP endpoint {endpoint}: {message}")]
    Otlp {
        /// The endpoint.
        endpoint: String,
        /// Why.
        message: String,
    },
}

/// The seam (see the module docs): a cheap handle, `None` inside when no
/// sink is set.
#[derive(Clone, Default)]
pub struct JobEvents(Option<Arc<Sinks>>);

impl std::fmt::Debug for JobEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobEvents")
            .field("on", &self.0.is_some())
            .finish()
    }
}

/// The sinks of a [`JobEvents`] that has any.
pub struct Sinks {
    log: Option<Queue<std::sync::mpsc::Sender<Msg>>>,
    spans: Option<Queue<tokio::sync::mpsc::UnboundedSender<Msg>>>,
    metrics: Arc<Metrics>,
    log_thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
    span_task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl JobEvents {
    /// No sink: every event point is one branch.
    pub fn off() -> Self {
        JobEvents(None)
    }

    /// Starts the sinks `config` sets (none: [`off`](Self::off)) for the
    /// daemon `sysid`. Spans need a Tokio runtime.
    pub fn start(
        config: &EventsConfig,
        sysid: &str,
        metrics: Arc<Metrics>,
    ) -> Result<Self, EventsError> {
        if !config.any() {
            return Ok(JobEvents::off());
        }
        let mut log_thread = None;
        let log = match &config.job_log {
            Some(c) => {
                let queued = Arc::new(AtomicUsize::new(0));
                let (tx, handle) = log::start(c, sysid, queued.clone(), metrics.clone())?;
                log_thread = Some(handle);
                Some(Queue {
                    tx,
                    queued,
                    sink: "log",
                })
            }
            None => None,
        };
        let mut span_task = None;
        let spans = match &config.otlp {
            Some(c) => {
                let queued = Arc::new(AtomicUsize::new(0));
                let (tx, handle) = otlp::start(c, sysid, queued.clone(), metrics.clone())?;
                span_task = Some(handle);
                Some(Queue {
                    tx,
                    queued,
                    sink: "otlp",
                })
            }
            None => None,
        };
        Ok(JobEvents(Some(Arc::new(Sinks {
            log,
            spans,
            metrics,
            log_thread: std::sync::Mutex::new(log_thread),
            span_task: std::sync::Mutex::new(span_task),
        }))))
    }

    /// The sinks, if any: the one branch at every event point.
    #[inline]
    pub fn on(&self) -> Option<&Sinks> {
        self.0.as_deref()
    }

    /// Writes and exports what the sinks still hold, within `timeout`, and
    /// stops them. Events after this are dropped.
    pub async fn shutdown(&self, timeout: Duration) {
        let Some(s) = self.on() else { return };
        let mut acks = Vec::new();
        if let Some(q) = &s.log {
            let (tx, rx) = std::sync::mpsc::channel();
            if q.tx.put(Msg::Stop(tx)) {
                acks.push(rx);
            }
        }
        if let Some(q) = &s.spans {
            let (tx, rx) = std::sync::mpsc::channel();
            if q.tx.put(Msg::Stop(tx)) {
                acks.push(rx);
            }
        }
        let deadline = std::time::Instant::now() + timeout;
        let waited = tokio::task::spawn_blocking(move || {
            acks.into_iter().all(|rx| {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                rx.recv_timeout(left).is_ok()
            })
        })
        .await
        .unwrap_or(false);
        if !waited {
            tracing::warn!("job events still queued at shutdown were dropped");
        }
        let log_thread = s.log_thread.lock().ok().and_then(|mut h| h.take());
        if let Some(h) = log_thread
            && waited
        {
            let _ = tokio::task::spawn_blocking(move || h.join()).await;
        }
        let span_task = s.span_task.lock().ok().and_then(|mut h| h.take());
        if let Some(h) = span_task {
            if waited {
                let _ = h.await;
            } else {
                h.abort();
            }
        }
    }
}

impl Sinks {
    /// Hands `batch` to every sink; counts it where a queue is full.
    fn emit(&self, batch: Batch) {
        if batch.jobs.is_empty() {
            return;
        }
        let n = batch.jobs.len() as u64;
        let batch = Arc::new(batch);
        if let Some(q) = &self.log
            && !q.offer(&batch)
        {
            self.metrics.job_events_dropped(q.sink, n);
        }
        if let Some(q) = &self.spans
            && !q.offer(&batch)
        {
            self.metrics.job_events_dropped(q.sink, n);
        }
    }

    /// Whether spans are exported (runs then get their own span's context).
    pub fn spans(&self) -> bool {
        self.spans.is_some()
    }

    /// The context a run of job `id`, stored with `trace`, continues: with
    /// spans exported, a new span of the job's trace (see [`context`]);
    /// `None` when spans are not exported or the job's trace is not
    /// sampled (the runner then gets the stored `traceparent`).
    pub fn run_context(&self, id: &str, trace: Option<&str>) -> Option<RunContext> {
        if !self.spans() {
            return None;
        }
        JobContext::of(id, trace).map(|c| c.run())
    }

    /// A run of `job` handed out now.
    pub fn run_start(&self, job: &Job) -> RunStart {
        let trace = trace_of_job(job);
        RunStart {
            began: SystemTime::now(),
            run: self.run_context(&job.id, trace),
            trace: trace.map(str::to_owned),
        }
    }

    /// Records about to be appended to the journal from `source`, the
    /// operation having begun at `start`: [`Added::durable`] sends the
    /// event once they are.
    pub fn adding<'a>(
        &self,
        jobs: impl IntoIterator<Item = JobRef<'a>>,
        source: Source,
        start: SystemTime,
    ) -> Added {
        Added {
            jobs: jobs
                .into_iter()
                .map(|j| Entry::new(j, Detail::Added(source)))
                .collect(),
            start,
        }
    }

    /// `added`: jobs durable in the journal.
    fn added(&self, added: Added) {
        self.emit(Batch {
            kind: Kind::Added,
            start: added.start,
            end: SystemTime::now(),
            worker: None,
            jobs: added.jobs,
        });
    }

    /// `ingested`: the store took `jobs` in one call from `start` to now;
    /// `is_new` tells the jobs it created from those that existed.
    pub fn ingested<'a>(
        &self,
        jobs: impl IntoIterator<Item = JobRef<'a>>,
        is_new: impl Fn(&str) -> bool,
        start: SystemTime,
    ) {
        self.emit(Batch {
            kind: Kind::Ingested,
            start,
            end: SystemTime::now(),
            worker: None,
            jobs: jobs
                .into_iter()
                .map(|j| {
                    let new = is_new(j.id);
                    Entry::new(j, Detail::Ingested { new })
                })
                .collect(),
        });
    }

    /// `rejected`: the store refused `job` for good.
    pub fn rejected(&self, job: JobRef<'_>, error: &str, start: SystemTime) {
        self.emit(Batch {
            kind: Kind::Rejected,
            start,
            end: SystemTime::now(),
            worker: None,
            jobs: vec![Entry::new(job, Detail::Rejected(error.to_owned()))],
        });
    }

    /// `claimed`: one claim call from `start` to now gave `jobs` to `by`.
    pub fn claimed<'a>(
        &self,
        jobs: impl IntoIterator<Item = JobRef<'a>>,
        by: By<'_>,
        start: SystemTime,
    ) {
        self.emit(Batch {
            kind: Kind::Claimed,
            start,
            end: SystemTime::now(),
            worker: worker_of(by),
            jobs: jobs
                .into_iter()
                .map(|j| Entry::new(j, Detail::None))
                .collect(),
        });
    }

    /// `started`: jobs handed to this daemon's runners, each with its
    /// run's context when spans are exported.
    pub fn started<'a>(&self, jobs: impl IntoIterator<Item = (JobRef<'a>, Option<RunContext>)>) {
        let now = SystemTime::now();
        self.emit(Batch {
            kind: Kind::Started,
            start: now,
            end: now,
            worker: None,
            jobs: jobs
                .into_iter()
                .map(|(j, run)| Entry::new(j, Detail::Started(run)))
                .collect(),
        });
    }

    /// `finished`: runs of `by` ended.
    pub fn finished<'a>(&self, jobs: impl IntoIterator<Item = (JobRef<'a>, RunEnd)>, by: By<'_>) {
        let now = SystemTime::now();
        self.emit(Batch {
            kind: Kind::Finished,
            start: now,
            end: now,
            worker: worker_of(by),
            jobs: jobs
                .into_iter()
                .map(|(j, end)| Entry::new(j, Detail::Finished(end)))
                .collect(),
        });
    }

    /// `released` (or `lost`, for the jobs the store no longer gave this
    /// owner): one release call from `start` to now.
    pub fn released(&self, jobs: Vec<(Entry, bool)>, worker: Option<&str>, start: SystemTime) {
        let end = SystemTime::now();
        let (taken, lost): (Vec<_>, Vec<_>) = jobs.into_iter().partition(|(_, t)| *t);
        for (kind, jobs) in [(Kind::Released, taken), (Kind::Lost, lost)] {
            self.emit(Batch {
                kind,
                start,
                end,
                worker: worker.map(str::to_owned),
                jobs: jobs.into_iter().map(|(e, _)| e).collect(),
            });
        }
    }
}

fn worker_of(by: By<'_>) -> Option<String> {
    match by {
        By::Daemon => None,
        By::Worker(w) => Some(w.to_owned()),
    }
}

/// Jobs about to be journaled (see [`Sinks::adding`]).
#[derive(Debug)]
#[must_use = "send the event once the jobs are durable"]
pub struct Added {
    jobs: Vec<Entry>,
    start: SystemTime,
}

impl Added {
    /// The jobs are durable: send the event.
    pub fn durable(self, sinks: &Sinks) {
        sinks.added(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(n: usize) -> Batch {
        let now = SystemTime::now();
        Batch {
            kind: Kind::Claimed,
            start: now,
            end: now,
            worker: None,
            jobs: (0..n)
                .map(|i| {
                    let id = format!("acme-{i}");
                    Entry::new(
                        JobRef {
                            id: &id,
                            jobtype: "acme-t",
                            attempt: 1,
                            trace: None,
                        },
                        Detail::None,
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn a_full_queue_drops_batches_and_counts_them_without_waiting() {
        let metrics = Arc::new(Metrics::new());
        let (tx, rx) = std::sync::mpsc::channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let sinks = Sinks {
            log: Some(Queue {
                tx,
                queued: queued.clone(),
                sink: "log",
            }),
            spans: None,
            metrics: metrics.clone(),
            log_thread: std::sync::Mutex::new(None),
            span_task: std::sync::Mutex::new(None),
        };
        let dropped = || {
            metrics
                .job_events_dropped
                .get_or_create(&crate::metrics::SinkLabels { sink: "log" })
                .get()
        };
        // Nothing reads the queue: it fills up to MAX_QUEUED job events.
        let per = 1000;
        for _ in 0..MAX_QUEUED / per {
            sinks.emit(batch(per));
        }
        assert_eq!(dropped(), 0);
        assert_eq!(queued.load(Ordering::Acquire), MAX_QUEUED / per * per);
        sinks.emit(batch(per));
        assert_eq!(dropped(), per as u64, "the batch past the bound is dropped");
        // The reader takes batches off: room again.
        for _ in 0..2 {
            match rx.recv().unwrap() {
                Msg::Batch(b) => taken(&queued, &b),
                Msg::Stop(_) => unreachable!(),
            }
        }
        sinks.emit(batch(per));
        assert_eq!(dropped(), per as u64);
        assert!(
            metrics
                .render()
                .contains("jobstore_job_events_dropped_total{sink=\"log\"} 1000")
        );
    }

    #[test]
    fn off_has_no_sinks() {
        assert!(JobEvents::off().on().is_none());
        let on =
            JobEvents::start(&EventsConfig::default(), "node-1", Arc::new(Metrics::new())).unwrap();
        assert!(on.on().is_none(), "no sink configured: off");
    }
}
