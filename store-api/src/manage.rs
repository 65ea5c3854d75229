//! The values of the management operations: listing jobs
//! ([`JobQuery`], [`JobPage`], [`Cursor`]), editing, deleting, cancelling
//! and renewing ([`JobEdit`], [`DeleteOutcome`], [`CancelOutcome`],
//! [`Renewal`]).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::limits::MAX_PAGE;
use crate::types::{Job, JobState, LOCK_BLOCKED, LOCK_DONE, Millis, ResultCode};

/// Which jobtypes a [`JobQuery`] reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobtypeFilter {
    /// Every jobtype.
    All,
    /// These jobtypes (1..=[`MAX_QUERY_JOBTYPES`](crate::limits::MAX_QUERY_JOBTYPES),
    /// each a valid jobtype, none twice).
    Exact(Vec<String>),
    /// Every jobtype that starts with this prefix (1..=200 bytes of the
    /// jobtype alphabet): how a tenant's jobs (`acme:*`) are found.
    Prefix(String),
}

impl JobtypeFilter {
    /// These jobtypes.
    pub fn exact<I, S>(jobtypes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        JobtypeFilter::Exact(jobtypes.into_iter().map(Into::into).collect())
    }

    /// Whether `jobtype` passes the filter.
    pub fn matches(&self, jobtype: &str) -> bool {
        match self {
            JobtypeFilter::All => true,
            JobtypeFilter::Exact(list) => list.iter().any(|t| t == jobtype),
            JobtypeFilter::Prefix(prefix) => jobtype.starts_with(prefix.as_str()),
        }
    }

    /// The exclusive upper bound of the jobtypes starting with `prefix`
    /// (`prefix` followed by `~`, which sorts after every character a
    /// jobtype may hold), for range scans: `prefix <= jobtype < bound`
    /// compared bytewise.
    pub fn prefix_bound(prefix: &str) -> String {
        format!("{prefix}~")
    }
}

/// A half-open time range `[from, to)`; either end may be open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TimeRange {
    /// Included lower bound.
    pub from: Option<Millis>,
    /// Excluded upper bound.
    pub to: Option<Millis>,
}

impl TimeRange {
    /// The range `[from, to)`.
    pub fn new(from: Option<Millis>, to: Option<Millis>) -> Self {
        TimeRange { from, to }
    }

    /// Whether the range is open at both ends (filters nothing).
    pub fn is_open(&self) -> bool {
        self.from.is_none() && self.to.is_none()
    }

    /// Whether `t` lies in the range.
    pub fn contains(&self, t: Millis) -> bool {
        self.from.is_none_or(|f| t >= f) && self.to.is_none_or(|e| t < e)
    }
}

/// What [`JobStore::list_jobs`](crate::JobStore::list_jobs) reads: one
/// state of some jobtypes, narrowed by filters, one page at a time.
///
/// **Order** (the key a [`Cursor`] resumes after), per state:
///
/// | state | order | key |
/// |---|---|---|
/// | waiting, expired | as claims hand them out: priority high first, then `dt`, then `id` | `(priority, dt, id)` |
/// | scheduled | due first: `dt`, then `id` | `(dt, id)` |
/// | running | lease expiry first: `dt`, then `id` | `(dt, id)` |
/// | blocked | not-before first: `dt` (the not-before time), then `id` | `(dt, id)` |
/// | archived | newest first: `done_dt` descending, then `id` descending | `(done_dt, id)` |
///
/// Across several jobtypes the order is the same, merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobQuery {
    /// Which jobtypes.
    pub jobtypes: JobtypeFilter,
    /// Which state (at the call's `now`).
    pub state: JobState,
    /// For [`JobState::Archived`] only: the result codes to keep (a set;
    /// empty keeps every code).
    pub codes: Vec<ResultCode>,
    /// Jobs created (`create_dt`) in this range.
    pub created: TimeRange,
    /// For [`JobState::Archived`] only: jobs archived (`done_dt`) in this range.
    pub archived: TimeRange,
    /// At most this many jobs per page: `1..=`[`MAX_PAGE`].
    pub limit: usize,
    /// Resume after the last job of an earlier page of the same query.
    pub cursor: Option<Cursor>,
    /// Whether to return payloads; when `false`, every job's `data` is empty.
    pub with_data: bool,
    /// Only jobs with this tag. The order's index is followed and jobs
    /// without the tag are passed over, so a page may read more jobs than
    /// it returns (see [`JobStore::list_jobs`](crate::JobStore::list_jobs)).
    pub tag: Option<String>,
}

