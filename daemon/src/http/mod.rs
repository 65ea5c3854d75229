//! The HTTP API (axum): routes, authentication, errors.
//!
//! The seed's paths are kept as given (`/{client}/job/{type}/add`,
//! `/{client}/handler/add/{type}/add`, `/{client}/handler/del/{type}/delete`,
//! `/{client}/handler/get/{type}`); the rest sit beside them. `GET
//! /openapi.json` describes all of it.

pub mod admin;
pub mod counts;
pub mod dashboard;
pub mod error;
pub mod extract;
pub mod jobs;
pub mod jobtype_handlers;
pub mod manage;
mod params;
pub mod schedules;
pub mod serve;
pub mod timing;
pub mod workers;

use std::ops::Deref;
use std::sync::Arc;

use axum::Router;
use axum::body::HttpBody;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use jobstore_api::JobStore;
use tokio_util::sync::CancellationToken;
use tower_http::timeout::TimeoutLayer;

use crate::config::Config;
use crate::executor::Executor;
use crate::ingest::Outcomes;
use crate::journal::Journal;
use crate::metrics::{Metrics, RequestLabels, StoreHealth};
use crate::sysid::SysidHandle;
use error::ApiError;

/// What every request handler can reach.
pub struct Shared {
    /// The store (metered).
    pub store: Arc<dyn JobStore>,
    /// The journal adds go to.
    pub journal: Journal,
    /// The configuration.
    pub config: Arc<Config>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Store reachability.
    pub store_health: Arc<StoreHealth>,
    /// Requests waiting for ingest verdicts.
    pub outcomes: Arc<Outcomes>,
    /// The sysid.
    pub sysid: SysidHandle,
    /// Cancelled when shutdown begins: new requests get 503.
    pub draining: CancellationToken,
    /// The largest payload accepted (the store's limit).
    pub max_payload: usize,
    /// The core: remote workers' fetches, heartbeats and finishes.
    pub executor: Executor,
    /// The newest job counts, for callers that accept them a little old.
    pub counts: counts::CountsCache,
    /// The job events seam: adds report here once durable.
    pub events: crate::events::JobEvents,
}

/// The router's state: a cheap handle on [`Shared`].
#[derive(Clone)]
pub struct AppState(pub Arc<Shared>);

impl Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// Every route: its path and what answers it. [`router`] serves exactly
/// these, and a test checks that `/openapi.json` documents each one.
pub fn routes() -> Vec<(&'static str, MethodRouter<AppState>)> {
    vec![
        ("/{client}/job/{type}/add", post(jobs::add)),
        ("/{client}/job/{type}/get", post(workers::fetch)),
        ("/{client}/jobs/heartbeat", post(workers::heartbeat)),
        ("/{client}/jobs/finish", post(workers::finish)),
        ("/{client}/jobs/{id}/update", post(workers::update)),
        ("/{client}/workers", get(workers::list)),
        ("/{client}/jobs/cancel", post(manage::cancel)),
        ("/{client}/jobs", get(manage::list)),
        ("/{client}/jobs/rerun", post(manage::rerun)),
        ("/{client}/jobs/delete", post(manage::delete)),
        ("/{client}/jobs/edit", post(manage::edit)),
        ("/{client}/jobs/unblock", post(manage::unblock)),
        ("/{client}/jobtypes/{type}/pause", post(manage::pause)),
        ("/{client}/jobtypes/{type}/resume", post(manage::resume)),
        ("/{client}/paused", get(manage::paused)),
        ("/{client}/failures", get(manage::failures)),
        ("/{client}/schedules", get(schedules::list)),
        (
            "/{client}/schedules/{name}",
            get(schedules::get)
                .put(schedules::set)
                .delete(schedules::delete),
        ),
        ("/{client}/schedules/{name}/pause", post(schedules::pause)),
        ("/{client}/schedules/{name}/resume", post(schedules::resume)),
        (
            "/{client}/schedules/{name}/trigger",
            post(schedules::trigger),
        ),
        ("/jobs", get(manage::list_all)),
        ("/{client}/jobs/{id}", get(jobs::get)),
        ("/{client}/jobs/{id}/waits", get(jobs::waits)),
        ("/{client}/stats", get(jobs::client_stats)),
        ("/{client}/stats/history", get(timing::stats_history)),
        (
            "/{client}/handler/add/{type}/add",
            post(jobtype_handlers::set),
        ),
        (
            "/{client}/handler/del/{type}/delete",
            post(jobtype_handlers::delete_post).delete(jobtype_handlers::delete),
        ),
        ("/{client}/handler/get/{type}", get(jobtype_handlers::get)),
        ("/{client}/handlers", get(jobtype_handlers::list)),
        ("/stats", get(jobs::all_stats)),
        ("/whoami", get(admin::whoami)),
        ("/health", get(admin::health)),
        ("/metrics", get(admin::metrics)),
        ("/openapi.json", get(admin::openapi)),
    ]
}

/// The API's router.
pub fn router(state: AppState) -> Router {
    let limit = state.config.max_body_bytes;
    let timeout = state.config.request_timeout;
    routes()
        .into_iter()
        .chain(dashboard::routes())
        .fold(Router::new(), |r, (path, route)| r.route(path, route))
        .fallback(fallback)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            refuse_when_draining,
        ))
        .layer(DefaultBodyLimit::max(limit))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            timeout,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            count_requests,
        ))
        .with_state(state)
}

async fn fallback() -> ApiError {
    ApiError::not_found("no such endpoint; GET /openapi.json lists them")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this endpoint does not take that method; GET /openapi.json lists them",
    )
}

/// New requests during shutdown get 503; `/health` still answers (503).
async fn refuse_when_draining(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if state.draining.is_cancelled() && req.uri().path() != "/health" {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the daemon is shutting down",
        )
        .into_response();
    }
    next.run(req).await
}

async fn count_requests(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |m| m.as_str())
        .to_owned();
    let method = req.method().as_str().to_owned();
    let response = next.run(req).await;
    let status = response.status();
    state
        .metrics
        .requests
        .get_or_create(&RequestLabels {
            route,
            method,
            status: status.as_u16(),
        })
        .inc();
    if status.is_client_error() || status.is_server_error() {
        state.metrics.error("http", status.as_u16());
    }
    if status == StatusCode::REQUEST_TIMEOUT && response.body().size_hint().exact() == Some(0) {
        // The timeout layer answers with an empty body; say what happened.
        return ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "timeout",
            "the request took longer than the daemon's request timeout",
        )
        .into_response();
    }
    response
}

#[cfg(test)]
mod tests {
    use utoipa::OpenApi;

    /// Every served route is documented, and every documented path is
    /// served: a route added without its OpenAPI entry fails here, and the
    /// end-to-end tests that walk `/openapi.json` (tenant isolation,
    /// schemathesis) then reach every route.
    #[test]
    fn openapi_documents_every_route() {
        let doc = super::admin::ApiDoc::openapi();
        let documented: std::collections::BTreeSet<String> =
            doc.paths.paths.keys().cloned().collect();
        let served: std::collections::BTreeSet<String> = super::routes()
            .iter()
            .map(|(p, _)| (*p).to_owned())
            .collect();
        assert_eq!(documented, served);
    }
}
