//! Routes for remote workers: fetch jobs (long-poll), heartbeat, finish,
//! update, and the workers this daemon heard from. Each parses and checks
//! the request, calls the [`Executor`](crate::executor::Executor), and
//! renders its answer; lease tokens are described in
//! [`crate::executor::registry`].

use std::collections::HashSet;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use jobstore_api::Millis;
use jobstore_api::limits::{MAX_CLAIM, MAX_LEASE, MAX_OUTPUT};
use jobstore_api::now_millis;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{JsonBody, PathParams, QueryOf, Tenant};
use super::params::ClientPath;
use crate::executor::registry::{self, WorkerView};
use crate::executor::{FetchRequest, RemoteError, RemoteResult};
use crate::runner::{Child, Outcome, Parsed};
use crate::tenant::{Client, local_of};

/// Longest long-poll, in milliseconds.
pub const MAX_WAIT_MS: u64 = 60_000;

/// A fetch's options.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct FetchQuery {
    /// Most jobs to hand out (default 1, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    pub max: Option<u32>,
    /// Wait up to this many milliseconds for work to arrive (long-poll;
    /// default 0, at most 60000 and below the request timeout).
    #[param(maximum = 60000)]
    pub wait: Option<u64>,
    /// The worker's name (1–64 bytes of A-Z a-z 0-9 _ . -); the daemon
    /// names it when absent.
    #[param(pattern = "^[A-Za-z0-9_.-]{1,64}$")]
    pub worker: Option<String>,
    /// A lease token from an earlier fetch, to hold these jobs under the
    /// same one (one heartbeat renews them all).
    #[param(
        pattern = "^[^_|/\\u0000-\\u001f\\u007f-\\u009f][^|\\u0000-\\u001f\\u007f-\\u009f]*/[A-Za-z0-9][A-Za-z0-9_]{0,63}:[A-Za-z0-9_.-]{1,64}/[0-9a-fA-F]{16}$"
    )]
    pub lease: Option<String>,
    /// The lease length in milliseconds (default: the daemon's `--lease`).
    #[param(minimum = 1000, maximum = 604800000)]
    pub lease_ms: Option<u64>,
}

/// A job handed to a worker.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct FetchedJob {
    /// The id (without the client prefix).
    pub id: String,
    /// The jobtype (without the client prefix).
    #[serde(rename = "type")]
    pub jobtype: String,
    /// This is the job's `attempt`-th hand-out.
    pub attempt: u32,
    /// Higher runs first.
    pub priority: i32,
    /// When it was stored (epoch ms).
    pub created: Millis,
    /// The payload, when UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// The payload as base64, when not UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_base64: Option<String>,
    /// The W3C trace context the run continues (the one the job was added
    /// with): start the run's span as its child. Absent when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The W3C `tracestate` that goes with `traceparent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    /// For a job that waited for other jobs: their ids and how each ended
    /// (`{"counts": {...}, "jobs": [{"id", "state", "code", "status",
    /// "output"?}], "more": bool}`; outputs when it was added
    /// `with_outputs`). Absent for other jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub waited: Option<serde_json::Value>,
}

/// The answer to a fetch.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct FetchResponse {
    /// The worker's name.
    pub worker: String,
    /// The lease token: send it with heartbeats, finishes and updates.
    pub lease: String,
    /// When the jobs' lease runs out unless renewed (epoch ms).
    pub lease_expires: Millis,
    /// The jobs; empty when none arrived within `wait`.
    pub jobs: Vec<FetchedJob>,
}

fn payload_fields(data: &[u8]) -> (Option<String>, Option<String>) {
    match std::str::from_utf8(data) {
        Ok(s) => (Some(s.to_owned()), None),
        Err(_) => (None, Some(BASE64.encode(data))),
    }
}

