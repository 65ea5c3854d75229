//! Jobs: add (through the journal), get, stats. Cancelling and the
//! other management routes are in [`manage`](super::manage).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use jobstore_api::limits::MAX_DELAY;
use jobstore_api::{Job, JobCounts, JobState, JobStore, Millis, TraceContext, now_millis};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::counts::Counts;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{CallerOf, PathParams, QueryOf, RawBody, Tenant, is_json};
use super::params::{ClientPath, JobtypePath};
use crate::events::{JobRef, Source};
use crate::ingest::Verdict;
use crate::journal::Record;
use crate::tenant;

/// Options of a line-form add, for every line.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AddQuery {
    /// Priority of every job (higher runs first; default 0).
    pub priority: Option<i32>,
    /// Run every job this many milliseconds from now.
    pub delay_ms: Option<u64>,
    /// Run every job at this time: epoch milliseconds or RFC 3339.
    pub run_at: Option<String>,
    /// Tags of every job, comma-separated (at most 8, each 1 to 64 of
    /// A-Z a-z 0-9 _ . : -).
    pub tags: Option<String>,
    /// A unique key for every job (see the JSON item's `unique`): with
    /// several lines, the first is added and the others are its duplicates.
    pub unique_key: Option<String>,
    /// With `unique_key`: also a duplicate while a job with the key was
    /// archived less than this many milliseconds ago.
    pub unique_window_ms: Option<u64>,
    /// With `unique_key`: `keep` (default) or `replace_data`.
    pub on_conflict: Option<String>,
    /// A repeat rule for every job (see the JSON item's `repeat`).
    pub repeat: Option<String>,
    /// With `repeat`: the rule's IANA time zone (default `UTC`).
    pub repeat_tz: Option<String>,
    /// Ids of jobs every job waits for, comma-separated (see the JSON
    /// item's `depends_on`; an id with a comma needs the JSON form).
    pub depends_on: Option<String>,
    /// With `depends_on`: `cancel` (default), `run` or `hold`.
    pub on_dependency_failure: Option<String>,
    /// With `depends_on`: hand each run its dependencies' outputs too.
    pub with_outputs: Option<bool>,
}

/// A job's repeat rule in a JSON add.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RepeatItem {
    /// Cron (5 or 6 fields, or `@daily` and the like) or the repeat
    /// syntax (`SCHEDULED|STARTED|FINISHED, +1 HOUR, ...`, `HOURLY`,
    /// `DAILY`, `WEEKLY`): each time a run ends ok, the job is due again
    /// at the rule's next time instead of being archived.
    #[schema(min_length = 1, max_length = 256, example = "0 6 * * *")]
    pub rule: String,
    /// The IANA time zone the rule counts in; default `UTC`.
    #[schema(max_length = 64, example = "Europe/Paris")]
    pub time_zone: Option<String>,
}

/// A job's unique key in a JSON add.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UniqueItem {
    /// The key, 1 to 256 bytes without control characters, scoped by the
    /// jobtype: while a job of the jobtype holding it is waiting,
    /// scheduled or running, an add with the key adds nothing and names
    /// that job in `duplicates`.
    #[schema(min_length = 1, max_length = 256, example = "invoice-4711")]
    pub key: String,
    /// Also a duplicate while a job with the key was archived (any result)
    /// less than this many milliseconds ago.
    pub window_ms: Option<u64>,
    /// What a duplicate does to the job holding the key: `keep` (default),
    /// or `replace_data`: a waiting or scheduled holder gets this payload.
    #[schema(value_type = Option<String>, example = "keep")]
    pub on_conflict: Option<String>,
}

/// A job of an add that was not added because another job holds its key.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DuplicateItem {
    /// The id the job would have had (nothing is stored under it).
    pub id: String,
    /// The job holding the key: live, or archived inside the window.
    pub existing: String,
    /// Whether that job got this add's payload (`on_conflict: replace_data`).
    pub replaced: bool,
}

/// One job of a JSON add.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddItem {
    /// The payload: a string is stored as its UTF-8 bytes, any other JSON
    /// value as its JSON text.
    #[schema(value_type = Option<Object>)]
    pub data: Option<serde_json::Value>,
    /// The payload as base64, for bytes that are not text.
    pub data_base64: Option<String>,
    /// A client-chosen id: the add is idempotent by it (a retried request
    /// creates nothing twice and reports the id as existing).
    pub id: Option<String>,
    /// Higher runs first; default 0.
    pub priority: Option<i32>,
    /// When to run: epoch milliseconds or an RFC 3339 time.
    #[schema(value_type = Option<String>)]
    pub run_at: Option<RunAt>,
    /// Run this many milliseconds from now.
    pub delay_ms: Option<u64>,
    /// Tags to find the job by (at most 8, each 1 to 64 of A-Z a-z 0-9 _ . : -).
    pub tags: Option<Vec<String>>,
    /// The job's W3C trace context (`version-traceid-parentid-flags`,
    /// lowercase hex): the job's runs continue this trace. Default: the
    /// request's `traceparent` header. Unlike the header, a malformed one
    /// is refused.
    #[schema(
        pattern = "^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[0-9a-f-]*)?$",
        max_length = 256,
        example = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    )]
    pub traceparent: Option<String>,
    /// The W3C `tracestate` that goes with `traceparent` (vendor entries,
    /// `key=value` comma-separated, at most 32 and 512 bytes); only with
    /// `traceparent`.
    #[schema(max_length = 512, example = "rojo=00f067aa0ba902b7")]
    pub tracestate: Option<String>,
    /// A unique key: at most one job of the jobtype holds it while live.
    pub unique: Option<UniqueItem>,
    /// Makes the job repeat: each run that ends ok makes it due again at
    /// the rule's next time (its result kept as the last one, and the
    /// payload the run left for the next: a `U:` line, or a remote
    /// finish's `data`); a run that fails or times out archives it.
    pub repeat: Option<RepeatItem>,
    /// Ids of jobs (of this client, already added) this one waits for: it
    /// is `blocked` until each has been archived, then waiting. At most
    /// 1,000, none twice, not its own. An id that is not a job of the
    /// store makes the store refuse the job: it is listed in the answer's
    /// `refused`, and nothing is added for it.
    #[schema(max_items = 1000)]
    pub depends_on: Option<Vec<String>>,
    /// What a dependency that ends other than `ok` does to this job:
    /// `cancel` (default: archived `cancelled`, which its own dependents
    /// see in turn), `run` (it runs once every dependency has ended) or
    /// `hold` (it stays blocked until the dependency is run again and
    /// ends ok, or an operator unblocks it: `POST /{client}/jobs/unblock`).
    #[schema(value_type = Option<String>, example = "cancel")]
    pub on_dependency_failure: Option<String>,
    /// With `depends_on`: its run is handed the dependencies' outputs as
    /// well as their ids and result codes (`JOBSTORE_WAITED`).
    pub with_outputs: Option<bool>,
}

