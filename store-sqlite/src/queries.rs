//! Every SQL statement of the store, loaded from `queries/*.sql`.

macro_rules! queries {
    ($($name:ident => $file:literal),* $(,)?) => {$(
        pub(crate) const $name: &str = include_str!(concat!("../queries/", $file));
    )*};
}

/// A release that archives, and its counts, in two calls (two hand-offs
/// to sqlx's worker thread instead of the four of a `Transaction`:
/// `BEGIN`, the release, the counts, `COMMIT`): this script opens the
/// transaction and runs the release statement (`release_keep.sql`, same
/// parameters), the store groups the released rows by (jobtype, code),
/// then [`COUNTS_ADD_COMMIT`] (or a bare `COMMIT`) ends it. Both run on
/// one `ScriptConn` (crate::store), which never returns a connection to
/// the pool with the transaction left open.
pub(crate) const RELEASE_BEGIN: &str = concat!(
    "BEGIN IMMEDIATE;\n",
    include_str!("../queries/release_keep.sql"),
    ";\n"
);

/// `counts_add.sql`, then `COMMIT`: the end of [`RELEASE_BEGIN`]'s
/// transaction.
pub(crate) const COUNTS_ADD_COMMIT: &str =
    concat!(include_str!("../queries/counts_add.sql"), ";\nCOMMIT;\n");

queries! {
    ADD_JOBS => "add_jobs.sql",
    ADD_KEYED_JOBS => "add_keyed_jobs.sql",
    UNIQUE_LOOKUP => "unique_lookup.sql",
    CLAIM_EXISTS => "claim_exists.sql",
    CLAIM_PICK => "claim_pick.sql",
    CLAIM_TAKE => "claim_take.sql",
    GET_JOB => "get_job.sql",
    GET_JOBS => "get_jobs.sql",
    RENEW_LOCKS => "renew_locks.sql",
    RELEASE_KEEP => "release_keep.sql",
    RELEASE_DELETE => "release_delete.sql",
    UPDATE_DATA => "update_data.sql",
    CANCEL_JOBS => "cancel_jobs.sql",
    COUNTS_ADD => "counts_add.sql",
    PURGE_ARCHIVED => "purge_archived.sql",
    WAITING_JOBTYPES => "waiting_jobtypes.sql",
    JOB_COUNTS => "job_counts.sql",
    SET_HANDLER => "set_handler.sql",
    GET_HANDLER => "get_handler.sql",
    LIST_HANDLERS => "list_handlers.sql",
    DELETE_HANDLER => "delete_handler.sql",
    RESERVE_SYSID => "reserve_sysid.sql",
    RENEW_SYSID => "renew_sysid.sql",
    RELEASE_SYSID => "release_sysid.sql",
    RERUN_JOBS => "rerun_jobs.sql",
    DELETE_JOBS => "delete_jobs.sql",
    DELETE_LOCKED => "delete_locked.sql",
    EDIT_JOBS => "edit_jobs.sql",
    PAUSE_JOBTYPE => "pause_jobtype.sql",
    RESUME_JOBTYPE => "resume_jobtype.sql",
    PAUSED_JOBTYPES => "paused_jobtypes.sql",
    LIST_TYPES_EXACT => "list_types_exact.sql",
    LIST_TYPES_RANGE => "list_types_range.sql",
    LIST_WAITING => "list_waiting.sql",
    LIST_SCHEDULED => "list_scheduled.sql",
    LIST_RUNNING => "list_running.sql",
    LIST_EXPIRED => "list_expired.sql",
    LIST_ARCHIVED_CODE => "list_archived_code.sql",
    LIST_ARCHIVED_TYPE => "list_archived_type.sql",
    STATS_ADD => "stats_add.sql",
    STATS_PRUNE => "stats_prune.sql",
    STATS_READ_RANGE => "stats_read_range.sql",
    STATS_READ_EXACT => "stats_read_exact.sql",
    SET_SCHEDULE => "set_schedule.sql",
    GET_SCHEDULE => "get_schedule.sql",
    LIST_SCHEDULES => "list_schedules.sql",
    DELETE_SCHEDULE => "delete_schedule.sql",
    PAUSE_SCHEDULE => "pause_schedule.sql",
    DUE_SCHEDULES => "due_schedules.sql",
    ADVANCE_SCHEDULE => "advance_schedule.sql",
    DEPS_LOOKUP => "deps_lookup.sql",
    EDGES_INSERT => "edges_insert.sql",
    MARK_TARGETS => "mark_targets.sql",
    EDGES_END => "edges_end.sql",
    WAITERS_READ => "waiters_read.sql",
    WAITERS_APPLY => "waiters_apply.sql",
    FORGET_WAITERS => "forget_waiters.sql",
    RELEASE_DELETE_FLOW => "release_delete_flow.sql",
    LIST_BLOCKED => "list_blocked.sql",
    JOB_WAITS => "job_waits.sql",
    WAITS_OF => "waits_of.sql",
    UNBLOCK_EDGES => "unblock_edges.sql",
    UNBLOCK_JOBS => "unblock_jobs.sql",
}

