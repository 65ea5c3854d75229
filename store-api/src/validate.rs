//! The one place that decides which inputs are valid. Every backend calls
//! these before touching its server, so all backends reject the same inputs
//! with the same [`ErrorKind`](crate::ErrorKind).

use std::collections::HashSet;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::flow::{JobFlow, Repeat, Unique};
use crate::limits::*;
use crate::manage::{JobEdit, JobQuery, JobtypeFilter, TimeRange};
use crate::stats::{Durations, MINUTE_MS, StatsDelta, StatsQuery};
use crate::trace::TraceContext;
use crate::types::{
    Capabilities, Handler, HandlerLimits, JobRelease, JobState, Millis, NewJob, Release,
};

/// A job id: 1..=[`MAX_ID_LEN`] bytes, no control characters, no `|`.
pub fn id(id: &str) -> Result<()> {
    text("job id", id, MAX_ID_LEN)
}

/// A sysid: like a job id, at most [`MAX_SYSID_LEN`] bytes, and not
/// starting with `__` (reserved: `__done` marks archived jobs).
pub fn sysid(sysid: &str) -> Result<()> {
    text("sysid", sysid, MAX_SYSID_LEN)?;
    if sysid.starts_with("__") {
        return Err(Error::invalid(format!(
            "sysid {sysid:?} starts with \"__\", which is reserved"
        )));
    }
    Ok(())
}

fn text(what: &str, value: &str, max: usize) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(format!("{what} is empty")));
    }
    if value.len() > max {
        return Err(Error::invalid(format!(
            "{what} is {} bytes long, the limit is {max}",
            value.len()
        )));
    }
    if let Some(c) = value.chars().find(|c| c.is_control() || *c == '|') {
        return Err(Error::invalid(format!(
            "{what} {value:?} contains the forbidden character {c:?}"
        )));
    }
    Ok(())
}

/// A jobtype: 1..=[`MAX_JOBTYPE_LEN`] bytes of `[A-Za-z0-9_.:-]`, starting
/// with a letter or digit.
pub fn jobtype(jobtype: &str) -> Result<()> {
    if jobtype.is_empty() {
        return Err(Error::invalid("jobtype is empty"));
    }
    if jobtype.len() > MAX_JOBTYPE_LEN {
        return Err(Error::invalid(format!(
            "jobtype is {} bytes long, the limit is {MAX_JOBTYPE_LEN}",
            jobtype.len()
        )));
    }
    if !jobtype.as_bytes()[0].is_ascii_alphanumeric() {
        return Err(Error::invalid(format!(
            "jobtype {jobtype:?} must start with a letter or digit"
        )));
    }
    if let Some(c) = jobtype
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-')))
    {
        return Err(Error::invalid(format!(
            "jobtype {jobtype:?} contains {c:?}; allowed are A-Z a-z 0-9 _ . : -"
        )));
    }
    Ok(())
}

/// A point in time given to the store: within `0..=`[`MAX_TIME`].
pub fn time(what: &str, t: Millis) -> Result<()> {
    if !(0..=MAX_TIME).contains(&t) {
        return Err(Error::invalid(format!(
            "{what} {t} is outside 0..={MAX_TIME} (epoch milliseconds)"
        )));
    }
    Ok(())
}

/// A payload against the store's limit.
pub fn payload(data: &[u8], caps: &Capabilities) -> Result<()> {
    if data.len() > caps.max_payload {
        return Err(Error::too_large("job data", data.len(), caps.max_payload));
    }
    Ok(())
}

/// A lease length: 1 ms..=[`MAX_LEASE`].
pub fn lease(what: &str, lease: Duration) -> Result<()> {
    if lease < Duration::from_millis(1) || lease > MAX_LEASE {
        return Err(Error::invalid(format!(
            "{what} {lease:?} is outside 1ms..={MAX_LEASE:?}"
        )));
    }
    Ok(())
}

/// A batch size: at most [`MAX_BATCH`] items.
pub fn batch(what: &str, len: usize) -> Result<()> {
    if len > MAX_BATCH {
        return Err(Error::too_large(what, len, MAX_BATCH));
    }
    Ok(())
}

