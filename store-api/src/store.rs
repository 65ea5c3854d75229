//! The [`JobStore`] trait.

use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::Result;
use crate::limits::DEFAULT_POLL_INTERVAL;
use crate::manage::*;
use crate::stats::{StatsBucket, StatsDelta, StatsQuery};
use crate::types::*;
use crate::watch::WorkWatcher;

/// A durable job store. Every backend implements this trait and passes the
/// conformance suite (`jobstore-conformance`); the daemon talks to nothing
/// else.
///
/// # Contract
///
/// **Time.** Every operation that depends on time takes `now` ([`Millis`],
/// UTC) from the caller; a backend never reads its server's clock for job
/// logic. Daemons sharing a store therefore need synchronized clocks; the
/// lease length is the margin for clock skew (keep skew well below it).
///
/// **States** are derived from `lock` and `dt`, never stored twice
/// (see [`Job::state`]):
/// waiting (`lock == ""`, `dt <= now`), scheduled (`lock == ""`, `dt > now`),
/// running (`lock == owner`, `dt > now`), expired (`lock == owner`,
/// `dt <= now`: eligible again, as if waiting), archived (`lock == "__done"`).
///
/// **Locked by owner** means `lock == owner`, whether or not the lease has
/// expired: until another claimer takes an expired job, its owner may still
/// renew, release or update it. Once taken, the old owner's calls change
/// nothing (fencing).
///
/// **Validation** happens before any I/O through [`crate::validate`], so
/// every backend rejects the same inputs with the same
/// [`ErrorKind`](crate::ErrorKind): malformed ids, jobtypes, sysids and
/// times, limits above [`crate::limits`], are `InvalidInput`; payloads above
/// [`Capabilities::max_payload`] and batches above
/// [`MAX_BATCH`](crate::limits::MAX_BATCH) are `TooLarge`.
///
/// **Atomicity.** Every state change is atomic per job. Batch operations are
/// not all-or-nothing: each job in a batch is handled on its own, and the
/// return value says which jobs were affected. Backends do each batch in one
/// round trip (or a small fixed number), never one per job.
///
/// **Guarantees.** While a lease is valid no other caller, in any process,
/// is handed the same job. A job that is added is eventually archived or
/// deleted as long as some daemon keeps running; a crash delays it by at
/// most one lease. Stores opened on different namespaces (key prefix,
/// schema, database) share nothing. Errors are distinct kinds with the cause
/// attached; a store never panics on any input.
///
/// **History** (stores that declare [`Capabilities::history`]). Every job
/// keeps its newest [`MAX_HISTORY`](crate::limits::MAX_HISTORY)
/// [`JobEvent`](crate::JobEvent)s, oldest first, each with the operation's `now`, who
/// (`by`: the owner for claims and releases, empty otherwise), the job's
/// attempts after the change, and what happened. Each job an operation
/// changes gets exactly one event, in the same atomic change:
/// [`add_jobs`](JobStore::add_jobs) `Added` (an existing id gets none);
/// [`claim_jobs`](JobStore::claim_jobs) `Claimed`;
/// [`release_jobs`](JobStore::release_jobs) `Retried { delay_ms, status }`
/// (the entry's [`JobRelease::status`]), `HandedBack`, or
/// `Archived { code, status }` (a delete leaves nothing);
/// [`cancel_jobs`](JobStore::cancel_jobs) `Cancelled` for a free job,
/// `CancelRequested` for each marking of a locked one;
/// [`rerun_jobs`](JobStore::rerun_jobs) `Rerun { delay_ms }`;
/// [`edit_jobs`](JobStore::edit_jobs) `Edited`. Renewals, payload updates
/// and purges record nothing. Events are part of the job: a job listed or
/// read carries them.
///
/// **Tags** (stores that declare [`Capabilities::tags`]): a job keeps the
/// [`NewJob::tags`] it was added with, unchanged, and
/// [`JobQuery::tag`] selects the jobs carrying one. A store without tags
/// refuses a tagged add with `Unsupported`.
///
/// **Trace context** (stores that declare [`Capabilities::trace`]): a job
/// keeps the [`NewJob::trace`] it was added with (a W3C `traceparent`, and
/// its `tracestate` if any), byte for byte, for its whole life: every read
/// ([`claim_jobs`](JobStore::claim_jobs), [`get_job`](JobStore::get_job),
/// [`list_jobs`](JobStore::list_jobs)) carries it, and no operation changes
/// it (retries, hand-backs, runs again, edits; an add of an existing id
/// leaves the stored one). Every store validates it
/// ([`crate::validate::trace`]): a malformed one is `InvalidInput` naming
/// `traceparent` or `tracestate`. A store without the capability accepts a
/// job with a valid context and keeps nothing of it: its jobs read back with
/// `trace: None`. Trace context is observability, never a reason to refuse
/// a job.
///
/// **Wrappers.** A store that wraps another (metrics, fault injection, a
/// test gate) implements [`StoreLayer`](crate::layer::StoreLayer) instead
/// of this trait: it writes only the methods it changes, or one hook
/// around every call, and is a `JobStore` through a blanket impl. `Arc<S>`
/// and `Box<S>` are stores that way.
#[async_trait]
pub trait JobStore: Send + Sync + Debug {
    /// What this store supports where backends differ.
    fn capabilities(&self) -> Capabilities;

