//! The values that cross the [`JobStore`](crate::JobStore) API.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::flow::{DependencyFailure, Duplicate, FlowState, JobFlow, Refusal, Repeat, Unique};
use crate::trace::TraceContext;

/// A point in time: milliseconds since the Unix epoch, UTC.
///
/// Every time-dependent operation takes `now` from the caller; backends never
/// read their own clock for job logic (see the crate docs, "Time").
pub type Millis = i64;

/// The `lock` of a job that nobody holds.
pub const LOCK_FREE: &str = "";
/// The `lock` of an archived job.
pub const LOCK_DONE: &str = "__done";
/// The `lock` of a job that waits for the jobs it depends on
/// ([`JobState::Blocked`]).
pub const LOCK_BLOCKED: &str = "__blocked";
/// A store may keep a blocked job's `dt` as this plus its not-before time:
/// above every other `dt` a store keeps (an archived job's is at most
/// `MAX_TIME + ARCHIVE_HORIZON_MS`, about 2.85e14), so no claim's `dt <=
/// now` reaches it, whatever the claimer's version. Reads give the
/// not-before time.
pub const BLOCKED_BASE_MS: Millis = 400_000_000_000_000;
/// How far past `now` an archived job's `dt` is pushed, so it never sorts
/// among eligible jobs: 1000 years of 365 days.
pub const ARCHIVE_HORIZON_MS: Millis = 1000 * 365 * 24 * 3600 * 1000;

/// The current time as [`Millis`], from the system clock. Daemons call this;
/// stores never do.
pub fn now_millis() -> Millis {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Millis::try_from(since.as_millis()).unwrap_or(Millis::MAX)
}

/// `d` in whole milliseconds, saturating (validation bounds every duration
/// that reaches a store well below the saturation point).
pub fn duration_ms(d: Duration) -> Millis {
    Millis::try_from(d.as_millis()).unwrap_or(Millis::MAX)
}

/// A job to insert.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewJob {
    /// Caller-chosen id, unique in the store (see [`crate::validate::id`]).
    pub id: String,
    /// `tenant-type` style name (see [`crate::validate::jobtype`]).
    pub jobtype: String,
    /// The opaque payload.
    pub data: Vec<u8>,
    /// Higher runs first.
    pub priority: i32,
    /// When the job first becomes eligible; `None` means at insert (`now`).
    pub run_at: Option<Millis>,
    /// Labels to find the job by ([`JobQuery::tag`](crate::JobQuery::tag)):
    /// at most [`MAX_TAGS`](crate::limits::MAX_TAGS), each 1 to
    /// [`MAX_TAG_LEN`](crate::limits::MAX_TAG_LEN) bytes of
    /// `A-Z a-z 0-9 _ . : -`, none twice. A store without
    /// [`Capabilities::tags`] refuses tagged jobs with `Unsupported`.
    pub tags: Vec<String>,
    /// The W3C trace context of the add, kept with the job so that its runs
    /// continue the producer's trace. Validated by every store
    /// ([`crate::validate::trace`]); a store without [`Capabilities::trace`]
    /// accepts it and keeps nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceContext>,
    /// What the job does beyond "run this" (a unique key, a repeat rule);
    /// `None` for a plain job. A store without the capability a flow field
    /// needs ([`Capabilities::unique_jobs`], [`Capabilities::repeat`])
    /// refuses the job with `Unsupported`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<Box<JobFlow>>,
}

impl NewJob {
    /// A job with priority 0 that is eligible at once.
    pub fn new(
        id: impl Into<String>,
        jobtype: impl Into<String>,
        data: impl Into<Vec<u8>>,
    ) -> Self {
        NewJob {
            id: id.into(),
            jobtype: jobtype.into(),
            data: data.into(),
            priority: 0,
            run_at: None,
            tags: Vec::new(),
            trace: None,
            flow: None,
        }
    }

    /// Sets the priority.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Makes the job eligible only from `dt` on.
    pub fn run_at(mut self, dt: Millis) -> Self {
        self.run_at = Some(dt);
        self
    }

