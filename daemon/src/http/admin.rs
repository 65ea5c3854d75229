//! Health, metrics and the API's own description.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use utoipa::{OpenApi, ToSchema};

use super::AppState;
use super::error::{ApiResult, ErrorBody};
use super::extract::CallerOf;
use crate::auth::Caller;

/// The daemon's health.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok`; `degraded` when the store is unreachable or the sysid is not
    /// held (adds are still acknowledged into the journal);
    /// `shutting_down`.
    pub status: String,
    /// The store, as this daemon's own calls see it.
    pub store: StoreHealthView,
    /// The journal.
    pub journal: JournalHealth,
    /// The sysid.
    pub sysid: SysidHealth,
}

/// Whether the store answers.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct StoreHealthView {
    /// Whether the last store call reached it.
    pub reachable: bool,
    /// The last error while unreachable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The journal's backlog.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct JournalHealth {
    /// Durable records not yet in the store.
    pub backlog_records: u64,
    /// Their bytes.
    pub backlog_bytes: u64,
    /// Damaged records skipped since start.
    pub damaged_records: u64,
    /// Seconds the oldest record has waited for ingest.
    pub ingest_lag_seconds: f64,
}

/// The sysid.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SysidHealth {
    /// The name.
    pub name: String,
    /// Whether this daemon holds it (claims only while it does).
    pub held: bool,
    /// When the lease runs out (epoch ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires: Option<i64>,
    /// The last renewal error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Health: store reachable, journal backlog, sysid held. 200 while serving
/// (`ok` or `degraded`), 503 while shutting down.
#[utoipa::path(
    get,
    path = "/health",
    tag = "admin",
    responses(
        (status = 200, body = Health),
        (status = 503, description = "Shutting down", body = ErrorBody)
    )
)]
pub async fn health(State(state): State<AppState>) -> impl IntoResponse {
    let js = state.journal.stats();
    let sysid = state.sysid.status();
    let held = state.sysid.held();
    let reachable = state.store_health.reachable();
    let shutting_down = state.draining.is_cancelled();
    let status = if shutting_down {
        "shutting_down"
    } else if reachable && held {
        "ok"
    } else {
        "degraded"
    };
    let body = Health {
        status: status.to_owned(),
        store: StoreHealthView {
            reachable,
            error: state.store_health.last_error(),
        },
        journal: JournalHealth {
            backlog_records: js.backlog_records,
            backlog_bytes: js.backlog_bytes,
            damaged_records: js.damaged_records,
            ingest_lag_seconds: state.metrics.ingest_lag_seconds.get(),
        },
        sysid: SysidHealth {
            name: sysid.sysid,
            held,
            expires: sysid.lease.map(|l| l.expires),
            error: sysid.last_error,
        },
    };
    let code = if shutting_down {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (code, Json(body))
}

/// Prometheus metrics (text format 0.0.4). Needs the admin token when
/// tokens are configured.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "admin",
    responses(
        (status = 200, description = "Prometheus text exposition", body = String, content_type = "text/plain"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn metrics(
    State(state): State<AppState>,
    CallerOf(caller): CallerOf,
) -> ApiResult<impl IntoResponse> {
    if state.config.auth.enabled() {
        caller.require_admin("metrics")?;
    }
    state.metrics.observe_journal(&state.journal.stats());
    state.metrics.sysid_held.set(i64::from(state.sysid.held()));
    state
        .metrics
        .store_up
        .set(i64::from(state.store_health.reachable()));
    let (active, gone, held) = state.executor.worker_totals(jobstore_api::now_millis());
    for (label, n) in [("active", active), ("gone", gone)] {
        state
            .metrics
            .remote_workers
            .get_or_create(&crate::metrics::StateLabels { state: label })
            .set(n as i64);
    }
    state.metrics.remote_jobs_held.set(held as i64);
    Ok((
        [(
            header::CONTENT_TYPE,
            prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        )],
        state.metrics.render(),
    ))
}

/// Whom a token speaks for.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WhoAmI {
    /// Whether the daemon asks for tokens at all (`false`: every caller
    /// may act for every client, as on a loopback listener without tokens).
    pub auth: bool,
    /// Whether the caller sees every client: the admin token, or any caller
    /// when the daemon asks for no token.
    pub admin: bool,
    /// The client a client's token acts for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
}

/// Whom the request's token speaks for (the dashboard asks at sign-in).
#[utoipa::path(
    get,
    path = "/whoami",
    tag = "admin",
    responses(
        (status = 200, body = WhoAmI),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn whoami(
    State(state): State<AppState>,
    CallerOf(caller): CallerOf,
) -> ApiResult<Json<WhoAmI>> {
    let (admin, client) = match caller {
        Caller::Open => (true, None),
        Caller::Admin => (true, None),
        Caller::Client(c) => (false, Some(c.to_string())),
    };
    Ok(Json(WhoAmI {
        auth: state.config.auth.enabled(),
        admin,
        client,
    }))
}

/// The OpenAPI document of this API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "jobstore",
        description = "The jobstore daemon's HTTP API. `{client}` is the tenant: a client's token reaches only its own paths."
    ),
    paths(
        super::jobs::add,
        super::jobs::get,
        super::jobs::waits,
        super::manage::cancel,
        super::manage::list,
        super::manage::list_all,
        super::manage::rerun,
        super::manage::delete,
        super::manage::unblock,
        super::manage::edit,
        super::manage::pause,
        super::manage::resume,
        super::manage::paused,
        super::manage::failures,
        super::schedules::set,
        super::schedules::list,
        super::schedules::get,
        super::schedules::delete,
        super::schedules::pause,
        super::schedules::resume,
        super::schedules::trigger,
        super::jobs::client_stats,
        super::timing::stats_history,
        super::jobs::all_stats,
        whoami,
        super::jobtype_handlers::set,
        super::jobtype_handlers::get,
        super::jobtype_handlers::delete,
        super::jobtype_handlers::delete_post,
        super::jobtype_handlers::list,
        super::workers::fetch,
        super::workers::heartbeat,
        super::workers::finish,
        super::workers::update,
        super::workers::list,
        health,
        metrics,
        openapi,
    ),
    modifiers(&Security),
    tags(
        (name = "jobs", description = "Add, query and cancel jobs"),
        (name = "manage", description = "List, run again, delete, edit jobs; pause jobtypes; failure groups"),
        (name = "handlers", description = "How a jobtype runs"),
        (name = "schedules", description = "Recurring jobs: cron and repeat rules, fired once per slot by every daemon"),
        (name = "workers", description = "Remote workers: fetch, heartbeat, finish, update"),
        (name = "admin", description = "Health, metrics, stats")
    )
)]
pub struct ApiDoc;

struct Security;

impl utoipa::Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// This document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "admin",
    responses((status = 200, description = "The OpenAPI 3.1 document", body = Object))
)]
pub async fn openapi() -> impl IntoResponse {
    Json(ApiDoc::openapi())
}
