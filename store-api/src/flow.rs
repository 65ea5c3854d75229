//! What a job does beyond "run this": its flow. Today a flow is a unique
//! key ([`Unique`]), a repeat rule ([`Repeat`]) and dependencies
//! (`depends_on`, [`DependencyFailure`]); children and batches extend
//! [`JobFlow`] and [`FlowState`] (see `docs/scheduling-design.md`).
//!
//! A plain job has no flow (`NewJob::flow` and `Job::flow` are `None`),
//! and stores keep nothing for it: the flow is a nullable marker beside the
//! job, so plain jobs pay no statement, script call or round trip for it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What a new job does beyond "run this" ([`NewJob::flow`](crate::NewJob::flow)).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct JobFlow {
    /// Add nothing when a live job of the same jobtype holds this key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique: Option<Unique>,
    /// Run again by this rule each time a run ends ok
    /// ([`Release::Repeat`](crate::Release::Repeat)) instead of being
    /// archived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<Repeat>,
    /// Jobs this one waits for: it is blocked ([`JobState::Blocked`](crate::JobState::Blocked))
    /// until each has been archived, then waiting. Each must be a job
    /// stored before the add (in the same namespace); 1..=
    /// [`MAX_DEPENDENCIES`](crate::limits::MAX_DEPENDENCIES) ids, none
    /// twice, not the job's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// What a dependency that ends other than `ok` does to this job.
    #[serde(default)]
    pub on_dependency_failure: DependencyFailure,
    /// The daemon hands this job's run the outputs of its dependencies,
    /// not only their ids and codes. Only with `depends_on`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub with_outputs: bool,
}

impl JobFlow {
    /// Whether the flow asks for nothing (a job with it is a plain job).
    pub fn is_empty(&self) -> bool {
        self.unique.is_none()
            && self.repeat.is_none()
            && self.depends_on.is_empty()
            && !self.with_outputs
    }
}

/// What a dependency that ends other than `ok` (archived `failed`,
/// `error`, `timeout` or `cancelled`, or deleted: `cancelled`) does to the
/// job that waits for it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DependencyFailure {
    /// The waiter is archived `cancelled` (status 0, its output naming the
    /// dependency), which its own waiters see in turn: a cancel runs down
    /// a chain.
    #[default]
    Cancel,
    /// The dependency counts as done: the waiter runs once every
    /// dependency has ended, and reads their codes.
    Run,
    /// The edge is held ([`EdgeState::Held`]): the waiter stays blocked
    /// for an operator, who runs the dependency again (the edge resolves
    /// when it ends again), unblocks the waiter
    /// ([`JobStore::unblock_jobs`](crate::JobStore::unblock_jobs)),
    /// cancels or deletes it.
    Hold,
}

impl DependencyFailure {
    /// The name used on the wire (`cancel`, `run`, `hold`).
    pub fn name(self) -> &'static str {
        match self {
            DependencyFailure::Cancel => "cancel",
            DependencyFailure::Run => "run",
            DependencyFailure::Hold => "hold",
        }
    }
}

impl std::str::FromStr for DependencyFailure {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        match s {
            "cancel" => Ok(DependencyFailure::Cancel),
            "run" => Ok(DependencyFailure::Run),
            "hold" => Ok(DependencyFailure::Hold),
            _ => Err(crate::Error::invalid(format!(
                "on_dependency_failure: {s:?} is not cancel, run or hold"
            ))),
        }
    }
}

/// A job of an add that was not stored because of what it waits for
/// ([`AddOutcome::refused`](crate::AddOutcome::refused)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// The id asked for (nothing is stored under it).
    pub id: String,
    /// The field at fault: `depends_on[i]` (from 0).
    pub field: String,
    /// Why, for a person.
    pub reason: String,
}

impl Refusal {
    /// The refusal of job `id` whose dependency `i` (`dep`) is not a job
    /// of the store.
    pub fn unknown_dependency(id: &str, i: usize, dep: &str) -> Self {
        Refusal {
            id: id.to_owned(),
            field: format!("depends_on[{i}]"),
            reason: format!("dependency {dep:?} is not a job"),
        }
    }
}