/// A job of an add that the store refused: a dependency is not a job.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RefusedItem {
    /// The id the job would have had (nothing is stored under it).
    pub id: String,
    /// The field at fault: `depends_on[i]`, from 0.
    pub field: String,
    /// Why.
    pub reason: String,
}

/// A time: epoch milliseconds or RFC 3339.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RunAt {
    /// Epoch milliseconds.
    Millis(i64),
    /// RFC 3339.
    Text(String),
}

/// The answer to an add.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AddResponse {
    /// The ids of the jobs, in the order of the request.
    pub ids: Vec<String>,
    /// Client-chosen ids that already existed: nothing was created for them.
    pub existing: Vec<String>,
    /// Client-chosen ids whose fate the store has not confirmed yet (it is
    /// unreachable): they are durable in the journal and will be added
    /// (answered with 202).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<String>,
    /// Ids the store refused for good; kept in the daemon's rejected file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected: Vec<String>,
    /// Jobs with a unique key that another job holds: nothing was added
    /// for them (their ids in `ids` name no job).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub duplicates: Vec<DuplicateItem>,
    /// Jobs the store refused because a dependency is not a job: nothing
    /// was added for them (their ids in `ids` name no job; they are kept
    /// in the daemon's rejected file).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<RefusedItem>,
}