/// The lease length a request asks for, within bounds.
fn lease_of(state: &AppState, lease_ms: Option<u64>) -> ApiResult<Duration> {
    match lease_ms {
        None => Ok(state.config.exec.lease),
        Some(ms) => {
            let d = Duration::from_millis(ms);
            if ms < 1000 || d > MAX_LEASE {
                return Err(ApiError::invalid(format!(
                    "lease_ms {ms} is outside 1000..={}",
                    MAX_LEASE.as_millis()
                ))
                .field("lease_ms"));
            }
            Ok(d)
        }
    }
}

/// A lease token the caller sent, checked to be well formed and to be
/// `client`'s: the lock owner and the worker's name.
fn owner_of(lease: &str, client: &Client) -> ApiResult<(String, String)> {
    let (holder, worker) = registry::lease_holder(lease).ok_or_else(|| {
        ApiError::invalid("lease is not a lease token from a fetch").field("lease")
    })?;
    if holder != client.as_str() {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("the lease token belongs to client \"{holder}\", not \"{client}\""),
        )
        .field("lease"));
    }
    Ok((lease.to_owned(), worker.to_owned()))
}

/// Hands out up to `max` jobs of the jobtype (or of a comma-separated list
/// of jobtypes, taken in order) under a lease, waiting up to `wait` ms for
/// work to arrive. Subject to the same caps as the daemon's own runners.
#[utoipa::path(
    post,
    path = "/{client}/job/{type}/get",
    tag = "workers",
    params(
        ClientPath,
        ("type" = String, Path, description = "A jobtype, or several separated by commas", pattern = "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,134}(,[A-Za-z0-9][A-Za-z0-9_.:-]{0,134}){0,31}$"),
        FetchQuery
    ),
    responses(
        (status = 200, body = FetchResponse),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn fetch(
    State(state): State<AppState>,
    tenant: Tenant,
    params: PathParams,
    QueryOf(q): QueryOf<FetchQuery>,
) -> ApiResult<Json<FetchResponse>> {
    let mut jobtypes = Vec::new();
    for t in params.get("type").split(',') {
        let jt = tenant.client.jobtype(t)?;
        if !jobtypes.contains(&jt) {
            jobtypes.push(jt);
        }
    }
    let max = q.max.unwrap_or(1);
    if !(1..=MAX_CLAIM as u32).contains(&max) {
        return Err(
            ApiError::invalid(format!("max {max} is outside 1..={MAX_CLAIM}")).field("max"),
        );
    }
    let wait_cap = MAX_WAIT_MS.min(
        u64::try_from(state.config.request_timeout.as_millis())
            .unwrap_or(u64::MAX)
            .saturating_sub(1000),
    );
    let wait = q.wait.unwrap_or(0);
    if wait > wait_cap {
        return Err(ApiError::invalid(format!(
            "wait {wait} ms is above {wait_cap} ms (the request timeout less a second)"
        ))
        .field("wait"));
    }
    let lease = lease_of(&state, q.lease_ms)?;
    let (owner, worker) = match (&q.lease, &q.worker) {
        (Some(token), named) => {
            let (owner, worker) = owner_of(token, &tenant.client)?;
            if named.as_ref().is_some_and(|n| *n != worker) {
                return Err(
                    ApiError::invalid("the lease token belongs to another worker name")
                        .field("lease"),
                );
            }
            (owner, worker)
        }
        (None, Some(name)) => {
            registry::check_worker(name).map_err(|m| ApiError::invalid(m).field("worker"))?;
            (
                registry::new_lease(&state.sysid.sysid(), tenant.client.as_str(), name),
                name.clone(),
            )
        }
        (None, None) => {
            let name = format!("w-{}", hex::encode(rand::random::<[u8; 4]>()));
            (
                registry::new_lease(&state.sysid.sysid(), tenant.client.as_str(), &name),
                name,
            )
        }
    };
    jobstore_api::validate::sysid(&owner).map_err(|_| {
        ApiError::invalid("the worker name is too long for this daemon's sysid").field("worker")
    })?;
    let fetched = state
        .executor
        .fetch(FetchRequest {
            client: tenant.client.clone(),
            jobtypes,
            max,
            wait: Duration::from_millis(wait),
            owner: owner.clone(),
            worker: worker.clone(),
            lease,
        })
        .await
        .map_err(|e| remote_error(e, "fetch"))?;
    Ok(Json(FetchResponse {
        worker,
        lease: owner,
        lease_expires: fetched.lease_expires,
        jobs: fetched
            .jobs
            .into_iter()
            .zip(fetched.traces)
            .map(|(j, trace)| {
                let (data, data_base64) = payload_fields(&j.data);
                let waited = fetched
                    .waited
                    .get(&j.id)
                    .and_then(|w| serde_json::from_str(w).ok());
                FetchedJob {
                    waited,
                    traceparent: trace.as_ref().map(|t| t.traceparent.clone()),
                    tracestate: trace.and_then(|t| t.tracestate),
                    id: local_of(&j.id).to_owned(),
                    jobtype: local_of(&j.jobtype).to_owned(),
                    attempt: j.attempts,
                    priority: j.priority,
                    created: j.create_dt,
                    data,
                    data_base64,
                }
            })
            .collect(),
    }))
}

/// Leases to renew.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatRequest {
    /// The lease token from the fetch.
    #[schema(
        pattern = "^[^_|/\\u0000-\\u001f\\u007f-\\u009f][^|\\u0000-\\u001f\\u007f-\\u009f]*/[A-Za-z0-9][A-Za-z0-9_]{0,63}:[A-Za-z0-9_.-]{1,64}/[0-9a-fA-F]{16}$"
    )]
    pub lease: String,
    /// The jobs to keep.
    #[schema(min_items = 1)]
    pub ids: Vec<String>,
    /// The new lease length in milliseconds (default: the daemon's).
    #[schema(minimum = 1000, maximum = 604800000)]
    pub lease_ms: Option<u64>,
}