/// How one edge of a waiter stands ([`WaitEdge::state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum EdgeState {
    /// The dependency is still live. An edge, once done, stays done: a
    /// dependency run again later does not make it pending again.
    Pending,
    /// The dependency ended with this result (deleted: `cancelled`, 0).
    Done {
        /// Its result code.
        code: crate::ResultCode,
        /// Its result status.
        status: u16,
    },
    /// The dependency ended other than `ok` with this result, and the
    /// waiter's policy is [`DependencyFailure::Hold`]: the waiter stays
    /// blocked. The edge resolves again when the dependency ends again
    /// (after a run again): `Done` if `ok`, else held with the new result.
    Held {
        /// Its result code.
        code: crate::ResultCode,
        /// Its result status.
        status: u16,
    },
    /// Passed over by an operator's
    /// [`unblock_jobs`](crate::JobStore::unblock_jobs) while pending or
    /// held: the dependency's end no longer reaches the waiter.
    Skipped,
}

impl EdgeState {
    /// Whether the edge still keeps its waiter blocked (pending or held).
    pub fn is_open(self) -> bool {
        matches!(self, EdgeState::Pending | EdgeState::Held { .. })
    }
}

/// One dependency of a waiter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitEdge {
    /// The dependency's id.
    pub target: String,
    /// How it stands.
    #[serde(flatten)]
    pub state: EdgeState,
}

/// What one job waits, or waited, for ([`JobStore::job_waits`](crate::JobStore::job_waits)).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waits {
    /// The waiter's id.
    pub id: String,
    /// Edges still pending.
    pub pending: u64,
    /// Edges held ([`EdgeState::Held`]).
    #[serde(default)]
    pub held: u64,
    /// Edges skipped by an operator ([`EdgeState::Skipped`]).
    #[serde(default)]
    pub skipped: u64,
    /// Edges resolved, by the dependency's result code.
    pub done: std::collections::BTreeMap<crate::ResultCode, u64>,
    /// One page of its edges, by target id.
    pub edges: Vec<WaitEdge>,
    /// The last target of the page when more follow.
    pub next: Option<String>,
}

impl Waits {
    /// The waits of job `id` from all its edges (in any order): the counts
    /// over every edge, and the page of at most `limit` edges after
    /// `after` in target order, `next` set when more follow.
    pub fn page(
        id: &str,
        edges: impl IntoIterator<Item = WaitEdge>,
        after: Option<&str>,
        limit: usize,
    ) -> Waits {
        let mut waits = Waits {
            id: id.to_owned(),
            ..Waits::default()
        };
        let mut edges: Vec<WaitEdge> = edges.into_iter().collect();
        for e in &edges {
            waits.count(e.state, 1);
        }
        edges.sort_by(|a, b| a.target.cmp(&b.target));
        edges.retain(|e| after.is_none_or(|a| e.target.as_str() > a));
        edges.truncate(limit.saturating_add(1));
        waits.edges = edges;
        waits.end_page(limit);
        waits
    }

    /// Counts `n` edges in `state`.
    pub fn count(&mut self, state: EdgeState, n: u64) {
        match state {
            EdgeState::Pending => self.pending += n,
            EdgeState::Held { .. } => self.held += n,
            EdgeState::Skipped => self.skipped += n,
            EdgeState::Done { code, .. } => *self.done.entry(code).or_default() += n,
        }
    }

    /// Ends a page read with one edge more than `limit`: that edge says a
    /// next page follows (`next`, the last target kept).
    pub fn end_page(&mut self, limit: usize) {
        if self.edges.len() > limit {
            self.edges.truncate(limit);
            self.next = self.edges.last().map(|e| e.target.clone());
        }
    }
}

/// The rule of a repeating job: when a run ends ok, the daemon computes
/// the next time from it and releases the job with
/// [`Release::Repeat`](crate::Release::Repeat), so the job is free again,
/// due then, instead of archived. Stores keep it as opaque text
/// ([`Repeat::to_text`]) and never read the rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Repeat {
    /// Cron (5 or 6 fields) or the repeat syntax, as schedules take it:
    /// 1..=[`MAX_RULE_LEN`](crate::limits::MAX_RULE_LEN) printable bytes.
    pub rule: String,
    /// The IANA time zone the rule counts in: 1..=
    /// [`MAX_TIME_ZONE_LEN`](crate::limits::MAX_TIME_ZONE_LEN) bytes
    /// without spaces, `UTC` by default.
    #[serde(default = "utc")]
    pub time_zone: String,
}

fn utc() -> String {
    "UTC".to_owned()
}

impl Repeat {
    /// A rule counted in UTC.
    pub fn new(rule: impl Into<String>) -> Self {
        Repeat {
            rule: rule.into(),
            time_zone: utc(),
        }
    }

