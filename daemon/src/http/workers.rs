//! Remote workers over HTTP: fetch jobs (long-poll), heartbeat, finish,
//! update, and the registry of workers seen. See [`crate::remote`].

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use jobstore_api::limits::{MAX_CLAIM, MAX_LEASE, MAX_OUTPUT};
use jobstore_api::{Job, JobRelease, Millis, duration_ms, now_millis};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{JsonBody, PathParams, QueryOf, Tenant};
use crate::executor::{Limits, policy};
use crate::journal::Record;
use crate::metrics::OutcomeLabels;
use crate::remote::{self, RemoteJob, WorkerView};
use crate::runner::{Class, Outcome, Parsed};
use crate::tenant::Client;

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
    let (holder, worker) = remote::lease_holder(lease).ok_or_else(|| {
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
        ("client" = String, Path, description = "The client (tenant): 1 to 64 of A-Z a-z 0-9 _, starting with a letter or digit", pattern = "^[A-Za-z0-9][A-Za-z0-9_]{0,63}$"),
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
            remote::check_worker(name).map_err(|m| ApiError::invalid(m).field("worker"))?;
            (
                remote::new_lease(&state.sysid.sysid(), tenant.client.as_str(), name),
                name.clone(),
            )
        }
        (None, None) => {
            let name = format!("w-{}", hex::encode(rand::random::<[u8; 4]>()));
            (
                remote::new_lease(&state.sysid.sysid(), tenant.client.as_str(), &name),
                name,
            )
        }
    };
    jobstore_api::validate::sysid(&owner).map_err(|_| {
        ApiError::invalid("the worker name is too long for this daemon's sysid").field("worker")
    })?;
    if !state.sysid.held() {
        return Err(ApiError::unavailable(
            "this daemon does not hold its sysid right now; it hands out no jobs",
        ));
    }
    let client = tenant.client.as_str();
    state.hub.seen(client, &worker, now_millis());

    // Subscribe before the first look, so an add between the look and the
    // wait still wakes us.
    let mut notices = state.hub.notices.subscribe();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(wait);
    let mut limits_of: HashMap<String, Limits> = HashMap::new();
    let mut jobs: Vec<Job> = Vec::new();
    loop {
        for jt in &jobtypes {
            let want = max - jobs.len() as u32;
            if want == 0 {
                break;
            }
            if !limits_of.contains_key(jt) {
                let handler = state.store.get_handler(jt).await?;
                let mut sched = state.hub.sched();
                sched.set_jobtype_cap(
                    jt,
                    handler.as_ref().and_then(|h| h.handler.limits.concurrency),
                );
                let limits = match &handler {
                    Some(h) => state.config.exec.limits.with(&h.handler.limits),
                    None => state.config.exec.limits,
                };
                limits_of.insert(jt.clone(), limits);
            }
            let grant = state.hub.sched().admit(jt, want, now_millis());
            let Some(grant) = grant else { continue };
            let claimed = state
                .store
                .claim_jobs(jt, grant.count as usize, &owner, lease, now_millis())
                .await;
            let got = claimed.as_ref().map_or(0, Vec::len);
            state
                .hub
                .sched()
                .jobs_started(grant, got as u32, now_millis());
            jobs.extend(claimed?);
        }
        if !jobs.is_empty() {
            break;
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            break;
        }
        // Wait for a notice about one of our jobtypes (or "anything"), at
        // most a second: jobs also become due by time alone.
        let until = deadline.min(now + Duration::from_secs(1));
        loop {
            match tokio::time::timeout_at(until, notices.recv()).await {
                Err(_) => break,
                Ok(Ok(jt)) if jt.is_empty() || jobtypes.contains(&jt) => break,
                Ok(Ok(_)) => continue,
                Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => break,
                Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => {
                    tokio::time::sleep_until(until).await;
                    break;
                }
            }
        }
    }
    let now = now_millis();
    let expires = now + duration_ms(lease);
    state.hub.handed_out(
        client,
        &worker,
        jobs.iter()
            .map(|j| {
                (
                    j.id.clone(),
                    RemoteJob {
                        jobtype: j.jobtype.clone(),
                        owner: owner.clone(),
                        worker: (client.to_owned(), worker.clone()),
                        expires: j.dt,
                        attempt: j.attempts,
                        created: j.create_dt,
                        limits: limits_of
                            .get(&j.jobtype)
                            .copied()
                            .unwrap_or(state.config.exec.limits),
                    },
                )
            })
            .collect(),
        now,
    );
    state.metrics.jobs_started.inc_by(jobs.len() as u64);
    Ok(Json(FetchResponse {
        worker,
        lease: owner,
        lease_expires: jobs.first().map_or(expires, |j| j.dt),
        jobs: jobs
            .into_iter()
            .map(|j| {
                let (data, data_base64) = payload_fields(&j.data);
                FetchedJob {
                    id: crate::tenant::local_of(&j.id).to_owned(),
                    jobtype: crate::tenant::local_of(&j.jobtype).to_owned(),
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
    /// No longer held (finished, cancelled, or taken by another worker
    /// after the lease ran out): stop working on these.
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

fn lost_error(what: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "conflict",
        format!(
            "{what}: none of these jobs is held under this lease any more (finished, cancelled, \
             or handed to another worker after the lease ran out)"
        ),
    )
}

/// Renews the leases of many jobs in one call; says which are still held.
#[utoipa::path(
    post,
    path = "/{client}/jobs/heartbeat",
    tag = "workers",
    params(("client" = String, Path, description = "The client (tenant): 1 to 64 of A-Z a-z 0-9 _, starting with a letter or digit", pattern = "^[A-Za-z0-9][A-Za-z0-9_]{0,63}$")),
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
    let now = now_millis();
    let renewed = state.store.renew_locks(&ids, &owner, lease, now).await?;
    let expires = now + duration_ms(lease);
    state.hub.renewed(&renewed, expires);
    let kept: HashSet<&str> = renewed.iter().map(String::as_str).collect();
    let lost: Vec<String> = ids
        .iter()
        .filter(|id| !kept.contains(id.as_str()))
        .cloned()
        .collect();
    state.hub.settle(&lost, false, now);
    if renewed.is_empty() {
        return Err(lost_error("heartbeat"));
    }
    // Only a worker that holds something is recorded as seen.
    state.hub.seen(tenant.client.as_str(), &worker, now);
    let local = |v: &[String]| {
        v.iter()
            .map(|id| crate::tenant::local_of(id).to_owned())
            .collect::<Vec<_>>()
    };
    Ok(Json(HeartbeatResponse {
        held: local(&renewed),
        lost: local(&lost),
        lease_expires: expires,
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
    /// New jobs of the same client to add.
    #[serde(default)]
    pub jobs: Vec<ChildJob>,
    /// For retry and error: run again after this many milliseconds instead
    /// of the backoff.
    pub retry_in_ms: Option<u64>,
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
    /// Ids of the new jobs asked for, in order.
    pub created: Vec<String>,
}

/// Reports results (ok, failed, retry, error) of jobs held under a lease,
/// with output and new jobs of the same client, in one call. The handler's
/// attempt and age limits apply as for the daemon's own runners.
#[utoipa::path(
    post,
    path = "/{client}/jobs/finish",
    tag = "workers",
    params(("client" = String, Path, description = "The client (tenant): 1 to 64 of A-Z a-z 0-9 _, starting with a letter or digit", pattern = "^[A-Za-z0-9][A-Za-z0-9_]{0,63}$")),
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
    let now = now_millis();

    // Attempts, ages and limits: from the registry, or (a job handed out by
    // another daemon) from the store and its handler.
    let mut known: HashMap<String, RemoteJob> = HashMap::new();
    let mut handlers: HashMap<String, Limits> = HashMap::new();
    for id in &ids {
        if let Some(j) = state.hub.job(id) {
            known.insert(id.clone(), j);
        } else if let Some(job) = state.store.get_job(id).await? {
            let limits = match handlers.get(&job.jobtype) {
                Some(l) => *l,
                None => {
                    let l = match state.store.get_handler(&job.jobtype).await? {
                        Some(h) => state.config.exec.limits.with(&h.handler.limits),
                        None => state.config.exec.limits,
                    };
                    handlers.insert(job.jobtype.clone(), l);
                    l
                }
            };
            known.insert(
                id.clone(),
                RemoteJob {
                    jobtype: job.jobtype.clone(),
                    owner: job.lock.clone(),
                    worker: (tenant.client.to_string(), worker.clone()),
                    expires: job.dt,
                    attempt: job.attempts,
                    created: job.create_dt,
                    limits,
                },
            );
        }
    }

    let mut releases = Vec::with_capacity(ids.len());
    let mut children = Vec::new();
    let mut outcomes: Vec<(&'static str, usize)> = Vec::new();
    for (i, (f, id)) in req.jobs.iter().zip(&ids).enumerate() {
        let place = |e: ApiError| e.item(i + 1).at(&format!("job {}", i + 1));
        if !(100..=599).contains(&f.status) {
            return Err(place(
                ApiError::invalid(format!("status {} is outside 100..=599", f.status))
                    .field("status"),
            ));
        }
        let output = match (&f.output, &f.output_base64) {
            (Some(_), Some(_)) => {
                return Err(place(
                    ApiError::invalid("give output or output_base64, not both").field("output"),
                ));
            }
            (Some(s), None) => s.as_bytes().to_vec(),
            (None, Some(b)) => BASE64.decode(b).map_err(|e| {
                place(ApiError::invalid(format!("output_base64: {e}")).field("output_base64"))
            })?,
            (None, None) => Vec::new(),
        };
        let mut outcome = Outcome::new(
            f.status,
            Parsed {
                output: output.into_iter().take(MAX_OUTPUT).collect(),
                ..Parsed::default()
            },
        );
        outcome.retry_after = f.retry_in_ms.map(Duration::from_millis);
        for (k, child) in f.jobs.iter().enumerate() {
            let jobtype = tenant
                .client
                .jobtype(&child.jobtype)
                .map_err(|e| place(ApiError::from(e).at(&format!("new job {}", k + 1))))?;
            let data = match &child.data {
                serde_json::Value::String(s) => s.as_bytes().to_vec(),
                v => v.to_string().into_bytes(),
            };
            if data.len() > state.max_payload {
                return Err(place(ApiError::too_large(
                    format!("new job {}: the payload is {} bytes", k + 1, data.len()),
                    state.max_payload as u64,
                )));
            }
            children.push(Record {
                id: crate::http::jobs::new_id(&tenant.client),
                jobtype,
                priority: 0,
                run_at: None,
                data,
            });
        }
        let (attempt, created, limits) = known
            .get(id)
            .map_or((1, now, state.config.exec.limits), |j| {
                (j.attempt, j.created, j.limits)
            });
        let delete_ok = state.config.exec.retention == Some(Duration::ZERO);
        let how = policy::release_for(&outcome, &limits, attempt, created, now, delete_ok);
        outcomes.push((
            match &how {
                jobstore_api::Release::Archive(r) => r.code.as_str(),
                jobstore_api::Release::Delete => "ok",
                _ if outcome.class == Class::Retry => "retry",
                _ => "error",
            },
            i,
        ));
        releases.push(JobRelease::new(id.clone(), how));
    }
    // New jobs are durable before their parents are released.
    let created: Vec<String> = children
        .iter()
        .map(|r| crate::tenant::local_of(&r.id).to_owned())
        .collect();
    if !children.is_empty() {
        let n = children.len() as u64;
        state.journal.append(children).await.map_err(|e| match e {
            crate::journal::JournalError::Closed => {
                ApiError::unavailable("the daemon is shutting down")
            }
            e => ApiError::internal(format!("cannot write the journal: {e}")),
        })?;
        state.metrics.jobs_acknowledged.inc_by(n);
    }
    let released = state
        .store
        .release_jobs(&releases, &owner, now_millis())
        .await?;
    state.hub.settle(&ids, true, now);
    let done: HashSet<&str> = released.iter().map(String::as_str).collect();
    for (outcome, i) in outcomes {
        if done.contains(ids[i].as_str()) {
            state
                .metrics
                .jobs_finished
                .get_or_create(&OutcomeLabels { outcome })
                .inc();
        }
    }
    if released.is_empty() {
        return Err(lost_error("finish"));
    }
    state.hub.seen(tenant.client.as_str(), &worker, now);
    let local = |id: &String| crate::tenant::local_of(id).to_owned();
    Ok(Json(FinishResponse {
        finished: released.iter().map(local).collect(),
        lost: ids
            .iter()
            .filter(|id| !done.contains(id.as_str()))
            .map(local)
            .collect(),
        created,
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
    params(("client" = String, Path, description = "The client (tenant): 1 to 64 of A-Z a-z 0-9 _, starting with a letter or digit", pattern = "^[A-Za-z0-9][A-Za-z0-9_]{0,63}$"), ("id" = String, Path, description = "The job id: no control characters, no | or /", pattern = "^[^|/\\u0000-\\u001f\\u007f-\\u009f]{1,135}$")),
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
    if state
        .store
        .update_data(&id, &owner, &data, now_millis())
        .await?
    {
        state
            .hub
            .seen(tenant.client.as_str(), &worker, now_millis());
        Ok(Json(UpdateResponse { updated: true }))
    } else {
        Err(lost_error("update"))
    }
}

/// The client's workers.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WorkerList {
    /// Workers this daemon heard from recently.
    pub workers: Vec<WorkerView>,
}

/// The workers of a client this daemon heard from: last seen, jobs held.
#[utoipa::path(
    get,
    path = "/{client}/workers",
    tag = "workers",
    params(("client" = String, Path, description = "The client (tenant): 1 to 64 of A-Z a-z 0-9 _, starting with a letter or digit", pattern = "^[A-Za-z0-9][A-Za-z0-9_]{0,63}$")),
    responses(
        (status = 200, body = WorkerList),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn list(State(state): State<AppState>, tenant: Tenant) -> Json<WorkerList> {
    let mut workers = state.hub.workers(tenant.client.as_str(), now_millis());
    workers.sort_by(|a, b| a.worker.cmp(&b.worker));
    Json(WorkerList { workers })
}