/// A batch of new jobs: size, each field, distinct ids.
pub fn new_jobs(jobs: &[NewJob], caps: &Capabilities, now: Millis) -> Result<()> {
    time("now", now)?;
    batch("batch of new jobs", jobs.len())?;
    let mut seen = HashSet::with_capacity(jobs.len());
    let mut edges = 0usize;
    for job in jobs {
        id(&job.id)?;
        jobtype(&job.jobtype)?;
        payload(&job.data, caps)?;
        if let Some(dt) = job.run_at {
            time("run_at", dt)?;
        }
        tags(&job.tags)?;
        if !caps.tags && !job.tags.is_empty() {
            return Err(Error::unsupported("tags on new jobs"));
        }
        if let Some(ctx) = &job.trace {
            trace(ctx)?;
        }
        if let Some(flow) = &job.flow {
            job_flow(flow, caps)?;
            dependencies(&job.id, &flow.depends_on)?;
            edges += flow.depends_on.len();
            if edges > MAX_BATCH_DEPENDENCIES {
                return Err(Error::too_large(
                    "dependencies of one batch",
                    edges,
                    MAX_BATCH_DEPENDENCIES,
                ));
            }
        }
        if !seen.insert(job.id.as_str()) {
            return Err(Error::invalid(format!(
                "job id {:?} appears twice in one batch",
                job.id
            )));
        }
    }
    Ok(())
}

/// A new job's flow: each field it sets must be offered by the store
/// (`Unsupported` otherwise) and valid.
pub fn job_flow(flow: &JobFlow, caps: &Capabilities) -> Result<()> {
    if let Some(u) = &flow.unique {
        if !caps.unique_jobs {
            return Err(Error::unsupported("unique keys on new jobs"));
        }
        unique(u)?;
    }
    if let Some(r) = &flow.repeat {
        if !caps.repeat {
            return Err(Error::unsupported("repeating jobs"));
        }
        repeat(r)?;
    }
    if !flow.depends_on.is_empty() && !caps.dependencies {
        return Err(Error::unsupported("dependencies"));
    }
    if flow.with_outputs && flow.depends_on.is_empty() {
        return Err(Error::invalid(
            "with_outputs: only a job with depends_on has outputs to read",
        ));
    }
    Ok(())
}

/// The arguments of [`job_waits`](crate::JobStore::job_waits): valid ids,
/// a limit of `1..=`[`MAX_PAGE`].
pub fn waits(id_: &str, after: Option<&str>, limit: usize) -> Result<()> {
    id(id_)?;
    if let Some(a) = after {
        id(a)?;
    }
    crate::manage::page_limit(limit)
}

/// The arguments of [`JobStore::waits_of`](crate::JobStore::waits_of).
pub fn waits_of(ids_: &[String], limit: usize) -> Result<()> {
    ids(ids_)?;
    crate::manage::page_limit(limit)
}

/// The dependencies of job `of`: at most [`MAX_DEPENDENCIES`]
/// (`TooLarge`), each a valid id, none twice, not `of` itself
/// (`InvalidInput`).
pub fn dependencies(of: &str, deps: &[String]) -> Result<()> {
    if deps.len() > MAX_DEPENDENCIES {
        return Err(Error::too_large(
            "dependencies of one job",
            deps.len(),
            MAX_DEPENDENCIES,
        ));
    }
    let mut seen = HashSet::with_capacity(deps.len());
    for (i, dep) in deps.iter().enumerate() {
        id(dep).map_err(|e| Error::invalid(format!("depends_on[{i}]: {e}")))?;
        if dep == of {
            return Err(Error::invalid(format!(
                "depends_on[{i}]: job {of:?} cannot depend on itself"
            )));
        }
        if !seen.insert(dep.as_str()) {
            return Err(Error::invalid(format!(
                "depends_on[{i}]: {dep:?} appears twice"
            )));
        }
    }
    Ok(())
}

/// A repeat rule: 1..=[`MAX_RULE_LEN`] bytes without control characters,
/// a time zone of 1..=[`MAX_TIME_ZONE_LEN`] bytes without spaces or
/// control characters. Only the daemon reads the rule itself.
pub fn repeat(r: &Repeat) -> Result<()> {
    printable("repeat.rule", &r.rule, MAX_RULE_LEN)?;
    printable("repeat.time_zone", &r.time_zone, MAX_TIME_ZONE_LEN)?;
    if r.rule.starts_with("TZ=") {
        return Err(Error::invalid(format!(
            "repeat.rule {:?} starts with TZ=: give the zone as repeat.time_zone",
            r.rule
        )));
    }
    if r.time_zone.contains(' ') {
        return Err(Error::invalid(format!(
            "repeat.time_zone {:?} contains a space",
            r.time_zone
        )));
    }
    Ok(())
}