/// What a heartbeat kept.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HeartbeatResponse {
    /// Still held, renewed until `lease_expires`.
    pub held: Vec<String>,
    /// Cancelled by an operator while running: archived as `cancelled`;
    /// stop working on these (their finish is refused).
    #[serde(default)]
    pub cancelled: Vec<String>,
    /// No longer held (finished, cancelled before this lease, or taken by
    /// another worker after the lease ran out): stop working on these.
    pub lost: Vec<String>,
    /// When the renewed leases run out (epoch ms).
    pub lease_expires: Millis,
}

fn store_ids(client: &Client, ids: &[String]) -> ApiResult<Vec<String>> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(ids.len());
    for (i, id) in ids.iter().enumerate() {
        let stored = client
            .job_id(id)
            .map_err(|e| ApiError::from(e).item(i + 1).at(&format!("id {}", i + 1)))?;
        if !seen.insert(stored.clone()) {
            return Err(ApiError::invalid(format!("id {id:?} appears twice")).field("ids"));
        }
        out.push(stored);
    }
    if out.is_empty() {
        return Err(ApiError::invalid("no ids").field("ids"));
    }
    Ok(out)
}

/// The answer to a refused call of `what` (`fetch`, `heartbeat`, ...).
fn remote_error(e: RemoteError, what: &str) -> ApiError {
    match e {
        RemoteError::NotHeld => {
            ApiError::new(StatusCode::CONFLICT, "conflict", format!("{what}: {e}"))
        }
        RemoteError::NoSysid => ApiError::unavailable(e.to_string()),
        RemoteError::Journal(crate::journal::JournalError::Closed) => {
            ApiError::unavailable("the daemon is shutting down")
        }
        RemoteError::Journal(e) => ApiError::internal(format!("cannot write the journal: {e}")),
        RemoteError::Store(e) => e.into(),
    }
}

fn local_ids(ids: &[String]) -> Vec<String> {
    ids.iter().map(|id| local_of(id).to_owned()).collect()
}