    /// Inserts each job with `lock = ""`, `attempts = 0`, `create_dt = now`,
    /// `dt = run_at.unwrap_or(now)`. A job whose id already exists is left
    /// untouched (whatever its state) and reported in
    /// [`AddOutcome::existing`], not as an error: journal replays and client
    /// idempotency keys rely on this. An id may appear only once per batch.
    /// Validation failures reject the whole batch before anything is stored.
    ///
    /// **Unique keys** (stores that declare [`Capabilities::unique_jobs`];
    /// others refuse a job with a key as `Unsupported`). The id is checked
    /// first: an existing id is `existing`, whatever its key. Then the key
    /// ([`Unique`](crate::Unique)), scoped by the jobtype: if a live job
    /// (waiting, scheduled, running or expired) of the same jobtype holds
    /// it, or, with a `window`, a job of the same jobtype and key was
    /// archived at `done_dt > now - window` (the most recent one is named;
    /// a deleted or purged job no longer counts, and a store may then stop
    /// seeing older archives of the key, ending the window early), nothing
    /// is stored and the job is reported in [`AddOutcome::duplicates`]
    /// naming that job. With [`OnConflict::ReplaceData`](crate::OnConflict::ReplaceData)
    /// a free (waiting or scheduled) live holder gets the duplicate's
    /// payload and the event `Edited` (`replaced: true`); any other holder
    /// is left as it is. Two jobs with one key in a batch: the first is
    /// added (or meets the holder), the second is a duplicate of it.
    /// Concurrent adds with one key, from any number of handles, store
    /// exactly one job. The key is freed in the same atomic change that
    /// archives or deletes its job, by every path
    /// ([`release_jobs`](JobStore::release_jobs) archive or delete,
    /// [`cancel_jobs`](JobStore::cancel_jobs),
    /// [`delete_jobs`](JobStore::delete_jobs)); a job whose daemon crashed
    /// is archived by the next claimer after its lease, which frees it.
    /// Every read carries the key ([`Job::flow`]).
    ///
    /// **Repeat rules** (stores that declare [`Capabilities::repeat`];
    /// others refuse a job with a rule as `Unsupported`): the rule is kept
    /// as given ([`Repeat::to_text`](crate::Repeat::to_text)), never read
    /// by the store, and carried by every read, also once the job is
    /// archived ([`Job::flow`]); the daemon releases the job with
    /// [`Release::Repeat`] when a run ends ok. Invalid rule text
    /// ([`validate::repeat`](crate::validate::repeat)) is `InvalidInput`.
    ///
    /// **Dependencies** (stores that declare [`Capabilities::dependencies`];
    /// others refuse a job with `depends_on` as `Unsupported`). Each id of
    /// `depends_on` must be a job stored before this call (a job earlier in
    /// the same batch does not count, nor a purged one); a job with an
    /// unknown one is not stored and is listed in [`AddOutcome::refused`]
    /// (field `depends_on[i]`), the others of the batch are added as usual.
    /// The id is checked first (an existing id is `existing`), then the
    /// unique key, then the dependencies. A dependency already archived is
    /// resolved at once with its result code. If a resolved dependency
    /// ended other than `ok` and the policy is
    /// [`DependencyFailure::Cancel`](crate::DependencyFailure::Cancel), the
    /// job is stored archived `cancelled` (status 0, output
    /// `[jobstore] dependency <id> ended <code>`, `done_dt = now`); under
    /// [`Hold`](crate::DependencyFailure::Hold) that edge is stored held
    /// ([`EdgeState::Held`](crate::EdgeState::Held)); else it
    /// is stored [`JobState::Blocked`] (`lock =`
    /// [`LOCK_BLOCKED`], `dt` its not-before time, `run_at` or `now`) while
    /// any edge is pending or held, or free as a plain job when none is. While
    /// blocked it is never claimed, renewed or released, and counts and
    /// lists as blocked. When its last dependency ends (see
    /// [`release_jobs`](JobStore::release_jobs)) it becomes free with `dt =
    /// max(not_before, now)` and the event
    /// [`EventKind::Unblocked`](crate::EventKind::Unblocked), and its
    /// jobtype is notified as for an add. Every read carries
    /// [`FlowState::pending`](crate::FlowState::pending), the policy and
    /// [`with_outputs`](crate::JobFlow::with_outputs) (which needs
    /// `depends_on`, else the batch is `InvalidInput`);
    /// [`job_waits`](JobStore::job_waits) lists the dependencies. Invalid
    /// dependencies ([`validate::dependencies`](crate::validate::dependencies):
    /// its own id, an id twice, more than
    /// [`MAX_DEPENDENCIES`](crate::limits::MAX_DEPENDENCIES)) reject the
    /// whole batch.
    async fn add_jobs(&self, jobs: &[NewJob], now: Millis) -> Result<AddOutcome>;