/// Adds jobs. The body is one payload per line (a trailing CR is dropped,
/// empty lines are skipped), or with `Content-Type: application/json` an
/// array of [`AddItem`]. Answers once the jobs are durable in the journal.
/// A `traceparent` header (and `tracestate`) is kept with every job of the
/// request as its trace context (a JSON item may carry its own); a
/// malformed one is ignored, as W3C Trace Context asks of a receiver.
#[utoipa::path(
    post,
    path = "/{client}/job/{type}/add",
    tag = "jobs",
    params(
        ClientPath,
        JobtypePath,
        AddQuery,
        ("traceparent" = Option<String>, Header, description = "W3C Trace Context of the add, kept with every job of the request (a JSON item's own traceparent takes its place); the runs continue this trace. A malformed one is ignored (the jobs are added without one) and counted in jobstore_trace_headers_ignored_total"),
        ("tracestate" = Option<String>, Header, description = "W3C tracestate that goes with traceparent; a malformed one is ignored, the traceparent kept")
    ),
    request_body(
        description = "One payload per line (text/plain or any non-JSON type), or a JSON array of items",
        content(
            (String = "text/plain"),
            (Vec<AddItem> = "application/json")
        )
    ),
    responses(
        (status = 200, description = "Durable; the ids in order", body = AddResponse),
        (status = 202, description = "Durable, but the store has not yet said which client-chosen ids existed", body = AddResponse),
        (status = 400, description = "Malformed body or names", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 413, description = "A payload or the body is too large", body = ErrorBody),
        (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn add(
    State(state): State<AppState>,
    tenant: Tenant,
    params: PathParams,
    QueryOf(query): QueryOf<AddQuery>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> ApiResult<impl IntoResponse> {
    let began = state.events.on().map(|_| SystemTime::now());
    let jobtype = tenant.client.jobtype(params.get("type"))?;
    let now = now_millis();
    let header_trace = crate::trace::from_headers(&headers);
    if let Some(header) = header_trace.ignored {
        state
            .metrics
            .trace_headers_ignored
            .get_or_create(&crate::metrics::HeaderLabels { header })
            .inc();
        tracing::debug!(header, "add: a malformed trace header was ignored");
    }
    let trace = header_trace.context;
    let max_payload = state.max_payload;
    let mut client_ids: Vec<String> = Vec::new();
    let records = if is_json(&headers) {
        if query.priority.is_some()
            || query.delay_ms.is_some()
            || query.run_at.is_some()
            || query.tags.is_some()
            || query.unique_key.is_some()
            || query.unique_window_ms.is_some()
            || query.on_conflict.is_some()
            || query.repeat.is_some()
            || query.repeat_tz.is_some()
            || query.depends_on.is_some()
            || query.on_dependency_failure.is_some()
            || query.with_outputs.is_some()
        {
            return Err(ApiError::invalid(
                "with a JSON body, give priority, delay_ms, run_at, tags, unique, repeat and depends_on per item, not in the query",
            ));
        }
        let items = parse_json_items(&body)?;
        let mut records = Vec::with_capacity(items.len());
        let mut seen = HashSet::new();
        for (i, item) in items.into_iter().enumerate() {
            let place = |e: ApiError| e.item(i + 1).at(&format!("item {}", i + 1));
            let data = item_data(&item).map_err(place)?;
            check_payload(&data, max_payload).map_err(place)?;
            let id = match &item.id {
                Some(id) => {
                    let stored = tenant.client.job_id(id).map_err(|e| place(e.into()))?;
                    if !seen.insert(stored.clone()) {
                        return Err(place(
                            ApiError::invalid(format!("id {id:?} appears twice in one request"))
                                .field("id"),
                        ));
                    }
                    client_ids.push(stored.clone());
                    stored
                }
                None => tenant.client.new_job_id(),
            };
            let run_at = run_at(item.run_at.as_ref(), item.delay_ms, now).map_err(place)?;
            let tags = check_tags(&state, item.tags.clone().unwrap_or_default()).map_err(place)?;
            let trace = item_trace(&item, trace.as_ref()).map_err(place)?;
            let unique = match &item.unique {
                None => None,
                Some(u) => Some(
                    check_unique(
                        &state,
                        &u.key,
                        u.window_ms,
                        u.on_conflict.as_deref(),
                        JSON_UNIQUE_FIELDS,
                    )
                    .map_err(place)?,
                ),
            };
            let repeat = match &item.repeat {
                None => None,
                Some(r) => Some(
                    check_repeat(
                        &state,
                        &r.rule,
                        r.time_zone.as_deref(),
                        now,
                        JSON_REPEAT_FIELDS,
                    )
                    .map_err(place)?,
                ),
            };
            let (depends_on, on_dependency_failure, with_outputs) = check_deps(
                &state,
                &tenant.client,
                &id,
                item.depends_on.as_deref(),
                item.on_dependency_failure.as_deref(),
                item.with_outputs,
            )
            .map_err(place)?;
            records.push(Record {
                id,
                jobtype: jobtype.clone(),
                priority: item.priority.unwrap_or(0),
                run_at,
                data,
                tags,
                trace,
                unique,
                repeat,
                depends_on,
                on_dependency_failure,
                with_outputs,
            });
        }
        records
    } else {
        let run_at_q = query.run_at.clone().map(RunAt::Text);
        let run_at = run_at(run_at_q.as_ref(), query.delay_ms, now)?;
        let priority = query.priority.unwrap_or(0);
        let tags: Vec<String> = query
            .tags
            .as_deref()
            .map(|t| t.split(',').map(|t| t.trim().to_owned()).collect())
            .unwrap_or_default();
        let tags = check_tags(&state, tags)?;
        let unique = match &query.unique_key {
            Some(key) => Some(check_unique(
                &state,
                key,
                query.unique_window_ms,
                query.on_conflict.as_deref(),
                QUERY_UNIQUE_FIELDS,
            )?),
            None if query.unique_window_ms.is_some() || query.on_conflict.is_some() => {
                return Err(ApiError::invalid(
                    "unique_window_ms and on_conflict go with unique_key",
                )
                .field("unique_key"));
            }
            None => None,
        };
        let repeat = match &query.repeat {
            Some(rule) => Some(check_repeat(
                &state,
                rule,
                query.repeat_tz.as_deref(),
                now,
                QUERY_REPEAT_FIELDS,
            )?),
            None if query.repeat_tz.is_some() => {
                return Err(ApiError::invalid("repeat_tz goes with repeat").field("repeat"));
            }
            None => None,
        };
        let listed: Option<Vec<String>> = query
            .depends_on
            .as_deref()
            .map(|d| d.split(',').map(|id| id.trim().to_owned()).collect());
        let mut records = Vec::new();
        for (i, line) in body.split(|b| *b == b'\n').enumerate() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                continue;
            }
            check_payload(line, max_payload)
                .map_err(|e| e.line(i + 1).at(&format!("line {}", i + 1)))?;
            let id = tenant.client.new_job_id();
            let (depends_on, on_dependency_failure, with_outputs) = check_deps(
                &state,
                &tenant.client,
                &id,
                listed.as_deref(),
                query.on_dependency_failure.as_deref(),
                query.with_outputs,
            )?;
            records.push(Record {
                id,
                jobtype: jobtype.clone(),
                priority,
                run_at,
                data: line.to_vec(),
                tags: tags.clone(),
                trace: trace.clone(),
                unique: unique.clone(),
                repeat: repeat.clone(),
                depends_on,
                on_dependency_failure,
                with_outputs,
            });
        }
        records
    };
    if records.is_empty() {
        return Err(ApiError::invalid(
            "the body holds no job: send one payload per line, or a JSON array of {\"data\": …}",
        ));
    }
    let ids: Vec<String> = records.iter().map(|r| r.id.clone()).collect();
    // Jobs with a unique key wait for the store's verdict too: the answer
    // names the job holding the key.
    let mut seen: HashSet<&str> = client_ids.iter().map(String::as_str).collect();
    let keyed: Vec<String> = records
        .iter()
        .filter(|r| (r.unique.is_some() || !r.depends_on.is_empty()) && seen.insert(r.id.as_str()))
        .map(|r| r.id.clone())
        .collect();
    drop(seen);
    client_ids.extend(keyed);
    let waiters: Vec<_> = client_ids
        .iter()
        .map(|id| state.outcomes.register(id))
        .collect();
    let n = records.len() as u64;
    let adding = match (state.events.on(), began) {
        (Some(ev), Some(began)) => {
            Some(ev.adding(records.iter().map(JobRef::of_record), Source::Http, began))
        }
        _ => None,
    };
    if let Err(e) = state.journal.append(records).await {
        state.outcomes.forget(&client_ids);
        state.metrics.error("journal", "append");
        tracing::error!(error = %e, "journal append failed");
        return Err(match e {
            crate::journal::JournalError::Closed => {
                ApiError::unavailable("the daemon is shutting down")
            }
            e => ApiError::internal(format!("cannot write the journal: {e}")),
        });
    }
    state.metrics.jobs_acknowledged.inc_by(n);
    if let (Some(adding), Some(ev)) = (adding, state.events.on()) {
        adding.durable(ev);
    }

    let strip = |id: &str| tenant.client.strip(id).unwrap_or(id).to_owned();
    let mut response = AddResponse {
        ids: ids.iter().map(|id| strip(id)).collect(),
        existing: Vec::new(),
        pending: Vec::new(),
        rejected: Vec::new(),
        duplicates: Vec::new(),
        refused: Vec::new(),
    };
    if waiters.is_empty() {
        return Ok((StatusCode::OK, Json(response)));
    }
    let deadline = tokio::time::Instant::now() + state.config.idempotent_wait;
    for (id, rx) in client_ids.iter().zip(waiters) {
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(Verdict::New)) => {}
            Ok(Ok(Verdict::Existing)) => response.existing.push(strip(id)),
            Ok(Ok(Verdict::Rejected(_))) => response.rejected.push(strip(id)),
            Ok(Ok(Verdict::Duplicate { existing, replaced })) => {
                response.duplicates.push(DuplicateItem {
                    id: strip(id),
                    existing: strip(&existing),
                    replaced,
                })
            }
            Ok(Ok(Verdict::Refused { field, reason })) => {
                // The store names the dependency by its store id.
                let reason = reason.replace(&format!("\"{}-", tenant.client), "\"");
                response.refused.push(RefusedItem {
                    id: strip(id),
                    field,
                    reason,
                })
            }
            Ok(Err(_)) | Err(_) => response.pending.push(strip(id)),
        }
    }
    state.outcomes.forget(&client_ids);
    let status = if response.pending.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((status, Json(response)))
}