/// Renews the leases of many jobs in one call; says which are still held.
#[utoipa::path(
    post,
    path = "/{client}/jobs/heartbeat",
    tag = "workers",
    params(ClientPath),
    request_body = HeartbeatRequest,
    responses(
        (status = 200, body = HeartbeatResponse),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 409, description = "None of the jobs is held under this lease", body = ErrorBody),
        (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn heartbeat(
    State(state): State<AppState>,
    tenant: Tenant,
    JsonBody(req): JsonBody<HeartbeatRequest>,
) -> ApiResult<Json<HeartbeatResponse>> {
    let (owner, worker) = owner_of(&req.lease, &tenant.client)?;
    let lease = lease_of(&state, req.lease_ms)?;
    let ids = store_ids(&tenant.client, &req.ids)?;
    let beat = state
        .executor
        .heartbeat(&tenant.client, &worker, &owner, &ids, lease)
        .await
        .map_err(|e| remote_error(e, "heartbeat"))?;
    Ok(Json(HeartbeatResponse {
        held: local_ids(&beat.held),
        cancelled: local_ids(&beat.cancelled),
        lost: local_ids(&beat.lost),
        lease_expires: beat.lease_expires,
    }))
}

/// A new job asked for by a finished one (like a `J:` line).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChildJob {
    /// The client's jobtype.
    #[serde(rename = "type")]
    pub jobtype: String,
    /// The payload: a string as its bytes, any other JSON value as its text.
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
    /// Tags of the new job (at most 8, each 1 to 64 of A-Z a-z 0-9 _ . : -).
    #[serde(default)]
    pub tags: Vec<String>,
    /// The new job's W3C trace context (the worker's own span, say);
    /// default: the one the finished job's fetch gave. A malformed one is
    /// refused.
    #[schema(
        pattern = "^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[0-9a-f-]*)?$",
        max_length = 256
    )]
    pub traceparent: Option<String>,
    /// The W3C `tracestate` that goes with `traceparent`; only with it.
    #[schema(max_length = 512)]
    pub tracestate: Option<String>,
}

/// One finished job.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Finish {
    /// The job's id.
    pub id: String,
    /// 2xx ok, 4xx failed (archived); 1xx retry, 5xx error (run again after
    /// a backoff, until the handler's limits).
    #[schema(minimum = 100, maximum = 599)]
    pub status: u16,
    /// Output kept with the result (64 KiB at most).
    pub output: Option<String>,
    /// Output as base64.
    pub output_base64: Option<String>,
    /// New jobs of the same client to add, made durable before the result
    /// is stored. One with an invalid jobtype or a payload over the limit
    /// is dropped and listed in the answer's `dropped`, as a `J:` line of
    /// the daemon's own runners would be; the result stands.
    #[serde(default)]
    pub jobs: Vec<ChildJob>,
    /// For retry and error: run again after this many milliseconds instead
    /// of the backoff.
    pub retry_in_ms: Option<u64>,
    /// For a repeating job whose run ended ok: the payload of its next
    /// run (a string is stored as its UTF-8 bytes, any other JSON value as
    /// its JSON text), so state passes from run to run. Ignored for a job
    /// that does not repeat; at most the store's payload limit.
    #[schema(value_type = Option<Object>)]
    pub data: Option<serde_json::Value>,
    /// The next run's payload as base64, for bytes that are not text.
    pub data_base64: Option<String>,
}

/// Results of jobs held under one lease.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FinishRequest {
    /// The lease token from the fetch.
    #[schema(
        pattern = "^[^_|/\\u0000-\\u001f\\u007f-\\u009f][^|\\u0000-\\u001f\\u007f-\\u009f]*/[A-Za-z0-9][A-Za-z0-9_]{0,63}:[A-Za-z0-9_.-]{1,64}/[0-9a-fA-F]{16}$"
    )]
    pub lease: String,
    /// The jobs.
    pub jobs: Vec<Finish>,
}

/// What a finish did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct FinishResponse {
    /// Results stored.
    pub finished: Vec<String>,
    /// Not held under this lease any more: their results were refused.
    pub lost: Vec<String>,
    /// Ids of the new jobs added, in order.
    pub created: Vec<String>,
    /// New jobs asked for that were dropped (an invalid jobtype, a payload
    /// over the limit), with why; the finished job's result stands and its
    /// output says the same.
    #[serde(default)]
    pub dropped: Vec<DroppedJob>,
}

