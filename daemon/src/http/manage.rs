//! Managing jobs: list with filters and a cursor, run again, delete,
//! cancel (by ids or by filter, with a dry run), edit, pause and resume a
//! jobtype, failure groups. Every route calls the store's management
//! operations; a store that does not offer one answers 501.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use jobstore_api::limits::{MAX_DELAY, MAX_PAGE};
use jobstore_api::{
    Cursor, JobEdit, JobQuery, JobState, JobtypeFilter, Millis, ResultCode, TimeRange, now_millis,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{CallerOf, JsonBody, PathParams, QueryOf, RawBody, Tenant, is_json};
use super::jobs::{JobView, job_view};
use super::params::ClientPath;
use crate::tenant::{self, Client};

/// The filters of a job list or of a bulk action.
#[derive(Debug, Clone, Default, Deserialize, Serialize, IntoParams, ToSchema)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct JobFilter {
    /// `waiting`, `scheduled`, `running`, `expired`, `blocked` or `archived`.
    pub state: Option<String>,
    /// Jobtypes, comma-separated (default: every jobtype of the client).
    #[serde(rename = "type")]
    #[param(rename = "type")]
    #[schema(rename = "type")]
    pub jobtype: Option<String>,
    /// For archived jobs: result codes, comma-separated (`ok`, `failed`,
    /// `retry`, `error`, `cancelled`, `timeout`).
    pub code: Option<String>,
    /// Created at or after (epoch ms or RFC 3339).
    pub created_from: Option<String>,
    /// Created before (epoch ms or RFC 3339).
    pub created_to: Option<String>,
    /// For archived jobs: archived at or after (epoch ms or RFC 3339).
    pub archived_from: Option<String>,
    /// For archived jobs: archived before (epoch ms or RFC 3339).
    pub archived_to: Option<String>,
    /// Only jobs with this tag.
    pub tag: Option<String>,
    /// For archived jobs: only those whose result has this status.
    pub status: Option<u16>,
    /// For archived jobs: only those whose output's first line is this (as
    /// a failure group shows it, `[jobstore]` notes skipped).
    pub message: Option<String>,
}

/// A page request: filters, page size, cursor, payloads.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// `waiting`, `scheduled`, `running`, `expired`, `blocked` or `archived` (required).
    pub state: Option<String>,
    /// Jobtypes, comma-separated (default: every jobtype).
    #[serde(rename = "type")]
    #[param(rename = "type")]
    pub jobtype: Option<String>,
    /// For archived jobs: result codes, comma-separated.
    pub code: Option<String>,
    /// Created at or after (epoch ms or RFC 3339).
    pub created_from: Option<String>,
    /// Created before (epoch ms or RFC 3339).
    pub created_to: Option<String>,
    /// For archived jobs: archived at or after.
    pub archived_from: Option<String>,
    /// For archived jobs: archived before.
    pub archived_to: Option<String>,
    /// Jobs per page: 1 to 1000 (default 100).
    pub limit: Option<usize>,
    /// The `next` of the page before (same filters).
    pub cursor: Option<String>,
    /// Include payloads (default false).
    pub data: Option<bool>,
    /// Only jobs with this tag.
    pub tag: Option<String>,
    /// For archived jobs: only those whose result has this status. The
    /// daemon applies it (and `message`) to each page the store returns,
    /// so a page may hold fewer than `limit` jobs, or none, before the last.
    pub status: Option<u16>,
    /// For archived jobs: only those whose output's first line is this (as
    /// a failure group shows it).
    pub message: Option<String>,
}

impl ListParams {
    fn filter(&self) -> JobFilter {
        JobFilter {
            state: self.state.clone(),
            jobtype: self.jobtype.clone(),
            code: self.code.clone(),
            created_from: self.created_from.clone(),
            created_to: self.created_to.clone(),
            archived_from: self.archived_from.clone(),
            archived_to: self.archived_to.clone(),
            tag: self.tag.clone(),
            status: self.status,
            message: self.message.clone(),
        }
    }
}

/// What a filter asks of an archived job's result beyond what the store
/// selects (its status, its output's first line): applied by the daemon to
/// each page, which is how a failure group is selected.
#[derive(Debug, Default)]
struct ResultMatch {
    status: Option<u16>,
    message: Option<String>,
}

impl ResultMatch {
    /// The match of `filter` (`prefix` as in [`query_of`]); `None` when it
    /// asks nothing of the result.
    fn of(filter: &JobFilter, prefix: &str) -> ApiResult<Option<ResultMatch>> {
        if filter.status.is_none() && filter.message.is_none() {
            return Ok(None);
        }
        if filter.state.as_deref() != Some("archived") {
            let field = if filter.status.is_some() {
                "status"
            } else {
                "message"
            };
            return Err(ApiError::invalid(format!(
                "{prefix}{field} selects archived jobs by their result; set {prefix}state=archived"
            ))
            .field(format!("{prefix}{field}")));
        }
        Ok(Some(ResultMatch {
            status: filter.status,
            message: filter.message.clone(),
        }))
    }

