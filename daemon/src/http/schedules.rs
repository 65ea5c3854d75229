//! Routes for schedules: recurring jobs kept in the store and fired by
//! every daemon on it (see [`crate::schedules`]).
//!
//! A client's schedule `name` is stored as `{client}-{name}`, like its
//! jobtypes, and the job of each slot has the id `{name}@{slot time}` (in
//! the client's ids), so one client never names another's schedule.

use axum::Json;
use axum::extract::State;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use jobstore_api::{CatchUp, Millis, NewJob, Overlap, Schedule, ScheduleRecord, now_millis};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::AppState;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{JsonBody, PathParams, Tenant};
use super::manage::parse_time;
use super::params::ClientPath;
use crate::schedules::plan;
use crate::schedules::rule::{Rule, rfc3339};
use crate::tenant::Client;

/// How many upcoming slots a schedule's view shows.
pub const UPCOMING: usize = 5;

/// A schedule as set: when it fires and the job each firing adds.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// A cron pattern (5 fields, or 6 with seconds first) or a repeat rule
    /// (`SCHEDULED|STARTED|FINISHED, +1 DAY, START OF DAY, +6 HOURS`,
    /// `HOURLY`, `DAILY`, `WEEKLY`).
    pub rule: String,
    /// The IANA time zone the rule is read in (default `UTC`).
    pub time_zone: Option<String>,
    /// The jobtype of the jobs it adds.
    #[serde(rename = "type")]
    #[schema(rename = "type")]
    pub jobtype: String,
    /// Their payload (UTF-8 text).
    pub data: Option<String>,
    /// Their payload as base64.
    pub data_base64: Option<String>,
    /// Their priority (default 0).
    pub priority: Option<i32>,
    /// Their tags.
    pub tags: Option<Vec<String>>,
    /// Missed slots (daemons down, schedule paused): `all` fires each,
    /// `last` (the default) the newest, `none` only those on time.
    pub catch_up: Option<String>,
    /// Slots older than this (ms) are never fired (default: a day).
    pub catch_up_window_ms: Option<u64>,
    /// A slot while the previous slot's job has not ended: `allow` (the
    /// default) fires it, `skip` skips it.
    pub overlap: Option<String>,
    /// No slot before this time: epoch ms or RFC 3339.
    pub start_at: Option<String>,
    /// No slot at or after this time: epoch ms or RFC 3339.
    pub end_at: Option<String>,
}

/// A schedule: its definition, its firing state, and its next slots.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct ScheduleView {
    /// Its name.
    pub name: String,
    /// Its rule.
    pub rule: String,
    /// The rule's time zone.
    pub time_zone: String,
    /// The jobtype of its jobs.
    #[serde(rename = "type")]
    #[schema(rename = "type")]
    pub jobtype: String,
    /// Their payload, when it is UTF-8 text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// Their payload as base64, when it is not UTF-8 text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_base64: Option<String>,
    /// Their priority.
    pub priority: i32,
    /// Their tags.
    pub tags: Vec<String>,
    /// `all`, `last` or `none`.
    pub catch_up: String,
    /// The catch-up window, ms.
    pub catch_up_window_ms: u64,
    /// `allow` or `skip`.
    pub overlap: String,
    /// No slot before this time (epoch ms).
    pub start_at: Option<Millis>,
    /// No slot at or after this time (epoch ms).
    pub end_at: Option<Millis>,
    /// 1 when created, one more at every set.
    pub version: u64,
    /// Paused: it fires nothing until resumed.
    pub paused: bool,
    /// When it was created (epoch ms).
    pub created_at: Millis,
    /// Its last set, pause or resume (epoch ms).
    pub updated_at: Millis,
    /// Every slot at or before this time was fired or skipped (epoch ms).
    pub fired_through: Option<Millis>,
    /// The job of the newest slot fired.
    pub last_job: Option<String>,
    /// When a daemon looks at it again (epoch ms); none once it ended.
    pub next_due: Option<Millis>,
    /// Slots fired since it was created.
    pub fired: u64,
    /// Slots skipped since it was created.
    pub skipped: u64,
    /// Its next slots (RFC 3339, UTC), at most five; for `STARTED` and
    /// `FINISHED` rules, as if each run took no time.
    pub next: Vec<String>,
}

/// The client's schedules.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ScheduleList {
    /// By name.
    pub schedules: Vec<ScheduleView>,
}

/// What a pause or resume did.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct SchedulePauseResponse {
    /// The schedule.
    pub name: String,
    /// Whether it is paused now.
    pub paused: bool,
    /// Whether the call changed it.
    pub changed: bool,
}