fn parse_json_items(body: &[u8]) -> ApiResult<Vec<AddItem>> {
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("the body is not valid JSON: {e}")))?;
    let values = match value {
        serde_json::Value::Array(v) => v,
        obj @ serde_json::Value::Object(_) => vec![obj],
        _ => {
            return Err(ApiError::invalid(
                "a JSON body must be an array of {\"data\": …} items (or one such object)",
            ));
        }
    };
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            serde_json::from_value::<AddItem>(v)
                .map_err(|e| ApiError::invalid(format!("item {}: {e}", i + 1)).item(i + 1))
        })
        .collect()
}

fn item_data(item: &AddItem) -> ApiResult<Vec<u8>> {
    match (&item.data, &item.data_base64) {
        (Some(_), Some(_)) => {
            Err(ApiError::invalid("give data or data_base64, not both").field("data"))
        }
        (None, None) => Err(ApiError::invalid("data (or data_base64) is missing").field("data")),
        (Some(serde_json::Value::String(s)), None) => Ok(s.as_bytes().to_vec()),
        (Some(v), None) => Ok(v.to_string().into_bytes()),
        (None, Some(b)) => BASE64.decode(b).map_err(|e| {
            ApiError::invalid(format!("data_base64 is not base64: {e}")).field("data_base64")
        }),
    }
}

/// The trace context of a JSON add's item: its own `traceparent` (and
/// `tracestate`), checked, or else the request's (from its headers).
fn item_trace(item: &AddItem, request: Option<&TraceContext>) -> ApiResult<Option<TraceContext>> {
    Ok(
        trace_fields(item.traceparent.as_deref(), item.tracestate.as_deref())?
            .or_else(|| request.cloned()),
    )
}

/// A trace context given as the JSON fields `traceparent` and
/// `tracestate`: `None` when neither is set; a malformed one, or a
/// tracestate without a traceparent, is a 400 naming the field.
pub(crate) fn trace_fields(
    traceparent: Option<&str>,
    tracestate: Option<&str>,
) -> ApiResult<Option<TraceContext>> {
    let Some(parent) = traceparent else {
        if tracestate.is_some() {
            return Err(
                ApiError::invalid("tracestate is given without a traceparent").field("tracestate"),
            );
        }
        return Ok(None);
    };
    TraceContext::parse(parent, None).map_err(|e| ApiError::from(e).field("traceparent"))?;
    let ctx = TraceContext::parse(parent, tracestate)
        .map_err(|e| ApiError::from(e).field("tracestate"))?;
    Ok(Some(ctx))
}

/// A unique key of an add, checked: valid, and offered by the store.
/// `fields` names the key's, window's and conflict mode's fields in
/// errors: [`JSON_UNIQUE_FIELDS`] or [`QUERY_UNIQUE_FIELDS`].
fn check_unique(
    state: &AppState,
    key: &str,
    window_ms: Option<u64>,
    on_conflict: Option<&str>,
    fields: [&str; 3],
) -> ApiResult<jobstore_api::Unique> {
    let [key_field, window_field, conflict_field] = fields;
    let mut unique = jobstore_api::Unique::new(key);
    if let Some(ms) = window_ms {
        unique = unique.window(Duration::from_millis(ms));
    }
    if let Some(c) = on_conflict {
        let c: jobstore_api::OnConflict = c
            .parse()
            .map_err(|e: jobstore_api::Error| ApiError::from(e).field(conflict_field))?;
        unique = unique.on_conflict(c);
    }
    if unique.window.is_some_and(|w| w > MAX_DELAY) {
        return Err(ApiError::invalid(format!(
            "{window_field} is above the maximum of {} ms",
            MAX_DELAY.as_millis()
        ))
        .field(window_field)
        .limit(MAX_DELAY.as_millis() as u64));
    }
    jobstore_api::validate::unique(&unique).map_err(|e| {
        ApiError::invalid(e.to_string().replacen("unique.key", key_field, 1)).field(key_field)
    })?;
    if !state.store.capabilities().unique_jobs {
        return Err(
            ApiError::from(jobstore_api::Error::unsupported("unique keys")).field(key_field),
        );
    }
    Ok(unique)
}