    fn matches(&self, job: &jobstore_api::Job) -> bool {
        let Some(result) = &job.result else {
            return false;
        };
        self.status.is_none_or(|s| s == result.status)
            && self
                .message
                .as_deref()
                .is_none_or(|m| m == first_line(&result.output))
    }
}

/// Keeps the jobs `m` matches (all without one).
fn keep_matching(jobs: &mut Vec<jobstore_api::Job>, m: &Option<ResultMatch>) {
    if let Some(m) = m {
        jobs.retain(|j| m.matches(j));
    }
}

/// A page of jobs.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct JobList {
    /// The jobs, in the state's order (waiting: as claims take them;
    /// scheduled: due first; running: lease expiry first; archived: newest
    /// first). Payloads only when asked for.
    pub jobs: Vec<JobView>,
    /// The cursor of the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// Whose jobs a query reads: one client's, or (admin) every client's.
pub(super) enum Scope<'a> {
    Client(&'a Client),
    All,
}

pub(super) fn parse_time(field: &str, s: &str) -> ApiResult<Millis> {
    let s = s.trim();
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    let t = humantime::parse_rfc3339_weak(s).map_err(|e| {
        ApiError::invalid(format!(
            "{field} {s:?} is neither epoch milliseconds nor an RFC 3339 time: {e}"
        ))
        .field(field)
    })?;
    let ms = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| ApiError::invalid(format!("{field} {s:?} is before 1970")).field(field))?
        .as_millis();
    Ok(Millis::try_from(ms).unwrap_or(Millis::MAX))
}

fn range(field: &str, from: &Option<String>, to: &Option<String>) -> ApiResult<TimeRange> {
    let from = from
        .as_deref()
        .map(|s| parse_time(&format!("{field}_from"), s))
        .transpose()?;
    let to = to
        .as_deref()
        .map(|s| parse_time(&format!("{field}_to"), s))
        .transpose()?;
    Ok(TimeRange::new(from, to))
}