/// What a delete did.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ScheduleDeleteResponse {
    /// The schedule.
    pub name: String,
    /// Whether it existed (its jobs stay).
    pub deleted: bool,
}

/// The job a trigger added.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct TriggerResponse {
    /// Its id.
    pub id: String,
}

/// The stored name of the client's schedule `name` (a `name` field in
/// errors).
fn stored_name(client: &Client, name: &str) -> ApiResult<String> {
    client.jobtype(name).map_err(|e| {
        ApiError::invalid(format!(
            "name: {}",
            e.message.replacen("jobtype", "name", 1)
        ))
        .field("name")
    })
}

fn parse_rule(rec: &ScheduleRecord) -> ApiResult<Rule> {
    Rule::parse(&rec.schedule.rule, &rec.schedule.time_zone).map_err(|e| {
        ApiError::new(
            axum::http::StatusCode::CONFLICT,
            "conflict",
            format!("the stored rule does not parse on this daemon (set by a newer version?): {e}"),
        )
        .field("rule")
    })
}

/// A store validation error of a schedule as a 400 (or 413) naming the
/// request's field it is about.
fn with_field(e: jobstore_api::Error) -> ApiError {
    let message = e.to_string();
    let body = message
        .split_once(": ")
        .map_or(message.as_str(), |(_, b)| b);
    let field = [
        ("tag", "tags"),
        ("catch_up_window", "catch_up_window_ms"),
        ("start_at", "start_at"),
        ("end_at", "end_at"),
        ("jobtype", "type"),
        ("job data", "data"),
        ("rule", "rule"),
        ("time_zone", "time_zone"),
        ("schedule name", "name"),
    ]
    .into_iter()
    .find(|(prefix, _)| body.starts_with(prefix))
    .map(|(_, field)| field);
    let err = ApiError::from(e);
    match field {
        Some(f) => err.field(f),
        None => err,
    }
}

/// A record as the API shows it, with its next slots.
fn view(client: &Client, rec: &ScheduleRecord, now: Millis) -> ScheduleView {
    let s = &rec.schedule;
    let local = |stored: &str| client.strip(stored).unwrap_or(stored).to_owned();
    let (data, data_base64) = match std::str::from_utf8(&s.data) {
        Ok(text) => (Some(text.to_owned()), None),
        Err(_) => (None, Some(BASE64.encode(&s.data))),
    };
    let next = match Rule::parse(&s.rule, &s.time_zone) {
        Ok(rule) if rec.next_due.is_some() => plan::upcoming(&rule, rec, now, UPCOMING)
            .into_iter()
            .map(rfc3339)
            .collect(),
        _ => Vec::new(),
    };
    ScheduleView {
        name: local(&s.name),
        rule: s.rule.clone(),
        time_zone: s.time_zone.clone(),
        jobtype: local(&s.jobtype),
        data,
        data_base64,
        priority: s.priority,
        tags: s.tags.clone(),
        catch_up: s.catch_up.as_str().to_owned(),
        catch_up_window_ms: u64::try_from(s.catch_up_window.as_millis()).unwrap_or(u64::MAX),
        overlap: s.overlap.as_str().to_owned(),
        start_at: s.start_at,
        end_at: s.end_at,
        version: rec.version,
        paused: rec.paused,
        created_at: rec.created_dt,
        updated_at: rec.updated_dt,
        fired_through: rec.fired_through,
        last_job: rec.last_job.as_deref().map(local),
        next_due: rec.next_due,
        fired: rec.fired,
        skipped: rec.skipped,
        next,
    }
}