/// The dependencies of job `id` (store id), checked: client ids made
/// store ids, none twice nor `id` itself, at most
/// [`MAX_DEPENDENCIES`](jobstore_api::limits::MAX_DEPENDENCIES), a known
/// policy, and a store that keeps dependencies.
fn check_deps(
    state: &AppState,
    client: &crate::tenant::Client,
    id: &str,
    depends_on: Option<&[String]>,
    policy: Option<&str>,
    with_outputs: Option<bool>,
) -> ApiResult<(Vec<String>, jobstore_api::DependencyFailure, bool)> {
    if with_outputs == Some(true) && depends_on.is_none() {
        return Err(ApiError::invalid("with_outputs goes with depends_on").field("with_outputs"));
    }
    let with_outputs = with_outputs.unwrap_or(false);
    let policy = match policy {
        None => jobstore_api::DependencyFailure::default(),
        Some(_) if depends_on.is_none() => {
            return Err(
                ApiError::invalid("on_dependency_failure goes with depends_on")
                    .field("on_dependency_failure"),
            );
        }
        Some(p) => p
            .parse()
            .map_err(|e: jobstore_api::Error| ApiError::from(e).field("on_dependency_failure"))?,
    };
    let Some(deps) = depends_on else {
        return Ok((Vec::new(), policy, false));
    };
    if deps.is_empty() {
        return Err(ApiError::invalid("depends_on is empty").field("depends_on"));
    }
    let mut stored = Vec::with_capacity(deps.len());
    for (i, dep) in deps.iter().enumerate() {
        let field = format!("depends_on[{i}]");
        stored.push(
            client
                .job_id(dep)
                .map_err(|e| ApiError::from(e).field(&field))?,
        );
    }
    jobstore_api::validate::dependencies(id, &stored).map_err(|e| {
        if e.kind() != jobstore_api::ErrorKind::InvalidInput {
            return ApiError::from(e).field("depends_on");
        }
        let text = e.to_string();
        let field = text
            .find("depends_on[")
            .and_then(|at| {
                text[at..]
                    .find(']')
                    .map(|end| text[at..at + end + 1].to_owned())
            })
            .unwrap_or_else(|| "depends_on".to_owned());
        let text = text.replace(&format!("\"{client}-"), "\"");
        ApiError::invalid(text).field(field)
    })?;
    if !state.store.capabilities().dependencies {
        return Err(
            ApiError::from(jobstore_api::Error::unsupported("dependencies")).field("depends_on"),
        );
    }
    Ok((stored, policy, with_outputs))
}

/// A repeat rule of an add, checked: it parses in its zone and fires
/// (counting from `now`), and the store keeps rules. `fields` names the
/// rule's and the zone's fields in errors.
fn check_repeat(
    state: &AppState,
    rule: &str,
    time_zone: Option<&str>,
    now: jobstore_api::Millis,
    [rule_field, zone_field]: [&'static str; 2],
) -> ApiResult<jobstore_api::Repeat> {
    let repeat = jobstore_api::Repeat::new(rule).time_zone(time_zone.unwrap_or("UTC"));
    let field = |f: &str| {
        if f == "time_zone" {
            zone_field
        } else {
            rule_field
        }
    };
    jobstore_api::validate::repeat(&repeat).map_err(|e| {
        let text = e.to_string();
        // The field the message starts with (a rule's message may name
        // the zone in its advice).
        let at = match (text.find("repeat.rule"), text.find("repeat.time_zone")) {
            (Some(r), Some(z)) if z < r => zone_field,
            (None, Some(_)) => zone_field,
            _ => rule_field,
        };
        let text =
            text.replacen("repeat.time_zone", zone_field, 1)
                .replacen("repeat.rule", rule_field, 1);
        ApiError::invalid(text).field(at)
    })?;
    crate::schedules::rule::Rule::parse_checked(&repeat.rule, &repeat.time_zone, now)
        .map_err(|e| ApiError::invalid(e.to_string()).field(field(e.field())))?;
    if !state.store.capabilities().repeat {
        return Err(
            ApiError::from(jobstore_api::Error::unsupported("repeating jobs")).field(rule_field),
        );
    }
    Ok(repeat)
}

/// The repeat rule's fields in a JSON item.
const JSON_REPEAT_FIELDS: [&str; 2] = ["repeat.rule", "repeat.time_zone"];
/// The repeat rule's fields in the query of a line-form add.
const QUERY_REPEAT_FIELDS: [&str; 2] = ["repeat", "repeat_tz"];

/// The unique key's fields in a JSON item.
const JSON_UNIQUE_FIELDS: [&str; 3] = ["unique.key", "unique.window_ms", "unique.on_conflict"];
/// The unique key's fields in the query of a line-form add.
const QUERY_UNIQUE_FIELDS: [&str; 3] = ["unique_key", "unique_window_ms", "on_conflict"];

/// Tags of an add, checked: valid, and kept by the store.
fn check_tags(state: &AppState, tags: Vec<String>) -> ApiResult<Vec<String>> {
    if tags.is_empty() {
        return Ok(tags);
    }
    jobstore_api::validate::tags(&tags).map_err(|e| ApiError::from(e).field("tags"))?;
    if !state.store.capabilities().tags {
        return Err(ApiError::from(jobstore_api::Error::unsupported("tags")).field("tags"));
    }
    Ok(tags)
}

fn check_payload(data: &[u8], max: usize) -> ApiResult<()> {
    if data.len() > max {
        return Err(ApiError::too_large(
            format!("the payload is {} bytes, the limit is {max}", data.len()),
            max as u64,
        ));
    }
    Ok(())
}

fn run_at(at: Option<&RunAt>, delay_ms: Option<u64>, now: Millis) -> ApiResult<Option<Millis>> {
    let t = match (at, delay_ms) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid("give run_at or delay_ms, not both").field("run_at"));
        }
        (None, None) => return Ok(None),
        (None, Some(d)) => {
            if Duration::from_millis(d) > MAX_DELAY {
                return Err(ApiError::invalid(format!(
                    "delay_ms {d} is above the maximum of {} ms",
                    MAX_DELAY.as_millis()
                ))
                .field("delay_ms")
                .limit(MAX_DELAY.as_millis() as u64));
            }
            now.saturating_add(d as i64)
        }
        (Some(RunAt::Millis(ms)), None) => *ms,
        (Some(RunAt::Text(s)), None) => parse_time(s)?,
    };
    jobstore_api::validate::time("run_at", t).map_err(|e| ApiError::from(e).field("run_at"))?;
    Ok(Some(t))
}