/// A new job a finish asked for that was dropped.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DroppedJob {
    /// The finished job's place in the request's `jobs`, from 1.
    pub job: usize,
    /// The new job's place in that job's `jobs`, from 1.
    pub new_job: usize,
    /// Why it was dropped.
    pub reason: String,
}

/// Reports results (ok, failed, retry, error) of jobs held under a lease,
/// with output and new jobs of the same client, in one call. The handler's
/// attempt and age limits apply as for the daemon's own runners.
#[utoipa::path(
    post,
    path = "/{client}/jobs/finish",
    tag = "workers",
    params(ClientPath),
    request_body = FinishRequest,
    responses(
        (status = 200, body = FinishResponse),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 409, description = "None of the jobs is held under this lease", body = ErrorBody),
        (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn finish(
    State(state): State<AppState>,
    tenant: Tenant,
    JsonBody(req): JsonBody<FinishRequest>,
) -> ApiResult<Json<FinishResponse>> {
    let (owner, worker) = owner_of(&req.lease, &tenant.client)?;
    let ids: Vec<String> = req.jobs.iter().map(|f| f.id.clone()).collect();
    let ids = store_ids(&tenant.client, &ids)?;
    let mut results = Vec::with_capacity(ids.len());
    for (i, (f, id)) in req.jobs.into_iter().zip(ids).enumerate() {
        let place = |e: ApiError| e.item(i + 1).at(&format!("job {}", i + 1));
        if !(100..=599).contains(&f.status) {
            return Err(place(
                ApiError::invalid(format!("status {} is outside 100..=599", f.status))
                    .field("status"),
            ));
        }
        let output = match (f.output, f.output_base64) {
            (Some(_), Some(_)) => {
                return Err(place(
                    ApiError::invalid("give output or output_base64, not both").field("output"),
                ));
            }
            (Some(s), None) => s.into_bytes(),
            (None, Some(b)) => BASE64.decode(b).map_err(|e| {
                place(ApiError::invalid(format!("output_base64: {e}")).field("output_base64"))
            })?,
            (None, None) => Vec::new(),
        };
        let mut children = Vec::with_capacity(f.jobs.len());
        for (k, child) in f.jobs.into_iter().enumerate() {
            let trace = super::jobs::trace_fields(
                child.traceparent.as_deref(),
                child.tracestate.as_deref(),
            )
            .map_err(|e| place(e.at(&format!("new job {}", k + 1))))?;
            children.push(Child {
                jobtype: child.jobtype,
                data: match child.data {
                    serde_json::Value::String(s) => s.into_bytes(),
                    v => v.to_string().into_bytes(),
                },
                tags: child.tags,
                trace,
            });
        }
        let mut outcome = Outcome::new(
            f.status,
            Parsed {
                output: output.into_iter().take(MAX_OUTPUT).collect(),
                children,
                ..Parsed::default()
            },
        );
        outcome.retry_after = f.retry_in_ms.map(Duration::from_millis);
        outcome.data = match (f.data, f.data_base64) {
            (Some(_), Some(_)) => {
                return Err(place(
                    ApiError::invalid("give data or data_base64, not both").field("data"),
                ));
            }
            (Some(serde_json::Value::String(s)), None) => Some(s.into_bytes()),
            (Some(v), None) => Some(v.to_string().into_bytes()),
            (None, Some(b)) => Some(BASE64.decode(b).map_err(|e| {
                place(ApiError::invalid(format!("data_base64: {e}")).field("data_base64"))
            })?),
            (None, None) => None,
        };
        if let Some(d) = outcome
            .data
            .as_ref()
            .filter(|d| d.len() > state.max_payload)
        {
            return Err(place(
                ApiError::too_large(
                    format!(
                        "data is {} bytes, the limit is {}",
                        d.len(),
                        state.max_payload
                    ),
                    state.max_payload as u64,
                )
                .field("data"),
            ));
        }
        results.push(RemoteResult { id, outcome });
    }
    let report = state
        .executor
        .finish(&tenant.client, &worker, &owner, results)
        .await
        .map_err(|e| remote_error(e, "finish"))?;
    Ok(Json(FinishResponse {
        finished: local_ids(&report.finished),
        lost: local_ids(&report.lost),
        created: local_ids(&report.created),
        dropped: report
            .dropped
            .into_iter()
            .map(|(job, d)| DroppedJob {
                job,
                new_job: d.index,
                reason: d.reason,
            })
            .collect(),
    }))
}

/// New data for a running job (progress, or state for its next run).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateRequest {
    /// The lease token from the fetch.
    #[schema(
        pattern = "^[^_|/\\u0000-\\u001f\\u007f-\\u009f][^|\\u0000-\\u001f\\u007f-\\u009f]*/[A-Za-z0-9][A-Za-z0-9_]{0,63}:[A-Za-z0-9_.-]{1,64}/[0-9a-fA-F]{16}$"
    )]
    pub lease: String,
    /// The new payload: a string as its bytes, any other JSON value as its text.
    #[schema(value_type = Option<Object>)]
    pub data: Option<serde_json::Value>,
    /// The new payload as base64.
    pub data_base64: Option<String>,
}