/// A unique key: 1..=[`MAX_UNIQUE_KEY_LEN`] bytes without control
/// characters, and a window of at most [`MAX_DELAY`].
pub fn unique(u: &Unique) -> Result<()> {
    if u.key.is_empty() {
        return Err(Error::invalid("unique.key is empty"));
    }
    if u.key.len() > MAX_UNIQUE_KEY_LEN {
        return Err(Error::invalid(format!(
            "unique.key is {} bytes, the limit is {MAX_UNIQUE_KEY_LEN}",
            u.key.len()
        )));
    }
    if u.key.chars().any(char::is_control) {
        return Err(Error::invalid(format!(
            "unique.key {:?} has a control character",
            u.key
        )));
    }
    if let Some(w) = u.window
        && w > MAX_DELAY
    {
        return Err(Error::invalid(format!(
            "unique.window {w:?} is above {MAX_DELAY:?}"
        )));
    }
    Ok(())
}

/// A list of job ids for renew, cancel or
/// [`release_all`](crate::JobStoreExt::release_all): size, each id, and
/// each id at most once.
pub fn ids(ids: &[String]) -> Result<()> {
    batch("list of job ids", ids.len())?;
    let mut seen = HashSet::with_capacity(ids.len());
    for i in ids {
        id(i)?;
        if !seen.insert(i.as_str()) {
            return Err(Error::invalid(format!(
                "job id {i:?} appears twice in one list"
            )));
        }
    }
    Ok(())
}

/// The arguments of a sysid reservation or renewal.
pub fn sysid_lease(sysid_: &str, ttl: Duration, now: Millis) -> Result<()> {
    sysid(sysid_)?;
    lease("sysid ttl", ttl)?;
    time("now", now)
}

/// The arguments of a cancel.
pub fn cancel(ids_: &[String], now: Millis) -> Result<()> {
    ids(ids_)?;
    time("now", now)
}

/// The arguments of a claim.
pub fn claim(
    jobtype_: &str,
    limit: usize,
    owner: &str,
    lease_: Duration,
    now: Millis,
) -> Result<()> {
    jobtype(jobtype_)?;
    if limit > MAX_CLAIM {
        return Err(Error::invalid(format!(
            "claim limit {limit} is above the maximum of {MAX_CLAIM}"
        )));
    }
    sysid(owner)?;
    lease("lease", lease_)?;
    time("now", now)
}

/// The arguments of a renewal.
pub fn renew(ids_: &[String], owner: &str, lease_: Duration, now: Millis) -> Result<()> {
    ids(ids_)?;
    sysid(owner)?;
    lease("lease", lease_)?;
    time("now", now)
}

/// The arguments of a release: at most [`MAX_BATCH`] entries; each id
/// valid and at most once in the list; a valid owner and `now`; then each
/// entry's [`release_how`]. Checked in that order, so the first error is the
/// same whether a caller lists the entries itself or goes through
/// [`JobStoreExt::release_all`](crate::JobStoreExt::release_all).
pub fn release(
    releases: &[JobRelease],
    owner: &str,
    now: Millis,
    caps: &Capabilities,
) -> Result<()> {
    batch("list of job releases", releases.len())?;
    let mut seen = HashSet::with_capacity(releases.len());
    for r in releases {
        id(&r.id)?;
        if !seen.insert(r.id.as_str()) {
            return Err(Error::invalid(format!(
                "job id {:?} appears twice in one list of releases",
                r.id
            )));
        }
    }
    sysid(owner)?;
    time("now", now)?;
    releases.iter().try_for_each(|r| release_how(&r.how, caps))
}

/// What one release asks for: a retry delay of at most [`MAX_DELAY`]
/// (`InvalidInput`), result output of at most [`MAX_OUTPUT`] bytes
/// (`TooLarge`); a repeat only on a store with [`Capabilities::repeat`]
/// (`Unsupported`), at a valid time (`InvalidInput`), with data of at most
/// [`Capabilities::max_payload`] bytes (`TooLarge`).
pub fn release_how(how: &Release, caps: &Capabilities) -> Result<()> {
    match how {
        Release::Retry { delay } if *delay > MAX_DELAY => Err(Error::invalid(format!(
            "retry delay {delay:?} is above the maximum of {MAX_DELAY:?}"
        ))),
        Release::Repeat { .. } if !caps.repeat => {
            Err(Error::unsupported("releases that repeat a job"))
        }
        Release::Repeat { at, data, .. } => {
            time("repeat time", *at)?;
            if let Some(data) = data {
                payload(data, caps)?;
            }
            output(how.output_len())
        }
        _ => output(how.output_len()),
    }
}