/// One row of the multi-row insert in [`ADD_JOBS`]: id, jobtype, priority,
/// dt, create_dt, data, tags, traceparent, tracestate.
pub(crate) const ADD_JOBS_ROW: &str = "(?, ?, ?, ?, ?, ?, ?, ?, ?)";

/// Parameters bound per row of [`ADD_JOBS`].
pub(crate) const ADD_JOBS_PARAMS_PER_ROW: usize = 9;

/// The insert for `rows` jobs.
pub(crate) fn add_jobs(rows: usize) -> String {
    let values = vec![ADD_JOBS_ROW; rows].join(", ");
    ADD_JOBS.replace("{rows}", &values)
}

/// One row of the multi-row insert in [`ADD_KEYED_JOBS`]: the columns of
/// [`ADD_JOBS_ROW`], then unique_key and repeat, then lock, pending,
/// dep_policy, done_dt, result_code, result_status, result_output and
/// history (the state the dependencies decide).
pub(crate) const ADD_KEYED_JOBS_ROW: &str =
    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

/// Parameters bound per row of [`ADD_KEYED_JOBS`].
pub(crate) const ADD_KEYED_JOBS_PARAMS_PER_ROW: usize = 19;

/// The insert for `rows` jobs of a batch with a flow (keyed or repeating
/// jobs, jobs with dependencies).
pub(crate) fn add_keyed_jobs(rows: usize) -> String {
    let values = vec![ADD_KEYED_JOBS_ROW; rows].join(", ");
    ADD_KEYED_JOBS.replace("{rows}", &values)
}

/// Parameters bound per bucket of [`STATS_ADD`]: resolution, jobtype,
/// start, then count, sum, sum of squares and 17 histogram counts for the
/// wait durations and again for the run durations.
pub(crate) const STATS_ADD_PARAMS_PER_ROW: usize = 43;

/// The upsert of `rows` stats buckets.
pub(crate) fn stats_add(rows: usize) -> String {
    let row = format!("({})", vec!["?"; STATS_ADD_PARAMS_PER_ROW].join(", "));
    STATS_ADD.replace("{rows}", &vec![row; rows].join(", "))
}

/// The columns a listing returns (`j` is the job row); the payload is
/// read only when asked for, else an empty blob stands in for it.
fn list_columns(with_data: bool) -> String {
    let data = if with_data { "j.data" } else { "x'' AS data" };
    format!(
        "j.id, j.jobtype, j.priority, j.dt, j.lock, j.attempts, j.create_dt, j.done_dt, \
         j.result_code, j.result_status, j.result_output, j.cancel_requested, j.tags, j.history, \
         j.claimed_at, j.claimed_by, j.traceparent, j.tracestate, j.unique_key, j.repeat, \
         j.pending, j.dep_policy, {data}"
    )
}

/// Which jobtypes a listing reads: a JSON array of them (`?11`), or the
/// range `[?9, ?10)` walked over an index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListTypes {
    Exact,
    Range,
}

/// The condition a listing adds to each of its ranges: with a tag, the
/// row's tags hold `?13`; without, `?13` (then NULL) is only named.
fn tag_filter(tagged: bool) -> &'static str {
    if tagged {
        "AND EXISTS (SELECT 1 FROM json_each(jobs.tags) WHERE value = ?13)"
    } else {
        "AND ?13 IS NULL"
    }
}

/// The listing statement of one shape: `template` (a `list_*.sql`),
/// the jobtypes given or walked over `index`, whose partial-index
/// condition is `rows` (the walk repeats it, as SQLite requires to use a
/// partial index); `tagged`: only the jobs carrying the tag `?13`.
pub(crate) fn list_jobs(
    template: &str,
    types: ListTypes,
    (index, rows): (&str, &str),
    with_data: bool,
    tagged: bool,
) -> String {
    let types = match types {
        ListTypes::Exact => strip_comments(LIST_TYPES_EXACT),
        ListTypes::Range => strip_comments(LIST_TYPES_RANGE)
            .replace("{index}", index)
            .replace("{rows}", rows),
    };
    strip_comments(template)
        .replace("{types}", &types)
        .replace("{cols}", &list_columns(with_data))
        .replace("{tag}", tag_filter(tagged))
}

/// A statement or fragment without its `--` comment lines (which name the
/// placeholders), before fragments are spliced in.
fn strip_comments(sql: &str) -> String {
    sql.lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
}
