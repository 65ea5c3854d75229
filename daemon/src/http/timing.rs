//! `GET /{client}/stats/history`: the wait and run times of a client's
//! jobtypes per minute (the last hour) or per day (the last 30 days), as
//! the store keeps them ([`JobStore::job_stats`](jobstore_api::JobStore::job_stats)).

use axum::Json;
use axum::extract::State;
use jobstore_api::stats::HISTOGRAM_BOUNDS_MS;
use jobstore_api::{Durations, Millis, StatsQuery, StatsResolution, now_millis};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{QueryOf, Tenant};
use super::manage::{Scope, jobtypes_of};
use super::params::ClientPath;
use crate::tenant;

/// Options of the stats history.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct HistoryParams {
    /// `minute` (the last hour) or `day` (the last 30 days; the default).
    pub resolution: Option<String>,
    /// Jobtypes, comma-separated (default: every jobtype of the client).
    #[serde(rename = "type")]
    #[param(rename = "type")]
    pub jobtype: Option<String>,
}

/// A set of durations: count, mean, spread and histogram.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DurationsView {
    /// How many.
    pub count: u64,
    /// Their sum (ms).
    pub sum_ms: u64,
    /// The sum of their squares (ms²).
    pub sum_sq_ms: f64,
    /// The mean (ms); absent when there are none.
    pub mean_ms: Option<f64>,
    /// The standard deviation (ms); absent when there are none.
    pub stddev_ms: Option<f64>,
    /// The upper bound of the histogram bucket holding the median (ms);
    /// absent when there are none or it is past the last bound.
    pub p50_ms: Option<u64>,
    /// The same for the 95th percentile.
    pub p95_ms: Option<u64>,
    /// The same for the 99th percentile.
    pub p99_ms: Option<u64>,
    /// Counts per histogram bucket, one per bound of `bounds_ms` and one
    /// past the last.
    pub buckets: Vec<u64>,
}

impl From<&Durations> for DurationsView {
    fn from(d: &Durations) -> Self {
        DurationsView {
            count: d.count,
            sum_ms: d.sum_ms,
            sum_sq_ms: d.sum_sq_ms,
            mean_ms: d.mean_ms(),
            stddev_ms: d.variance_ms2().map(f64::sqrt),
            p50_ms: d.quantile_bound_ms(0.5),
            p95_ms: d.quantile_bound_ms(0.95),
            p99_ms: d.quantile_bound_ms(0.99),
            buckets: d.buckets.to_vec(),
        }
    }
}

/// One jobtype's times over one minute or day.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct BucketView {
    /// The start of the minute or UTC day (epoch ms).
    pub start: Millis,
    /// Waits, from when each job was due to its claim.
    pub wait: DurationsView,
    /// Runs that ended, from claim to result.
    pub run: DurationsView,
}

/// One jobtype's buckets, oldest first; minutes or days with nothing are
/// left out.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct JobtypeHistory {
    /// The jobtype (without the client prefix).
    #[serde(rename = "type")]
    pub jobtype: String,
    /// Its buckets.
    pub buckets: Vec<BucketView>,
}

/// A client's wait and run times per jobtype over time.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct StatsHistory {
    /// The client.
    pub client: String,
    /// `minute` or `day`.
    pub resolution: String,
    /// The width of a bucket (ms).
    pub bucket_ms: Millis,
    /// The histogram's bucket upper bounds (ms, inclusive).
    pub bounds_ms: Vec<u64>,
    /// Per jobtype, sorted.
    pub jobtypes: Vec<JobtypeHistory>,
}

/// A client's wait times (due to start) and run times per jobtype: per
/// minute for the last hour or per UTC day for the last 30 days, each as
/// count, mean, standard deviation and histogram. Every daemon on the
/// store adds its own every few seconds (`--stats-every`).
#[utoipa::path(
    get,
    path = "/{client}/stats/history",
    tag = "jobs",
    params(ClientPath, HistoryParams),
    responses(
        (status = 200, body = StatsHistory),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 501, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn stats_history(
    State(state): State<AppState>,
    tenant: Tenant,
    QueryOf(params): QueryOf<HistoryParams>,
) -> ApiResult<Json<StatsHistory>> {
    let resolution = match params.resolution.as_deref().map(str::trim) {
        None | Some("day") => StatsResolution::Day,
        Some("minute") => StatsResolution::Minute,
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "resolution {other:?} is neither minute nor day"
            ))
            .field("resolution"));
        }
    };
    let query = StatsQuery {
        jobtypes: jobtypes_of(
            &Scope::Client(&tenant.client),
            params.jobtype.as_deref(),
            "type",
        )?,
        resolution,
    };
    let buckets = state.store.job_stats(&query, now_millis()).await?;
    let mut jobtypes: Vec<JobtypeHistory> = Vec::new();
    for b in buckets {
        let view = BucketView {
            start: b.start,
            wait: (&b.wait).into(),
            run: (&b.run).into(),
        };
        let local = tenant::local_of(&b.jobtype);
        match jobtypes.last_mut() {
            Some(last) if last.jobtype == local => last.buckets.push(view),
            _ => jobtypes.push(JobtypeHistory {
                jobtype: local.to_owned(),
                buckets: vec![view],
            }),
        }
    }
    Ok(Json(StatsHistory {
        client: tenant.client.to_string(),
        resolution: resolution.as_str().to_owned(),
        bucket_ms: resolution.width(),
        bounds_ms: HISTOGRAM_BOUNDS_MS.to_vec(),
        jobtypes,
    }))
}
