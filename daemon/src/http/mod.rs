//! The HTTP API (axum): routes, authentication, errors.
//!
//! The seed's paths are kept as given (`/{client}/job/{type}/add`,
//! `/{client}/handler/add/{type}/add`, `/{client}/handler/del/{type}/delete`,
//! `/{client}/handler/get/{type}`); the rest sit beside them. `GET
//! /openapi.json` describes all of it.

pub mod admin;
pub mod error;
pub mod extract;
pub mod handlers;
pub mod jobs;
pub mod workers;

use std::ops::Deref;
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use jobstore_api::JobStore;
use tokio_util::sync::CancellationToken;
use tower_http::timeout::TimeoutLayer;

use crate::config::Config;
use crate::ingest::Outcomes;
use crate::journal::Journal;
use crate::metrics::{Metrics, RequestLabels, StoreHealth};
use crate::remote::WorkHub;
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
    /// The scheduler and the remote workers' registry.
    pub hub: Arc<WorkHub>,
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

/// The API's router.
pub fn router(state: AppState) -> Router {
    let limit = state.config.max_body_bytes;
    let timeout = state.config.request_timeout;
    Router::new()
        .route("/{client}/job/{type}/add", post(jobs::add))
        .route("/{client}/job/{type}/get", post(workers::fetch))
        .route("/{client}/jobs/heartbeat", post(workers::heartbeat))
        .route("/{client}/jobs/finish", post(workers::finish))
        .route("/{client}/jobs/{id}/update", post(workers::update))
        .route("/{client}/workers", get(workers::list))
        .route("/{client}/jobs/cancel", post(jobs::cancel))
        .route("/{client}/jobs/{id}", get(jobs::get))
        .route("/{client}/stats", get(jobs::client_stats))
        .route("/{client}/handler/add/{type}/add", post(handlers::set))
        .route(
            "/{client}/handler/del/{type}/delete",
            post(handlers::delete_post).delete(handlers::delete),
        )
        .route("/{client}/handler/get/{type}", get(handlers::get))
        .route("/{client}/handlers", get(handlers::list))
        .route("/stats", get(jobs::all_stats))
        .route("/health", get(admin::health))
        .route("/metrics", get(admin::metrics))
        .route("/openapi.json", get(admin::openapi))
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
    if status == StatusCode::REQUEST_TIMEOUT {
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