    /// Sets the tags.
    pub fn tags<I, S>(mut self, tags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the trace context.
    pub fn trace(mut self, trace: TraceContext) -> Self {
        self.trace = Some(trace);
        self
    }

    /// Gives the job a unique key ([`Unique`]).
    pub fn unique(mut self, unique: Unique) -> Self {
        self.flow.get_or_insert_with(Default::default).unique = Some(unique);
        self
    }

    /// Its unique key, if it has one.
    pub fn unique_key(&self) -> Option<&Unique> {
        self.flow.as_ref().and_then(|f| f.unique.as_ref())
    }

    /// Makes the job repeat by `rule` ([`Repeat`]).
    pub fn repeat(mut self, rule: Repeat) -> Self {
        self.flow.get_or_insert_with(Default::default).repeat = Some(rule);
        self
    }

    /// Its repeat rule, if it has one.
    pub fn repeat_rule(&self) -> Option<&Repeat> {
        self.flow.as_ref().and_then(|f| f.repeat.as_ref())
    }

    /// Makes the job wait for `ids` (jobs already stored) before it is
    /// eligible ([`JobState::Blocked`]).
    pub fn depends_on<I, S>(mut self, ids: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.flow.get_or_insert_with(Default::default).depends_on =
            ids.into_iter().map(Into::into).collect();
        self
    }

    /// What a dependency that ends other than `ok` does to this job.
    pub fn on_dependency_failure(mut self, policy: DependencyFailure) -> Self {
        self.flow
            .get_or_insert_with(Default::default)
            .on_dependency_failure = policy;
        self
    }

    /// Hands its run its dependencies' outputs, not only their codes
    /// ([`JobFlow::with_outputs`](crate::JobFlow::with_outputs)).
    pub fn with_outputs(mut self) -> Self {
        self.flow.get_or_insert_with(Default::default).with_outputs = true;
        self
    }

    /// The ids it depends on (empty for most jobs).
    pub fn dependencies(&self) -> &[String] {
        self.flow.as_ref().map_or(&[], |f| f.depends_on.as_slice())
    }
}

impl fmt::Debug for NewJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewJob")
            .field("id", &self.id)
            .field("jobtype", &self.jobtype)
            .field("data_len", &self.data.len())
            .field("priority", &self.priority)
            .field("run_at", &self.run_at)
            .field("tags", &self.tags)
            .field("trace", &self.trace)
            .field("flow", &self.flow)
            .finish()
    }
}

/// What [`JobStore::add_jobs`](crate::JobStore::add_jobs) did with a batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddOutcome {
    /// Ids that were inserted, in batch order.
    pub new: Vec<String>,
    /// Ids that already existed and were left untouched, in batch order.
    pub existing: Vec<String>,
    /// Jobs not stored because another job holds their unique key, in
    /// batch order.
    pub duplicates: Vec<Duplicate>,
    /// Jobs not stored because a dependency is not a job of the store, in
    /// batch order. `new`, `existing`, `duplicates` and `refused`
    /// partition the batch.
    pub refused: Vec<Refusal>,
}

/// A job as stored.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// Unique id.
    pub id: String,
    /// Its jobtype.
    pub jobtype: String,
    /// The payload.
    pub data: Vec<u8>,
    /// Higher runs first.
    pub priority: i32,
    /// When the job is next eligible; while locked, the lease expiry.
    pub dt: Millis,
    /// [`LOCK_FREE`], the owner's sysid while claimed, or [`LOCK_DONE`].
    pub lock: String,
    /// How many times the job has been handed out.
    pub attempts: u32,
    /// When it was inserted.
    pub create_dt: Millis,
    /// When it was archived.
    pub done_dt: Option<Millis>,
    /// Set on archive; a job run again ([`JobStore::rerun_jobs`](crate::JobStore::rerun_jobs))
    /// keeps its last result until it is archived again, and a repeating
    /// job ([`Release::Repeat`]) keeps its last run's while it waits for
    /// the next.
    pub result: Option<JobResult>,
    /// Whether the job is marked for cancelling while locked
    /// ([`JobStore::cancel_jobs`](crate::JobStore::cancel_jobs)); cleared
    /// when its holder lets go of it.
    #[serde(default)]
    pub cancel_requested: bool,
    /// The tags it was added with.
    #[serde(default)]
    pub tags: Vec<String>,
    /// The newest [`MAX_HISTORY`](crate::limits::MAX_HISTORY) events, oldest
    /// first (empty in a store without [`Capabilities::history`]).
    #[serde(default)]
    pub history: Vec<crate::history::JobEvent>,
    /// The trace context it was added with ([`NewJob::trace`]), unchanged
    /// for the job's life; `None` in a store without [`Capabilities::trace`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceContext>,
    /// In a job returned by [`JobStore::claim_jobs`](crate::JobStore::claim_jobs):
    /// its `dt` before the claim, when it became due (for an expired job
    /// taken again, when its lease expired). `None` in every other read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_due: Option<Millis>,
    /// Its flow as stored (a unique key, a repeat rule); `None` on a
    /// plain job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<Box<FlowState>>,
}