fn output(len: usize) -> Result<()> {
    if len > MAX_OUTPUT {
        return Err(Error::too_large("result output", len, MAX_OUTPUT));
    }
    Ok(())
}

/// The arguments of a data update.
pub fn update_data(
    id_: &str,
    owner: &str,
    data: &[u8],
    caps: &Capabilities,
    now: Millis,
) -> Result<()> {
    id(id_)?;
    sysid(owner)?;
    payload(data, caps)?;
    time("now", now)
}

/// A handler to store.
pub fn handler(jobtype_: &str, handler: &Handler, now: Millis) -> Result<()> {
    jobtype(jobtype_)?;
    time("now", now)?;
    if handler.method.is_empty()
        || handler.method.len() > 32
        || !handler
            .method
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    {
        return Err(Error::invalid(format!(
            "handler method {:?} must be 1..=32 bytes of a-z 0-9 _ -",
            handler.method
        )));
    }
    let fields = [
        ("body", Some(&handler.body)),
        ("eid", handler.eid.as_ref()),
        ("before", handler.before.as_ref()),
        ("before_each", handler.before_each.as_ref()),
        ("after_each", handler.after_each.as_ref()),
    ];
    for (name, value) in fields {
        if let Some(v) = value {
            if v.len() > MAX_HANDLER_FIELD {
                return Err(Error::too_large(
                    format!("handler {name}"),
                    v.len(),
                    MAX_HANDLER_FIELD,
                ));
            }
            if v.contains('\0') {
                return Err(Error::invalid(format!(
                    "handler {name} contains a NUL character"
                )));
            }
        }
    }
    if let Some(eid) = &handler.eid {
        text("handler eid", eid, MAX_ID_LEN)?;
    }
    handler_limits(&handler.limits)
}

/// A handler's limits: counts `1..=` their maximum
/// ([`MAX_HANDLER_ATTEMPTS`], [`MAX_HANDLER_CONCURRENCY`]); `time_limit_ms`
/// `1..=`[`MAX_LEASE`]; the other durations `1..=`[`MAX_DELAY`]; and
/// `backoff_base_ms <= backoff_max_ms` when both are set. Every failure is
/// `InvalidInput` naming the field.
pub fn handler_limits(limits: &HandlerLimits) -> Result<()> {
    fn count(field: &str, value: Option<u32>, max: u32) -> Result<()> {
        match value {
            Some(v) if !(1..=max).contains(&v) => Err(Error::invalid(format!(
                "handler limits.{field} {v} is outside 1..={max}"
            ))),
            _ => Ok(()),
        }
    }
    fn millis(field: &str, value: Option<u64>, max: Duration) -> Result<()> {
        let max_ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
        match value {
            Some(v) if !(1..=max_ms).contains(&v) => Err(Error::invalid(format!(
                "handler limits.{field} {v} is outside 1..={max_ms} (milliseconds)"
            ))),
            _ => Ok(()),
        }
    }
    count("max_attempts", limits.max_attempts, MAX_HANDLER_ATTEMPTS)?;
    millis("max_age_ms", limits.max_age_ms, MAX_DELAY)?;
    millis("time_limit_ms", limits.time_limit_ms, MAX_LEASE)?;
    count("concurrency", limits.concurrency, MAX_HANDLER_CONCURRENCY)?;
    millis("backoff_base_ms", limits.backoff_base_ms, MAX_DELAY)?;
    millis("backoff_max_ms", limits.backoff_max_ms, MAX_DELAY)?;
    if let (Some(base), Some(max)) = (limits.backoff_base_ms, limits.backoff_max_ms)
        && base > max
    {
        return Err(Error::invalid(format!(
            "handler limits.backoff_base_ms {base} is above limits.backoff_max_ms {max}"
        )));
    }
    Ok(())
}