    /// The jobtypes that have at least one eligible job (waiting or expired)
    /// at `now` and are not paused, each with its count of eligible jobs, capped at
    /// [`Capabilities::waiting_count_cap`] but never over-reported. Order is
    /// unspecified. (Counts are exact when all callers' clocks agree; with
    /// clock skew a job can count as eligible early by up to the skew.)
    async fn waiting_jobtypes(&self, now: Millis) -> Result<Vec<WaitingJobtype>>;

    /// Atomically picks up to `limit` eligible jobs of `jobtype` (none while
    /// the jobtype is paused, see [`JobStore::pause_jobtype`]), ordered by
    /// priority (high first), then `dt`, then `id`; sets `lock = owner`,
    /// `dt = now + lease`, `attempts += 1`; and returns them as stored after
    /// the change, in that order, each with [`Job::claimed_due`] set to its
    /// `dt` before the change. While the lease is valid no other caller
    /// can claim the same job. `limit == 0` returns nothing; a limit above
    /// [`MAX_CLAIM`](crate::limits::MAX_CLAIM) is `InvalidInput`.
    ///
    /// A backend that makes due jobs eligible lazily (moving them from a
    /// schedule into a ready queue inside the claim) may bound that work per
    /// claim, to keep claims O(log n); the bound must be at least
    /// `MAX_CLAIM` and documented. Only when more jobs than the bound fall due
    /// between two claims may a claim hand out a later job before an earlier
    /// one still waiting to be moved; no job is ever skipped for good.
    async fn claim_jobs(
        &self,
        jobtype: &str,
        limit: usize,
        owner: &str,
        lease: Duration,
        now: Millis,
    ) -> Result<Vec<Job>>;

    /// For each job still locked by `owner`, sets `dt = now + lease`.
    /// Returns the ids renewed (order unspecified); the others are lost to
    /// this owner (archived, deleted, or taken by another after expiry) and
    /// the caller must stop working on them. Among the renewed, those
    /// marked for cancelling ([`JobStore::cancel_jobs`]) are listed again in
    /// [`Renewal::cancelled`]: the caller stops their runs and archives them
    /// as [`ResultCode::Cancelled`]. An id may appear only once per list
    /// (as in every id list).
    async fn renew_locks(
        &self,
        ids: &[String],
        owner: &str,
        lease: Duration,
        now: Millis,
    ) -> Result<Renewal>;