impl Job {
    /// The state derived from `lock` and `dt` at `now`.
    pub fn state(&self, now: Millis) -> JobState {
        if self.lock == LOCK_DONE {
            JobState::Archived
        } else if self.lock == LOCK_BLOCKED {
            JobState::Blocked
        } else if self.lock == LOCK_FREE {
            if self.dt <= now {
                JobState::Waiting
            } else {
                JobState::Scheduled
            }
        } else if self.dt > now {
            JobState::Running
        } else {
            JobState::Expired
        }
    }

    /// Whether a claim at `now` may hand this job out (waiting or expired).
    pub fn is_eligible(&self, now: Millis) -> bool {
        matches!(self.state(now), JobState::Waiting | JobState::Expired)
    }
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job")
            .field("id", &self.id)
            .field("jobtype", &self.jobtype)
            .field("data_len", &self.data.len())
            .field("priority", &self.priority)
            .field("dt", &self.dt)
            .field("lock", &self.lock)
            .field("attempts", &self.attempts)
            .field("create_dt", &self.create_dt)
            .field("done_dt", &self.done_dt)
            .field("result", &self.result)
            .field("cancel_requested", &self.cancel_requested)
            .field("tags", &self.tags)
            .field("history_len", &self.history.len())
            .field("trace", &self.trace)
            .field("claimed_due", &self.claimed_due)
            .field("flow", &self.flow)
            .finish()
    }
}

/// A job's state, derived from `lock` and `dt`; never stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Waiting for the jobs it depends on ([`LOCK_BLOCKED`]): never
    /// eligible, never owned; `dt` is its not-before time.
    Blocked,
    /// Free and due: eligible.
    Waiting,
    /// Free, due later.
    Scheduled,
    /// Claimed, lease valid.
    Running,
    /// Claimed, lease expired: eligible again.
    Expired,
    /// Done; never eligible again.
    Archived,
}

/// The outcome code of an archived job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResultCode {
    /// Finished successfully (2xx).
    Ok,
    /// Finished, failed for good (4xx).
    Failed,
    /// Asked to be run again (1xx); archived only when limits are reached.
    Retry,
    /// Errored (5xx).
    Error,
    /// Cancelled before it ran.
    Cancelled,
    /// Ran out of attempts or age.
    Timeout,
}

impl ResultCode {
    /// Every code, in a fixed order.
    pub const ALL: [ResultCode; 6] = [
        ResultCode::Ok,
        ResultCode::Failed,
        ResultCode::Retry,
        ResultCode::Error,
        ResultCode::Cancelled,
        ResultCode::Timeout,
    ];

    /// The stored spelling: `ok`, `failed`, `retry`, `error`, `cancelled`, `timeout`.
    pub fn as_str(self) -> &'static str {
        match self {
            ResultCode::Ok => "ok",
            ResultCode::Failed => "failed",
            ResultCode::Retry => "retry",
            ResultCode::Error => "error",
            ResultCode::Cancelled => "cancelled",
            ResultCode::Timeout => "timeout",
        }
    }

    /// The code of a status class: 1xx retry, 2xx ok, 4xx failed, anything
    /// else error.
    pub fn from_status(status: u16) -> ResultCode {
        match status / 100 {
            1 => ResultCode::Retry,
            2 => ResultCode::Ok,
            4 => ResultCode::Failed,
            _ => ResultCode::Error,
        }
    }
}

impl fmt::Display for ResultCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ResultCode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        ResultCode::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| Error::invalid(format!("unknown result code {s:?}")))
    }
}

/// The result stored with an archived job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobResult {
    /// The outcome.
    pub code: ResultCode,
    /// The numeric status: 1xx retry, 2xx ok, 4xx failed, 5xx error; 0 when
    /// the job never ran (cancelled).
    pub status: u16,
    /// Output kept with the result, at most [`crate::limits::MAX_OUTPUT`]
    /// bytes; empty when there is none.
    pub output: Vec<u8>,
}

