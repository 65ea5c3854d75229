//! Routes for jobtype handlers: how a client's jobtype runs.
//!
//! A `process` handler runs a command on the daemon's host: whoever can set
//! one can run code there. Setting one over HTTP is refused unless the
//! operator enabled process handlers and the caller holds the admin token.
//! `http` handlers may be limited to an allow-list of hosts.

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use jobstore_api::{Handler, HandlerLimits, HandlerVersion, now_millis};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{PathParams, QueryOf, RawBody, Tenant, is_json};
use super::params::{ClientPath, JobtypePath};
use crate::auth::Caller;
use crate::runner::Method;
use crate::runner::http::{TargetError, check_target};
use crate::tenant;

/// A handler's fields given in the query string (with a raw body).
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct HandlerQuery {
    /// How the jobs run: `process`, `http` or `remote`.
    pub method: Option<String>,
    /// Execution-context id (`process` only): jobtypes with the same eid
    /// share long-lived workers.
    pub eid: Option<String>,
    /// Run once when an execution context starts, or once per handler
    /// body and `before` text on this daemon without an eid (`process`
    /// only).
    pub before: Option<String>,
    /// Run before each batch, by each worker before its share of the batch
    /// with an eid (`process` only).
    pub before_each: Option<String>,
    /// Run after each batch, by each worker after its share of the batch
    /// with an eid (`process` only).
    pub after_each: Option<String>,
    /// Hand-outs before a failing job is archived as timeout.
    pub max_attempts: Option<u32>,
    /// Age (ms) after which a failing job is archived as timeout.
    pub max_age_ms: Option<u64>,
    /// Longest one run may take (ms).
    pub time_limit_ms: Option<u64>,
    /// Most jobs of the jobtype running at once per daemon.
    pub concurrency: Option<u32>,
    /// First retry delay (ms); doubles per attempt.
    pub backoff_base_ms: Option<u64>,
    /// Longest retry delay (ms).
    pub backoff_max_ms: Option<u64>,
}

impl HandlerQuery {
    fn limits(&self) -> LimitsSpec {
        LimitsSpec {
            max_attempts: self.max_attempts,
            max_age_ms: self.max_age_ms,
            time_limit_ms: self.time_limit_ms,
            concurrency: self.concurrency,
            backoff_base_ms: self.backoff_base_ms,
            backoff_max_ms: self.backoff_max_ms,
        }
    }

    fn any_field(&self) -> bool {
        self.method.is_some()
            || self.eid.is_some()
            || self.before.is_some()
            || self.before_each.is_some()
            || self.after_each.is_some()
            || !HandlerLimits::from(self.limits()).is_unset()
    }
}

/// A handler's limits; unset ones take the daemon's defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsSpec {
    /// Hand-outs before a failing job is archived as `timeout`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Age (ms since it was stored) after which a failing job is archived
    /// as `timeout`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_age_ms: Option<u64>,
    /// Longest one run may take (ms) before it is killed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_limit_ms: Option<u64>,
    /// Most jobs of the jobtype running at once on one daemon.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// First retry delay (ms); doubles per attempt, with jitter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff_base_ms: Option<u64>,
    /// Longest retry delay (ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff_max_ms: Option<u64>,
}

impl From<LimitsSpec> for HandlerLimits {
    fn from(l: LimitsSpec) -> Self {
        HandlerLimits {
            max_attempts: l.max_attempts,
            max_age_ms: l.max_age_ms,
            time_limit_ms: l.time_limit_ms,
            concurrency: l.concurrency,
            backoff_base_ms: l.backoff_base_ms,
            backoff_max_ms: l.backoff_max_ms,
        }
    }
}

impl From<HandlerLimits> for LimitsSpec {
    fn from(l: HandlerLimits) -> Self {
        LimitsSpec {
            max_attempts: l.max_attempts,
            max_age_ms: l.max_age_ms,
            time_limit_ms: l.time_limit_ms,
            concurrency: l.concurrency,
            backoff_base_ms: l.backoff_base_ms,
            backoff_max_ms: l.backoff_max_ms,
        }
    }
}

fn is_unset(l: &LimitsSpec) -> bool {
    *l == LimitsSpec::default()
}

