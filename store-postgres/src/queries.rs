//! Every SQL statement the store runs, one file per operation under
//! `queries/`.

pub(crate) const ADD_JOBS: &str = include_str!("../queries/add_jobs.sql");
pub(crate) const CLAIM_JOBS: &str = include_str!("../queries/claim_jobs.sql");
pub(crate) const RENEW_LOCKS: &str = include_str!("../queries/renew_locks.sql");
pub(crate) const RELEASE_JOBS: &str = include_str!("../queries/release_jobs.sql");
pub(crate) const UPDATE_DATA: &str = include_str!("../queries/update_data.sql");
pub(crate) const CANCEL_JOBS: &str = include_str!("../queries/cancel_jobs.sql");
pub(crate) const GET_JOB: &str = include_str!("../queries/get_job.sql");
pub(crate) const PURGE_ARCHIVED: &str = include_str!("../queries/purge_archived.sql");
pub(crate) const WAITING_JOBTYPES: &str = include_str!("../queries/waiting_jobtypes.sql");
pub(crate) const JOB_COUNTS: &str = include_str!("../queries/job_counts.sql");
pub(crate) const SET_HANDLER: &str = include_str!("../queries/set_handler.sql");
pub(crate) const GET_HANDLER: &str = include_str!("../queries/get_handler.sql");
pub(crate) const LIST_HANDLERS: &str = include_str!("../queries/list_handlers.sql");
pub(crate) const DELETE_HANDLER: &str = include_str!("../queries/delete_handler.sql");
pub(crate) const RESERVE_SYSID: &str = include_str!("../queries/reserve_sysid.sql");
pub(crate) const RENEW_SYSID: &str = include_str!("../queries/renew_sysid.sql");
pub(crate) const RELEASE_SYSID: &str = include_str!("../queries/release_sysid.sql");
pub(crate) const RERUN_JOBS: &str = include_str!("../queries/rerun_jobs.sql");
pub(crate) const DELETE_JOBS: &str = include_str!("../queries/delete_jobs.sql");
pub(crate) const EDIT_JOBS: &str = include_str!("../queries/edit_jobs.sql");
pub(crate) const PAUSE_JOBTYPE: &str = include_str!("../queries/pause_jobtype.sql");
pub(crate) const RESUME_JOBTYPE: &str = include_str!("../queries/resume_jobtype.sql");
pub(crate) const PAUSED_JOBTYPES: &str = include_str!("../queries/paused_jobtypes.sql");
pub(crate) const LIST_WAITING: &str = include_str!("../queries/list_waiting.sql");
pub(crate) const LIST_EXPIRED: &str = include_str!("../queries/list_expired.sql");
pub(crate) const LIST_SCHEDULED: &str = include_str!("../queries/list_scheduled.sql");
pub(crate) const LIST_RUNNING: &str = include_str!("../queries/list_running.sql");
pub(crate) const LIST_ARCHIVED: &str = include_str!("../queries/list_archived.sql");
pub(crate) const LIST_ARCHIVED_ALL: &str = include_str!("../queries/list_archived_all.sql");
pub(crate) const ADD_STATS: &str = include_str!("../queries/add_stats.sql");
pub(crate) const JOB_STATS: &str = include_str!("../queries/job_stats.sql");