impl JobResult {
    /// A result with this code and status and no output.
    pub fn new(code: ResultCode, status: u16) -> Self {
        JobResult {
            code,
            status,
            output: Vec::new(),
        }
    }

    /// The result of a job that finished with `status` (code derived from its
    /// class).
    pub fn from_status(status: u16) -> Self {
        JobResult::new(ResultCode::from_status(status), status)
    }

    /// The result stored by [`JobStore::cancel_jobs`](crate::JobStore::cancel_jobs).
    pub fn cancelled() -> Self {
        JobResult::new(ResultCode::Cancelled, 0)
    }

    /// Attaches output, truncated to [`crate::limits::MAX_OUTPUT`] bytes.
    pub fn with_output(mut self, mut output: Vec<u8>) -> Self {
        output.truncate(crate::limits::MAX_OUTPUT);
        self.output = output;
        self
    }
}

/// How [`JobStore::release_jobs`](crate::JobStore::release_jobs) lets go of
/// a job (see [`JobRelease`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// Free again, eligible after `delay`: `lock = ""`, `dt = now + delay`.
    Retry {
        /// How long until it is eligible again.
        delay: Duration,
    },
    /// Handed back unstarted: `lock = ""`, `dt = now`, and `attempts` goes
    /// back down by one, so the hand-out is not counted.
    Unget,
    /// Done: `lock = "__done"`, `done_dt = now`, `result` stored, `dt = now +`
    /// [`ARCHIVE_HORIZON_MS`].
    Archive(JobResult),
    /// Removed from the store.
    Delete,
    /// A repeating job's run ended ok and it runs again at `at`:
    /// `lock = ""`, `dt = at`, `attempts = 0`, `result` stored as its last
    /// result (`done_dt` stays `None`), and the payload replaced by `data`
    /// when given. Its flow (unique key, rule) stays. Only on a store with
    /// [`Capabilities::repeat`].
    Repeat {
        /// When it is due again.
        at: Millis,
        /// The result of the run that ended.
        result: JobResult,
        /// The payload of the next run; `None` keeps the current one.
        data: Option<Vec<u8>>,
    },
}

impl Release {
    /// Bytes of result output this release stores: an archive's or a
    /// repeat's output, 0 for the others.
    pub fn output_len(&self) -> usize {
        match self {
            Release::Archive(result) | Release::Repeat { result, .. } => result.output.len(),
            _ => 0,
        }
    }
}

/// One job to let go of, and how; an entry of
/// [`JobStore::release_jobs`](crate::JobStore::release_jobs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRelease {
    /// The job's id.
    pub id: String,
    /// What becomes of it.
    pub how: Release,
    /// The status of the run this release ends, when there was one: kept
    /// in the history of a retry (an archive's status is its result's).
    pub status: Option<u16>,
}

impl JobRelease {
    /// Lets go of job `id` as `how` says.
    pub fn new(id: impl Into<String>, how: Release) -> Self {
        JobRelease {
            id: id.into(),
            how,
            status: None,
        }
    }

    /// Records the status of the run the release ends.
    pub fn status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }
}

/// A jobtype with eligible jobs, from [`JobStore::waiting_jobtypes`](crate::JobStore::waiting_jobtypes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitingJobtype {
    /// The jobtype.
    pub jobtype: String,
    /// How many jobs are eligible, at most the store's
    /// [`Capabilities::waiting_count_cap`].
    pub count: u64,
}

/// Counts of one jobtype's jobs by state, from [`JobStore::job_counts`](crate::JobStore::job_counts).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobCounts {
    /// The jobtype.
    pub jobtype: String,
    /// Eligible now: free and due, or with an expired lease.
    pub waiting: u64,
    /// Free, due later.
    pub scheduled: u64,
    /// Claimed with a valid lease.
    pub running: u64,
    /// Waiting for the jobs they depend on ([`JobState::Blocked`]).
    #[serde(default)]
    pub blocked: u64,
    /// Archived, by result code; codes with no jobs are absent.
    pub archived: BTreeMap<ResultCode, u64>,
}

impl JobCounts {
    /// All jobs of the jobtype.
    pub fn total(&self) -> u64 {
        self.waiting
            + self.scheduled
            + self.running
            + self.blocked
            + self.archived.values().sum::<u64>()
    }
}