fn split(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// The store jobtypes a `type` parameter (a comma-separated list, field
/// `field` in errors) names in `scope`: the client's jobtypes listed, or
/// every jobtype of the client (of every client for the admin) without it.
pub(super) fn jobtypes_of(
    scope: &Scope,
    list: Option<&str>,
    field: &str,
) -> ApiResult<JobtypeFilter> {
    let types: Vec<String> = match (scope, list) {
        (Scope::Client(client), Some(list)) => {
            let mut types = Vec::new();
            for t in split(list) {
                let stored = client
                    .jobtype(t)
                    .map_err(|e| ApiError::invalid(e.to_string()).field(field))?;
                if !types.contains(&stored) {
                    types.push(stored);
                }
            }
            types
        }
        (Scope::Client(client), None) => {
            return Ok(JobtypeFilter::Prefix(format!(
                "{}{}",
                client.as_str(),
                tenant::SEP
            )));
        }
        (Scope::All, Some(list)) => split(list).map(str::to_owned).collect(),
        (Scope::All, None) => return Ok(JobtypeFilter::All),
    };
    if types.is_empty() {
        return Err(ApiError::invalid(format!("{field} is empty")).field(field));
    }
    Ok(JobtypeFilter::Exact(types))
}

/// The store query of `filter` (with `prefix` the field names in errors
/// carry: `filter.` in a bulk body, nothing in a query string).
fn query_of(scope: &Scope, filter: &JobFilter, prefix: &str) -> ApiResult<JobQuery> {
    let f = |name: &str| format!("{prefix}{name}");
    let state: JobState = filter
        .state
        .as_deref()
        .ok_or_else(|| {
            ApiError::invalid(format!(
                "{} is missing: waiting, scheduled, running, expired, blocked or archived",
                f("state")
            ))
            .field(f("state"))
        })?
        .parse()
        .map_err(|e: jobstore_api::Error| ApiError::from(e).field(f("state")))?;
    let mut q = JobQuery::new(state);
    q.jobtypes = jobtypes_of(scope, filter.jobtype.as_deref(), &f("type"))?;
    if let Some(codes) = &filter.code {
        let mut parsed = Vec::new();
        for c in split(codes) {
            let code: ResultCode = c
                .parse()
                .map_err(|e: jobstore_api::Error| ApiError::from(e).field(f("code")))?;
            parsed.push(code);
        }
        if parsed.is_empty() {
            return Err(ApiError::invalid(format!("{} is empty", f("code"))).field(f("code")));
        }
        q.codes = parsed;
    }
    if let Some(t) = &filter.tag {
        jobstore_api::validate::tag(t).map_err(|e| ApiError::from(e).field(f("tag")))?;
        q.tag = Some(t.clone());
    }
    q.created = range(&f("created"), &filter.created_from, &filter.created_to)?;
    q.archived = range(&f("archived"), &filter.archived_from, &filter.archived_to)?;
    Ok(q)
}

/// The field a store's validation message names (its first word), for
/// the error's `field`.
fn store_field(e: jobstore_api::Error, prefix: &str) -> ApiError {
    let message = e.to_string();
    let detail = message.strip_prefix("invalid input: ").unwrap_or(&message);
    let first = detail
        .split([' ', ':'])
        .next()
        .unwrap_or_default()
        .to_owned();
    let known = [
        "limit", "codes", "archived", "created", "cursor", "prefix", "jobtypes", "jobtype",
    ];
    let field = match first.split('.').next() {
        Some("codes") => "code".to_owned(),
        Some("jobtypes" | "jobtype" | "prefix") => "type".to_owned(),
        Some(k) if known.contains(&k) => first.replace('.', "_"),
        _ => String::new(),
    };
    let err = ApiError::from(e);
    if field.is_empty() {
        err
    } else {
        err.field(format!("{prefix}{field}"))
    }
}

async fn list_scoped(
    state: &AppState,
    scope: Scope<'_>,
    params: ListParams,
) -> ApiResult<Json<JobList>> {
    let filter = params.filter();
    let mut q = query_of(&scope, &filter, "")?;
    let by_result = ResultMatch::of(&filter, "")?;
    q.limit = params.limit.unwrap_or(100);
    q.with_data = params.data.unwrap_or(false);
    if let Some(c) = &params.cursor {
        q.cursor = Some(
            c.parse::<Cursor>()
                .map_err(|e| ApiError::from(e).field("cursor"))?,
        );
    }
    let now = now_millis();
    jobstore_api::validate::job_query(&q, now).map_err(|e| store_field(e, ""))?;
    let mut page = state.store.list_jobs(&q, now).await?;
    keep_matching(&mut page.jobs, &by_result);
    let view = |j: &jobstore_api::Job| {
        let mut v = job_view(j, now);
        if !q.with_data {
            v.data = None;
            v.data_base64 = None;
        }
        v
    };
    Ok(Json(JobList {
        jobs: page.jobs.iter().map(view).collect(),
        next: page.next.map(|c| c.to_string()),
    }))
}

/// A client's jobs: one state, filtered, a page at a time.
#[utoipa::path(
    get,
    path = "/{client}/jobs",
    tag = "manage",
    params(ClientPath, ListParams),
    responses(
        (status = 200, body = JobList),
        (status = 400, description = "A bad filter, limit or cursor (the error names the field)", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 501, description = "The store does not list jobs", body = ErrorBody),
        (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn list(
    State(state): State<AppState>,
    tenant: Tenant,
    QueryOf(params): QueryOf<ListParams>,
) -> ApiResult<Json<JobList>> {
    list_scoped(&state, Scope::Client(&tenant.client), params).await
}

/// Every client's jobs (the admin token, when tokens are configured);
/// `type` names store jobtypes (`client-type`).
#[utoipa::path(
    get,
    path = "/jobs",
    tag = "admin",
    params(ListParams),
    responses(
        (status = 200, body = JobList),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 501, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn list_all(
    State(state): State<AppState>,
    CallerOf(caller): CallerOf,
    QueryOf(params): QueryOf<ListParams>,
) -> ApiResult<Json<JobList>> {
    if state.config.auth.enabled() {
        caller.require_admin("jobs of every client")?;
    }
    list_scoped(&state, Scope::All, params).await
}

/// A bulk action: by ids, or by filter (a batch at a time, resumed by
/// `cursor`), or a dry run that counts what the filter selects.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkRequest {
    /// Job ids, as the add answered them (give ids or filter).
    pub ids: Option<Vec<String>>,
    /// The jobs to act on (give ids or filter).
    pub filter: Option<JobFilter>,
    /// Only count what the filter (or the ids) selects; change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// With a filter: the `next` of the batch before.
    pub cursor: Option<String>,
    /// With a filter: most jobs per batch, 1 to 1000 (default 1000).
    pub limit: Option<usize>,
    /// Run again only: make the jobs due this many milliseconds from now.
    pub delay_ms: Option<u64>,
}

/// What a bulk action did.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct BulkResponse {
    /// How many jobs the ids or this batch of the filter selected (for a
    /// dry run: everything the filter selects).
    pub matched: u64,
    /// Changed: run again, deleted, unblocked, or (cancel) archived as
    /// cancelled.
    pub done: Vec<String>,
    /// Cancel only: running jobs marked; their runs are stopped at their
    /// next lease renewal, then they are archived as cancelled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cancelling: Vec<String>,
    /// Not changed: running (delete), not archived (run again), already
    /// archived (cancel), not blocked (unblock), or unknown.
    pub not_done: Vec<String>,
    /// With a filter: the cursor of the next batch; absent when the
    /// filter is exhausted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Action {
    Rerun,
    Delete,
    Cancel,
    Unblock,
}

async fn bulk(
    state: &AppState,
    client: &Client,
    req: BulkRequest,
    action: Action,
) -> ApiResult<BulkResponse> {
    if req.delay_ms.is_some() && action != Action::Rerun {
        return Err(ApiError::invalid("delay_ms applies to run again only").field("delay_ms"));
    }
    let delay = Duration::from_millis(req.delay_ms.unwrap_or(0));
    if delay > MAX_DELAY {
        return Err(ApiError::invalid(format!(
            "delay_ms {} is above the maximum of {} ms",
            delay.as_millis(),
            MAX_DELAY.as_millis()
        ))
        .field("delay_ms")
        .limit(MAX_DELAY.as_millis() as u64));
    }
    let now = now_millis();
    let (ids, next, matched) = match (&req.ids, &req.filter) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid("give ids or filter, not both").field("filter"));
        }
        (None, None) => {
            return Err(ApiError::invalid(
                "a bulk action needs ids or a filter (with at least its state)",
            )
            .field("filter"));
        }
        (Some(locals), None) => {
            if req.cursor.is_some() || req.limit.is_some() {
                return Err(
                    ApiError::invalid("cursor and limit go with a filter, not with ids")
                        .field("cursor"),
                );
            }
            if locals.is_empty() {
                return Err(ApiError::invalid("ids is empty").field("ids"));
            }
            let mut seen = HashSet::new();
            let mut ids = Vec::with_capacity(locals.len());
            for (i, local) in locals.iter().enumerate() {
                let id = client
                    .job_id(local)
                    .map_err(|e| ApiError::from(e).item(i + 1).field("ids"))?;
                if seen.insert(id.clone()) {
                    ids.push(id);
                }
            }
            jobstore_api::validate::ids(&ids).map_err(|e| ApiError::from(e).field("ids"))?;
            let n = ids.len() as u64;
            (ids, None, n)
        }
        (None, Some(filter)) => {
            let mut q = query_of(&Scope::Client(client), filter, "filter.")?;
            let by_result = ResultMatch::of(filter, "filter.")?;
            let wrong_state = match action {
                Action::Rerun => q.state != JobState::Archived,
                Action::Delete => matches!(q.state, JobState::Running | JobState::Expired),
                Action::Cancel => q.state == JobState::Archived,
                Action::Unblock => q.state != JobState::Blocked,
            };
            if wrong_state {
                let what = match action {
                    Action::Rerun => "run again applies to archived jobs",
                    Action::Delete => "delete applies to jobs that are not running",
                    Action::Cancel => "cancel applies to jobs that are not archived",
                    Action::Unblock => "unblock applies to blocked jobs",
                };
                return Err(ApiError::invalid(format!(
                    "{what}; the filter selects {} jobs",
                    q.state
                ))
                .field("filter.state"));
            }
            q.limit = req.limit.unwrap_or(MAX_PAGE);
            if let Some(c) = &req.cursor {
                q.cursor = Some(
                    c.parse::<Cursor>()
                        .map_err(|e| ApiError::from(e).field("cursor"))?,
                );
            }
            jobstore_api::validate::job_query(&q, now).map_err(|e| store_field(e, "filter."))?;
            if req.dry_run {
                let mut total = 0u64;
                q.limit = MAX_PAGE;
                loop {
                    let mut page = state.store.list_jobs(&q, now).await?;
                    keep_matching(&mut page.jobs, &by_result);
                    total += page.jobs.len() as u64;
                    match page.next {
                        Some(c) => q.cursor = Some(c),
                        None => break,
                    }
                }
                return Ok(BulkResponse {
                    matched: total,
                    ..BulkResponse::default()
                });
            }
            let mut page = state.store.list_jobs(&q, now).await?;
            keep_matching(&mut page.jobs, &by_result);
            let ids: Vec<String> = page.jobs.into_iter().map(|j| j.id).collect();
            let n = ids.len() as u64;
            (ids, page.next.map(|c| c.to_string()), n)
        }
    };
    let strip = |id: &String| client.strip(id).unwrap_or(id).to_owned();
    if req.dry_run {
        return Ok(BulkResponse {
            matched,
            ..BulkResponse::default()
        });
    }
    let mut response = BulkResponse {
        matched,
        next,
        ..BulkResponse::default()
    };
    if ids.is_empty() {
        return Ok(response);
    }
    let (done, cancelling): (Vec<String>, Vec<String>) = match action {
        Action::Rerun => (state.store.rerun_jobs(&ids, delay, now).await?, Vec::new()),
        Action::Delete => (
            state.store.delete_jobs(&ids, now).await?.deleted,
            Vec::new(),
        ),
        Action::Cancel => {
            let out = state.store.cancel_jobs(&ids, now).await?;
            (out.cancelled, out.marked)
        }
        Action::Unblock => (state.store.unblock_jobs(&ids, now).await?, Vec::new()),
    };
    let changed: HashSet<&String> = done.iter().chain(cancelling.iter()).collect();
    response.not_done = ids
        .iter()
        .filter(|id| !changed.contains(id))
        .map(strip)
        .collect();
    response.done = done.iter().map(strip).collect();
    response.cancelling = cancelling.iter().map(strip).collect();
    Ok(response)
}