    /// Counts the rule in `time_zone`.
    pub fn time_zone(mut self, time_zone: impl Into<String>) -> Self {
        self.time_zone = time_zone.into();
        self
    }

    /// The text a store keeps: the rule alone in UTC, else
    /// `TZ=<zone> <rule>` (as cron's `CRON_TZ=` lines).
    pub fn to_text(&self) -> String {
        if self.time_zone == "UTC" {
            self.rule.clone()
        } else {
            format!("TZ={} {}", self.time_zone, self.rule)
        }
    }

    /// The rule of [`to_text`](Self::to_text)'s text.
    pub fn from_text(text: &str) -> Self {
        match text
            .strip_prefix("TZ=")
            .and_then(|rest| rest.split_once(' '))
        {
            Some((zone, rule)) => Repeat::new(rule).time_zone(zone),
            None => Repeat::new(text),
        }
    }
}

/// A unique key: at most one live job of a jobtype holds it
/// ([`JobStore::add_jobs`](crate::JobStore::add_jobs)).
///
/// The key is held from the add while the job is waiting, scheduled,
/// running or expired, and freed in the same atomic change that archives
/// or deletes the job, whichever way (a release, a cancel, a delete), also
/// when the daemon that ran it crashed: another claims it after the lease
/// and archives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Unique {
    /// 1..=[`MAX_UNIQUE_KEY_LEN`](crate::limits::MAX_UNIQUE_KEY_LEN)
    /// bytes, no control characters. Scoped by the jobtype.
    pub key: String,
    /// Also a duplicate while a job with this key was archived less than
    /// `window` ago (any result code), at most
    /// [`MAX_DELAY`](crate::limits::MAX_DELAY).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Duration>,
    /// What a duplicate add does to the job holding the key.
    #[serde(default)]
    pub on_conflict: OnConflict,
}

impl Unique {
    /// A key held while the job is live, kept on conflict.
    pub fn new(key: impl Into<String>) -> Self {
        Unique {
            key: key.into(),
            window: None,
            on_conflict: OnConflict::Keep,
        }
    }

    /// Also holds the key for `window` after the job is archived.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = Some(window);
        self
    }

    /// Sets what a duplicate does to the holder.
    pub fn on_conflict(mut self, on_conflict: OnConflict) -> Self {
        self.on_conflict = on_conflict;
        self
    }
}

/// What a duplicate add does to the job holding its key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnConflict {
    /// Leave the holder as it is.
    #[default]
    Keep,
    /// Give the holder the duplicate's payload if it is free (waiting or
    /// scheduled), recorded as `Edited`. A running, expired or archived
    /// holder is left as it is.
    ReplaceData,
}

impl OnConflict {
    /// The name used on the wire (`keep`, `replace_data`).
    pub fn name(self) -> &'static str {
        match self {
            OnConflict::Keep => "keep",
            OnConflict::ReplaceData => "replace_data",
        }
    }
}

impl std::str::FromStr for OnConflict {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        match s {
            "keep" => Ok(OnConflict::Keep),
            "replace_data" => Ok(OnConflict::ReplaceData),
            _ => Err(crate::Error::invalid(format!(
                "on_conflict: {s:?} is not keep or replace_data"
            ))),
        }
    }
}

/// A job's flow as stored, on every read ([`Job::flow`](crate::Job::flow)).
/// `None` on a plain job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FlowState {
    /// The unique key it was added with. An archived job keeps it (the
    /// key is free again), so a run again takes it back if nobody holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique_key: Option<String>,
    /// The repeat rule it was added with; kept when it is archived, so a
    /// run again repeats again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<Repeat>,
    /// How many of its dependencies keep it blocked: pending, or held
    /// ([`EdgeState::is_open`]). 0 once none is, or for a job added
    /// without dependencies.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pending: u32,
    /// It was added with dependencies: [`JobStore::job_waits`](crate::JobStore::job_waits)
    /// has something to say.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub has_edges: bool,
    /// What a dependency that ends other than `ok` does to it (only
    /// meaningful with `has_edges`).
    #[serde(default)]
    pub on_dependency_failure: DependencyFailure,
    /// Its run is handed its dependencies' outputs ([`JobFlow::with_outputs`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub with_outputs: bool,
}

/// The dependencies part of a stored flow, as a backend reads it back
/// ([`FlowState::from_stored`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoredDeps {
    /// Edges pending or held.
    pub pending: u32,
    /// The policy it was added with.
    pub policy: DependencyFailure,
    /// [`JobFlow::with_outputs`].
    pub with_outputs: bool,
}