/// The schedule `spec` describes, as the client's `name`, checked: the
/// rule parses and fires, the zone exists, the template is a valid job.
fn schedule_of(
    client: &Client,
    name: &str,
    spec: ScheduleSpec,
    now: Millis,
) -> ApiResult<(Schedule, Rule)> {
    let stored = stored_name(client, name)?;
    // Its slots' and triggers' job ids must be valid ids.
    let longest = format!("{stored}@trigger-{}", "0".repeat(32));
    if longest.len() > jobstore_api::limits::MAX_ID_LEN {
        return Err(ApiError::invalid(format!(
            "name: {name:?} is too long: its jobs' ids ({longest:?}) would be over {} bytes",
            jobstore_api::limits::MAX_ID_LEN
        ))
        .field("name"));
    }
    let time_zone = spec.time_zone.unwrap_or_else(|| "UTC".to_owned());
    let rule = Rule::parse_checked(&spec.rule, &time_zone, now)
        .map_err(|e| ApiError::invalid(e.to_string()).field(e.field()))?;
    let jobtype = client
        .jobtype(&spec.jobtype)
        .map_err(|e| ApiError::from(e).field("type"))?;
    let data = match (spec.data, spec.data_base64) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid("give data or data_base64, not both").field("data"));
        }
        (Some(d), None) => d.into_bytes(),
        (None, Some(b)) => BASE64.decode(b).map_err(|e| {
            ApiError::invalid(format!("data_base64 is not base64: {e}")).field("data_base64")
        })?,
        (None, None) => Vec::new(),
    };
    let catch_up = match spec.catch_up.as_deref() {
        None => CatchUp::default(),
        Some(c) => CatchUp::parse(c).map_err(|e| ApiError::from(e).field("catch_up"))?,
    };
    let overlap = match spec.overlap.as_deref() {
        None => Overlap::default(),
        Some(o) => Overlap::parse(o).map_err(|e| ApiError::from(e).field("overlap"))?,
    };
    let mut schedule = Schedule::new(stored, spec.rule, jobtype);
    schedule.time_zone = time_zone;
    schedule.data = data;
    schedule.priority = spec.priority.unwrap_or(0);
    schedule.tags = spec.tags.unwrap_or_default();
    schedule.catch_up = catch_up;
    if let Some(ms) = spec.catch_up_window_ms {
        schedule.catch_up_window = std::time::Duration::from_millis(ms);
    }
    schedule.overlap = overlap;
    schedule.start_at = spec
        .start_at
        .as_deref()
        .map(|t| parse_time("start_at", t))
        .transpose()?;
    schedule.end_at = spec
        .end_at
        .as_deref()
        .map(|t| parse_time("end_at", t))
        .transpose()?;
    if let Some(end) = schedule.end_at
        && end <= now
    {
        return Err(ApiError::invalid(format!(
            "end_at {} is not in the future: the schedule would never fire",
            rfc3339(end)
        ))
        .field("end_at"));
    }
    Ok((schedule, rule))
}