fn parse_time(s: &str) -> ApiResult<Millis> {
    if let Ok(ms) = s.trim().parse::<i64>() {
        return Ok(ms);
    }
    let t = humantime::parse_rfc3339_weak(s.trim()).map_err(|e| {
        ApiError::invalid(format!(
            "run_at {s:?} is neither epoch milliseconds nor an RFC 3339 time: {e}"
        ))
        .field("run_at")
    })?;
    let ms = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| ApiError::invalid(format!("run_at {s:?} is before 1970")).field("run_at"))?
        .as_millis();
    Ok(Millis::try_from(ms).unwrap_or(Millis::MAX))
}

/// A job as the API shows it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct JobView {
    /// The id (without the client prefix).
    pub id: String,
    /// The jobtype (without the client prefix).
    #[serde(rename = "type")]
    pub jobtype: String,
    /// `waiting`, `scheduled`, `running`, `expired` (lease ran out; eligible
    /// again) or `archived`.
    pub state: String,
    /// Higher runs first.
    pub priority: i32,
    /// How many times it was handed out.
    pub attempts: u32,
    /// When it was stored (epoch ms).
    pub created: Millis,
    /// When it is next eligible (waiting, scheduled).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_at: Option<Millis>,
    /// When its lease runs out (running, expired).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_expires: Option<Millis>,
    /// The daemon that holds it (running, expired).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locked_by: Option<String>,
    /// When it was archived.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub done: Option<Millis>,
    /// The payload, when it is UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// The payload as base64, when it is not UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_base64: Option<String>,
    /// The result once archived; a job run again keeps its last result
    /// until it is archived again, a repeating job its last run's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<ResultView>,
    /// Cancelled while running: its run is stopped at its holder's next
    /// lease renewal, then it is archived as `cancelled`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancelling: bool,
    /// The tags it was added with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// What happened to it, oldest first (the newest 20 events): `added`,
    /// `claimed`, `retried`, `handed_back`, `archived`, `cancel_requested`,
    /// `cancelled`, `rerun`, `edited`, `repeated` (a repeating job's run
    /// ended: `code`, `status`, and `next_ms`, when it runs again), each with its time (`at`), who
    /// (`by`: a sysid or a remote worker's lease) and the attempts after it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<Object>)]
    pub history: Vec<jobstore_api::JobEvent>,
    /// The W3C `traceparent` it was added with: its runs continue this
    /// trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The W3C `tracestate` it was added with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    /// The unique key it was added with: held while the job is live, free
    /// again once it is archived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique_key: Option<String>,
    /// The repeat rule it was added with: each run that ends ok makes it
    /// due again at the rule's next time, `result` holding the last run's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<RepeatView>,
    /// For a job added with dependencies: how many have not ended yet
    /// (`GET /{client}/jobs/{id}/waits` lists them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependencies_pending: Option<u32>,
    /// For a job added with dependencies: what a failed one does to it
    /// (`cancel` or `run`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_dependency_failure: Option<String>,
}

/// A repeating job's rule.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RepeatView {
    /// Cron or the repeat syntax.
    pub rule: String,
    /// The IANA time zone it counts in.
    pub time_zone: String,
}

/// An archived job's result.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ResultView {
    /// `ok`, `failed`, `retry`, `error`, `cancelled`, `timeout`.
    pub code: String,
    /// The status: 1xx retry, 2xx ok, 4xx failed, 5xx error (0: never ran).
    pub status: u16,
    /// Captured output, when UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Captured output as base64, when not UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_base64: Option<String>,
}

fn text_or_base64(bytes: &[u8]) -> (Option<String>, Option<String>) {
    match std::str::from_utf8(bytes) {
        Ok(s) => (Some(s.to_owned()), None),
        Err(_) => (None, Some(BASE64.encode(bytes))),
    }
}

/// The API's view of `job` at `now`.
pub fn job_view(job: &Job, now: Millis) -> JobView {
    let state = job.state(now);
    let (data, data_base64) = text_or_base64(&job.data);
    let locked = matches!(state, JobState::Running | JobState::Expired);
    JobView {
        id: tenant::local_of(&job.id).to_owned(),
        jobtype: tenant::local_of(&job.jobtype).to_owned(),
        state: state_name(state).to_owned(),
        priority: job.priority,
        attempts: job.attempts,
        created: job.create_dt,
        run_at: matches!(
            state,
            JobState::Waiting | JobState::Scheduled | JobState::Blocked
        )
        .then_some(job.dt),
        lease_expires: locked.then_some(job.dt),
        locked_by: locked.then(|| job.lock.clone()),
        done: job.done_dt,
        data,
        data_base64,
        cancelling: job.cancel_requested,
        tags: job.tags.clone(),
        history: job.history.clone(),
        traceparent: job.trace.as_ref().map(|t| t.traceparent.clone()),
        tracestate: job.trace.as_ref().and_then(|t| t.tracestate.clone()),
        unique_key: job.flow.as_ref().and_then(|f| f.unique_key.clone()),
        dependencies_pending: job.flow.as_ref().filter(|f| f.has_edges).map(|f| f.pending),
        on_dependency_failure: job
            .flow
            .as_ref()
            .filter(|f| f.has_edges)
            .map(|f| f.on_dependency_failure.name().to_owned()),
        repeat: job
            .flow
            .as_ref()
            .and_then(|f| f.repeat.as_ref())
            .map(|r| RepeatView {
                rule: r.rule.clone(),
                time_zone: r.time_zone.clone(),
            }),
        result: job.result.as_ref().map(|r| {
            let (output, output_base64) = if r.output.is_empty() {
                (None, None)
            } else {
                text_or_base64(&r.output)
            };
            ResultView {
                code: r.code.to_string(),
                status: r.status,
                output,
                output_base64,
            }
        }),
    }
}