impl StoredDeps {
    /// `pending` open edges under `policy`, without outputs.
    pub fn new(pending: u32, policy: DependencyFailure) -> Self {
        StoredDeps {
            pending,
            policy,
            with_outputs: false,
        }
    }

    /// Sets [`with_outputs`](Self::with_outputs).
    pub fn with_outputs(mut self, with_outputs: bool) -> Self {
        self.with_outputs = with_outputs;
        self
    }
}

impl From<(u32, DependencyFailure)> for StoredDeps {
    fn from((pending, policy): (u32, DependencyFailure)) -> Self {
        StoredDeps::new(pending, policy)
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl FlowState {
    /// The stored flow of a job added with `key`.
    pub fn unique(key: impl Into<String>) -> Self {
        FlowState {
            unique_key: Some(key.into()),
            ..FlowState::default()
        }
    }

    /// The stored flow of a job added with `flow` (`None` for a plain job).
    pub fn of(flow: &JobFlow) -> Option<Box<FlowState>> {
        let state = FlowState {
            unique_key: flow.unique.as_ref().map(|u| u.key.clone()),
            repeat: flow.repeat.clone(),
            pending: u32::try_from(flow.depends_on.len()).unwrap_or(u32::MAX),
            has_edges: !flow.depends_on.is_empty(),
            on_dependency_failure: if flow.depends_on.is_empty() {
                DependencyFailure::default()
            } else {
                flow.on_dependency_failure
            },
            with_outputs: flow.with_outputs && !flow.depends_on.is_empty(),
        };
        (state != FlowState::default()).then(|| Box::new(state))
    }

    /// The stored flow from its columns or fields (`None` when both are
    /// absent): what every backend's read builds.
    pub fn from_parts(unique_key: Option<String>, repeat: Option<&str>) -> Option<Box<FlowState>> {
        Self::from_stored(unique_key, repeat, None::<StoredDeps>)
    }

    /// [`from_parts`](Self::from_parts) with the dependencies a job was
    /// added with, when it had any: how many still keep it blocked, its
    /// policy, and whether its run gets their outputs.
    pub fn from_stored(
        unique_key: Option<String>,
        repeat: Option<&str>,
        deps: Option<impl Into<StoredDeps>>,
    ) -> Option<Box<FlowState>> {
        let deps: Option<StoredDeps> = deps.map(Into::into);
        let state = FlowState {
            unique_key,
            repeat: repeat.map(Repeat::from_text),
            pending: deps.map_or(0, |d| d.pending),
            has_edges: deps.is_some(),
            on_dependency_failure: deps.map_or_else(DependencyFailure::default, |d| d.policy),
            with_outputs: deps.is_some_and(|d| d.with_outputs),
        };
        (state != FlowState::default()).then(|| Box::new(state))
    }
}

/// A job of an add that was not stored because another job holds its key
/// ([`AddOutcome::duplicates`](crate::AddOutcome::duplicates)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Duplicate {
    /// The id asked for (nothing is stored under it).
    pub id: String,
    /// The job holding the key: live, or archived inside the window.
    pub existing: String,
    /// Whether the holder got the new payload ([`OnConflict::ReplaceData`]).
    pub replaced: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deps_policies_read_back_by_name() {
        for (policy, name) in [
            (DependencyFailure::Cancel, "cancel"),
            (DependencyFailure::Run, "run"),
            (DependencyFailure::Hold, "hold"),
        ] {
            assert_eq!(policy.name(), name);
            assert_eq!(name.parse::<DependencyFailure>().unwrap(), policy);
        }
        let stored: StoredDeps = (3, DependencyFailure::Hold).into();
        assert_eq!(stored, StoredDeps::new(3, DependencyFailure::Hold));
        assert_eq!(
            (stored.pending, stored.policy, stored.with_outputs),
            (3, DependencyFailure::Hold, false)
        );
        let flow = FlowState::from_stored(None, None, Some(stored.with_outputs(true))).unwrap();
        assert_eq!(
            (
                flow.pending,
                flow.has_edges,
                flow.on_dependency_failure,
                flow.with_outputs
            ),
            (3, true, DependencyFailure::Hold, true)
        );
        assert_eq!(FlowState::from_stored(None, None, None::<StoredDeps>), None);
        let e = "wait".parse::<DependencyFailure>().unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("cancel, run or hold"), "{e}");
    }
}