/// Creates or replaces a schedule. The answer shows its next slots.
#[utoipa::path(
    put,
    path = "/{client}/schedules/{name}",
    tag = "schedules",
    params(ClientPath, ("name" = String, Path, description = "The schedule's name", pattern = "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,134}$")),
    request_body = ScheduleSpec,
    responses(
        (status = 200, body = ScheduleView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 501, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn set(
    State(state): State<AppState>,
    tenant: Tenant,
    params: PathParams,
    JsonBody(spec): JsonBody<ScheduleSpec>,
) -> ApiResult<Json<ScheduleView>> {
    let now = now_millis();
    let (schedule, rule) = schedule_of(&tenant.client, params.get("name"), spec, now)?;
    jobstore_api::validate::schedule(&schedule, None, &state.store.capabilities(), now)
        .map_err(with_field)?;
    // The firing state the new definition continues from (a replace keeps
    // it), to say when it is first due.
    let current = state.store.get_schedule(&schedule.name).await?;
    let probe = ScheduleRecord {
        schedule: schedule.clone(),
        ..current.unwrap_or_else(|| ScheduleRecord {
            schedule: schedule.clone(),
            version: 0,
            paused: false,
            created_dt: now,
            updated_dt: now,
            fired_through: None,
            last_job: None,
            next_due: None,
            fired: 0,
            skipped: 0,
        })
    };
    let Some(next_due) = plan::first_due(&rule, &probe, now) else {
        return Err(ApiError::invalid(format!(
            "rule: {:?} has no slot between the schedule's start and its end",
            schedule.rule
        ))
        .field("rule"));
    };
    let rec = state
        .store
        .set_schedule(&schedule, Some(next_due), now)
        .await?;
    tracing::info!(schedule = %rec.schedule.name, version = rec.version, rule = %rec.schedule.rule, "schedule set");
    Ok(Json(view(&tenant.client, &rec, now)))
}

/// The client's schedules, by name.
#[utoipa::path(
    get,
    path = "/{client}/schedules",
    tag = "schedules",
    params(ClientPath),
    responses(
        (status = 200, body = ScheduleList),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 501, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn list(State(state): State<AppState>, tenant: Tenant) -> ApiResult<Json<ScheduleList>> {
    let now = now_millis();
    let prefix = format!("{}{}", tenant.client, crate::tenant::SEP);
    let all = state.store.list_schedules(&prefix).await?;
    Ok(Json(ScheduleList {
        schedules: all.iter().map(|r| view(&tenant.client, r, now)).collect(),
    }))
}

async fn read(state: &AppState, client: &Client, name: &str) -> ApiResult<ScheduleRecord> {
    let stored = stored_name(client, name)?;
    state
        .store
        .get_schedule(&stored)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no schedule {name:?} for client {client}")))
}

/// A schedule.
#[utoipa::path(
    get,
    path = "/{client}/schedules/{name}",
    tag = "schedules",
    params(ClientPath, ("name" = String, Path, description = "The schedule's name", pattern = "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,134}$")),
    responses(
        (status = 200, body = ScheduleView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 501, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn get(
    State(state): State<AppState>,
    tenant: Tenant,
    params: PathParams,
) -> ApiResult<Json<ScheduleView>> {
    let rec = read(&state, &tenant.client, params.get("name")).await?;
    Ok(Json(view(&tenant.client, &rec, now_millis())))
}

/// Deletes a schedule; the jobs it added stay.
#[utoipa::path(
    delete,
    path = "/{client}/schedules/{name}",
    tag = "schedules",
    params(ClientPath, ("name" = String, Path, description = "The schedule's name", pattern = "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,134}$")),
    responses(
        (status = 200, body = ScheduleDeleteResponse),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 501, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn delete(
    State(state): State<AppState>,
    tenant: Tenant,
    params: PathParams,
) -> ApiResult<Json<ScheduleDeleteResponse>> {
    let name = params.get("name");
    let stored = stored_name(&tenant.client, name)?;
    let deleted = state.store.delete_schedule(&stored).await?;
    if deleted {
        tracing::info!(schedule = %stored, "schedule deleted");
    }
    Ok(Json(ScheduleDeleteResponse {
        name: name.to_owned(),
        deleted,
    }))
}

async fn set_paused(
    state: &AppState,
    tenant: &Tenant,
    params: &PathParams,
    paused: bool,
) -> ApiResult<Json<SchedulePauseResponse>> {
    let name = params.get("name");
    let rec = read(state, &tenant.client, name).await?;
    let now = now_millis();
    // A resume is due at the first slot after the watermark: the slots
    // missed while paused follow the catch-up policy.
    let next_due = if paused {
        None
    } else {
        plan::first_due(&parse_rule(&rec)?, &rec, now)
    };
    let changed = state
        .store
        .pause_schedule(&rec.schedule.name, paused, next_due, now)
        .await?;
    Ok(Json(SchedulePauseResponse {
        name: name.to_owned(),
        paused,
        changed,
    }))
}

/// Pauses a schedule on every daemon: it fires nothing until resumed.
#[utoipa::path(
    post,
    path = "/{client}/schedules/{name}/pause",
    tag = "schedules",
    params(ClientPath, ("name" = String, Path, description = "The schedule's name", pattern = "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,134}$")),
    responses(
        (status = 200, body = SchedulePauseResponse),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 501, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn pause(
    State(state): State<AppState>,
    tenant: Tenant,
    params: PathParams,
) -> ApiResult<Json<SchedulePauseResponse>> {
    set_paused(&state, &tenant, &params, true).await
}

/// Resumes a paused schedule; the slots it missed follow its catch-up
/// policy.
#[utoipa::path(
    post,
    path = "/{client}/schedules/{name}/resume",
    tag = "schedules",
    params(ClientPath, ("name" = String, Path, description = "The schedule's name", pattern = "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,134}$")),
    responses(
        (status = 200, body = SchedulePauseResponse),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 501, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn resume(
    State(state): State<AppState>,
    tenant: Tenant,
    params: PathParams,
) -> ApiResult<Json<SchedulePauseResponse>> {
    set_paused(&state, &tenant, &params, false).await
}

/// Adds one job of the schedule now, outside its slots (its watermark and
/// counters are left as they are).
#[utoipa::path(
    post,
    path = "/{client}/schedules/{name}/trigger",
    tag = "schedules",
    params(ClientPath, ("name" = String, Path, description = "The schedule's name", pattern = "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,134}$")),
    responses(
        (status = 200, body = TriggerResponse),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 501, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn trigger(
    State(state): State<AppState>,
    tenant: Tenant,
    params: PathParams,
) -> ApiResult<Json<TriggerResponse>> {
    let rec = read(&state, &tenant.client, params.get("name")).await?;
    let s = &rec.schedule;
    let id = format!("{}@trigger-{}", s.name, uuid::Uuid::now_v7().as_simple());
    let job = NewJob::new(id.clone(), s.jobtype.clone(), s.data.clone())
        .priority(s.priority)
        .tags(s.tags.iter().cloned());
    state.store.add_jobs(&[job], now_millis()).await?;
    tracing::info!(schedule = %s.name, job = %id, "schedule triggered");
    Ok(Json(TriggerResponse {
        id: tenant.client.strip(&id).unwrap_or(&id).to_owned(),
    }))
}