    /// Lets go of jobs locked by `owner`, each as its own entry says: the
    /// daemon finishes a batch of jobs whose results differ (each archive
    /// with its own status and output, retries with their own delays) in
    /// one call. For each [`JobRelease`] `{ id, how }`:
    ///
    /// - if job `id` is locked by `owner` (running, or expired and not yet
    ///   taken by another claimer), it is changed as `how` says, atomically:
    ///   - [`Release::Retry`]`{ delay }`: `lock = ""`, `dt = now + delay`
    ///     (`attempts` unchanged);
    ///   - [`Release::Unget`]: `lock = ""`, `dt = now`, `attempts -= 1`
    ///     (not below 0): the hand-out is not counted;
    ///   - [`Release::Archive`]`(result)`: `lock = "__done"`,
    ///     `done_dt = now`, `dt = now +` [`ARCHIVE_HORIZON_MS`], `result`
    ///     stored (code, status and output exactly as given);
    ///   - [`Release::Delete`]: the job is removed, and its id may be added
    ///     again (under any jobtype);
    ///   - [`Release::Repeat`]`{ at, result, data }` (a repeating job's run
    ///     ended ok; only with [`Capabilities::repeat`]): `lock = ""`,
    ///     `dt = at`, `attempts = 0`, `result` stored as its last result
    ///     (code, status, output), `done_dt` stays `None`, the payload
    ///     replaced by `data` when it is `Some`; its tags, trace and flow
    ///     (the unique key stays held, the rule stays) are kept, and the
    ///     history gains [`EventKind::Repeated`](crate::EventKind::Repeated)
    ///     `{ code, status, next_ms: at }`. It counts as waiting or
    ///     scheduled by `at`, never as archived;
    /// - otherwise (free, archived, locked by another owner, or unknown) it
    ///   is not touched. This is the fencing that keeps a daemon whose
    ///   lease expired from undoing the new owner's work; it holds per
    ///   entry, so one list may mix jobs the caller still owns and jobs it
    ///   lost.
    ///
    /// **Effects on waiters** (stores with [`Capabilities::dependencies`]):
    /// a job that leaves the live states, whichever way (an archive or a
    /// delete here, [`cancel_jobs`](JobStore::cancel_jobs),
    /// [`delete_jobs`](JobStore::delete_jobs)), ends its edges in the same
    /// atomic change, with its result code and status (deleted:
    /// `cancelled`, 0): each blocked waiter whose policy is `Cancel` and
    /// for which the code is not `ok` is archived `cancelled` (status 0,
    /// output `[jobstore] dependency <id> ended <code>`, the event
    /// `Cancelled`), which ends its own edges in turn; each blocked waiter
    /// whose policy is `Hold` and for which the code is not `ok` keeps the
    /// edge open as held with that result (it stays blocked, and nothing
    /// runs down); every other blocked waiter counts the dependency done
    /// and is unblocked when no edge is left pending or held. A held edge
    /// waits for its dependency's next end (after a
    /// [`rerun_jobs`](JobStore::rerun_jobs)), which resolves it the same
    /// way: done if `ok`, else held again with the new result. (Whether an
    /// id added again after its job was deleted or purged resolves edges
    /// held on the old job is unspecified.) A waiter that is no longer
    /// blocked (unblocked by [`unblock_jobs`](JobStore::unblock_jobs),
    /// cancelled, archived) is not changed by a later end; its edge records
    /// the end unless skipped. Each edge ends once: however many times and by however
    /// many callers its dependency's end is delivered, and when the last
    /// dependencies of a waiter end at the same instant on different
    /// handles, the waiter is unblocked exactly once. A repeat or a retry
    /// leaves a dependency live. (A backend that cannot make the waiters'
    /// change in the archive's own atomic step records it there and
    /// delivers it before the call returns; [`settle_flows`](JobStore::settle_flows)
    /// finishes a delivery a crash interrupted.)
    ///
    /// Returns the ids of the entries applied (order unspecified). Entries
    /// are independent: each job's change is atomic, the list as a whole
    /// is not (another caller may see some entries applied and not yet
    /// others), and a job is never left half-changed.
    ///
    /// Validation ([`validate::release`](crate::validate::release)) rejects
    /// the whole list before anything changes: more than
    /// [`MAX_BATCH`](crate::limits::MAX_BATCH) entries is `TooLarge`; an
    /// invalid id, an id listed twice, an invalid owner or `now`, a retry
    /// delay above [`MAX_DELAY`](crate::limits::MAX_DELAY), a repeat time
    /// that is not a valid time is `InvalidInput`; result output above
    /// [`MAX_OUTPUT`](crate::limits::MAX_OUTPUT) or repeat data above
    /// [`Capabilities::max_payload`] in any entry is `TooLarge`; a repeat
    /// on a store without [`Capabilities::repeat`] is `Unsupported`. An
    /// empty list returns an empty list.
    ///
    /// A backend does the whole list in one round trip (or a small fixed
    /// number, independent of its length and of how many distinct results
    /// it holds), never one per job. Retry, unget and repeat entries are new work:
    /// a store that declares [`Capabilities::notifications`] wakes watchers
    /// with their jobtypes, as an add does.
    ///
    /// [`JobStoreExt::release_all`] releases a list of ids all the same way.
    async fn release_jobs(
        &self,
        releases: &[JobRelease],
        owner: &str,
        now: Millis,
    ) -> Result<Vec<String>>;

    /// Replaces the payload of job `id` if it is locked by `owner`, so a
    /// running job can report progress or hand state to its next run.
    /// Returns whether it did; a non-owner changes nothing and gets `false`.
    async fn update_data(&self, id: &str, owner: &str, data: &[u8], now: Millis) -> Result<bool>;

    /// Cancels jobs by id:
    ///
    /// - free jobs (waiting or scheduled) are archived now with
    ///   [`JobResult::cancelled`], `done_dt = now` and `dt = now +`
    ///   [`ARCHIVE_HORIZON_MS`], and listed in [`CancelOutcome::cancelled`];
    /// - locked jobs (running, or expired and not yet taken again) are
    ///   *marked* ([`Job::cancel_requested`]) and listed in
    ///   [`CancelOutcome::marked`], if the store declares
    ///   [`Capabilities::cancel_running`] (else they are left alone): the
    ///   job stays its holder's, who learns at its next renewal
    ///   ([`Renewal::cancelled`]), or, if the lease ran out, the next
    ///   claimer learns from the claimed job's `cancel_requested`; either
    ///   archives it as cancelled. The mark is cleared when the holder lets
    ///   go of the job, whichever way. Marking a marked job lists it again;
    /// - archived and unknown ids are untouched and listed in neither.
    ///
    /// A blocked job is cancelled as a free one. A job archived here ends
    /// its edges as [`release_jobs`](JobStore::release_jobs) says.
    async fn cancel_jobs(&self, ids: &[String], now: Millis) -> Result<CancelOutcome>;

    /// The job in any state, or `None`.
    async fn get_job(&self, id: &str) -> Result<Option<Job>>;