impl JobQuery {
    /// The first page (100 jobs, no payloads) of `state` jobs of every jobtype.
    pub fn new(state: JobState) -> Self {
        JobQuery {
            jobtypes: JobtypeFilter::All,
            state,
            codes: Vec::new(),
            created: TimeRange::default(),
            archived: TimeRange::default(),
            limit: 100,
            cursor: None,
            with_data: false,
            tag: None,
        }
    }

    /// Only jobs tagged `tag`.
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tag = Some(tag.into());
        self
    }

    /// Only these jobtypes.
    pub fn jobtypes<I, S>(mut self, jobtypes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.jobtypes = JobtypeFilter::exact(jobtypes);
        self
    }

    /// Only jobtypes starting with `prefix`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.jobtypes = JobtypeFilter::Prefix(prefix.into());
        self
    }

    /// Only archived jobs with these codes.
    pub fn codes(mut self, codes: impl IntoIterator<Item = ResultCode>) -> Self {
        self.codes = codes.into_iter().collect();
        self
    }

    /// Only jobs created in `range`.
    pub fn created(mut self, range: TimeRange) -> Self {
        self.created = range;
        self
    }

    /// Only jobs archived in `range`.
    pub fn archived(mut self, range: TimeRange) -> Self {
        self.archived = range;
        self
    }

    /// Pages of `limit` jobs.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// With payloads.
    pub fn with_data(mut self) -> Self {
        self.with_data = true;
        self
    }

    /// The page after `cursor`.
    pub fn after(mut self, cursor: Option<Cursor>) -> Self {
        self.cursor = cursor;
        self
    }

    /// Whether `job`, read at `now`, is one this query lists (every filter
    /// but the cursor).
    pub fn matches(&self, job: &Job, now: Millis) -> bool {
        let state = job.state(now);
        let state_ok = state == self.state;
        let code = job.result.as_ref().map_or(ResultCode::Ok, |r| r.code);
        state_ok
            && self.tag.as_ref().is_none_or(|t| job.tags.contains(t))
            && self.jobtypes.matches(&job.jobtype)
            && self.created.contains(job.create_dt)
            && (self.state != JobState::Archived
                || ((self.codes.is_empty() || self.codes.contains(&code))
                    && self.archived.contains(job.done_dt.unwrap_or_default())))
    }

    /// The sort key of `job` in this query's order (see the table above):
    /// comparing keys with [`JobQuery::before`] gives the page order.
    pub fn key_of(&self, job: &Job) -> SortKey {
        match self.state {
            JobState::Waiting | JobState::Expired => SortKey {
                priority: job.priority,
                dt: job.dt,
                id: job.id.clone(),
            },
            JobState::Scheduled | JobState::Running | JobState::Blocked => SortKey {
                priority: 0,
                dt: job.dt,
                id: job.id.clone(),
            },
            JobState::Archived => SortKey {
                priority: 0,
                dt: job.done_dt.unwrap_or_default(),
                id: job.id.clone(),
            },
        }
    }

    /// Whether key `a` comes before key `b` in this query's order.
    pub fn before(&self, a: &SortKey, b: &SortKey) -> bool {
        self.compare(a, b) == std::cmp::Ordering::Less
    }

    /// This query's order on keys.
    pub fn compare(&self, a: &SortKey, b: &SortKey) -> std::cmp::Ordering {
        match self.state {
            JobState::Waiting | JobState::Expired => b
                .priority
                .cmp(&a.priority)
                .then(a.dt.cmp(&b.dt))
                .then(a.id.cmp(&b.id)),
            JobState::Scheduled | JobState::Running | JobState::Blocked => {
                a.dt.cmp(&b.dt).then(a.id.cmp(&b.id))
            }
            JobState::Archived => b.dt.cmp(&a.dt).then(b.id.cmp(&a.id)),
        }
    }

    /// A fingerprint of every filter (not the limit, the cursor or
    /// `with_data`): a cursor carries it, so a cursor given to another
    /// query is refused instead of paging through the wrong jobs.
    pub fn fingerprint(&self) -> u64 {
        let mut codes: Vec<&str> = self.codes.iter().map(|c| c.as_str()).collect();
        codes.sort_unstable();
        codes.dedup();
        let mut jobtypes = match &self.jobtypes {
            JobtypeFilter::All => vec!["*".to_owned()],
            JobtypeFilter::Exact(list) => {
                let mut l: Vec<String> = list.iter().map(|t| format!("={t}")).collect();
                l.sort_unstable();
                l
            }
            JobtypeFilter::Prefix(p) => vec![format!("^{p}")],
        };
        jobtypes.push(state_name(self.state).to_owned());
        let text = format!(
            "{}|{}|{:?}|{:?}|{:?}|{:?}|{:?}",
            jobtypes.join(","),
            codes.join(","),
            self.tag,
            self.created.from,
            self.created.to,
            self.archived.from,
            self.archived.to
        );
        fnv1a64(text.as_bytes())
    }

    /// The cursor that resumes after `job` (the last of a page).
    pub fn cursor_after(&self, job: &Job) -> Cursor {
        Cursor {
            fingerprint: self.fingerprint(),
            key: self.key_of(job),
        }
    }

    /// The key to resume after: `None` for a first page; `InvalidInput`
    /// (naming `cursor`) if the cursor was made by another query.
    pub fn resume_after(&self) -> Result<Option<&SortKey>> {
        match &self.cursor {
            None => Ok(None),
            Some(c) if c.fingerprint == self.fingerprint() => Ok(Some(&c.key)),
            Some(_) => Err(Error::invalid(
                "cursor was made by a query with other filters; start again without a cursor",
            )),
        }
    }

    /// Whether `job` (which must match this query) lies after the cursor.
    pub fn after_cursor(&self, job: &Job) -> bool {
        match self.cursor.as_ref() {
            None => true,
            Some(c) => self.before(&c.key, &self.key_of(job)),
        }
    }

    /// The result codes this query keeps (every code when none is given).
    pub fn code_set(&self) -> Vec<ResultCode> {
        if self.codes.is_empty() {
            ResultCode::ALL.to_vec()
        } else {
            let mut codes = self.codes.clone();
            codes.sort_unstable();
            codes.dedup();
            codes
        }
    }
}

