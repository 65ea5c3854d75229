//! Every SQL statement of the store, loaded from `queries/*.sql`.

macro_rules! queries {
    ($($name:ident => $file:literal),* $(,)?) => {$(
        pub(crate) const $name: &str = include_str!(concat!("../queries/", $file));
    )*};
}

queries! {
    ADD_JOBS => "add_jobs.sql",
    CLAIM_EXISTS => "claim_exists.sql",
    CLAIM_PICK => "claim_pick.sql",
    CLAIM_TAKE => "claim_take.sql",
    GET_JOB => "get_job.sql",
    RENEW_LOCKS => "renew_locks.sql",
    RELEASE_KEEP => "release_keep.sql",
    RELEASE_DELETE => "release_delete.sql",
    UPDATE_DATA => "update_data.sql",
    CANCEL_JOBS => "cancel_jobs.sql",
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
}

/// One row of the multi-row insert in [`ADD_JOBS`]: id, jobtype, priority,
/// dt, create_dt, data.
pub(crate) const ADD_JOBS_ROW: &str = "(?, ?, ?, ?, ?, ?)";

/// Parameters bound per row of [`ADD_JOBS`].
pub(crate) const ADD_JOBS_PARAMS_PER_ROW: usize = 6;

/// The insert for `rows` jobs.
pub(crate) fn add_jobs(rows: usize) -> String {
    let values = vec![ADD_JOBS_ROW; rows].join(", ");
    ADD_JOBS.replace("{rows}", &values)
}