/// How a jobtype runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handler {
    /// How the jobs run: the daemon's runners (`process`, `http`) or
    /// `remote` workers; 1..=32 bytes of `a-z 0-9 _ -`, opaque to stores.
    /// Stores keep it under its first name, `lang` (a column, a document
    /// field, the JSON key).
    #[serde(rename = "lang")]
    pub method: String,
    /// What the runner runs (a command line, a URL, a script).
    pub body: String,
    /// Execution-context id: jobtypes with the same `eid` share a context.
    pub eid: Option<String>,
    /// Run once when a context starts.
    pub before: Option<String>,
    /// Run before each batch.
    pub before_each: Option<String>,
    /// Run after each batch.
    pub after_each: Option<String>,
    /// How the daemon bounds the jobtype's runs; everything unset by
    /// default (the daemon's own defaults apply). Versions stored before
    /// limits existed read back with none set.
    #[serde(default)]
    pub limits: HandlerLimits,
}

/// Per-handler limits the daemon applies to a jobtype's jobs; `None` means
/// unset (the daemon's default). Stores keep them with the handler version
/// and give them back unchanged; the bounds are checked by
/// [`crate::validate::handler`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HandlerLimits {
    /// Hand-outs (claims) before the job is archived as
    /// [`ResultCode::Timeout`] instead of run again:
    /// `1..=`[`MAX_HANDLER_ATTEMPTS`](crate::limits::MAX_HANDLER_ATTEMPTS).
    pub max_attempts: Option<u32>,
    /// Age since `create_dt`, in ms, after which the job is archived as
    /// [`ResultCode::Timeout`]: `1..=`[`MAX_DELAY`](crate::limits::MAX_DELAY).
    pub max_age_ms: Option<u64>,
    /// Longest one run may take, in ms, before it is killed:
    /// `1..=`[`MAX_LEASE`](crate::limits::MAX_LEASE).
    pub time_limit_ms: Option<u64>,
    /// Most jobs of the jobtype running at once per daemon:
    /// `1..=`[`MAX_HANDLER_CONCURRENCY`](crate::limits::MAX_HANDLER_CONCURRENCY).
    pub concurrency: Option<u32>,
    /// First retry delay, in ms; it doubles per attempt, with jitter:
    /// `1..=`[`MAX_DELAY`](crate::limits::MAX_DELAY).
    pub backoff_base_ms: Option<u64>,
    /// Cap on the retry delay, in ms: `1..=`[`MAX_DELAY`](crate::limits::MAX_DELAY),
    /// and not below `backoff_base_ms` when both are set.
    pub backoff_max_ms: Option<u64>,
}

impl HandlerLimits {
    /// Whether no limit is set.
    pub fn is_unset(&self) -> bool {
        *self == HandlerLimits::default()
    }
}

impl Handler {
    /// A handler with this method and body and nothing else.
    pub fn new(method: impl Into<String>, body: impl Into<String>) -> Self {
        Handler {
            method: method.into(),
            body: body.into(),
            ..Handler::default()
        }
    }

    /// Sets the limits.
    pub fn limits(mut self, limits: HandlerLimits) -> Self {
        self.limits = limits;
        self
    }
}

/// One stored version of a jobtype's handler.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandlerVersion {
    /// The version's own id, chosen by the store.
    pub id: String,
    /// The jobtype it runs.
    pub jobtype: String,
    /// When it was set.
    pub dt: Millis,
    /// The handler.
    pub handler: Handler,
}

/// A held sysid: proof of holding, given back to renew and release it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SysidLease {
    /// The sysid.
    pub sysid: String,
    /// The holder's secret token.
    pub token: String,
    /// When the lease runs out unless renewed.
    pub expires: Millis,
}

impl fmt::Debug for SysidLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SysidLease")
            .field("sysid", &self.sysid)
            .field("token", &"<hidden>")
            .field("expires", &self.expires)
            .finish()
    }
}