/// The lowercase name of a state: `waiting`, `scheduled`, `running`,
/// `expired`, `archived` (what [`JobState`]'s `FromStr` reads).
pub fn state_name(state: JobState) -> &'static str {
    match state {
        JobState::Blocked => "blocked",
        JobState::Waiting => "waiting",
        JobState::Scheduled => "scheduled",
        JobState::Running => "running",
        JobState::Expired => "expired",
        JobState::Archived => "archived",
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(state_name(*self))
    }
}

impl FromStr for JobState {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        [
            JobState::Waiting,
            JobState::Scheduled,
            JobState::Running,
            JobState::Expired,
            JobState::Archived,
            JobState::Blocked,
        ]
        .into_iter()
        .find(|st| state_name(*st) == s)
        .ok_or_else(|| {
            Error::invalid(format!(
                "unknown state {s:?}; states are waiting, scheduled, running, expired, archived, blocked"
            ))
        })
    }
}

/// A job's place in a [`JobQuery`]'s order (see its table): `priority` is
/// 0 where the order does not use it; `dt` is `dt`, or `done_dt` for
/// archived jobs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SortKey {
    /// The job's priority (waiting and expired), else 0.
    pub priority: i32,
    /// `dt`, or `done_dt` for archived jobs.
    pub dt: Millis,
    /// The job's id.
    pub id: String,
}

/// Where the next page of a [`JobQuery`] starts: the key of the last job
/// returned, and a fingerprint of the query's filters. Opaque to callers
/// (its text form is hex); stable while jobs are added, moved
/// and archived, because it names a position in the order, not an offset.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cursor {
    fingerprint: u64,
    key: SortKey,
}

impl Cursor {
    /// The key of the last job of the page before.
    pub fn key(&self) -> &SortKey {
        &self.key
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = format!(
            "1|{:016x}|{}|{}|{}",
            self.fingerprint, self.key.priority, self.key.dt, self.key.id
        );
        f.write_str(&hex::encode(text))
    }
}

impl FromStr for Cursor {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::invalid(format!("cursor {s:?} is not a cursor this store made"));
        let bytes = hex::decode(s).map_err(|_| bad())?;
        let text = String::from_utf8(bytes).map_err(|_| bad())?;
        let mut parts = text.splitn(5, '|');
        let (Some("1"), Some(fp), Some(priority), Some(dt), Some(id)) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(bad());
        };
        let fingerprint = u64::from_str_radix(fp, 16).map_err(|_| bad())?;
        let priority = priority.parse().map_err(|_| bad())?;
        let dt = dt.parse().map_err(|_| bad())?;
        crate::validate::id(id).map_err(|_| bad())?;
        crate::validate::time("cursor", dt).map_err(|_| bad())?;
        Ok(Cursor {
            fingerprint,
            key: SortKey {
                priority,
                dt,
                id: id.to_owned(),
            },
        })
    }
}