/// Runs archived jobs again (any result code): they wait again, their
/// attempts start over, their last result stays in their view.
#[utoipa::path(
    post,
    path = "/{client}/jobs/rerun",
    tag = "manage",
    params(ClientPath),
    request_body = BulkRequest,
    responses(
        (status = 200, body = BulkResponse),
        (status = 400, description = "Neither ids nor filter, or a bad filter (the error names the field)", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 501, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn rerun(
    State(state): State<AppState>,
    tenant: Tenant,
    JsonBody(req): JsonBody<BulkRequest>,
) -> ApiResult<Json<BulkResponse>> {
    Ok(Json(
        bulk(&state, &tenant.client, req, Action::Rerun).await?,
    ))
}

/// Deletes jobs that are not running; running ones are listed in
/// `not_done`, untouched.
#[utoipa::path(
    post,
    path = "/{client}/jobs/delete",
    tag = "manage",
    params(ClientPath),
    request_body = BulkRequest,
    responses(
        (status = 200, body = BulkResponse),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 501, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn delete(
    State(state): State<AppState>,
    tenant: Tenant,
    JsonBody(req): JsonBody<BulkRequest>,
) -> ApiResult<Json<BulkResponse>> {
    Ok(Json(
        bulk(&state, &tenant.client, req, Action::Delete).await?,
    ))
}

/// Unblocks blocked jobs, by ids or by a filter of state `blocked`: each
/// passes over what it still waits for (its pending and held
/// dependencies read `skipped` in its waits; their ends no longer reach
/// it) and waits at once (or is scheduled until its own run time), with
/// an `unblocked` event. Jobs that are not blocked are listed in
/// `not_done`, untouched.
#[utoipa::path(
    post,
    path = "/{client}/jobs/unblock",
    tag = "manage",
    params(ClientPath),
    request_body = BulkRequest,
    responses(
        (status = 200, body = BulkResponse),
        (status = 400, description = "Neither ids nor filter, or a bad filter (the error names the field)", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 501, description = "The store keeps no dependencies", body = ErrorBody),
        (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn unblock(
    State(state): State<AppState>,
    tenant: Tenant,
    JsonBody(req): JsonBody<BulkRequest>,
) -> ApiResult<Json<BulkResponse>> {
    Ok(Json(
        bulk(&state, &tenant.client, req, Action::Unblock).await?,
    ))
}

/// What a cancel did.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct CancelResponse {
    /// Archived as `cancelled` now: they were waiting or scheduled.
    pub cancelled: Vec<String>,
    /// Running: their runs are stopped at their holder's next lease
    /// renewal (a remote worker's next heartbeat), then they are archived
    /// as `cancelled`.
    #[serde(default)]
    pub cancelling: Vec<String>,
    /// Not cancelled: already archived, or unknown.
    pub not_cancelled: Vec<String>,
    /// How many jobs the ids or this batch of the filter selected (a dry
    /// run: everything the filter selects).
    #[serde(default)]
    pub matched: u64,
    /// With a filter: the cursor of the next batch; absent when done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// Cancels jobs, by ids or by filter: waiting and scheduled ones are
/// archived as `cancelled` at once; running ones are stopped at their
/// holder's next lease renewal and then archived as `cancelled`. Body: a
/// [`BulkRequest`] (`{"ids": […]}` or `{"filter": …}`), or one id per line.
#[utoipa::path(
    post,
    path = "/{client}/jobs/cancel",
    tag = "jobs",
    params(ClientPath),
    request_body(content((BulkRequest = "application/json"), (String = "text/plain"))),
    responses(
        (status = 200, body = CancelResponse),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn cancel(
    State(state): State<AppState>,
    tenant: Tenant,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> ApiResult<Json<CancelResponse>> {
    let req = if is_json(&headers) {
        serde_json::from_slice::<BulkRequest>(&body)
            .map_err(|e| ApiError::invalid(format!("the body is not a cancel request: {e}")))?
    } else {
        let ids: Vec<String> = std::str::from_utf8(&body)
            .map_err(|_| ApiError::invalid("the body is not UTF-8"))?
            .lines()
            .map(|l| l.trim_end_matches('\r'))
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        if ids.is_empty() {
            return Err(ApiError::invalid("no ids to cancel").field("ids"));
        }
        BulkRequest {
            ids: Some(ids),
            ..BulkRequest::default()
        }
    };
    let out = bulk(&state, &tenant.client, req, Action::Cancel).await?;
    Ok(Json(CancelResponse {
        cancelled: out.done,
        cancelling: out.cancelling,
        not_cancelled: out.not_done,
        matched: out.matched,
        next: out.next,
    }))
}

/// One job's changes.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EditItem {
    /// The job id, as the add answered it.
    pub id: String,
    /// A new priority.
    pub priority: Option<i32>,
    /// A new due time: epoch ms or RFC 3339.
    pub run_at: Option<String>,
    /// A new payload (UTF-8 text).
    pub data: Option<String>,
    /// A new payload as base64.
    pub data_base64: Option<String>,
}

/// Edits of waiting or scheduled jobs.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EditRequest {
    /// The edits, each changing at least one field.
    #[schema(min_items = 1)]
    pub edits: Vec<EditItem>,
}

/// What an edit did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EditResponse {
    /// Edited.
    pub edited: Vec<String>,
    /// Not edited: running, archived, or unknown.
    pub not_edited: Vec<String>,
}

/// Changes the priority, due time or payload of waiting or scheduled jobs.
#[utoipa::path(
    post,
    path = "/{client}/jobs/edit",
    tag = "manage",
    params(ClientPath),
    request_body = EditRequest,
    responses(
        (status = 200, body = EditResponse),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 501, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn edit(
    State(state): State<AppState>,
    tenant: Tenant,
    JsonBody(req): JsonBody<EditRequest>,
) -> ApiResult<Json<EditResponse>> {
    if req.edits.is_empty() {
        return Err(ApiError::invalid("edits is empty").field("edits"));
    }
    let mut edits = Vec::with_capacity(req.edits.len());
    for (i, item) in req.edits.iter().enumerate() {
        let at = |e: ApiError| e.item(i + 1);
        let id = tenant
            .client
            .job_id(&item.id)
            .map_err(|e| at(ApiError::from(e).field("id")))?;
        let mut edit = JobEdit::new(id);
        edit.priority = item.priority;
        edit.run_at = item
            .run_at
            .as_deref()
            .map(|s| parse_time("run_at", s))
            .transpose()
            .map_err(at)?;
        edit.data = match (&item.data, &item.data_base64) {
            (Some(_), Some(_)) => {
                return Err(at(
                    ApiError::invalid("give data or data_base64, not both").field("data")
                ));
            }
            (Some(d), None) => Some(d.as_bytes().to_vec()),
            (None, Some(b)) => Some(BASE64.decode(b).map_err(|e| {
                at(ApiError::invalid(format!("data_base64 is not base64: {e}"))
                    .field("data_base64"))
            })?),
            (None, None) => None,
        };
        edits.push(edit);
    }
    let caps = state.store.capabilities();
    jobstore_api::validate::edits(&edits, &caps, now_millis()).map_err(ApiError::from)?;
    let edited = state.store.edit_jobs(&edits, now_millis()).await?;
    let done: HashSet<&String> = edited.iter().collect();
    let strip = |id: &String| tenant.client.strip(id).unwrap_or(id).to_owned();
    Ok(Json(EditResponse {
        not_edited: edits
            .iter()
            .map(|e| &e.id)
            .filter(|id| !done.contains(id))
            .map(strip)
            .collect(),
        edited: edited.iter().map(strip).collect(),
    }))
}

/// A jobtype's pause state.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PauseResponse {
    /// The jobtype.
    #[serde(rename = "type")]
    pub jobtype: String,
    /// Whether it is paused now.
    pub paused: bool,
    /// Whether this call changed it.
    pub changed: bool,
}

async fn set_paused(
    state: &AppState,
    tenant: &Tenant,
    params: &PathParams,
    paused: bool,
) -> ApiResult<Json<PauseResponse>> {
    let local = params.get("type");
    let jobtype = tenant.client.jobtype(local)?;
    let changed = state
        .store
        .pause_jobtype(&jobtype, paused, now_millis())
        .await?;
    Ok(Json(PauseResponse {
        jobtype: local.to_owned(),
        paused,
        changed,
    }))
}

/// Pauses a jobtype on every daemon of the store: its jobs are not
/// claimed or fetched until it is resumed; adds still land.
#[utoipa::path(
    post,
    path = "/{client}/jobtypes/{type}/pause",
    tag = "manage",
    params(ClientPath, ("type" = String, Path, description = "The jobtype", pattern = "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,134}$")),
    responses(
        (status = 200, body = PauseResponse),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 501, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn pause(
    State(state): State<AppState>,
    tenant: Tenant,
    params: PathParams,
) -> ApiResult<Json<PauseResponse>> {
    set_paused(&state, &tenant, &params, true).await
}

/// Resumes a paused jobtype.
#[utoipa::path(
    post,
    path = "/{client}/jobtypes/{type}/resume",
    tag = "manage",
    params(ClientPath, ("type" = String, Path, description = "The jobtype", pattern = "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,134}$")),
    responses(
        (status = 200, body = PauseResponse),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 501, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn resume(
    State(state): State<AppState>,
    tenant: Tenant,
    params: PathParams,
) -> ApiResult<Json<PauseResponse>> {
    set_paused(&state, &tenant, &params, false).await
}

/// A client's paused jobtypes.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PausedList {
    /// The paused jobtypes, sorted.
    pub paused: Vec<String>,
}

/// The client's paused jobtypes.
#[utoipa::path(
    get,
    path = "/{client}/paused",
    tag = "manage",
    params(ClientPath),
    responses(
        (status = 200, body = PausedList),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 501, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn paused(State(state): State<AppState>, tenant: Tenant) -> ApiResult<Json<PausedList>> {
    let all = state.store.paused_jobtypes().await?;
    Ok(Json(PausedList {
        paused: all
            .iter()
            .filter_map(|t| tenant.client.strip(t))
            .map(str::to_owned)
            .collect(),
    }))
}

/// Options of the failure groups.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct FailureParams {
    /// Jobtypes, comma-separated (default: every jobtype of the client).
    #[serde(rename = "type")]
    #[param(rename = "type")]
    pub jobtype: Option<String>,
    /// How many of the newest failures to group: 1 to 100000 (default 10000).
    pub scan: Option<usize>,
}

/// Failed jobs that failed the same way.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct FailureGroup {
    /// The jobtype.
    #[serde(rename = "type")]
    pub jobtype: String,
    /// `failed`, `error` or `timeout`.
    pub code: String,
    /// The status of the last run.
    pub status: u16,
    /// The first line of the output (`[jobstore]` notes skipped).
    pub message: String,
    /// How many of the scanned failures are in the group.
    pub count: u64,
    /// The newest job of the group.
    pub example: String,
    /// When the newest was archived (epoch ms).
    pub latest: Millis,
}

/// A client's failures, grouped.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Failures {
    /// The groups, largest first.
    pub groups: Vec<FailureGroup>,
    /// How many failures were grouped (the newest ones).
    pub scanned: u64,
    /// Whether every failure was grouped (`false`: older ones were left
    /// out; raise `scan`).
    pub complete: bool,
}

const FAILURE_CODES: [ResultCode; 3] = [ResultCode::Failed, ResultCode::Error, ResultCode::Timeout];

/// The line a failure is grouped by: the first line of its output that is
/// not a daemon note, clipped to 200 bytes.
fn first_line(output: &[u8]) -> String {
    let text = String::from_utf8_lossy(output);
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("[jobstore]"))
        .or_else(|| text.lines().map(str::trim).find(|l| !l.is_empty()))
        .unwrap_or("");
    let mut end = line.len().min(200);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line[..end].to_owned()
}

/// A client's archived failed, error and timeout jobs grouped by jobtype,
/// code, status and the first line of their output, with counts and an
/// example: "4,210 jobs failed with `connection refused`" is one line.
#[utoipa::path(
    get,
    path = "/{client}/failures",
    tag = "manage",
    params(ClientPath, FailureParams),
    responses(
        (status = 200, body = Failures),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 501, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn failures(
    State(state): State<AppState>,
    tenant: Tenant,
    QueryOf(params): QueryOf<FailureParams>,
) -> ApiResult<Json<Failures>> {
    let scan = params.scan.unwrap_or(10_000);
    if !(1..=100_000).contains(&scan) {
        return Err(ApiError::invalid(format!("scan {scan} is outside 1..=100000")).field("scan"));
    }
    let filter = JobFilter {
        state: Some("archived".into()),
        jobtype: params.jobtype,
        ..JobFilter::default()
    };
    let mut q = query_of(&Scope::Client(&tenant.client), &filter, "")?;
    q.codes = FAILURE_CODES.to_vec();
    q.limit = MAX_PAGE.min(scan);
    let now = now_millis();
    jobstore_api::validate::job_query(&q, now).map_err(|e| store_field(e, ""))?;
    type Key = (String, ResultCode, u16, String);
    let mut groups: BTreeMap<Key, FailureGroup> = BTreeMap::new();
    let mut scanned = 0u64;
    let complete = loop {
        let page = state.store.list_jobs(&q, now).await?;
        for job in &page.jobs {
            scanned += 1;
            let Some(result) = &job.result else { continue };
            let message = first_line(&result.output);
            let key = (job.jobtype.clone(), result.code, result.status, message);
            groups
                .entry(key.clone())
                .or_insert_with(|| FailureGroup {
                    jobtype: tenant::local_of(&job.jobtype).to_owned(),
                    code: result.code.to_string(),
                    status: result.status,
                    message: key.3.clone(),
                    count: 0,
                    example: tenant::local_of(&job.id).to_owned(),
                    latest: job.done_dt.unwrap_or_default(),
                })
                .count += 1;
        }
        match page.next {
            None => break true,
            Some(_) if scanned as usize >= scan => break false,
            Some(c) => {
                q.cursor = Some(c);
                q.limit = MAX_PAGE.min(scan - scanned as usize);
            }
        }
    };
    let mut groups: Vec<FailureGroup> = groups.into_values().collect();
    groups.sort_by(|a, b| b.count.cmp(&a.count).then(b.latest.cmp(&a.latest)));
    Ok(Json(Failures {
        groups,
        scanned,
        complete,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_group_by_the_first_line_that_is_not_a_note() {
        assert_eq!(
            first_line(b"[jobstore] note\nconnection refused\nmore"),
            "connection refused"
        );
        assert_eq!(first_line(b"\n\n  boom  \n"), "boom");
        assert_eq!(
            first_line(b"[jobstore] only a note"),
            "[jobstore] only a note"
        );
        assert_eq!(first_line(b""), "");
        let long = "é".repeat(150);
        assert!(first_line(long.as_bytes()).len() <= 200);
    }

    #[test]
    fn result_match_selects_a_failure_group() {
        let archived = |status: Option<u16>, message: Option<&str>| JobFilter {
            state: Some("archived".into()),
            status,
            message: message.map(str::to_owned),
            ..JobFilter::default()
        };
        assert!(
            ResultMatch::of(&archived(None, None), "")
                .unwrap()
                .is_none()
        );
        let waiting = JobFilter {
            state: Some("waiting".into()),
            status: Some(404),
            ..JobFilter::default()
        };
        let e = ResultMatch::of(&waiting, "filter.")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("filter.status") && e.contains("state=archived"),
            "{e}"
        );
        let mut no_state = archived(None, Some("boom"));
        no_state.state = None;
        assert!(
            ResultMatch::of(&no_state, "")
                .unwrap_err()
                .to_string()
                .contains("message")
        );

        let job = |status: u16, output: &str| jobstore_api::Job {
            id: "acme-1".into(),
            jobtype: "acme-import".into(),
            data: Vec::new(),
            priority: 0,
            dt: 0,
            lock: jobstore_api::LOCK_DONE.into(),
            attempts: 1,
            create_dt: 0,
            done_dt: Some(1),
            result: Some(jobstore_api::JobResult {
                code: ResultCode::Failed,
                status,
                output: output.as_bytes().to_vec(),
            }),
            cancel_requested: false,
            tags: Vec::new(),
            history: Vec::new(),
            claimed_due: None,
            flow: None,
            trace: None,
        };
        let m = ResultMatch::of(&archived(Some(404), Some("connection refused")), "")
            .unwrap()
            .unwrap();
        assert!(m.matches(&job(404, "[jobstore] note\nconnection refused\n")));
        assert!(!m.matches(&job(500, "connection refused")));
        assert!(!m.matches(&job(404, "timed out")));
        let mut unfinished = job(404, "connection refused");
        unfinished.result = None;
        assert!(!m.matches(&unfinished));
        let by_status = ResultMatch::of(&archived(Some(404), None), "")
            .unwrap()
            .unwrap();
        assert!(by_status.matches(&job(404, "anything")));
        let mut jobs = vec![job(404, "a"), job(500, "a"), job(404, "b")];
        keep_matching(&mut jobs, &Some(by_status));
        assert_eq!(jobs.len(), 2);
        keep_matching(&mut jobs, &None);
        assert_eq!(jobs.len(), 2);
    }

    #[test]
    fn filters_name_their_field_when_wrong() {
        let client = Client::new("acme").unwrap();
        let scope = Scope::Client(&client);
        let bad = |f: JobFilter| query_of(&scope, &f, "filter.").unwrap_err().to_string();
        let with = |state: &str| JobFilter {
            state: Some(state.into()),
            ..JobFilter::default()
        };
        assert!(bad(JobFilter::default()).contains("filter.state"));
        assert!(bad(with("done")).contains("unknown state"));
        let mut f = with("archived");
        f.code = Some("ok,nope".into());
        assert!(bad(f).contains("unknown result code"));
        let mut f = with("archived");
        f.created_from = Some("yesterday".into());
        assert!(bad(f).contains("filter.created_from"));
        let q = query_of(&scope, &with("waiting"), "").unwrap();
        assert_eq!(q.jobtypes, JobtypeFilter::Prefix("acme-".into()));
        let mut f = with("waiting");
        f.jobtype = Some("mail, sms,mail".into());
        let q = query_of(&scope, &f, "").unwrap();
        assert_eq!(
            q.jobtypes,
            JobtypeFilter::Exact(vec!["acme-mail".into(), "acme-sms".into()])
        );
    }
}