    /// The jobs of `ids` in any state, as [`get_job`](JobStore::get_job)
    /// reads each; unknown ids are left out, order unspecified. What a
    /// daemon reads the outputs of a waiter's dependencies with. At most
    /// [`MAX_BATCH`](crate::limits::MAX_BATCH) ids (`TooLarge`), each valid
    /// and listed once (`InvalidInput`). The default calls `get_job` per
    /// id: a backend behind a network overrides it with one round trip.
    async fn get_jobs(&self, ids: &[String]) -> Result<Vec<Job>> {
        crate::validate::ids(ids)?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            out.extend(self.get_job(id).await?);
        }
        Ok(out)
    }

    /// Deletes the archived jobs whose `done_dt < before` and whose result
    /// code is one of `codes`; returns how many. `codes` is a set (order
    /// and repeats do not matter); an empty slice purges nothing. Archived
    /// jobs of other codes, and jobs in every other state, are untouched,
    /// so results of some codes can be kept longer than others (failures,
    /// to see why a job failed) by purging each group with its own
    /// `before`. `before` is validated as a time even when `codes` is
    /// empty.
    ///
    /// A purged job is gone as if deleted: it leaves the counts, and its id
    /// added again makes a new job with nothing of the old one. A backend
    /// may purge in bounded batches (the call returns once a batch comes
    /// back short), each job atomically: a job archived while a purge runs
    /// is purged whole or kept whole, never left half-deleted.
    async fn purge_archived(&self, before: Millis, codes: &[ResultCode]) -> Result<u64>;

    /// Per jobtype with any job, how many are waiting (eligible), scheduled,
    /// running, blocked and archived by result code at `now`. Order
    /// unspecified.
    async fn job_counts(&self, now: Millis) -> Result<Vec<JobCounts>>;

    /// One page of the jobs `query` selects, in its order (see
    /// [`JobQuery`]), at `now` (which decides waiting from scheduled and
    /// running from expired). At most `query.limit` jobs; `next` is the
    /// cursor of the following page, `None` on the last. Paging is keyset,
    /// never by offset: jobs added, moved or archived between two pages
    /// never make a page repeat or skip a job that stayed in the selection
    /// the whole time. Payloads are empty unless `query.with_data`.
    ///
    /// Checked by [`validate::job_query`](crate::validate::job_query): a
    /// limit outside `1..=`[`MAX_PAGE`](crate::limits::MAX_PAGE), codes or
    /// an archive range on a query of another state, a range whose end is
    /// not after its start, a cursor from another query, invalid jobtypes
    /// or prefixes are `InvalidInput`. A store without
    /// [`Capabilities::list_jobs`] answers `Unsupported`.
    ///
    /// A page reads at most a bounded number of jobs past the ones it
    /// returns, whatever the size of the archive (listing follows an
    /// index in the query's order; filters on `created` and `archived`
    /// ranges narrow it).
    async fn list_jobs(&self, query: &JobQuery, now: Millis) -> Result<JobPage> {
        let _ = (query, now);
        Err(crate::Error::unsupported("list_jobs"))
    }

    /// Runs archived jobs again (any result code): each becomes free with
    /// `dt = now + delay`, `attempts = 0` and `done_dt = None`; its last
    /// `result` stays readable until it is archived again. Jobs in any
    /// other state, and unknown ids, are untouched. A job with a unique key
    /// takes the key back; if another live job of its jobtype holds it (or
    /// an earlier id of the same call took it), the job stays archived and
    /// is not returned. The edges held on a job run again stay held: its
    /// next end resolves them (see [`release_jobs`](JobStore::release_jobs)).
    /// Returns the ids run again (order unspecified). Watchers wake as for an add. A store
    /// without [`Capabilities::edit_jobs`] answers `Unsupported`.
    async fn rerun_jobs(
        &self,
        ids: &[String],
        delay: Duration,
        now: Millis,
    ) -> Result<Vec<String>> {
        let _ = (ids, delay, now);
        Err(crate::Error::unsupported("rerun_jobs"))
    }

    /// Deletes the jobs of `ids` that are not locked (waiting, scheduled,
    /// blocked, archived) at `now`; a deleted id may be added again as a new job.
    /// A live job deleted ends its edges as cancelled (see
    /// [`release_jobs`](JobStore::release_jobs)). Locked jobs
    /// (running, or expired and not taken again) are refused and listed in
    /// [`DeleteOutcome::running`], untouched; unknown ids are in neither
    /// list. A store without [`Capabilities::edit_jobs`] answers
    /// `Unsupported`.
    async fn delete_jobs(&self, ids: &[String], now: Millis) -> Result<DeleteOutcome> {
        let _ = (ids, now);
        Err(crate::Error::unsupported("delete_jobs"))
    }

    /// Changes free jobs (waiting or scheduled) and blocked ones: each edit
    /// sets the fields it gives (priority, due time `dt`, payload) and
    /// leaves the others; a blocked job's due time is its not-before time
    /// (it stays blocked).
    /// Locked, archived and unknown jobs are untouched. Returns the ids
    /// edited (order unspecified). Checked by
    /// [`validate::edits`](crate::validate::edits): an edit that changes
    /// nothing, an id listed twice, a bad time are `InvalidInput`; a payload
    /// over [`Capabilities::max_payload`] or more than
    /// [`MAX_BATCH`](crate::limits::MAX_BATCH) edits is `TooLarge`. An
    /// edit that makes a job due at once wakes watchers. A store without
    /// [`Capabilities::edit_jobs`] answers `Unsupported`.
    async fn edit_jobs(&self, edits: &[JobEdit], now: Millis) -> Result<Vec<String>> {
        let _ = (edits, now);
        Err(crate::Error::unsupported("edit_jobs"))
    }

    /// What job `id` waits, or waited, for: its dependencies in target id
    /// order, from just after `after`, at most `limit` (`1..=`
    /// [`MAX_PAGE`](crate::limits::MAX_PAGE), else `InvalidInput`), with
    /// `next` set when more follow, and its counts over all of them
    /// (pending, held, skipped, and done by result code). `None` for an
    /// unknown id; a job added without dependencies has none. A dependency purged since its
    /// end keeps its code and status here. A store without
    /// [`Capabilities::dependencies`] answers `Unsupported`.
    async fn job_waits(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<crate::Waits>> {
        let _ = (id, after, limit);
        Err(crate::Error::unsupported("job_waits"))
    }

    /// [`job_waits`](JobStore::job_waits) of several jobs at once: for each
    /// id of a job with dependencies (others and unknown ids are left
    /// out; order unspecified), its counts and its first page of at most
    /// `limit` edges. What a daemon hands the runs of the waiters it
    /// claimed, in one round trip. At most
    /// [`MAX_BATCH`](crate::limits::MAX_BATCH) ids (`TooLarge`), `limit`
    /// `1..=` [`MAX_PAGE`](crate::limits::MAX_PAGE) (`InvalidInput`). The
    /// default calls `job_waits` per id: a backend behind a network
    /// overrides it.
    async fn waits_of(&self, ids: &[String], limit: usize) -> Result<Vec<crate::Waits>> {
        crate::validate::waits_of(ids, limit)?;
        let mut out = Vec::new();
        for id in ids {
            if let Some(w) = self.job_waits(id, None, limit).await?
                && !w.edges.is_empty()
            {
                out.push(w);
            }
        }
        Ok(out)
    }

    /// The operator's override for blocked jobs: each job of `ids` that is
    /// blocked skips its pending and held edges
    /// ([`EdgeState::Skipped`](crate::EdgeState::Skipped): their
    /// dependencies' ends no longer reach it) and becomes free with `dt =
    /// max(not_before, now)`, its pending count 0 and the event
    /// [`EventKind::Unblocked`](crate::EventKind::Unblocked); its jobtype
    /// is notified as for an add. Jobs in other states and unknown ids are
    /// left as they are. Returns the ids unblocked (order unspecified).
    /// Racing the last dependency's end, the job is unblocked exactly once
    /// (by whichever comes first; the other finds it free). Validation as
    /// [`cancel_jobs`](JobStore::cancel_jobs)'s. One round trip for the
    /// list. A store without [`Capabilities::dependencies`] answers
    /// `Unsupported`.
    async fn unblock_jobs(&self, ids: &[String], now: Millis) -> Result<Vec<String>> {
        let _ = (ids, now);
        Err(crate::Error::unsupported("unblock_jobs"))
    }

    /// Finishes the deliveries to waiters that a crash between a
    /// dependency's end and its delivery left undone (see
    /// [`release_jobs`](JobStore::release_jobs)), those recorded before
    /// `now - grace`, at most `limit` of them; returns how many it
    /// delivered. Idempotent, and safe from any number of callers at once.
    /// A store that ends edges in the archive's own atomic step has nothing
    /// to finish: the default returns 0.
    async fn settle_flows(&self, now: Millis, limit: usize) -> Result<u64> {
        let _ = (now, limit);
        Ok(0)
    }

    /// Pauses (`paused = true`) or resumes a jobtype, store-wide and
    /// durably: while paused, claims of it return nothing and
    /// [`waiting_jobtypes`](JobStore::waiting_jobtypes) leaves it out;
    /// adds, releases, cancels and lists go on. A jobtype may be paused
    /// before it has any job. Returns whether the call changed anything.
    /// Resuming wakes watchers. A store without [`Capabilities::pause`]
    /// answers `Unsupported`.
    async fn pause_jobtype(&self, jobtype: &str, paused: bool, now: Millis) -> Result<bool> {
        let _ = (jobtype, paused, now);
        Err(crate::Error::unsupported("pause_jobtype"))
    }

    /// The paused jobtypes, sorted. A store without
    /// [`Capabilities::pause`] answers `Unsupported`.
    async fn paused_jobtypes(&self) -> Result<Vec<String>> {
        Err(crate::Error::unsupported("paused_jobtypes"))
    }

    /// Adds each delta to its jobtype's stats bucket of the delta's minute
    /// and to the one of the UTC day holding that minute (see
    /// [`crate::stats`]). A delta whose minute is older than the minute
    /// buckets kept at `now` ([`StatsResolution::oldest_kept`](crate::StatsResolution::oldest_kept)) adds to its
    /// day only; one older than the days kept adds nothing. Every addition
    /// is atomic and exact: concurrent adds, from any number of callers,
    /// sum to the total of what each added. Buckets older than the ones
    /// kept are dropped, by this call or a later one; they are never read.
    ///
    /// Checked by [`validate::stats_deltas`](crate::validate::stats_deltas):
    /// a minute that is not a multiple of [`MINUTE_MS`](crate::stats::MINUTE_MS)
    /// or starts after `now`, a jobtype and minute listed twice, a delta with
    /// no durations, durations whose histogram does not add up to their
    /// count, a sum of squares that is negative or not finite, an invalid
    /// jobtype are `InvalidInput`; more than
    /// [`MAX_BATCH`](crate::limits::MAX_BATCH) deltas are `TooLarge`. A store
    /// without [`Capabilities::stats`] answers `Unsupported`.
    async fn add_stats(&self, deltas: &[StatsDelta], now: Millis) -> Result<()> {
        let _ = (deltas, now);
        Err(crate::Error::unsupported("add_stats"))
    }

    /// The stats buckets of `query.resolution` kept at `now` (starting at
    /// or after [`StatsResolution::oldest_kept`](crate::StatsResolution::oldest_kept)) for the jobtypes `query`
    /// selects, sorted by jobtype (bytewise), then start. A bucket nothing
    /// was added to is absent. Checked by
    /// [`validate::stats_query`](crate::validate::stats_query). A store
    /// without [`Capabilities::stats`] answers `Unsupported`.
    async fn job_stats(&self, query: &StatsQuery, now: Millis) -> Result<Vec<StatsBucket>> {
        let _ = (query, now);
        Err(crate::Error::unsupported("job_stats"))
    }

    /// A [`WorkWatcher`] that wakes when new work may have arrived: an add,
    /// a retry or unget release, from this or any other process. The default
    /// polls every [`DEFAULT_POLL_INTERVAL`]; a backend with a notification
    /// channel (LISTEN/NOTIFY, pub/sub) feeds it notices and declares
    /// [`Capabilities::notifications`].
    async fn watch(&self) -> Result<WorkWatcher> {
        Ok(WorkWatcher::polling(DEFAULT_POLL_INTERVAL))
    }

    /// Stores a new version of `jobtype`'s handler with its own id and
    /// `dt = now`; older versions are kept until deleted. Returns the
    /// version stored. Every field, [`Handler::limits`] included, reads
    /// back exactly as given (an unset limit stays unset; a version's
    /// limits are its own, never merged with an older version's), and a
    /// version stored before a backend kept limits reads back with none
    /// set. Checked by [`validate::handler`](crate::validate::handler):
    /// field sizes and each limit's bounds.
    async fn set_handler(
        &self,
        jobtype: &str,
        handler: &Handler,
        now: Millis,
    ) -> Result<HandlerVersion>;

    /// The newest version of `jobtype`'s handler: greatest `dt`, and among
    /// equal `dt` the one set last. `None` if there is none.
    async fn get_handler(&self, jobtype: &str) -> Result<Option<HandlerVersion>>;

    /// Removes every version of `jobtype`'s handler; returns whether any existed.
    async fn delete_handler(&self, jobtype: &str) -> Result<bool>;

    /// The newest version of each jobtype's handler. Order unspecified.
    async fn list_handlers(&self) -> Result<Vec<HandlerVersion>>;

    /// Creates schedule `s.name`, or replaces its definition: `version`
    /// becomes 1 on create and one more on every replace, `next_due` is
    /// set as given (the caller computed it from the rule; `None`: never
    /// due), `updated_dt = now`. A replace keeps the firing state
    /// (`fired_through`, `last_job`, `fired`, `skipped`), `paused` and
    /// `created_dt`. Returns the record stored. Checked by
    /// [`validate::schedule`](crate::validate::schedule). A store without
    /// [`Capabilities::schedules`] answers `Unsupported` (every schedule
    /// method does).
    ///
    /// **Schedules** are kept apart from jobs: no schedule method adds,
    /// changes or reads a job. A store keeps the definition as given and
    /// never reads the rule or the time zone. Names are per namespace like
    /// jobtypes: the daemon prefixes a client's.
    async fn set_schedule(
        &self,
        s: &crate::schedule::Schedule,
        next_due: Option<Millis>,
        now: Millis,
    ) -> Result<crate::schedule::ScheduleRecord> {
        let _ = (s, next_due, now);
        Err(crate::Error::unsupported("set_schedule"))
    }

    /// The schedule named `name`, or `None`.
    async fn get_schedule(&self, name: &str) -> Result<Option<crate::schedule::ScheduleRecord>> {
        let _ = name;
        Err(crate::Error::unsupported("get_schedule"))
    }

    /// The schedules whose name starts with `prefix` (empty: all), sorted
    /// by name (bytewise).
    async fn list_schedules(&self, prefix: &str) -> Result<Vec<crate::schedule::ScheduleRecord>> {
        let _ = prefix;
        Err(crate::Error::unsupported("list_schedules"))
    }

    /// Removes the schedule; returns whether it existed. Jobs it added stay.
    async fn delete_schedule(&self, name: &str) -> Result<bool> {
        let _ = name;
        Err(crate::Error::unsupported("delete_schedule"))
    }

    /// Pauses (`paused = true`) or resumes the schedule. A paused schedule
    /// is never due. A change sets `updated_dt = now`; a resume also sets
    /// `next_due` as given (a pause leaves it). Returns whether it changed
    /// anything: `false` for an unknown schedule or one already so.
    async fn pause_schedule(
        &self,
        name: &str,
        paused: bool,
        next_due: Option<Millis>,
        now: Millis,
    ) -> Result<bool> {
        let _ = (name, paused, next_due, now);
        Err(crate::Error::unsupported("pause_schedule"))
    }

    /// Up to `limit` (1..=[`MAX_PAGE`](crate::limits::MAX_PAGE)) schedules
    /// that are not paused and have `next_due <= now`, by `next_due`, then
    /// name. Reads an index of `next_due`: schedules not due cost nothing.
    async fn due_schedules(
        &self,
        now: Millis,
        limit: usize,
    ) -> Result<Vec<crate::schedule::ScheduleRecord>> {
        let _ = (now, limit);
        Err(crate::Error::unsupported("due_schedules"))
    }

    /// Compare-and-set of the firing state: applies `advance` (see
    /// [`ScheduleAdvance::apply`](crate::ScheduleAdvance::apply)) only if
    /// the schedule still has `version` and `advance` comes after its
    /// watermark ([`ScheduleAdvance::applies_after`](crate::ScheduleAdvance::applies_after):
    /// a later `fired_through`, or the same one for an advance that fires
    /// and skips nothing). Returns whether it applied; an unknown schedule
    /// is `false`. Atomic: of concurrent advances from one version to one
    /// watermark, by any number of callers, exactly one applies. A paused
    /// schedule may still be advanced (a firer that read it before the
    /// pause finishes its round).
    async fn advance_schedule(
        &self,
        name: &str,
        version: u64,
        advance: &crate::schedule::ScheduleAdvance,
        now: Millis,
    ) -> Result<bool> {
        let _ = (name, version, advance, now);
        Err(crate::Error::unsupported("advance_schedule"))
    }

    /// Reserves `sysid` for `ttl` if it is free or its lease expired
    /// (`expires <= now`), with a new secret token. A sysid held under a
    /// valid lease is a `Conflict`, whoever asks.
    async fn reserve_sysid(&self, sysid: &str, ttl: Duration, now: Millis) -> Result<SysidLease>;

    /// Extends the lease to `now + ttl` if `lease`'s token still holds the
    /// sysid (even past expiry, as long as nobody reserved it since);
    /// otherwise `Conflict`.
    async fn renew_sysid(
        &self,
        lease: &SysidLease,
        ttl: Duration,
        now: Millis,
    ) -> Result<SysidLease>;

    /// Frees the sysid if `lease`'s token still holds it; returns whether it
    /// did. A stale lease releases nothing.
    async fn release_sysid(&self, lease: &SysidLease) -> Result<bool>;
}