/// What a store supports where backends legitimately differ. The
/// conformance suite reads it instead of skipping checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// The largest `data` accepted, in bytes; at least
    /// [`crate::limits::MIN_PAYLOAD_SUPPORT`].
    pub max_payload: usize,
    /// Counts from `waiting_jobtypes` stop at this number, if set.
    pub waiting_count_cap: Option<u64>,
    /// Whether [`JobStore::watch`](crate::JobStore::watch) delivers
    /// notifications (as opposed to plain polling).
    pub notifications: bool,
    /// Whether [`JobStore::list_jobs`](crate::JobStore::list_jobs) is offered.
    pub list_jobs: bool,
    /// Whether [`JobStore::rerun_jobs`](crate::JobStore::rerun_jobs),
    /// [`delete_jobs`](crate::JobStore::delete_jobs) and
    /// [`edit_jobs`](crate::JobStore::edit_jobs) are offered.
    pub edit_jobs: bool,
    /// Whether [`JobStore::cancel_jobs`](crate::JobStore::cancel_jobs)
    /// marks locked jobs (without it, they are left alone and only free
    /// jobs are cancelled).
    pub cancel_running: bool,
    /// Whether [`JobStore::pause_jobtype`](crate::JobStore::pause_jobtype)
    /// and [`paused_jobtypes`](crate::JobStore::paused_jobtypes) are offered.
    pub pause: bool,
    /// Whether jobs keep tags ([`NewJob::tags`], [`JobQuery::tag`](crate::JobQuery::tag)).
    pub tags: bool,
    /// Whether jobs keep their history ([`Job::history`]).
    pub history: bool,
    /// Whether [`JobStore::add_stats`](crate::JobStore::add_stats) and
    /// [`job_stats`](crate::JobStore::job_stats) are offered.
    pub stats: bool,
    /// Whether jobs keep their trace context ([`NewJob::trace`],
    /// [`Job::trace`]). A store without it still validates a new job's
    /// context, then drops it: its jobs read back with `trace: None`.
    pub trace: bool,
    /// Whether the schedule methods ([`JobStore::set_schedule`](crate::JobStore::set_schedule)
    /// and the others) are offered.
    pub schedules: bool,
    /// Whether jobs may have a unique key ([`NewJob::unique`],
    /// [`AddOutcome::duplicates`]).
    pub unique_jobs: bool,
    /// Whether jobs may repeat ([`NewJob::repeat`], [`Release::Repeat`]).
    pub repeat: bool,
    /// Whether jobs may depend on other jobs ([`NewJob::depends_on`],
    /// [`JobStore::job_waits`](crate::JobStore::job_waits)).
    pub dependencies: bool,
}

impl Capabilities {
    /// Capabilities with this payload limit, no count cap, and polling only.
    pub const fn new(max_payload: usize) -> Self {
        Capabilities {
            max_payload,
            waiting_count_cap: None,
            notifications: false,
            list_jobs: false,
            edit_jobs: false,
            cancel_running: false,
            pause: false,
            tags: false,
            history: false,
            stats: false,
            trace: false,
            schedules: false,
            unique_jobs: false,
            repeat: false,
            dependencies: false,
        }
    }

    /// Declares dependencies.
    pub const fn with_dependencies(mut self) -> Self {
        self.dependencies = true;
        self
    }

    /// Declares repeating jobs.
    pub const fn with_repeat(mut self) -> Self {
        self.repeat = true;
        self
    }

    /// Declares unique keys.
    pub const fn with_unique_jobs(mut self) -> Self {
        self.unique_jobs = true;
        self
    }

    /// Declares the schedule methods.
    pub const fn with_schedules(mut self) -> Self {
        self.schedules = true;
        self
    }

    /// Declares that jobs keep their trace context.
    pub const fn with_trace(mut self) -> Self {
        self.trace = true;
        self
    }

    /// Declares per-jobtype timing stats.
    pub const fn with_stats(mut self) -> Self {
        self.stats = true;
        self
    }

    /// Declares tags and history.
    pub const fn with_tags_and_history(mut self) -> Self {
        self.tags = true;
        self.history = true;
        self
    }

    /// Declares every management operation: listing, run again, delete,
    /// edit, cancelling locked jobs, pausing jobtypes.
    pub const fn with_management(mut self) -> Self {
        self.list_jobs = true;
        self.edit_jobs = true;
        self.cancel_running = true;
        self.pause = true;
        self
    }

    /// Sets the cap on waiting counts.
    pub const fn with_waiting_count_cap(mut self, cap: u64) -> Self {
        self.waiting_count_cap = Some(cap);
        self
    }

    /// Declares that `watch` delivers notifications.
    pub const fn with_notifications(mut self) -> Self {
        self.notifications = true;
        self
    }
}