/// A handler as JSON (request and answer).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HandlerSpec {
    /// How the jobs run: `process`, `http` or `remote`.
    #[serde(alias = "lang")]
    pub method: String,
    /// A command line (`process`), a URL (`http`), or anything (`remote`:
    /// shown to whoever reads the handler).
    pub body: String,
    /// Execution-context id (`process` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eid: Option<String>,
    /// Run once when an execution context starts, or once per handler
    /// body and `before` text on this daemon without an eid (`process`
    /// only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// Run before each batch, by each worker before its share of the batch
    /// with an eid (`process` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_each: Option<String>,
    /// Run after each batch, by each worker after its share of the batch
    /// with an eid (`process` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_each: Option<String>,
    /// Attempts, age, time limit, concurrency and backoff.
    #[serde(default, skip_serializing_if = "is_unset")]
    pub limits: LimitsSpec,
}

impl HandlerSpec {
    fn into_handler(self) -> Handler {
        Handler {
            method: self.method,
            body: self.body,
            eid: self.eid,
            before: self.before,
            before_each: self.before_each,
            after_each: self.after_each,
            limits: self.limits.into(),
        }
    }

    fn of(h: &Handler) -> Self {
        HandlerSpec {
            method: h.method.clone(),
            body: h.body.clone(),
            eid: h.eid.clone(),
            before: h.before.clone(),
            before_each: h.before_each.clone(),
            after_each: h.after_each.clone(),
            limits: h.limits.into(),
        }
    }
}

/// A stored handler version.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HandlerView {
    /// The jobtype (without the client prefix).
    #[serde(rename = "type")]
    pub jobtype: String,
    /// The version's id.
    pub version: String,
    /// When it was set (epoch ms).
    pub set_at: i64,
    /// The handler.
    #[serde(flatten)]
    pub handler: HandlerSpec,
}

fn view(v: &HandlerVersion) -> HandlerView {
    HandlerView {
        jobtype: tenant::local_of(&v.jobtype).to_owned(),
        version: v.id.clone(),
        set_at: v.dt,
        handler: HandlerSpec::of(&v.handler),
    }
}

/// Whether `caller` may store `handler` on this daemon: a known method,
/// no field the method never reads, and what the method itself needs.
fn authorize(state: &AppState, caller: &Caller, handler: &Handler) -> ApiResult<()> {
    let method = Method::of(handler).ok_or_else(|| {
        ApiError::invalid(format!(
            "unknown handler method {:?}; known are {}",
            handler.method,
            Method::names()
        ))
        .field("method")
    })?;
    if let Some(field) = method.unused_field(handler) {
        return Err(ApiError::invalid(format!(
            "{field} is for process handlers; {method} handlers never run it"
        ))
        .field(field));
    }
    match method {
        Method::Process => {
            if !state.config.allow_process_handlers {
                return Err(ApiError::new(
                    axum::http::StatusCode::FORBIDDEN,
                    "forbidden",
                    "process handlers run commands on the daemon's host and are disabled here; \
                     the operator enables them with --allow-process-handlers",
                ));
            }
            caller.require_admin("setting a process handler")?;
            if handler.body.trim().is_empty() {
                return Err(ApiError::invalid(
                    "a process handler needs a command line as its body",
                )
                .field("body"));
            }
        }
        Method::Http => {
            check_target(&state.config.http_allow_hosts, &handler.body).map_err(|e| match e {
                TargetError::Invalid(m) => ApiError::invalid(m).field("body"),
                TargetError::NotAllowed(m) => {
                    ApiError::new(axum::http::StatusCode::FORBIDDEN, "forbidden", m).field("body")
                }
            })?
        }
        Method::Remote => {}
    }
    Ok(())
}