/// What an update did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct UpdateResponse {
    /// Always true (a job not held is a 409).
    pub updated: bool,
}

/// Replaces the payload of a job held under the lease.
#[utoipa::path(
    post,
    path = "/{client}/jobs/{id}/update",
    tag = "workers",
    params(ClientPath, ("id" = String, Path, description = "The job id: no control characters, no | or /", pattern = "^[^|/\\u0000-\\u001f\\u007f-\\u009f]{1,135}$")),
    request_body = UpdateRequest,
    responses(
        (status = 200, body = UpdateResponse),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 409, description = "The job is not held under this lease", body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn update(
    State(state): State<AppState>,
    tenant: Tenant,
    params: PathParams,
    JsonBody(req): JsonBody<UpdateRequest>,
) -> ApiResult<Json<UpdateResponse>> {
    let (owner, worker) = owner_of(&req.lease, &tenant.client)?;
    let id = tenant.client.job_id(params.get("id"))?;
    let data = match (&req.data, &req.data_base64) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid("give data or data_base64, not both").field("data"));
        }
        (None, None) => {
            return Err(ApiError::invalid("data (or data_base64) is missing").field("data"));
        }
        (Some(serde_json::Value::String(s)), None) => s.as_bytes().to_vec(),
        (Some(v), None) => v.to_string().into_bytes(),
        (None, Some(b)) => BASE64
            .decode(b)
            .map_err(|e| ApiError::invalid(format!("data_base64: {e}")).field("data_base64"))?,
    };
    if data.len() > state.max_payload {
        return Err(ApiError::too_large(
            format!(
                "the payload is {} bytes, the limit is {}",
                data.len(),
                state.max_payload
            ),
            state.max_payload as u64,
        ));
    }
    state
        .executor
        .update(&tenant.client, &worker, &owner, &id, &data)
        .await
        .map_err(|e| remote_error(e, "update"))?;
    Ok(Json(UpdateResponse { updated: true }))
}

/// The client's workers.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WorkerList {
    /// Workers this daemon heard from recently.
    pub workers: Vec<WorkerView>,
}

/// The workers of a client this daemon heard from: last seen, jobs held.
/// This daemon's view, not a store-wide registry: a worker that talks to
/// several daemons shows in each with what it did there, and the list
/// starts empty when the daemon restarts.
#[utoipa::path(
    get,
    path = "/{client}/workers",
    tag = "workers",
    params(ClientPath),
    responses(
        (status = 200, body = WorkerList),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn list(State(state): State<AppState>, tenant: Tenant) -> Json<WorkerList> {
    let mut workers = state.executor.workers(tenant.client.as_str(), now_millis());
    workers.sort_by(|a, b| a.worker.cmp(&b.worker));
    Json(WorkerList { workers })
}