fn state_name(s: JobState) -> &'static str {
    match s {
        JobState::Blocked => "blocked",
        JobState::Waiting => "waiting",
        JobState::Scheduled => "scheduled",
        JobState::Running => "running",
        JobState::Expired => "expired",
        JobState::Archived => "archived",
    }
}

/// A job by id: its state, attempts, result and output.
#[utoipa::path(
    get,
    path = "/{client}/jobs/{id}",
    tag = "jobs",
    params(ClientPath, ("id" = String, Path, description = "The job id as the add answered it: no control characters, no | or /; at most 200 bytes with the client and a dash", pattern = "^[^|/\\u0000-\\u001f\\u007f-\\u009f]{1,135}$")),
    responses(
        (status = 200, body = JobView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, description = "No such job (or not yet ingested from the journal)", body = ErrorBody),
        (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn get(
    State(state): State<AppState>,
    tenant: Tenant,
    params: PathParams,
) -> ApiResult<Json<JobView>> {
    let local = params.get("id");
    let id = tenant.client.job_id(local)?;
    match state.store.get_job(&id).await? {
        Some(job) => Ok(Json(job_view(&job, now_millis()))),
        None => Err(ApiError::not_found(format!(
            "no job {local:?} for client {}",
            tenant.client
        ))),
    }
}

/// What a job waits, or waited, for.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WaitsView {
    /// The job.
    pub id: String,
    /// Dependencies that have not ended.
    pub pending: u64,
    /// Dependencies that ended other than `ok` while the job's policy is
    /// `hold`: the job stays blocked until they end again (run them again)
    /// or an operator unblocks it.
    pub held: u64,
    /// Dependencies an operator's unblock passed over.
    pub skipped: u64,
    /// Dependencies that ended, by result code.
    pub done: BTreeMap<String, u64>,
    /// One page of its dependencies, by id.
    pub jobs: Vec<WaitView>,
    /// Give this as `after` for the next page; absent on the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// One dependency.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WaitView {
    /// The dependency's id.
    pub id: String,
    /// `pending`; `done` or `held` with the code and status it ended
    /// with; `skipped` by an operator's unblock.
    pub state: String,
    /// Its result code, once it ended (deleted: `cancelled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Its result status, once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Its result output, with `with_outputs=true` (none once it is purged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

/// Query of `GET /{client}/jobs/{id}/waits`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct WaitsQuery {
    /// The `next` of the previous page.
    pub after: Option<String>,
    /// At most this many dependencies (1 to 1,000; default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
    /// Also each dependency's result output (UTF-8, invalid bytes
    /// replaced), as a waiter's run is handed them.
    pub with_outputs: Option<bool>,
}

/// What a job waits, or waited, for: its dependencies by id, a page at a
/// time, with how each ended, and the counts over all of them.
#[utoipa::path(
    get,
    path = "/{client}/jobs/{id}/waits",
    tag = "jobs",
    params(ClientPath, ("id" = String, Path, description = "The job id as the add answered it", pattern = "^[^|/\\u0000-\\u001f\\u007f-\\u009f]{1,135}$"), WaitsQuery),
    responses(
        (status = 200, body = WaitsView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, description = "No such job", body = ErrorBody),
        (status = 501, description = "The store keeps no dependencies", body = ErrorBody),
        (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn waits(
    State(state): State<AppState>,
    tenant: Tenant,
    params: PathParams,
    QueryOf(query): QueryOf<WaitsQuery>,
) -> ApiResult<Json<WaitsView>> {
    let local = params.get("id");
    let id = tenant.client.job_id(local)?;
    let after = match &query.after {
        Some(a) => Some(
            tenant
                .client
                .job_id(a)
                .map_err(|e| ApiError::from(e).field("after"))?,
        ),
        None => None,
    };
    let limit = query.limit.unwrap_or(100);
    if !(1..=jobstore_api::limits::MAX_PAGE).contains(&limit) {
        return Err(ApiError::invalid(format!(
            "limit {limit} is outside 1..={}",
            jobstore_api::limits::MAX_PAGE
        ))
        .field("limit"));
    }
    let Some(w) = state.store.job_waits(&id, after.as_deref(), limit).await? else {
        return Err(ApiError::not_found(format!(
            "no job {local:?} for client {}",
            tenant.client
        )));
    };
    let mut view = waits_view(&tenant.client, local, &w);
    if query.with_outputs == Some(true) {
        let targets: Vec<String> = w.edges.iter().map(|e| e.target.clone()).collect();
        let mut outputs = std::collections::HashMap::new();
        for chunk in targets.chunks(crate::executor::waited::OUTPUT_READ) {
            for job in state.store.get_jobs(chunk).await? {
                if let Some(r) = job.result {
                    outputs.insert(job.id, r.output);
                }
            }
        }
        for (v, e) in view.jobs.iter_mut().zip(&w.edges) {
            v.output = outputs
                .get(&e.target)
                .map(|o| String::from_utf8_lossy(o).into_owned());
        }
    }
    Ok(Json(view))
}

/// The view of `w`, the waits of job `local` of `client`.
pub fn waits_view(
    client: &crate::tenant::Client,
    local: &str,
    w: &jobstore_api::Waits,
) -> WaitsView {
    use jobstore_api::EdgeState;
    let strip = |id: &str| client.strip(id).unwrap_or(id).to_owned();
    WaitsView {
        id: local.to_owned(),
        pending: w.pending,
        held: w.held,
        skipped: w.skipped,
        done: w.done.iter().map(|(c, n)| (c.to_string(), *n)).collect(),
        jobs: w
            .edges
            .iter()
            .map(|e| {
                let (state, result) = match e.state {
                    EdgeState::Pending => ("pending", None),
                    EdgeState::Skipped => ("skipped", None),
                    EdgeState::Done { code, status } => ("done", Some((code, status))),
                    EdgeState::Held { code, status } => ("held", Some((code, status))),
                };
                WaitView {
                    id: strip(&e.target),
                    state: state.to_owned(),
                    code: result.map(|(c, _)| c.to_string()),
                    status: result.map(|(_, s)| s),
                    output: None,
                }
            })
            .collect(),
        next: w.next.as_deref().map(strip),
    }
}

/// Counts of one jobtype's jobs.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct JobtypeStats {
    /// The jobtype (without the client prefix).
    #[serde(rename = "type")]
    pub jobtype: String,
    /// Eligible now.
    pub waiting: u64,
    /// Due later.
    pub scheduled: u64,
    /// Running under a valid lease.
    pub running: u64,
    /// Waiting for the jobs they depend on.
    pub blocked: u64,
    /// Archived, by result code.
    pub archived: BTreeMap<String, u64>,
    /// Whether the jobtype is paused (no daemon claims its jobs).
    pub paused: bool,
}

/// A client's stats.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ClientStats {
    /// The client.
    pub client: String,
    /// Per jobtype.
    pub jobtypes: Vec<JobtypeStats>,
}

/// Every client's stats.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AllStats {
    /// Per client.
    pub clients: Vec<ClientStats>,
}