/// A [`JobQuery`]: its limit, jobtypes or prefix, filters that belong to
/// its state, time ranges the right way round, and a cursor made by the
/// same query. Each error names the field.
pub fn job_query(query: &JobQuery, now: Millis) -> Result<()> {
    time("now", now)?;
    crate::manage::page_limit(query.limit)?;
    jobtype_filter(&query.jobtypes)?;
    let archived = query.state == JobState::Archived;
    if !archived && !query.codes.is_empty() {
        return Err(Error::invalid(format!(
            "codes filter archived jobs; the query lists {} jobs",
            query.state
        )));
    }
    if !archived && !query.archived.is_open() {
        return Err(Error::invalid(format!(
            "archived (a range of archive times) filters archived jobs; the query lists {} jobs",
            query.state
        )));
    }
    range("created", &query.created)?;
    range("archived", &query.archived)?;
    if let Some(t) = &query.tag {
        tag(t)?;
    }
    query.resume_after()?;
    Ok(())
}

/// A [`JobtypeFilter`]: a list of 1..=[`MAX_QUERY_JOBTYPES`] valid
/// jobtypes, none twice, or a valid prefix.
pub fn jobtype_filter(filter: &JobtypeFilter) -> Result<()> {
    match filter {
        JobtypeFilter::All => {}
        JobtypeFilter::Exact(list) => {
            if list.is_empty() {
                return Err(Error::invalid("jobtypes is an empty list"));
            }
            if list.len() > MAX_QUERY_JOBTYPES {
                return Err(Error::invalid(format!(
                    "jobtypes lists {} jobtypes, the limit is {MAX_QUERY_JOBTYPES}",
                    list.len()
                )));
            }
            let mut seen = HashSet::with_capacity(list.len());
            for t in list {
                jobtype(t)?;
                if !seen.insert(t.as_str()) {
                    return Err(Error::invalid(format!("jobtypes lists {t:?} twice")));
                }
            }
        }
        JobtypeFilter::Prefix(prefix) => {
            jobtype(prefix).map_err(|e| match e {
                Error::InvalidInput { message } => Error::invalid(format!(
                    "prefix: {}",
                    message.replacen("jobtype", "prefix", 1)
                )),
                other => other,
            })?;
        }
    }
    Ok(())
}

fn range(what: &str, r: &TimeRange) -> Result<()> {
    if let Some(from) = r.from {
        time(&format!("{what}.from"), from)?;
    }
    if let Some(to) = r.to {
        time(&format!("{what}.to"), to)?;
    }
    if let (Some(from), Some(to)) = (r.from, r.to)
        && to <= from
    {
        return Err(Error::invalid(format!(
            "{what} range ends at {to}, not after its start {from}"
        )));
    }
    Ok(())
}

/// The arguments of a run again: the ids, the delay, `now`.
pub fn rerun(ids_: &[String], delay: Duration, now: Millis) -> Result<()> {
    ids(ids_)?;
    if delay > MAX_DELAY {
        return Err(Error::invalid(format!(
            "delay {delay:?} is above the maximum of {MAX_DELAY:?}"
        )));
    }
    time("now", now)
}

/// A batch of [`JobEdit`]s: size, ids (each once), times, payloads, and
/// each edit changing something.
pub fn edits(edits: &[JobEdit], caps: &Capabilities, now: Millis) -> Result<()> {
    time("now", now)?;
    batch("batch of edits", edits.len())?;
    let mut seen = HashSet::with_capacity(edits.len());
    for e in edits {
        id(&e.id)?;
        if !seen.insert(e.id.as_str()) {
            return Err(Error::invalid(format!(
                "job id {:?} appears twice in one batch of edits",
                e.id
            )));
        }
        if e.priority.is_none() && e.run_at.is_none() && e.data.is_none() {
            return Err(Error::invalid(format!(
                "the edit of job {:?} changes nothing (set priority, run_at or data)",
                e.id
            )));
        }
        if let Some(dt) = e.run_at {
            time("run_at", dt)?;
        }
        if let Some(data) = &e.data {
            payload(data, caps)?;
        }
    }
    Ok(())
}

/// The arguments of a pause or resume.
pub fn pause(jobtype_: &str, now: Millis) -> Result<()> {
    jobtype(jobtype_)?;
    time("now", now)
}

