//! The documented limits of the contract, the same for every backend.

use std::time::Duration;

use crate::types::Millis;

/// Longest job id, in bytes.
pub const MAX_ID_LEN: usize = 200;
/// Longest jobtype, in bytes.
pub const MAX_JOBTYPE_LEN: usize = 200;
/// Longest sysid, in bytes.
pub const MAX_SYSID_LEN: usize = 200;
/// Most jobs one claim may ask for.
pub const MAX_CLAIM: usize = 1_000;
/// Most jobs, ids or releases in one add, renew, release or cancel call.
pub const MAX_BATCH: usize = 10_000;
/// Every backend stores payloads of at least this many bytes (1 MiB).
pub const MIN_PAYLOAD_SUPPORT: usize = 1 << 20;
/// Most bytes of result output kept with an archived job (64 KiB).
pub const MAX_OUTPUT: usize = 64 << 10;
/// Longest handler body or hook, in bytes (1 MiB).
pub const MAX_HANDLER_FIELD: usize = 1 << 20;
/// Largest [`HandlerLimits::max_attempts`](crate::HandlerLimits::max_attempts).
pub const MAX_HANDLER_ATTEMPTS: u32 = 1_000_000;
/// Largest [`HandlerLimits::concurrency`](crate::HandlerLimits::concurrency).
pub const MAX_HANDLER_CONCURRENCY: u32 = 10_000;
/// Longest lease (job lock or sysid): 7 days.
pub const MAX_LEASE: Duration = Duration::from_secs(7 * 24 * 3600);
/// Longest retry delay: 100 years of 365 days.
pub const MAX_DELAY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
/// Latest time a store accepts: 9999-12-31T23:59:59.999Z.
pub const MAX_TIME: Millis = 253_402_300_799_999;
/// How often a polling [`WorkWatcher`](crate::WorkWatcher) wakes by default.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(500);

/// Most jobs in one page of [`JobStore::list_jobs`](crate::JobStore::list_jobs).
pub const MAX_PAGE: usize = 1_000;

/// Most jobtypes named in one [`JobtypeFilter::Exact`](crate::JobtypeFilter::Exact).
pub const MAX_QUERY_JOBTYPES: usize = 100;

/// Most events a job keeps in its history (the newest).
pub const MAX_HISTORY: usize = 20;

/// Most tags on one job.
pub const MAX_TAGS: usize = 8;

/// Longest tag, in bytes.
pub const MAX_TAG_LEN: usize = 64;

/// Longest [`TraceContext::traceparent`](crate::TraceContext::traceparent),
/// in bytes (version `00` is 55; later versions may be longer).
pub const MAX_TRACEPARENT_LEN: usize = 256;

/// Longest [`TraceContext::tracestate`](crate::TraceContext::tracestate), in
/// bytes: the 512 that W3C Trace Context asks every vendor to pass on.
pub const MAX_TRACESTATE_LEN: usize = 512;

/// Most entries in a [`TraceContext::tracestate`](crate::TraceContext::tracestate),
/// as W3C Trace Context sets it.
pub const MAX_TRACESTATE_MEMBERS: usize = 32;

/// Longest schedule rule (cron or repeat syntax), in bytes.
pub const MAX_RULE_LEN: usize = 256;

/// Longest schedule time zone name, in bytes.
pub const MAX_TIME_ZONE_LEN: usize = 64;

/// Longest schedule name, in bytes (a jobtype's length).
pub const MAX_SCHEDULE_NAME_LEN: usize = MAX_JOBTYPE_LEN;

/// The longest unique key ([`Unique::key`](crate::Unique::key)), in bytes.
pub const MAX_UNIQUE_KEY_LEN: usize = 256;

/// Most dependencies one job may have ([`JobFlow::depends_on`](crate::JobFlow::depends_on)).
pub const MAX_DEPENDENCIES: usize = 1_000;

/// Most dependencies of all the jobs of one add, together.
pub const MAX_BATCH_DEPENDENCIES: usize = 100_000;