impl Serialize for Cursor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Cursor {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One page of [`JobStore::list_jobs`](crate::JobStore::list_jobs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPage {
    /// The jobs, in the query's order.
    pub jobs: Vec<Job>,
    /// The cursor of the next page; `None` when this page is the last
    /// (fewer than `limit` jobs matched past the cursor).
    pub next: Option<Cursor>,
}

impl JobPage {
    /// The page of `query` holding `jobs` (sorted, at most `limit + 1`
    /// long: a backend reads one job more than the limit to learn whether
    /// another page follows). Drops the extra job, and payloads unless
    /// the query asked for them.
    pub fn from_sorted(query: &JobQuery, mut jobs: Vec<Job>) -> JobPage {
        let more = jobs.len() > query.limit;
        jobs.truncate(query.limit);
        if !query.with_data {
            jobs.iter_mut().for_each(|j| j.data.clear());
        }
        let next = if more {
            jobs.last().map(|j| query.cursor_after(j))
        } else {
            None
        };
        JobPage { jobs, next }
    }
}

/// Changes to a waiting or scheduled job, for
/// [`JobStore::edit_jobs`](crate::JobStore::edit_jobs); fields left `None`
/// stay as they are, and at least one must be set.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct JobEdit {
    /// The job's id.
    pub id: String,
    /// A new priority.
    pub priority: Option<i32>,
    /// A new due time (`dt`).
    pub run_at: Option<Millis>,
    /// A new payload.
    pub data: Option<Vec<u8>>,
}

impl JobEdit {
    /// An edit of job `id` that changes nothing yet.
    pub fn new(id: impl Into<String>) -> Self {
        JobEdit {
            id: id.into(),
            ..JobEdit::default()
        }
    }

    /// Sets the priority.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Sets the due time.
    pub fn run_at(mut self, dt: Millis) -> Self {
        self.run_at = Some(dt);
        self
    }

    /// Sets the payload.
    pub fn data(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.data = Some(data.into());
        self
    }
}

impl fmt::Debug for JobEdit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobEdit")
            .field("id", &self.id)
            .field("priority", &self.priority)
            .field("run_at", &self.run_at)
            .field("data_len", &self.data.as_ref().map(Vec::len))
            .finish()
    }
}

/// What [`JobStore::delete_jobs`](crate::JobStore::delete_jobs) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteOutcome {
    /// Ids deleted (order unspecified).
    pub deleted: Vec<String>,
    /// Ids refused because the job is locked (running, or expired and not
    /// yet taken again); they are untouched (order unspecified).
    pub running: Vec<String>,
}

/// What [`JobStore::cancel_jobs`](crate::JobStore::cancel_jobs) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CancelOutcome {
    /// Free jobs archived as cancelled now (order unspecified).
    pub cancelled: Vec<String>,
    /// Locked jobs marked for cancelling: their holder learns at its next
    /// renewal ([`Renewal::cancelled`]) or claim ([`Job::cancel_requested`])
    /// and archives them (order unspecified).
    pub marked: Vec<String>,
}

/// What [`JobStore::renew_locks`](crate::JobStore::renew_locks) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Renewal {
    /// Ids renewed (order unspecified); the caller has lost the others.
    pub renewed: Vec<String>,
    /// The renewed ids that were marked for cancelling: the caller stops
    /// their runs and archives them as [`ResultCode::Cancelled`].
    pub cancelled: Vec<String>,
}

/// Whether `lock` is an owner's (not free, not archived).
pub fn is_locked(lock: &str) -> bool {
    !lock.is_empty() && lock != LOCK_DONE && lock != LOCK_BLOCKED
}

/// A query's limit, checked: `1..=`[`MAX_PAGE`].
pub(crate) fn page_limit(limit: usize) -> Result<()> {
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(Error::invalid(format!(
            "limit {limit} is outside 1..={MAX_PAGE}"
        )));
    }
    Ok(())
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_through_text() {
        let q = JobQuery::new(JobState::Archived).prefix("acme:");
        let job = Job {
            id: "a|b".replace('|', "-"),
            jobtype: "acme:mail".into(),
            data: vec![],
            priority: -3,
            dt: 5,
            lock: LOCK_DONE.into(),
            attempts: 1,
            create_dt: 1,
            done_dt: Some(7),
            result: None,
            cancel_requested: false,
            tags: vec![],
            history: vec![],
            claimed_due: None,
            trace: None,
            flow: None,
        };
        let c = q.cursor_after(&job);
        let back: Cursor = c.to_string().parse().unwrap();
        assert_eq!(back, c);
        assert_eq!(back.key().dt, 7);
        let q2 = q.clone().after(Some(back.clone()));
        assert_eq!(q2.resume_after().unwrap(), Some(&back.key));
        let other = JobQuery::new(JobState::Archived)
            .prefix("acme:")
            .codes([ResultCode::Failed])
            .after(Some(back));
        assert!(other.resume_after().is_err());
        for bad in ["", "!!", "MXx4", &hex::encode("1|zz|0|0|a")] {
            assert!(bad.parse::<Cursor>().is_err(), "{bad:?}");
        }
    }
}