/// A tag: 1..=[`MAX_TAG_LEN`] bytes of `[A-Za-z0-9_.:-]`.
pub fn tag(tag: &str) -> Result<()> {
    if tag.is_empty() || tag.len() > MAX_TAG_LEN {
        return Err(Error::invalid(format!(
            "tag {tag:?} is {} bytes long; tags are 1..={MAX_TAG_LEN} bytes",
            tag.len()
        )));
    }
    if let Some(c) = tag
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-')))
    {
        return Err(Error::invalid(format!(
            "tag {tag:?} contains {c:?}; allowed are A-Z a-z 0-9 _ . : -"
        )));
    }
    Ok(())
}

/// A job's [`TraceContext`]: a W3C `traceparent` and, if set, a W3C
/// `tracestate` (see [`TraceContext`] for the rules). A malformed one is
/// `InvalidInput` naming `traceparent` or `tracestate`, whether or not the
/// store keeps trace context ([`Capabilities::trace`]).
pub fn trace(ctx: &TraceContext) -> Result<()> {
    crate::trace::check(ctx)
}

/// A job's tags: at most [`MAX_TAGS`], each valid, none twice.
pub fn tags(list: &[String]) -> Result<()> {
    if list.len() > MAX_TAGS {
        return Err(Error::invalid(format!(
            "tags lists {} tags, the limit is {MAX_TAGS}",
            list.len()
        )));
    }
    for (i, t) in list.iter().enumerate() {
        tag(t)?;
        if list[..i].contains(t) {
            return Err(Error::invalid(format!("tags lists {t:?} twice")));
        }
    }
    Ok(())
}

/// A batch of [`StatsDelta`]s: size, jobtypes, minutes (aligned, not after
/// `now`), each (jobtype, minute) once, and each delta holding durations
/// whose histogram adds up to their count.
pub fn stats_deltas(deltas: &[StatsDelta], now: Millis) -> Result<()> {
    time("now", now)?;
    batch("batch of stats", deltas.len())?;
    let mut seen = HashSet::with_capacity(deltas.len());
    for d in deltas {
        jobtype(&d.jobtype)?;
        time("minute", d.minute)?;
        if d.minute.rem_euclid(MINUTE_MS) != 0 {
            return Err(Error::invalid(format!(
                "minute {} is not the start of a minute (a multiple of {MINUTE_MS})",
                d.minute
            )));
        }
        if d.minute > now {
            return Err(Error::invalid(format!(
                "minute {} starts after now ({now})",
                d.minute
            )));
        }
        if !seen.insert((d.jobtype.as_str(), d.minute)) {
            return Err(Error::invalid(format!(
                "stats for jobtype {:?} at minute {} appear twice in one batch",
                d.jobtype, d.minute
            )));
        }
        if d.wait.is_empty() && d.run.is_empty() {
            return Err(Error::invalid(format!(
                "stats for jobtype {:?} at minute {} hold no durations",
                d.jobtype, d.minute
            )));
        }
        durations("wait", &d.wait)?;
        durations("run", &d.run)?;
    }
    Ok(())
}

fn durations(what: &str, d: &Durations) -> Result<()> {
    let in_buckets: u64 = d.buckets.iter().fold(0u64, |a, b| a.saturating_add(*b));
    if in_buckets != d.count {
        return Err(Error::invalid(format!(
            "{what}.buckets add up to {in_buckets}, not to {what}.count {}",
            d.count
        )));
    }
    if !d.sum_sq_ms.is_finite() || d.sum_sq_ms < 0.0 {
        return Err(Error::invalid(format!(
            "{what}.sum_sq_ms is {}; it is a finite sum of squares, 0 or more",
            d.sum_sq_ms
        )));
    }
    if d.count == 0 && (d.sum_ms != 0 || d.sum_sq_ms != 0.0) {
        return Err(Error::invalid(format!(
            "{what} holds no durations but sums that are not 0"
        )));
    }
    Ok(())
}

/// A [`StatsQuery`]: its jobtypes, and `now`.
pub fn stats_query(query: &StatsQuery, now: Millis) -> Result<()> {
    time("now", now)?;
    jobtype_filter(&query.jobtypes)
}

/// A schedule's name: a jobtype's rules (the daemon names a client's
/// schedules `{client}-{name}`), at most [`MAX_SCHEDULE_NAME_LEN`] bytes;
/// messages name the `name` field.
pub fn schedule_name(name: &str) -> Result<()> {
    jobtype(name).map_err(|e| match e {
        Error::InvalidInput { message } => Error::invalid(format!(
            "schedule name: {}",
            message.replacen("jobtype", "name", 1)
        )),
        other => other,
    })
}