/// Sets a handler. With `Content-Type: application/json` the body is a
/// [`HandlerSpec`]; otherwise the body is the handler's body and the other
/// fields come from the query string (`method` required).
#[utoipa::path(
    post,
    path = "/{client}/handler/add/{type}/add",
    tag = "handlers",
    params(ClientPath, JobtypePath, HandlerQuery),
    request_body(content((HandlerSpec = "application/json"), (String = "text/plain"))),
    responses(
        (status = 200, body = HandlerView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, description = "A process handler without the admin token or with process handlers disabled, or an http host not allowed", body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn set(
    State(state): State<AppState>,
    tenant: Tenant,
    params: PathParams,
    QueryOf(query): QueryOf<HandlerQuery>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> ApiResult<Json<HandlerView>> {
    let jobtype = tenant.client.jobtype(params.get("type"))?;
    let spec = if is_json(&headers) {
        if query.any_field() {
            return Err(ApiError::invalid(
                "with a JSON body, give every field in the body, not in the query",
            ));
        }
        serde_json::from_slice::<HandlerSpec>(&body)
            .map_err(|e| ApiError::invalid(format!("the body is not a handler: {e}")))?
    } else {
        let body = String::from_utf8(body.to_vec())
            .map_err(|_| ApiError::invalid("the handler body is not UTF-8").field("body"))?;
        let limits = query.limits();
        let Some(method) = query.method else {
            return Err(ApiError::invalid(format!(
                "the method query parameter is missing (?method={})",
                Method::ALL.map(Method::as_str).join(" or ?method=")
            ))
            .field("method"));
        };
        HandlerSpec {
            method,
            body,
            eid: query.eid,
            before: query.before,
            before_each: query.before_each,
            after_each: query.after_each,
            limits,
        }
    };
    let handler = spec.into_handler();
    jobstore_api::validate::handler(&jobtype, &handler, now_millis())?;
    authorize(&state, &tenant.caller, &handler)?;
    let version = state
        .store
        .set_handler(&jobtype, &handler, now_millis())
        .await?;
    tracing::info!(jobtype = %jobtype, method = %handler.method, version = %version.id, "handler set");
    Ok(Json(view(&version)))
}

/// The newest version of a jobtype's handler.
#[utoipa::path(
    get,
    path = "/{client}/handler/get/{type}",
    tag = "handlers",
    params(ClientPath, JobtypePath),
    responses(
        (status = 200, body = HandlerView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn get(
    State(state): State<AppState>,
    tenant: Tenant,
    params: PathParams,
) -> ApiResult<Json<HandlerView>> {
    let local = params.get("type");
    let jobtype = tenant.client.jobtype(local)?;
    match state.store.get_handler(&jobtype).await? {
        Some(v) => Ok(Json(view(&v))),
        None => Err(ApiError::not_found(format!(
            "no handler for jobtype {local:?} of client {}",
            tenant.client
        ))),
    }
}

/// The answer to a delete.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DeleteResponse {
    /// Whether a handler existed and was deleted.
    pub deleted: bool,
}

/// Deletes every version of a jobtype's handler (POST or DELETE).
#[utoipa::path(
    delete,
    path = "/{client}/handler/del/{type}/delete",
    tag = "handlers",
    params(ClientPath, JobtypePath),
    responses(
        (status = 200, body = DeleteResponse),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, description = "There was no handler", body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn delete(
    State(state): State<AppState>,
    tenant: Tenant,
    params: PathParams,
) -> ApiResult<Json<DeleteResponse>> {
    let local = params.get("type");
    let jobtype = tenant.client.jobtype(local)?;
    if state.store.delete_handler(&jobtype).await? {
        tracing::info!(jobtype = %jobtype, "handler deleted");
        Ok(Json(DeleteResponse { deleted: true }))
    } else {
        Err(ApiError::not_found(format!(
            "no handler for jobtype {local:?} of client {}",
            tenant.client
        )))
    }
}

/// Same as the DELETE form (the seed's POST form).
#[utoipa::path(
    post,
    path = "/{client}/handler/del/{type}/delete",
    tag = "handlers",
    params(ClientPath, JobtypePath),
    responses(
        (status = 200, body = DeleteResponse),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn delete_post(
    state: State<AppState>,
    tenant: Tenant,
    params: PathParams,
) -> ApiResult<Json<DeleteResponse>> {
    delete(state, tenant, params).await
}

/// A client's handlers.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HandlerList {
    /// The newest version of each jobtype's handler.
    pub handlers: Vec<HandlerView>,
}

/// The client's handlers (newest version of each).
#[utoipa::path(
    get,
    path = "/{client}/handlers",
    tag = "handlers",
    params(ClientPath),
    responses(
        (status = 200, body = HandlerList),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn list(State(state): State<AppState>, tenant: Tenant) -> ApiResult<Json<HandlerList>> {
    let mut handlers: Vec<HandlerView> = state
        .store
        .list_handlers()
        .await?
        .iter()
        .filter(|v| tenant.client.strip(&v.jobtype).is_some())
        .map(view)
        .collect();
    handlers.sort_by(|a, b| a.jobtype.cmp(&b.jobtype));
    Ok(Json(HandlerList { handlers }))
}