/// Conveniences over [`JobStore`], for every store.
#[async_trait]
pub trait JobStoreExt: JobStore {
    /// Adds one job; returns whether it was new.
    async fn add_job(&self, job: NewJob, now: Millis) -> Result<bool> {
        let outcome = self.add_jobs(std::slice::from_ref(&job), now).await?;
        Ok(!outcome.new.is_empty())
    }

    /// Lets go of every job of `ids` locked by `owner` the same way, `how`:
    /// [`JobStore::release_jobs`] with one entry per id. Returns the ids
    /// released (order unspecified). The arguments are checked (as
    /// `release_jobs` would, with the same first error) before `how` is
    /// copied into each entry.
    async fn release_all(
        &self,
        ids: &[String],
        owner: &str,
        how: &Release,
        now: Millis,
    ) -> Result<Vec<String>> {
        crate::validate::ids(ids)?;
        crate::validate::sysid(owner)?;
        crate::validate::time("now", now)?;
        crate::validate::release_how(how, &self.capabilities())?;
        let releases: Vec<JobRelease> = ids
            .iter()
            .map(|id| JobRelease::new(id.clone(), how.clone()))
            .collect();
        self.release_jobs(&releases, owner, now).await
    }

    /// Archives the jobs of `ids` locked by `owner`, each with `result`.
    async fn archive_jobs(
        &self,
        ids: &[String],
        owner: &str,
        result: JobResult,
        now: Millis,
    ) -> Result<Vec<String>> {
        self.release_all(ids, owner, &Release::Archive(result), now)
            .await
    }
}

impl<T: JobStore + ?Sized> JobStoreExt for T {}

// `Arc<S>` and `Box<S>` are stores as layers over `S` (`crate::layer`).