/// A schedule's definition: its name, rule and time zone (printable text
/// of at most [`MAX_RULE_LEN`] and [`MAX_TIME_ZONE_LEN`] bytes), the job
/// template as an add checks it (jobtype, payload, tags), a catch-up
/// window of at most [`MAX_DELAY`], start and end times with the end after
/// the start, and `next_due` and `now` as times.
pub fn schedule(
    s: &crate::schedule::Schedule,
    next_due: Option<Millis>,
    caps: &Capabilities,
    now: Millis,
) -> Result<()> {
    schedule_name(&s.name)?;
    printable("rule", &s.rule, MAX_RULE_LEN)?;
    printable("time_zone", &s.time_zone, MAX_TIME_ZONE_LEN)?;
    jobtype(&s.jobtype)?;
    payload(&s.data, caps)?;
    tags(&s.tags)?;
    if s.catch_up_window > MAX_DELAY {
        return Err(Error::invalid(format!(
            "catch_up_window {:?} is above the limit of {MAX_DELAY:?}",
            s.catch_up_window
        )));
    }
    if let Some(t) = s.start_at {
        time("start_at", t)?;
    }
    if let Some(t) = s.end_at {
        time("end_at", t)?;
    }
    if let (Some(start), Some(end)) = (s.start_at, s.end_at)
        && end <= start
    {
        return Err(Error::invalid(format!(
            "end_at {end} is not after start_at {start}"
        )));
    }
    if let Some(t) = next_due {
        time("next_due", t)?;
    }
    time("now", now)
}

fn printable(what: &str, value: &str, max: usize) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(format!("{what} is empty")));
    }
    if value.len() > max {
        return Err(Error::invalid(format!(
            "{what} is {} bytes long, the limit is {max}",
            value.len()
        )));
    }
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        return Err(Error::invalid(format!(
            "{what} {value:?} contains the control character {c:?}"
        )));
    }
    Ok(())
}

/// A prefix of schedule names: empty (every schedule) or a name's rules.
pub fn schedule_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() {
        return Ok(());
    }
    schedule_name(prefix).map_err(|e| match e {
        Error::InvalidInput { message } => {
            Error::invalid(message.replacen("schedule name", "schedule prefix", 1))
        }
        other => other,
    })
}

/// A pause or resume of a schedule: its name, `next_due` and `now`.
pub fn schedule_pause(name: &str, next_due: Option<Millis>, now: Millis) -> Result<()> {
    schedule_name(name)?;
    if let Some(t) = next_due {
        time("next_due", t)?;
    }
    time("now", now)
}

/// A read of due schedules: `now` and a limit of 1..=[`MAX_PAGE`].
pub fn due_schedules(now: Millis, limit: usize) -> Result<()> {
    time("now", now)?;
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(Error::invalid(format!(
            "limit {limit} is outside 1..={MAX_PAGE}"
        )));
    }
    Ok(())
}

/// An advance of a schedule: its name, a version of at least 1, the
/// watermark, `next_due` and `now` as times, and the last job's id.
pub fn schedule_advance(
    name: &str,
    version: u64,
    advance: &crate::schedule::ScheduleAdvance,
    now: Millis,
) -> Result<()> {
    schedule_name(name)?;
    if version == 0 {
        return Err(Error::invalid("version 0: versions start at 1"));
    }
    time("fired_through", advance.fired_through)?;
    if let Some(t) = advance.next_due {
        time("next_due", t)?;
    }
    if let Some(job) = &advance.last_job {
        text("last_job", job, MAX_ID_LEN)?;
    }
    time("now", now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deps_lists_at_their_bounds() {
        let deps = |n: usize| (0..n).map(|i| format!("d{i}")).collect::<Vec<_>>();
        assert!(dependencies("w", &deps(MAX_DEPENDENCIES)).is_ok());
        let e = dependencies("w", &deps(MAX_DEPENDENCIES + 1)).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::TooLarge);
        assert!(waits_of(&deps(3), 1).is_ok());
        let twice = vec!["a".to_owned(), "a".to_owned()];
        assert_eq!(
            waits_of(&twice, 1).unwrap_err().kind(),
            crate::ErrorKind::InvalidInput
        );
        assert_eq!(
            waits_of(&deps(1), 0).unwrap_err().kind(),
            crate::ErrorKind::InvalidInput
        );
    }
}