fn jobtype_stats(c: &JobCounts, paused: &[String]) -> JobtypeStats {
    JobtypeStats {
        jobtype: tenant::local_of(&c.jobtype).to_owned(),
        waiting: c.waiting,
        scheduled: c.scheduled,
        running: c.running,
        blocked: c.blocked,
        archived: c
            .archived
            .iter()
            .map(|(code, n)| (code.to_string(), *n))
            .collect(),
        paused: paused.binary_search(&c.jobtype).is_ok(),
    }
}

/// How old a snapshot of counts the caller accepts.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CountsParams {
    /// Accept counts read up to this many seconds ago, 0 to 60 (default 0:
    /// read now). The daemon keeps one snapshot for every caller, so pages
    /// that refresh often cost the store one read per this many seconds.
    #[param(maximum = 60)]
    pub max_age: Option<u64>,
}

/// Counts and paused jobtypes at most `max_age` seconds old.
async fn counts_with_paused(state: &AppState, params: &CountsParams) -> ApiResult<Arc<Counts>> {
    let max_age = params.max_age.unwrap_or(0);
    if max_age > MAX_COUNTS_AGE {
        return Err(ApiError::invalid(format!(
            "max_age {max_age} is above the maximum of {MAX_COUNTS_AGE} seconds"
        ))
        .field("max_age")
        .limit(MAX_COUNTS_AGE));
    }
    state
        .counts
        .get(Duration::from_secs(max_age), || read_counts(&*state.store))
        .await
}

/// The oldest counts a caller may accept, in seconds.
const MAX_COUNTS_AGE: u64 = 60;

/// Every jobtype's counts, and a row of zeros for each paused jobtype with
/// no job; the paused jobtypes, sorted (none from a store without pauses).
async fn read_counts(store: &dyn JobStore) -> ApiResult<Counts> {
    let mut counts = store.job_counts(now_millis()).await?;
    let mut paused = if store.capabilities().pause {
        store.paused_jobtypes().await?
    } else {
        Vec::new()
    };
    paused.sort();
    for p in &paused {
        if !counts.iter().any(|c| &c.jobtype == p) {
            counts.push(JobCounts {
                jobtype: p.clone(),
                ..JobCounts::default()
            });
        }
    }
    Ok((counts, paused))
}

/// A client's job counts by jobtype and state.
#[utoipa::path(
    get,
    path = "/{client}/stats",
    tag = "jobs",
    params(ClientPath, CountsParams),
    responses(
        (status = 200, body = ClientStats),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn client_stats(
    State(state): State<AppState>,
    tenant: Tenant,
    QueryOf(params): QueryOf<CountsParams>,
) -> ApiResult<Json<ClientStats>> {
    let snapshot = counts_with_paused(&state, &params).await?;
    let (counts, paused) = &*snapshot;
    let mut jobtypes: Vec<JobtypeStats> = counts
        .iter()
        .filter(|c| tenant.client.strip(&c.jobtype).is_some())
        .map(|c| jobtype_stats(c, paused))
        .collect();
    jobtypes.sort_by(|a, b| a.jobtype.cmp(&b.jobtype));
    Ok(Json(ClientStats {
        client: tenant.client.to_string(),
        jobtypes,
    }))
}

/// Every client's job counts (the admin token, when tokens are configured).
#[utoipa::path(
    get,
    path = "/stats",
    tag = "admin",
    params(CountsParams),
    responses(
        (status = 200, body = AllStats),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []), ())
)]
pub async fn all_stats(
    State(state): State<AppState>,
    CallerOf(caller): CallerOf,
    QueryOf(params): QueryOf<CountsParams>,
) -> ApiResult<Json<AllStats>> {
    if state.config.auth.enabled() {
        caller.require_admin("stats of every client")?;
    }
    let snapshot = counts_with_paused(&state, &params).await?;
    let (counts, paused) = &*snapshot;
    let mut by_client: BTreeMap<String, Vec<JobtypeStats>> = BTreeMap::new();
    for c in counts {
        by_client
            .entry(tenant::tenant_of(&c.jobtype).to_owned())
            .or_default()
            .push(jobtype_stats(c, paused));
    }
    Ok(Json(AllStats {
        clients: by_client
            .into_iter()
            .map(|(client, mut jobtypes)| {
                jobtypes.sort_by(|a, b| a.jobtype.cmp(&b.jobtype));
                ClientStats { client, jobtypes }
            })
            .collect(),
    }))
}
