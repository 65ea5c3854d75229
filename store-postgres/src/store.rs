//! [`PgStore`]: the [`JobStore`] on PostgreSQL.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use jobstore_api::batch::split_by_size;
use jobstore_api::history::{PendingClaim, complete_history, history_from_json, with_added};
use jobstore_api::limits::MAX_CLAIM;
use jobstore_api::{
    ARCHIVE_HORIZON_MS, AddOutcome, BLOCKED_BASE_MS, Capabilities, DependencyFailure, Duplicate,
    EdgeState, Error, FlowState, Handler, HandlerLimits, HandlerVersion, Job, JobCounts, JobFlow,
    JobRelease, JobResult, JobStore, LOCK_BLOCKED, Millis, NewJob, OnConflict, Refusal, Release,
    Result, ResultCode, StatsBucket, StatsDelta, StatsQuery, StoredDeps, SysidLease, TraceContext,
    WaitEdge, WaitingJobtype, Waits, WorkWatcher, duration_ms, validate,
};
use jobstore_api::{
    CancelOutcome, DeleteOutcome, JobEdit, JobPage, JobQuery, JobState, JobtypeFilter, Renewal,
};
use jobstore_api::{Schedule, ScheduleAdvance, ScheduleRecord};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::{ConnectOptions, Connection, Executor, Row};

use crate::error::map;
use crate::options::PgStoreOptions;
use crate::queries as q;
use crate::vacuum::Vacuums;

/// A job store in one PostgreSQL schema, over a sqlx connection pool.
///
/// Cheap to share behind an `Arc`; every operation takes a pooled
/// connection for one statement. The pool reconnects by itself after the
/// server restarts: calls made while it is down fail with a retryable
/// [`Error::Unavailable`], later calls succeed.
pub struct PgStore {
    pool: PgPool,
    /// The pool `list_jobs` runs on: its connections plan every statement
    /// with its parameters and never compile it (see the README,
    /// "Listing").
    list_pool: PgPool,
    connect: PgConnectOptions,
    options: PgStoreOptions,
    channel: String,
    vacuums: Option<Vacuums>,
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore")
            .field("options", &self.options)
            .field("channel", &self.channel)
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// The largest payload accepted: 64 MiB (PostgreSQL's `bytea` takes up
    /// to 1 GiB, but a whole batch travels in one message).
    pub const MAX_PAYLOAD: usize = 64 << 20;
    /// Counts from `waiting_jobtypes` stop here (the claim maximum): a count
    /// reads at most this many index entries per jobtype.
    pub const WAITING_COUNT_CAP: u64 = MAX_CLAIM as u64;
    /// Most payload bytes sent in one add statement; larger batches are
    /// split into several statements.
    const ADD_CHUNK_BYTES: usize = 32 << 20;
    /// Most result output bytes sent in one release statement; longer
    /// lists are split into several statements.
    const RELEASE_CHUNK_BYTES: usize = 32 << 20;
    /// Most connections of the listing pool (opened on first use).
    const LIST_CONNECTIONS: u32 = 2;

    /// Connects to the `postgres://` URL (see the crate docs for its
    /// parameters), creates the schema if needed and runs the migrations.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(PgStoreOptions::from_url(url)?).await
    }

    /// Connects with these options, creates the schema if needed and runs
    /// the migrations. Several stores may connect to a fresh schema at once:
    /// creation and migration are serialized by an advisory lock.
    pub async fn connect_with(options: PgStoreOptions) -> Result<Self> {
        options.check_schema()?;
        let schema = options.schema_name().to_owned();
        let base = PgConnectOptions::from_str(options.url())
            .map_err(|e| Error::invalid(format!("invalid PostgreSQL connection options: {e}")))?;
        let mut settings: Vec<(&str, String)> = vec![("search_path", schema.clone())];
        if let Some(t) = options.get_statement_timeout() {
            settings.push(("statement_timeout", t.as_millis().to_string()));
        }
        let connect = base
            .options(settings)
            .application_name("jobstore")
            .log_statements(tracing::log::LevelFilter::Trace);

        migrate(&connect, &schema, options.get_acquire_timeout()).await?;

        let pool = PgPoolOptions::new()
            .max_connections(options.get_max_connections())
            .acquire_timeout(options.get_acquire_timeout())
            .connect_lazy_with(connect.clone());
        let list_pool = PgPoolOptions::new()
            .max_connections(Self::LIST_CONNECTIONS.min(options.get_max_connections()))
            .acquire_timeout(options.get_acquire_timeout())
            .connect_lazy_with(
                connect
                    .clone()
                    .options([("plan_cache_mode", "force_custom_plan"), ("jit", "off")]),
            );
        Ok(PgStore {
            pool,
            list_pool,
            vacuums: Vacuums::start(&connect, options.get_vacuum_every()),
            connect,
            channel: format!("jobstore:{schema}"),
            options,
        })
    }

    /// The connection pool (for tools and benchmarks that run their own
    /// statements in the store's schema).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The schema this store lives in.
    pub fn schema(&self) -> &str {
        self.options.schema_name()
    }

    /// The `LISTEN/NOTIFY` channel the store notifies on new work.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// Closes the pools, waiting for connections in use to come back.
    pub async fn close(&self) {
        self.pool.close().await;
        self.list_pool.close().await;
    }

    /// Drops the store's schema and everything in it (for tools that make
    /// a namespace of their own, such as benchmarks). The store is unusable
    /// afterwards.
    pub async fn drop_schema(&self) -> Result<()> {
        let sql = format!(
            "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
            self.options.schema_name()
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&self.pool)
            .await
            .map_err(|e| map("drop schema", e))?;
        Ok(())
    }

    /// The add statements for `jobs`: one per [`Self::ADD_CHUNK_BYTES`] of
    /// payload, at least one job each.
    fn add_chunks(jobs: &[NewJob]) -> Vec<&[NewJob]> {
        split_by_size(jobs, Self::ADD_CHUNK_BYTES, |j| j.data.len())
    }

    /// The release statements for `releases`: one per
    /// [`Self::RELEASE_CHUNK_BYTES`] of result output and repeat payload,
    /// at least one entry each.
    fn release_chunks<'r>(releases: &'r [&'r JobRelease]) -> Vec<&'r [&'r JobRelease]> {
        split_by_size(releases, Self::RELEASE_CHUNK_BYTES, |r| {
            r.how.output_len() + repeat_data(&r.how).map_or(0, <[u8]>::len)
        })
    }

    /// A batch without a unique key: `queries/add_jobs.sql`, or
    /// `queries/add_repeat_jobs.sql` when a job of it has a repeat rule.
    async fn add_chunk(&self, jobs: &[NewJob], now: Millis) -> Result<HashSet<String>> {
        let cols = AddColumns::of(jobs, now);
        let query = match &cols.repeats {
            None => cols.bind(sqlx::query(q::ADD_JOBS)),
            Some(repeats) => cols.bind(sqlx::query(q::ADD_REPEAT_JOBS)).bind(repeats),
        };
        let rows = query
            .bind(now)
            .bind(&self.channel)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| map("add_jobs", e))?;
        rows.iter().map(|r| get::<String>(r, 0)).collect()
    }

    /// A batch with at least one unique key (`queries/add_unique_jobs.sql`):
    /// what became of each job, in batch order.
    async fn add_unique_chunk(&self, jobs: &[NewJob], now: Millis) -> Result<Vec<Added>> {
        let cols = AddColumns::of(jobs, now);
        let keys: Vec<Option<&str>> = jobs
            .iter()
            .map(|j| j.unique_key().map(|u| u.key.as_str()))
            .collect();
        let windows: Vec<Option<i64>> = jobs
            .iter()
            .map(|j| j.unique_key().and_then(|u| u.window).map(duration_ms))
            .collect();
        let replace: Vec<bool> = jobs
            .iter()
            .map(|j| {
                j.unique_key()
                    .is_some_and(|u| u.on_conflict == OnConflict::ReplaceData)
            })
            .collect();
        let rows = retry_deadlock(|| {
            cols.bind(sqlx::query(q::ADD_UNIQUE_JOBS))
                .bind(&cols.repeats)
                .bind(&keys)
                .bind(&windows)
                .bind(&replace)
                .bind(now)
                .bind(&self.channel)
                .fetch_all(&self.pool)
        })
        .await
        .map_err(|e| map("add_jobs", e))?;
        let mut out: Vec<Option<Added>> = vec![None; jobs.len()];
        for r in &rows {
            let pos: i32 = get(r, 0)?;
            let slot = usize::try_from(pos - 1)
                .ok()
                .and_then(|i| out.get_mut(i))
                .ok_or_else(|| Error::backend_msg(format!("add_unique_jobs: position {pos}")))?;
            *slot = Some(match get::<String>(r, 1)?.as_str() {
                "n" => Added::New,
                "e" => Added::Existing,
                "d" => Added::Duplicate {
                    holder: get::<Option<String>>(r, 2)?.ok_or_else(|| {
                        Error::backend_msg("add_unique_jobs: a duplicate without a holder")
                    })?,
                    replaced: get(r, 3)?,
                },
                other => {
                    return Err(Error::backend_msg(format!(
                        "add_unique_jobs: unexpected outcome {other:?}"
                    )));
                }
            });
        }
        out.into_iter()
            .map(|a| a.ok_or_else(|| Error::backend_msg("add_unique_jobs: a job left undecided")))
            .collect()
    }

    /// The release statement for `releases` (see `queries/release_jobs.sql`).
    fn release_query<'q>(
        &'q self,
        releases: &'q [&'q JobRelease],
        owner: &'q str,
        now: Millis,
        flow: bool,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        let n = releases.len();
        let mut ids: Vec<&str> = Vec::with_capacity(n);
        let mut kinds: Vec<&str> = Vec::with_capacity(n);
        let mut dts: Vec<Option<i64>> = Vec::with_capacity(n);
        let mut codes: Vec<Option<&str>> = Vec::with_capacity(n);
        let mut statuses: Vec<Option<i32>> = Vec::with_capacity(n);
        let mut outputs: Vec<Option<&[u8]>> = Vec::with_capacity(n);
        // Repeat payloads: the whole array NULL for a list without a repeat.
        let datas: Option<Vec<Option<&[u8]>>> = releases
            .iter()
            .any(|r| matches!(r.how, Release::Repeat { .. }))
            .then(|| releases.iter().map(|r| repeat_data(&r.how)).collect());
        for r in releases {
            ids.push(&r.id);
            let (kind, dt, result) = match &r.how {
                Release::Retry { delay } => ("r", Some(now + duration_ms(*delay)), None),
                Release::Unget => ("u", Some(now), None),
                Release::Repeat { at, result, .. } => ("p", Some(*at), Some(result)),
                Release::Archive(result) => ("a", None, Some(result)),
                Release::Delete => ("d", None, None),
            };
            kinds.push(kind);
            dts.push(dt);
            codes.push(result.map(|r| r.code.as_str()));
            // An archive's or a repeat's status is its result's; a retry's
            // is the run's (for its history event).
            let status = match result {
                Some(result) => Some(result.status),
                None => r.status,
            };
            statuses.push(status.map(i32::from));
            outputs.push(result.map(|r| r.output.as_slice()));
        }
        sqlx::query(q::RELEASE_JOBS)
            .bind(ids)
            .bind(owner)
            .bind(kinds)
            .bind(dts)
            .bind(codes)
            .bind(statuses)
            .bind(outputs)
            .bind(now)
            .bind(now + ARCHIVE_HORIZON_MS)
            .bind(&self.channel)
            .bind(datas)
            .bind(flow)
    }

    /// The list statement of `query` (see `queries/list_*.sql`), its
    /// parameters bound.
    fn list_query<'q>(
        &self,
        query: &'q JobQuery,
        now: Millis,
    ) -> Result<sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>> {
        let key = query.resume_after()?;
        // limit <= MAX_PAGE (validated): one more row says whether a next
        // page follows.
        let rows = query.limit as i64 + 1;
        let created_from = query.created.from.unwrap_or(i64::MIN);
        let created_to = query.created.to.unwrap_or(i64::MAX);
        let cursor_id = key.map_or("", |k| k.id.as_str()).to_owned();
        let tag = query.tag.as_deref();
        // The jobtypes: an exact list, or a range of them ([from, to),
        // compared bytewise: the columns use the "C" collation).
        let (types, from, to): (Option<Vec<String>>, String, String) = match &query.jobtypes {
            JobtypeFilter::All => (None, String::new(), JobtypeFilter::prefix_bound("")),
            JobtypeFilter::Exact(list) => (Some(list.clone()), String::new(), String::new()),
            JobtypeFilter::Prefix(p) => (None, p.clone(), JobtypeFilter::prefix_bound(p)),
        };
        let q = match query.state {
            JobState::Blocked => {
                // Stored dt is BLOCKED_BASE_MS + the not-before time the
                // cursor holds; the first page starts at the range's start.
                let (dt, id) = match key {
                    Some(k) => (k.dt + BLOCKED_BASE_MS, k.id.clone()),
                    None => (BLOCKED_BASE_MS, String::new()),
                };
                sqlx::query(q::LIST_BLOCKED)
                    .bind(types)
                    .bind(from)
                    .bind(to)
                    .bind(rows)
                    .bind(dt)
                    .bind(id)
                    .bind(created_from)
                    .bind(created_to)
                    .bind(query.with_data)
                    .bind(tag)
            }
            JobState::Waiting | JobState::Expired => {
                // First page: a priority above every i32, so the whole
                // range lies "after" it.
                let cursor_priority =
                    key.map_or(i64::from(i32::MAX) + 1, |k| i64::from(k.priority));
                let sql = if query.state == JobState::Waiting {
                    q::LIST_WAITING
                } else {
                    q::LIST_EXPIRED
                };
                sqlx::query(sql)
                    .bind(types)
                    .bind(from)
                    .bind(to)
                    .bind(now)
                    .bind(rows)
                    .bind(cursor_priority)
                    .bind(key.map_or(-1, |k| k.dt))
                    .bind(cursor_id)
                    .bind(created_from)
                    .bind(created_to)
                    .bind(query.with_data)
                    .bind(tag)
            }
            JobState::Scheduled | JobState::Running => {
                // After the cursor and after now: (dt, id) > (now + 1, "")
                // is dt > now (ids are never empty).
                let after = (now + 1, "");
                let (dt, id) = match key {
                    Some(k) if (k.dt, k.id.as_str()) > after => (k.dt, k.id.clone()),
                    _ => (after.0, String::new()),
                };
                let sql = if query.state == JobState::Scheduled {
                    q::LIST_SCHEDULED
                } else {
                    q::LIST_RUNNING
                };
                sqlx::query(sql)
                    .bind(types)
                    .bind(from)
                    .bind(to)
                    .bind(rows)
                    .bind(dt)
                    .bind(id)
                    .bind(created_from)
                    .bind(created_to)
                    .bind(query.with_data)
                    .bind(tag)
            }
            JobState::Archived => {
                let codes: Vec<&'static str> =
                    query.code_set().iter().map(|c| c.as_str()).collect();
                // Before the cursor and before the end of the archived
                // range: (done_dt, id) < (to, "") is done_dt < to.
                let mut start = (i64::MAX, String::new());
                if let Some(k) = key {
                    start = (k.dt, k.id.clone());
                }
                if let Some(to) = query.archived.to
                    && (to, "") < (start.0, start.1.as_str())
                {
                    start = (to, String::new());
                }
                let done_from = query.archived.from.unwrap_or(i64::MIN);
                if query.jobtypes == JobtypeFilter::All {
                    sqlx::query(q::LIST_ARCHIVED_ALL)
                        .bind(codes)
                        .bind(rows)
                        .bind(start.0)
                        .bind(start.1)
                        .bind(created_from)
                        .bind(created_to)
                        .bind(query.with_data)
                        .bind(done_from)
                        .bind(tag)
                } else {
                    sqlx::query(q::LIST_ARCHIVED)
                        .bind(types)
                        .bind(from)
                        .bind(to)
                        .bind(rows)
                        .bind(start.0)
                        .bind(start.1)
                        .bind(created_from)
                        .bind(created_to)
                        .bind(query.with_data)
                        .bind(codes)
                        .bind(done_from)
                        .bind(tag)
                }
            }
        };
        Ok(q)
    }

    /// The flow path of a release: `entries` (the archive or delete
    /// entries the plain statement did not apply: of jobs with edges, or
    /// lost) applied by `queries/release_jobs.sql` with `$12` set, the lock
    /// re-checked, and their edges ended (`queries/end_edges.sql`), in one
    /// transaction. Returns the ids applied (none for a lost entry).
    async fn release_flow(
        &self,
        entries: &[&JobRelease],
        owner: &str,
        now: Millis,
    ) -> std::result::Result<Vec<String>, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let rows = self
            .release_query(entries, owner, now, true)
            .fetch_all(&mut *tx)
            .await?;
        let mut ended = Ended::default();
        let mut released = Vec::with_capacity(rows.len());
        for r in &rows {
            let id: String = r.try_get(0)?;
            match r.try_get::<String, _>(1)?.as_str() {
                "a" => ended.push(&id, r.try_get(2)?, r.try_get(3)?),
                "d" => {
                    ended.push(&id, None, None);
                    ended.forget.push(id.clone());
                }
                _ => {}
            }
            released.push(id);
        }
        self.end_edges(&mut tx, &ended, now).await?;
        tx.commit().await?;
        Ok(released)
    }

    /// The flow path of a cancel: `queries/cancel_jobs.sql` with `$4` set
    /// for `ids` (free or blocked jobs with waiters) and the edges to the
    /// jobs archived ended, in one transaction. Returns the ids cancelled
    /// and marked (a job claimed meanwhile).
    async fn cancel_flow(
        &self,
        ids: &[String],
        now: Millis,
    ) -> std::result::Result<(Vec<String>, Vec<String>), sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let rows = sqlx::query(q::CANCEL_JOBS)
            .bind(ids)
            .bind(now)
            .bind(now + ARCHIVE_HORIZON_MS)
            .bind(true)
            .fetch_all(&mut *tx)
            .await?;
        let (mut cancelled, mut marked) = (Vec::new(), Vec::new());
        let mut ended = Ended::default();
        for r in &rows {
            let id: String = r.try_get(0)?;
            if r.try_get::<String, _>(1)? == "c" {
                ended.push(&id, None, None);
                cancelled.push(id);
            } else {
                marked.push(id);
            }
        }
        self.end_edges(&mut tx, &ended, now).await?;
        tx.commit().await?;
        Ok((cancelled, marked))
    }

    /// The flow path of a delete: `queries/delete_jobs.sql` with `$2` set
    /// for `ids` (jobs with edges), their own edges dropped and those to
    /// the live ones ended as cancelled, in one transaction. Returns the
    /// ids deleted and refused (a job claimed meanwhile).
    async fn delete_flow(
        &self,
        ids: &[String],
        now: Millis,
    ) -> std::result::Result<(Vec<String>, Vec<String>), sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let rows = sqlx::query(q::DELETE_JOBS)
            .bind(ids)
            .bind(true)
            .fetch_all(&mut *tx)
            .await?;
        let (mut deleted, mut running) = (Vec::new(), Vec::new());
        let mut ended = Ended::default();
        for r in &rows {
            let id: String = r.try_get(0)?;
            if r.try_get::<String, _>(1)? == "d" {
                if r.try_get::<bool, _>(2)? {
                    ended.push(&id, None, None);
                }
                ended.forget.push(id.clone());
                deleted.push(id);
            } else {
                running.push(id);
            }
        }
        self.end_edges(&mut tx, &ended, now).await?;
        tx.commit().await?;
        Ok((deleted, running))
    }

    /// Ends the edges of `ended` in the flow path's transaction
    /// (`jobstore_end_edges`: the cascade, the unblocks, their notices).
    async fn end_edges(
        &self,
        tx: &mut sqlx::PgConnection,
        ended: &Ended,
        now: Millis,
    ) -> std::result::Result<(), sqlx::Error> {
        if ended.targets.is_empty() && ended.forget.is_empty() {
            return Ok(());
        }
        sqlx::query(q::END_EDGES)
            .bind(&ended.targets)
            .bind(&ended.codes)
            .bind(&ended.statuses)
            .bind(&ended.forget)
            .bind(now)
            .bind(now + ARCHIVE_HORIZON_MS)
            .bind(&self.channel)
            .execute(&mut *tx)
            .await?;
        Ok(())
    }

    /// A batch with at least one job with dependencies
    /// (`queries/add_flow_jobs.sql`): what became of each job, in batch
    /// order.
    async fn add_flow_chunk(&self, jobs: &[NewJob], now: Millis) -> Result<Vec<Added>> {
        let cols = AddColumns::of(jobs, now);
        let keys: Vec<Option<&str>> = jobs
            .iter()
            .map(|j| j.unique_key().map(|u| u.key.as_str()))
            .collect();
        let windows: Vec<Option<i64>> = jobs
            .iter()
            .map(|j| j.unique_key().and_then(|u| u.window).map(duration_ms))
            .collect();
        let replace: Vec<bool> = jobs
            .iter()
            .map(|j| {
                j.unique_key()
                    .is_some_and(|u| u.on_conflict == OnConflict::ReplaceData)
            })
            .collect();
        let mut dep_pos: Vec<i32> = Vec::new();
        let mut dep_ids: Vec<&str> = Vec::new();
        let mut policies: Vec<Option<String>> = Vec::with_capacity(jobs.len());
        for (i, job) in jobs.iter().enumerate() {
            let deps = job.dependencies();
            let pos = i32::try_from(i + 1).unwrap_or(i32::MAX);
            dep_pos.extend(std::iter::repeat_n(pos, deps.len()));
            dep_ids.extend(deps.iter().map(String::as_str));
            policies.push((!deps.is_empty()).then(|| stored_policy(job.flow.as_deref())));
        }
        let rows = retry_deadlock(|| {
            cols.bind(sqlx::query(q::ADD_FLOW_JOBS))
                .bind(&cols.repeats)
                .bind(&keys)
                .bind(&windows)
                .bind(&replace)
                .bind(&dep_pos)
                .bind(&dep_ids)
                .bind(&policies)
                .bind(now)
                .bind(now + ARCHIVE_HORIZON_MS)
                .bind(&self.channel)
                .fetch_all(&self.pool)
        })
        .await
        .map_err(|e| map("add_jobs", e))?;
        let mut out: Vec<Option<Added>> = vec![None; jobs.len()];
        for r in &rows {
            let pos: i32 = get(r, 0)?;
            let slot = usize::try_from(pos - 1)
                .ok()
                .and_then(|i| out.get_mut(i))
                .ok_or_else(|| Error::backend_msg(format!("add_flow_jobs: position {pos}")))?;
            let holder: Option<String> = get(r, 2)?;
            *slot = Some(match get::<String>(r, 1)?.as_str() {
                "n" => Added::New,
                "e" => Added::Existing,
                "d" => Added::Duplicate {
                    holder: holder.ok_or_else(|| {
                        Error::backend_msg("add_flow_jobs: a duplicate without a holder")
                    })?,
                    replaced: get(r, 3)?,
                },
                "r" => Added::Refused {
                    dep: holder.ok_or_else(|| {
                        Error::backend_msg("add_flow_jobs: a refusal without a dependency")
                    })?,
                    index: usize::try_from(get::<Option<i32>>(r, 4)?.unwrap_or(0)).unwrap_or(0),
                },
                other => {
                    return Err(Error::backend_msg(format!(
                        "add_flow_jobs: unexpected outcome {other:?}"
                    )));
                }
            });
        }
        out.into_iter()
            .map(|a| a.ok_or_else(|| Error::backend_msg("add_flow_jobs: a job left undecided")))
            .collect()
    }

    async fn ids_query(
        &self,
        what: &str,
        query: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<Vec<String>> {
        let rows = query
            .fetch_all(&self.pool)
            .await
            .map_err(|e| map(what, e))?;
        rows.iter().map(|r| get::<String>(r, 0)).collect()
    }
}

/// The payload a repeat release brings (`None`: it keeps the job's; any
/// other release brings none).
fn repeat_data(how: &Release) -> Option<&[u8]> {
    match how {
        Release::Repeat {
            data: Some(data), ..
        } => Some(data),
        _ => None,
    }
}

/// The targets a flow path ended (code `None`: deleted or cancelled,
/// `cancelled` with status 0) and the deleted waiters whose own edges go.
#[derive(Debug, Default)]
struct Ended {
    targets: Vec<String>,
    codes: Vec<String>,
    statuses: Vec<i32>,
    forget: Vec<String>,
}

impl Ended {
    fn push(&mut self, id: &str, code: Option<String>, status: Option<i32>) {
        self.targets.push(id.to_owned());
        match code {
            Some(code) => {
                self.codes.push(code);
                self.statuses.push(status.unwrap_or(0));
            }
            None => {
                self.codes.push(ResultCode::Cancelled.as_str().to_owned());
                self.statuses.push(0);
            }
        }
    }
}

/// An edge's state from its `state` (`p` pending, `s` skipped, `h` held,
/// `d` done), `code` and `status` columns.
fn edge_state(state: String, code: Option<String>, status: Option<i32>) -> Result<EdgeState> {
    match state.as_str() {
        "p" => return Ok(EdgeState::Pending),
        "s" => return Ok(EdgeState::Skipped),
        _ => {}
    }
    let r = result_of(code, status, None)?
        .ok_or_else(|| Error::backend_msg("an ended edge without a code"))?;
    Ok(if state == "h" {
        EdgeState::Held {
            code: r.code,
            status: r.status,
        }
    } else {
        EdgeState::Done {
            code: r.code,
            status: r.status,
        }
    })
}

/// The suffix of a stored `dep_policy` for a job added with
/// [`JobFlow::with_outputs`](jobstore_api::JobFlow::with_outputs).
const WITH_OUTPUTS: &str = "+outputs";

/// A job's stored `dep_policy`: its policy's name, then [`WITH_OUTPUTS`]
/// if it reads its dependencies' outputs.
fn stored_policy(flow: Option<&JobFlow>) -> String {
    let policy = flow.map_or(DependencyFailure::default(), |f| f.on_dependency_failure);
    if flow.is_some_and(|f| f.with_outputs) {
        format!("{}{WITH_OUTPUTS}", policy.name())
    } else {
        policy.name().to_owned()
    }
}

/// What became of one job of a keyed add (`add_unique_jobs`).
#[derive(Debug, Clone)]
enum Added {
    New,
    Existing,
    Duplicate { holder: String, replaced: bool },
    Refused { dep: String, index: usize },
}

/// How many times a statement PostgreSQL aborted to break a deadlock
/// (`40P01`) runs again before the error reaches the caller.
const DEADLOCK_RETRIES: u32 = 3;

/// Runs the single-statement transaction `op` makes, again when
/// PostgreSQL aborted it to break a deadlock: the aborted statement
/// changed nothing, so running it again does what it would have done. The
/// statements that lock several jobs (releases, renewals, cancels) lock
/// them in id order when the planner drives the join from their ids, but
/// on a small table it may hash-join and lock in table order instead
/// (README: "Lock order and deadlocks").
async fn retry_deadlock<T, F, Fut>(mut op: F) -> std::result::Result<T, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, sqlx::Error>>,
{
    let mut retries = 0;
    loop {
        match op().await {
            Err(sqlx::Error::Database(db))
                if retries < DEADLOCK_RETRIES && db.code().as_deref() == Some("40P01") =>
            {
                retries += 1;
            }
            r => return r,
        }
    }
}

/// Creates the schema and runs the migrations on a connection of its own,
/// under a session advisory lock named after the schema (released when the
/// connection closes, whatever happens).
async fn migrate(connect: &PgConnectOptions, schema: &str, timeout: Duration) -> Result<()> {
    let work = async {
        let mut conn = connect.connect().await.map_err(|e| map("connect", e))?;
        sqlx::query("SELECT pg_advisory_lock(hashtextextended($1, 0))")
            .bind(format!("jobstore migrate {schema}"))
            .execute(&mut conn)
            .await
            .map_err(|e| map("migration lock", e))?;
        // The schema name is checked (a-z, 0-9, _), so quoting is enough.
        conn.execute(sqlx::AssertSqlSafe(format!(
            "CREATE SCHEMA IF NOT EXISTS \"{schema}\""
        )))
        .await
        .map_err(|e| map("create schema", e))?;
        // The embedded migrations (`migrations/`). sqlx's own lock is one
        // per database; ours is per schema, so stores in different schemas
        // migrate in parallel.
        let mut migrator = sqlx::migrate!();
        migrator.set_locking(false);
        // `run_direct` on the connection itself: `run` takes an `Acquire`,
        // whose higher-ranked bound leaves `connect`'s future not provably
        // `Send` (it could not be spawned).
        migrator
            .run_direct(None, &mut conn, false)
            .await
            .map_err(crate::error::map_migrate)?;
        conn.close().await.map_err(|e| map("close", e))?;
        Ok(())
    };
    match tokio::time::timeout(timeout.max(Duration::from_secs(30)), work).await {
        Ok(r) => r,
        Err(elapsed) => Err(Error::unavailable(
            "PostgreSQL connect and migrate timed out",
            elapsed,
        )),
    }
}

/// Column `i` of `row`, decoding failures as backend errors.
pub(crate) fn get<'r, T>(row: &'r PgRow, i: usize) -> Result<T>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get(i).map_err(|e| map("decode", e))
}

/// A job from the columns every statement returning jobs selects (see
/// `queries/get_job.sql`): id, jobtype, data, priority, dt, lock, attempts,
/// create_dt, done_dt, code, status, output, cancel_requested, tags,
/// history (JSON text), claimed_at, claimed_by, traceparent, tracestate,
/// unique_key, repeat_rule. A result is read when `code` is set: an
/// archived job's, or a live job's last one (run again, or repeated). The history
/// is the stored one completed with the pending claim (`claimed_at` set:
/// claimed then by `claimed_by`, with the job's attempts) and, for an
/// archived job, its archival ([`complete_history`]).
fn job_from_row(row: &PgRow) -> Result<Job> {
    let attempts = attempts_at(row, 6)?;
    let done_dt: Option<Millis> = get(row, 8)?;
    let result = result_of(get(row, 9)?, get(row, 10)?, get(row, 11)?)?;
    let create_dt: Millis = get(row, 7)?;
    // Jobs added since migration 13 store no `added` event: put back.
    let stored = history_from_json(&get::<String>(row, 14)?)?;
    let claim = match get::<Option<Millis>>(row, 15)? {
        None => None,
        Some(at) => Some(PendingClaim {
            at,
            by: get::<Option<String>>(row, 16)?.unwrap_or_default(),
            attempt: attempts,
        }),
    };
    let archived = match (done_dt, &result) {
        (Some(at), Some(r)) => Some((at, r.code, r.status)),
        _ => None,
    };
    let lock: String = get(row, 5)?;
    Ok(Job {
        id: get(row, 0)?,
        jobtype: get(row, 1)?,
        data: get(row, 2)?,
        priority: get(row, 3)?,
        dt: read_dt(get(row, 4)?, &lock),
        lock,
        attempts,
        create_dt,
        done_dt,
        result,
        cancel_requested: get(row, 12)?,
        tags: get(row, 13)?,
        history: complete_history(with_added(stored, create_dt), claim, archived),
        claimed_due: None,
        flow: flow_of(get(row, 19)?, get(row, 20)?, get(row, 21)?, get(row, 22)?)?,
        trace: match get::<Option<String>>(row, 17)? {
            None => None,
            Some(traceparent) => Some(TraceContext {
                traceparent,
                tracestate: get(row, 18)?,
            }),
        },
    })
}

/// A job's stored flow from its `unique_key`, `repeat_rule`, `pending`
/// and `dep_policy` columns: `None` for a plain job.
fn flow_of(
    unique_key: Option<String>,
    repeat_rule: Option<String>,
    pending: Option<i32>,
    policy: Option<String>,
) -> Result<Option<Box<FlowState>>> {
    let deps = match pending {
        None => None,
        Some(p) => {
            let text = policy.as_deref().unwrap_or_default();
            let (name, with_outputs) = match text.strip_suffix(WITH_OUTPUTS) {
                Some(name) => (name, true),
                None => (text, false),
            };
            let policy = if name.is_empty() {
                DependencyFailure::default()
            } else {
                DependencyFailure::from_str(name)
                    .map_err(|_| Error::backend_msg(format!("unknown policy {text:?}")))?
            };
            Some(StoredDeps::new(u32::try_from(p).unwrap_or(0), policy).with_outputs(with_outputs))
        }
    };
    Ok(FlowState::from_stored(
        unique_key,
        repeat_rule.as_deref(),
        deps,
    ))
}

/// A job's `dt` as read from its stored one: a blocked job's is its
/// not-before time (stored as [`BLOCKED_BASE_MS`] + it).
fn read_dt(stored: Millis, lock: &str) -> Millis {
    if lock == LOCK_BLOCKED {
        stored - BLOCKED_BASE_MS
    } else {
        stored
    }
}

/// Column `i`, a job's attempts: never negative but by a row edited by
/// hand, a backend error.
fn attempts_at(row: &PgRow, i: usize) -> Result<u32> {
    let attempts: i32 = get(row, i)?;
    u32::try_from(attempts).map_err(|_| Error::backend_msg(format!("negative attempts {attempts}")))
}

/// A job's result from its columns `code`, `status`, `output`: none
/// without a code.
fn result_of(
    code: Option<String>,
    status: Option<i32>,
    output: Option<Vec<u8>>,
) -> Result<Option<JobResult>> {
    let Some(code) = code else {
        return Ok(None);
    };
    let status = status.unwrap_or_default();
    Ok(Some(JobResult {
        code: ResultCode::from_str(&code)
            .map_err(|_| Error::backend_msg(format!("unknown result code {code:?}")))?,
        status: u16::try_from(status)
            .map_err(|_| Error::backend_msg(format!("status {status} out of range")))?,
        output: output.unwrap_or_default(),
    }))
}

/// The `rare` record of a claimed row (`queries/claim_jobs.sql`): code,
/// status, output, cancel_requested, tags, history (JSON text),
/// traceparent, tracestate; NULL for a job with none of them set.
type Rare = (
    Option<String>,
    Option<i32>,
    Option<Vec<u8>>,
    bool,
    Vec<String>,
    String,
    Option<String>,
    Option<String>,
);

/// A job just claimed (`queries/claim_jobs.sql`: id, data, priority,
/// attempts, create_dt, the dt before the claim, `rare`, unique_key,
/// repeat_rule), with what the
/// claim set: its jobtype, lease expiry, lock and pending claim (at `now`
/// by `owner`).
fn claimed_from_row(
    row: &PgRow,
    jobtype: &str,
    owner: &str,
    expiry: Millis,
    now: Millis,
) -> Result<Job> {
    let attempts = attempts_at(row, 3)?;
    let create_dt: Millis = get(row, 4)?;
    let (result, cancel_requested, tags, stored, trace) = match get::<Option<Rare>>(row, 6)? {
        None => (None, false, Vec::new(), Vec::new(), None),
        Some((code, status, output, cancel, tags, history, traceparent, tracestate)) => (
            result_of(code, status, output)?,
            cancel,
            tags,
            history_from_json(&history)?,
            traceparent.map(|traceparent| TraceContext {
                traceparent,
                tracestate,
            }),
        ),
    };
    let claim = PendingClaim {
        at: now,
        by: owner.to_owned(),
        attempt: attempts,
    };
    Ok(Job {
        id: get(row, 0)?,
        jobtype: jobtype.to_owned(),
        data: get(row, 1)?,
        priority: get(row, 2)?,
        dt: expiry,
        lock: owner.to_owned(),
        attempts,
        create_dt,
        done_dt: None,
        result,
        cancel_requested,
        tags,
        history: complete_history(with_added(stored, create_dt), Some(claim), None),
        claimed_due: Some(get(row, 5)?),
        flow: flow_of(get(row, 7)?, get(row, 8)?, get(row, 9)?, get(row, 10)?)?,
        trace,
    })
}

/// Limit column `i`: `NULL` is not set; a value out of the field's range
/// (only by editing the table by hand) is a backend error.
fn limit<T: TryFrom<i64>>(row: &PgRow, i: usize) -> Result<Option<T>> {
    let v: Option<i64> = get(row, i)?;
    v.map(|v| {
        T::try_from(v).map_err(|_| {
            Error::backend_msg(format!(
                "stored handler limit {v} (column {i}) is out of range"
            ))
        })
    })
    .transpose()
}

/// A limit as bound to its column (validated limits fit a `bigint`).
fn limit_param<T: Into<u64>>(v: Option<T>) -> Option<i64> {
    v.map(|v| i64::try_from(v.into()).unwrap_or(i64::MAX))
}

fn handler_from_row(row: &PgRow) -> Result<HandlerVersion> {
    let seq: i64 = get(row, 0)?;
    let limits = HandlerLimits {
        max_attempts: limit(row, 9)?,
        max_age_ms: limit(row, 10)?,
        time_limit_ms: limit(row, 11)?,
        concurrency: limit(row, 12)?,
        backoff_base_ms: limit(row, 13)?,
        backoff_max_ms: limit(row, 14)?,
    };
    Ok(HandlerVersion {
        id: seq.to_string(),
        jobtype: get(row, 1)?,
        dt: get(row, 2)?,
        handler: Handler {
            method: get(row, 3)?,
            body: get(row, 4)?,
            eid: get(row, 5)?,
            before: get(row, 6)?,
            before_each: get(row, 7)?,
            after_each: get(row, 8)?,
            limits,
        },
    })
}

/// A stored `bigint` of a schedule (its version or a counter) as the
/// record's `u64`: a negative value (only by editing the table by hand) is
/// a backend error.
fn schedule_u64(row: &PgRow, i: usize, what: &str) -> Result<u64> {
    let v: i64 = get(row, i)?;
    u64::try_from(v)
        .map_err(|_| Error::backend_msg(format!("stored schedule {what} {v} is negative")))
}

/// A counter as bound to its `bigint` column (a count past 2^63 - 1, which
/// no firer sends, is bound as 2^63 - 1).
fn counter_param(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A schedule's record from the state columns every schedule statement
/// returns first (see `queries/get_schedule.sql`): version, paused,
/// created_dt, updated_dt, fired_through, last_job, next_due, fired,
/// skipped; with `schedule` its definition.
fn schedule_record(row: &PgRow, schedule: Schedule) -> Result<ScheduleRecord> {
    Ok(ScheduleRecord {
        schedule,
        version: schedule_u64(row, 0, "version")?,
        paused: get(row, 1)?,
        created_dt: get(row, 2)?,
        updated_dt: get(row, 3)?,
        fired_through: get(row, 4)?,
        last_job: get(row, 5)?,
        next_due: get(row, 6)?,
        fired: schedule_u64(row, 7, "fired")?,
        skipped: schedule_u64(row, 8, "skipped")?,
    })
}

/// A schedule as read (`get_schedule.sql`, `list_schedules.sql`,
/// `due_schedules.sql`): the state columns, then name, definition (JSON
/// text) and data.
fn schedule_from_row(row: &PgRow) -> Result<ScheduleRecord> {
    let name: String = get(row, 9)?;
    let definition: String = get(row, 10)?;
    let schedule = Schedule::from_definition(name, &definition, get(row, 11)?)?;
    schedule_record(row, schedule)
}

fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

#[async_trait]
impl JobStore for PgStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(Self::MAX_PAYLOAD)
            .with_waiting_count_cap(Self::WAITING_COUNT_CAP)
            .with_notifications()
            .with_management()
            .with_tags_and_history()
            .with_stats()
            .with_trace()
            .with_schedules()
            .with_unique_jobs()
            .with_repeat()
            .with_dependencies()
    }

    async fn add_jobs(&self, jobs: &[NewJob], now: Millis) -> Result<AddOutcome> {
        validate::new_jobs(jobs, &self.capabilities(), now)?;
        let mut outcome = AddOutcome::default();
        let deps = jobs.iter().any(|j| !j.dependencies().is_empty());
        if deps || jobs.iter().any(|j| j.unique_key().is_some()) {
            // A batch with a key or a dependency: add_unique_jobs or
            // add_flow_jobs, one statement per ADD_CHUNK_BYTES of payload
            // as below.
            for chunk in Self::add_chunks(jobs) {
                let added = if deps {
                    self.add_flow_chunk(chunk, now).await?
                } else {
                    self.add_unique_chunk(chunk, now).await?
                };
                for (job, added) in chunk.iter().zip(added) {
                    match added {
                        Added::New => outcome.new.push(job.id.clone()),
                        Added::Existing => outcome.existing.push(job.id.clone()),
                        Added::Duplicate { holder, replaced } => {
                            outcome.duplicates.push(Duplicate {
                                id: job.id.clone(),
                                existing: holder,
                                replaced,
                            })
                        }
                        Added::Refused { dep, index } => outcome
                            .refused
                            .push(Refusal::unknown_dependency(&job.id, index, &dep)),
                    }
                }
            }
            return Ok(outcome);
        }
        let mut new_ids = HashSet::with_capacity(jobs.len());
        // One statement per ADD_CHUNK_BYTES of payload (one for any
        // ordinary batch), at least one job each.
        for chunk in Self::add_chunks(jobs) {
            new_ids.extend(self.add_chunk(chunk, now).await?);
        }
        for job in jobs {
            if new_ids.contains(&job.id) {
                outcome.new.push(job.id.clone());
            } else {
                outcome.existing.push(job.id.clone());
            }
        }
        Ok(outcome)
    }

    async fn waiting_jobtypes(&self, now: Millis) -> Result<Vec<WaitingJobtype>> {
        validate::time("now", now)?;
        let rows = sqlx::query(q::WAITING_JOBTYPES)
            .bind(now)
            .bind(Self::WAITING_COUNT_CAP as i64)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| map("waiting_jobtypes", e))?;
        rows.iter()
            .map(|r| {
                Ok(WaitingJobtype {
                    jobtype: get(r, 0)?,
                    count: count(get(r, 1)?),
                })
            })
            .collect()
    }

    async fn claim_jobs(
        &self,
        jobtype: &str,
        limit: usize,
        owner: &str,
        lease: Duration,
        now: Millis,
    ) -> Result<Vec<Job>> {
        validate::claim(jobtype, limit, owner, lease, now)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let expiry = now + duration_ms(lease);
        let rows = sqlx::query(q::CLAIM_JOBS)
            .bind(jobtype)
            .bind(now)
            .bind(limit as i64)
            .bind(owner)
            .bind(expiry)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| map("claim_jobs", e))?;
        if let Some(v) = &self.vacuums {
            v.claimed(rows.len());
        }
        rows.iter()
            .map(|r| claimed_from_row(r, jobtype, owner, expiry, now))
            .collect()
    }

    async fn renew_locks(
        &self,
        ids: &[String],
        owner: &str,
        lease: Duration,
        now: Millis,
    ) -> Result<Renewal> {
        validate::renew(ids, owner, lease, now)?;
        let mut renewal = Renewal::default();
        if ids.is_empty() {
            return Ok(renewal);
        }
        let rows = retry_deadlock(|| {
            sqlx::query(q::RENEW_LOCKS)
                .bind(ids)
                .bind(owner)
                .bind(now + duration_ms(lease))
                .fetch_all(&self.pool)
        })
        .await
        .map_err(|e| map("renew_locks", e))?;
        for r in &rows {
            let id: String = get(r, 0)?;
            if get::<bool>(r, 1)? {
                renewal.cancelled.push(id.clone());
            }
            renewal.renewed.push(id);
        }
        Ok(renewal)
    }

    async fn release_jobs(
        &self,
        releases: &[JobRelease],
        owner: &str,
        now: Millis,
    ) -> Result<Vec<String>> {
        validate::release(releases, owner, now, &self.capabilities())?;
        // Sorted by id, with the kinds that keep their job (retry, unget,
        // repeat) apart from those that remove it (archive, delete): each statement
        // then locks its jobs in id order (see queries/release_jobs.sql).
        // One statement per kind present and RELEASE_CHUNK_BYTES of result
        // output and repeat payload, each its own transaction: one for an ordinary list of
        // one kind, two when it mixes them.
        let mut sorted: Vec<&JobRelease> = releases.iter().collect();
        sorted.sort_unstable_by(|a, b| a.id.cmp(&b.id));
        let (stay, go): (Vec<&JobRelease>, Vec<&JobRelease>) = sorted.into_iter().partition(|r| {
            matches!(
                r.how,
                Release::Retry { .. } | Release::Unget | Release::Repeat { .. }
            )
        });
        let mut released = Vec::with_capacity(releases.len());
        // Where the rows of `go` start in `released`.
        let mut go_from = 0;
        for group in [&stay, &go] {
            go_from = released.len();
            for chunk in Self::release_chunks(group) {
                let rows = retry_deadlock(|| {
                    self.release_query(chunk, owner, now, false)
                        .fetch_all(&self.pool)
                })
                .await
                .map_err(|e| map("release_jobs", e))?;
                for r in &rows {
                    released.push(get::<String>(r, 0)?);
                }
            }
        }
        // The archive and delete entries that did not come back: those of
        // jobs with edges, which the plain statement leaves to the flow
        // path, and lost ones (lock no longer ours), which the flow path
        // re-checks and leaves alone, one small transaction that changes
        // nothing (rare). A plain list its owner still holds comes back
        // whole, and the plain statement reads nothing to tell them apart.
        if released.len() - go_from < go.len() {
            let applied: HashSet<&str> = released[go_from..].iter().map(String::as_str).collect();
            let flow: Vec<&JobRelease> = go
                .iter()
                .filter(|e| !applied.contains(e.id.as_str()))
                .copied()
                .collect();
            drop(applied);
            for chunk in Self::release_chunks(&flow) {
                let done = retry_deadlock(|| self.release_flow(chunk, owner, now))
                    .await
                    .map_err(|e| map("release_jobs", e))?;
                released.extend(done);
            }
        }
        Ok(released)
    }

    async fn update_data(&self, id: &str, owner: &str, data: &[u8], now: Millis) -> Result<bool> {
        validate::update_data(id, owner, data, &self.capabilities(), now)?;
        let done = sqlx::query(q::UPDATE_DATA)
            .bind(id)
            .bind(owner)
            .bind(data)
            .execute(&self.pool)
            .await
            .map_err(|e| map("update_data", e))?;
        Ok(done.rows_affected() > 0)
    }

    async fn cancel_jobs(&self, ids: &[String], now: Millis) -> Result<CancelOutcome> {
        validate::cancel(ids, now)?;
        let mut outcome = CancelOutcome::default();
        if ids.is_empty() {
            return Ok(outcome);
        }
        let rows = retry_deadlock(|| {
            sqlx::query(q::CANCEL_JOBS)
                .bind(ids)
                .bind(now)
                .bind(now + ARCHIVE_HORIZON_MS)
                .bind(false)
                .fetch_all(&self.pool)
        })
        .await
        .map_err(|e| map("cancel_jobs", e))?;
        let mut flow = Vec::new();
        for r in &rows {
            let id: String = get(r, 0)?;
            match get::<String>(r, 1)?.as_str() {
                "c" => outcome.cancelled.push(id),
                "f" => flow.push(id),
                _ => outcome.marked.push(id),
            }
        }
        if !flow.is_empty() {
            let (cancelled, marked) = retry_deadlock(|| self.cancel_flow(&flow, now))
                .await
                .map_err(|e| map("cancel_jobs", e))?;
            outcome.cancelled.extend(cancelled);
            outcome.marked.extend(marked);
        }
        Ok(outcome)
    }

    async fn get_job(&self, id: &str) -> Result<Option<Job>> {
        validate::id(id)?;
        let row = sqlx::query(q::GET_JOB)
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| map("get_job", e))?;
        row.as_ref().map(job_from_row).transpose()
    }

    async fn get_jobs(&self, ids: &[String]) -> Result<Vec<Job>> {
        validate::ids(ids)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(q::GET_JOBS)
            .bind(ids)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| map("get_jobs", e))?;
        rows.iter().map(job_from_row).collect()
    }

    async fn purge_archived(&self, before: Millis, codes: &[ResultCode]) -> Result<u64> {
        validate::time("before", before)?;
        if codes.is_empty() {
            return Ok(0);
        }
        // Each code once: the statement takes up to a batch per code listed.
        let mut codes: Vec<&str> = codes.iter().map(|c| c.as_str()).collect();
        codes.sort_unstable();
        codes.dedup();
        // Bounded statements, each its own transaction: a purge of
        // millions of rows holds no long transaction and stays within the
        // statement timeout. Archived jobs only ever get newer than
        // `before`, so the batches run out.
        let batch = self.options.get_purge_batch();
        let mut total = 0;
        loop {
            let row = sqlx::query(q::PURGE_ARCHIVED)
                .bind(before)
                .bind(i64::from(batch))
                .bind(&codes)
                .fetch_one(&self.pool)
                .await
                .map_err(|e| map("purge_archived", e))?;
            let n = count(get(&row, 0)?);
            total += n;
            if n < u64::from(batch) {
                return Ok(total);
            }
        }
    }

    async fn job_counts(&self, now: Millis) -> Result<Vec<JobCounts>> {
        validate::time("now", now)?;
        let rows = sqlx::query(q::JOB_COUNTS)
            .bind(now)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| map("job_counts", e))?;
        let mut by_type: BTreeMap<String, JobCounts> = BTreeMap::new();
        for r in &rows {
            let jobtype: String = get(r, 0)?;
            let state: String = get(r, 1)?;
            let code: Option<String> = get(r, 2)?;
            let n = count(get(r, 3)?);
            let c = by_type.entry(jobtype.clone()).or_insert_with(|| JobCounts {
                jobtype,
                ..JobCounts::default()
            });
            match (state.as_str(), code) {
                ("waiting", _) => c.waiting += n,
                ("scheduled", _) => c.scheduled += n,
                ("running", _) => c.running += n,
                ("blocked", _) => c.blocked += n,
                ("archived", Some(code)) => {
                    let code = ResultCode::from_str(&code)
                        .map_err(|_| Error::backend_msg(format!("unknown result code {code:?}")))?;
                    *c.archived.entry(code).or_default() += n;
                }
                (other, _) => {
                    return Err(Error::backend_msg(format!(
                        "unexpected job state {other:?}"
                    )));
                }
            }
        }
        Ok(by_type.into_values().collect())
    }

    async fn list_jobs(&self, query: &JobQuery, now: Millis) -> Result<JobPage> {
        validate::job_query(query, now)?;
        let rows = self
            .list_query(query, now)?
            .fetch_all(&self.list_pool)
            .await
            .map_err(|e| map("list_jobs", e))?;
        let jobs = rows
            .iter()
            .map(job_from_row)
            .collect::<Result<Vec<Job>>>()?;
        Ok(JobPage::from_sorted(query, jobs))
    }

    async fn rerun_jobs(
        &self,
        ids: &[String],
        delay: Duration,
        now: Millis,
    ) -> Result<Vec<String>> {
        validate::rerun(ids, delay, now)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.ids_query(
            "rerun_jobs",
            sqlx::query(q::RERUN_JOBS)
                .bind(ids)
                .bind(now + duration_ms(delay))
                .bind(&self.channel)
                .bind(now),
        )
        .await
    }

    async fn delete_jobs(&self, ids: &[String], now: Millis) -> Result<DeleteOutcome> {
        validate::ids(ids)?;
        validate::time("now", now)?;
        let mut outcome = DeleteOutcome::default();
        if ids.is_empty() {
            return Ok(outcome);
        }
        let rows = retry_deadlock(|| {
            sqlx::query(q::DELETE_JOBS)
                .bind(ids)
                .bind(false)
                .fetch_all(&self.pool)
        })
        .await
        .map_err(|e| map("delete_jobs", e))?;
        let mut flow = Vec::new();
        for r in &rows {
            let id: String = get(r, 0)?;
            match get::<String>(r, 1)?.as_str() {
                "d" => outcome.deleted.push(id),
                "f" => flow.push(id),
                _ => outcome.running.push(id),
            }
        }
        if !flow.is_empty() {
            let (deleted, running) = retry_deadlock(|| self.delete_flow(&flow, now))
                .await
                .map_err(|e| map("delete_jobs", e))?;
            outcome.deleted.extend(deleted);
            outcome.running.extend(running);
        }
        Ok(outcome)
    }

    async fn edit_jobs(&self, edits: &[JobEdit], now: Millis) -> Result<Vec<String>> {
        validate::edits(edits, &self.capabilities(), now)?;
        let mut edited = Vec::with_capacity(edits.len());
        // One statement per ADD_CHUNK_BYTES of payload (one for any
        // ordinary batch), at least one edit each; edits are independent.
        let chunks = split_by_size(edits, Self::ADD_CHUNK_BYTES, |e| {
            e.data.as_ref().map_or(0, Vec::len)
        });
        for chunk in chunks {
            let ids: Vec<&str> = chunk.iter().map(|e| e.id.as_str()).collect();
            let prios: Vec<Option<i32>> = chunk.iter().map(|e| e.priority).collect();
            let dts: Vec<Option<i64>> = chunk.iter().map(|e| e.run_at).collect();
            let data: Vec<Option<&[u8]>> = chunk.iter().map(|e| e.data.as_deref()).collect();
            edited.extend(
                self.ids_query(
                    "edit_jobs",
                    sqlx::query(q::EDIT_JOBS)
                        .bind(ids)
                        .bind(prios)
                        .bind(dts)
                        .bind(data)
                        .bind(now)
                        .bind(&self.channel),
                )
                .await?,
            );
        }
        Ok(edited)
    }

    async fn job_waits(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<Waits>> {
        validate::waits(id, after, limit)?;
        // One more edge than asked says whether a next page follows.
        let rows = sqlx::query(q::JOB_WAITS)
            .bind(id)
            .bind(after.unwrap_or(""))
            .bind(limit as i64 + 1)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| map("job_waits", e))?;
        let mut known = false;
        let mut waits = Waits {
            id: id.to_owned(),
            ..Waits::default()
        };
        for r in &rows {
            match get::<String>(r, 0)?.as_str() {
                "k" => known = true,
                "c" => {
                    let n = count(get(r, 5)?);
                    waits.count(edge_state(get(r, 2)?, get(r, 3)?, None)?, n);
                }
                _ => waits.edges.push(WaitEdge {
                    target: get(r, 1)?,
                    state: edge_state(get(r, 2)?, get(r, 3)?, get(r, 4)?)?,
                }),
            }
        }
        if !known {
            return Ok(None);
        }
        waits.end_page(limit);
        Ok(Some(waits))
    }

    async fn waits_of(&self, ids: &[String], limit: usize) -> Result<Vec<Waits>> {
        validate::waits_of(ids, limit)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // One more edge than asked per job says whether a next page follows.
        let rows = sqlx::query(q::WAITS_OF)
            .bind(ids)
            .bind(limit as i64 + 1)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| map("waits_of", e))?;
        let mut by_id: HashMap<String, Waits> = HashMap::new();
        for r in &rows {
            let id: String = get(r, 1)?;
            let waits = by_id.entry(id).or_insert_with_key(|id| Waits {
                id: id.clone(),
                ..Waits::default()
            });
            if get::<String>(r, 0)? == "c" {
                let n = count(get(r, 6)?);
                waits.count(edge_state(get(r, 3)?, get(r, 4)?, None)?, n);
            } else {
                waits.edges.push(WaitEdge {
                    target: get(r, 2)?,
                    state: edge_state(get(r, 3)?, get(r, 4)?, get(r, 5)?)?,
                });
            }
        }
        Ok(by_id
            .into_values()
            .map(|mut w| {
                w.edges.sort_by(|a, b| a.target.cmp(&b.target));
                w.end_page(limit);
                w
            })
            .collect())
    }

    async fn unblock_jobs(&self, ids: &[String], now: Millis) -> Result<Vec<String>> {
        validate::cancel(ids, now)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows = retry_deadlock(|| {
            sqlx::query(q::UNBLOCK_JOBS)
                .bind(ids)
                .bind(now)
                .bind(&self.channel)
                .fetch_all(&self.pool)
        })
        .await
        .map_err(|e| map("unblock_jobs", e))?;
        rows.iter().map(|r| get::<String>(r, 0)).collect()
    }

    async fn pause_jobtype(&self, jobtype: &str, paused: bool, now: Millis) -> Result<bool> {
        validate::pause(jobtype, now)?;
        if paused {
            let done = sqlx::query(q::PAUSE_JOBTYPE)
                .bind(jobtype)
                .bind(now)
                .execute(&self.pool)
                .await
                .map_err(|e| map("pause_jobtype", e))?;
            Ok(done.rows_affected() > 0)
        } else {
            let row = sqlx::query(q::RESUME_JOBTYPE)
                .bind(jobtype)
                .bind(&self.channel)
                .fetch_one(&self.pool)
                .await
                .map_err(|e| map("pause_jobtype", e))?;
            Ok(get::<i64>(&row, 0)? > 0)
        }
    }

    async fn paused_jobtypes(&self) -> Result<Vec<String>> {
        self.ids_query("paused_jobtypes", sqlx::query(q::PAUSED_JOBTYPES))
            .await
    }

    async fn add_stats(&self, deltas: &[StatsDelta], now: Millis) -> Result<()> {
        validate::stats_deltas(deltas, now)?;
        crate::stats::add(&self.pool, deltas, now).await
    }

    async fn job_stats(&self, query: &StatsQuery, now: Millis) -> Result<Vec<StatsBucket>> {
        validate::stats_query(query, now)?;
        crate::stats::read(&self.pool, query, now).await
    }

    async fn watch(&self) -> Result<WorkWatcher> {
        crate::watch::watch(&self.connect, &self.options, &self.channel).await
    }

    async fn set_handler(
        &self,
        jobtype: &str,
        handler: &Handler,
        now: Millis,
    ) -> Result<HandlerVersion> {
        validate::handler(jobtype, handler, now)?;
        let row = sqlx::query(q::SET_HANDLER)
            .bind(jobtype)
            .bind(now)
            .bind(&handler.method)
            .bind(&handler.body)
            .bind(&handler.eid)
            .bind(&handler.before)
            .bind(&handler.before_each)
            .bind(&handler.after_each)
            .bind(limit_param(handler.limits.max_attempts))
            .bind(limit_param(handler.limits.max_age_ms))
            .bind(limit_param(handler.limits.time_limit_ms))
            .bind(limit_param(handler.limits.concurrency))
            .bind(limit_param(handler.limits.backoff_base_ms))
            .bind(limit_param(handler.limits.backoff_max_ms))
            .fetch_one(&self.pool)
            .await
            .map_err(|e| map("set_handler", e))?;
        let seq: i64 = get(&row, 0)?;
        Ok(HandlerVersion {
            id: seq.to_string(),
            jobtype: jobtype.to_owned(),
            dt: now,
            handler: handler.clone(),
        })
    }

    async fn get_handler(&self, jobtype: &str) -> Result<Option<HandlerVersion>> {
        validate::jobtype(jobtype)?;
        let row = sqlx::query(q::GET_HANDLER)
            .bind(jobtype)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| map("get_handler", e))?;
        row.as_ref().map(handler_from_row).transpose()
    }

    async fn delete_handler(&self, jobtype: &str) -> Result<bool> {
        validate::jobtype(jobtype)?;
        let done = sqlx::query(q::DELETE_HANDLER)
            .bind(jobtype)
            .execute(&self.pool)
            .await
            .map_err(|e| map("delete_handler", e))?;
        Ok(done.rows_affected() > 0)
    }

    async fn list_handlers(&self) -> Result<Vec<HandlerVersion>> {
        let rows = sqlx::query(q::LIST_HANDLERS)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| map("list_handlers", e))?;
        rows.iter().map(handler_from_row).collect()
    }

    async fn set_schedule(
        &self,
        s: &Schedule,
        next_due: Option<Millis>,
        now: Millis,
    ) -> Result<ScheduleRecord> {
        validate::schedule(s, next_due, &self.capabilities(), now)?;
        let row = sqlx::query(q::SET_SCHEDULE)
            .bind(&s.name)
            .bind(s.definition())
            .bind(&s.data)
            .bind(now)
            .bind(next_due)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| map("set_schedule", e))?;
        schedule_record(&row, s.clone())
    }

    async fn get_schedule(&self, name: &str) -> Result<Option<ScheduleRecord>> {
        validate::schedule_name(name)?;
        let row = sqlx::query(q::GET_SCHEDULE)
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| map("get_schedule", e))?;
        row.as_ref().map(schedule_from_row).transpose()
    }

    async fn list_schedules(&self, prefix: &str) -> Result<Vec<ScheduleRecord>> {
        validate::schedule_prefix(prefix)?;
        let rows = sqlx::query(q::LIST_SCHEDULES)
            .bind(prefix)
            .bind(JobtypeFilter::prefix_bound(prefix))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| map("list_schedules", e))?;
        rows.iter().map(schedule_from_row).collect()
    }

    async fn delete_schedule(&self, name: &str) -> Result<bool> {
        validate::schedule_name(name)?;
        let done = sqlx::query(q::DELETE_SCHEDULE)
            .bind(name)
            .execute(&self.pool)
            .await
            .map_err(|e| map("delete_schedule", e))?;
        Ok(done.rows_affected() > 0)
    }

    async fn pause_schedule(
        &self,
        name: &str,
        paused: bool,
        next_due: Option<Millis>,
        now: Millis,
    ) -> Result<bool> {
        validate::schedule_pause(name, next_due, now)?;
        let done = sqlx::query(q::PAUSE_SCHEDULE)
            .bind(name)
            .bind(paused)
            .bind(next_due)
            .bind(now)
            .execute(&self.pool)
            .await
            .map_err(|e| map("pause_schedule", e))?;
        Ok(done.rows_affected() > 0)
    }

    async fn due_schedules(&self, now: Millis, limit: usize) -> Result<Vec<ScheduleRecord>> {
        validate::due_schedules(now, limit)?;
        let rows = sqlx::query(q::DUE_SCHEDULES)
            .bind(now)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| map("due_schedules", e))?;
        rows.iter().map(schedule_from_row).collect()
    }

    async fn advance_schedule(
        &self,
        name: &str,
        version: u64,
        advance: &ScheduleAdvance,
        now: Millis,
    ) -> Result<bool> {
        validate::schedule_advance(name, version, advance, now)?;
        // Versions are bigint: one past 2^63 - 1 is stored nowhere.
        let Ok(version) = i64::try_from(version) else {
            return Ok(false);
        };
        let row = sqlx::query(q::ADVANCE_SCHEDULE)
            .bind(name)
            .bind(version)
            .bind(advance.fired_through)
            .bind(&advance.last_job)
            .bind(advance.next_due)
            .bind(counter_param(advance.fired))
            .bind(counter_param(advance.skipped))
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| map("advance_schedule", e))?;
        Ok(row.is_some())
    }

    async fn reserve_sysid(&self, sysid: &str, ttl: Duration, now: Millis) -> Result<SysidLease> {
        validate::sysid_lease(sysid, ttl, now)?;
        let token = jobstore_api::new_token();
        let expires = now + duration_ms(ttl);
        let row = sqlx::query(q::RESERVE_SYSID)
            .bind(sysid)
            .bind(&token)
            .bind(expires)
            .bind(now)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| map("reserve_sysid", e))?;
        match row {
            Some(_) => Ok(SysidLease {
                sysid: sysid.to_owned(),
                token,
                expires,
            }),
            None => Err(Error::sysid_held(sysid)),
        }
    }

    async fn renew_sysid(
        &self,
        lease: &SysidLease,
        ttl: Duration,
        now: Millis,
    ) -> Result<SysidLease> {
        validate::sysid_lease(&lease.sysid, ttl, now)?;
        let expires = now + duration_ms(ttl);
        let row = sqlx::query(q::RENEW_SYSID)
            .bind(&lease.sysid)
            .bind(&lease.token)
            .bind(expires)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| map("renew_sysid", e))?;
        match row {
            Some(_) => Ok(SysidLease {
                expires,
                ..lease.clone()
            }),
            None => Err(Error::sysid_lost(&lease.sysid)),
        }
    }

    async fn release_sysid(&self, lease: &SysidLease) -> Result<bool> {
        validate::sysid(&lease.sysid)?;
        let done = sqlx::query(q::RELEASE_SYSID)
            .bind(&lease.sysid)
            .bind(&lease.token)
            .execute(&self.pool)
            .await
            .map_err(|e| map("release_sysid", e))?;
        Ok(done.rows_affected() > 0)
    }
}

/// The columns of a batch of new jobs, as the add statements take them
/// first: ids, jobtypes, payloads, priorities, due times, tags (one text
/// per job: validated tags never contain a space), traceparents and
/// tracestates; then, bound by the statements that take them, the repeat
/// rules.
struct AddColumns<'a> {
    ids: Vec<&'a str>,
    types: Vec<&'a str>,
    data: Vec<&'a [u8]>,
    prio: Vec<i32>,
    dts: Vec<i64>,
    tags: Vec<String>,
    parents: Vec<Option<&'a str>>,
    states: Vec<Option<&'a str>>,
    /// The rules as stored ([`Repeat::to_text`](jobstore_api::Repeat::to_text)),
    /// `None` where a job has none; `None` for a batch without a rule
    /// (bound as a NULL array, or not at all: `queries/add_jobs.sql`).
    repeats: Option<Vec<Option<String>>>,
}

impl<'a> AddColumns<'a> {
    fn of(jobs: &'a [NewJob], now: Millis) -> Self {
        AddColumns {
            ids: jobs.iter().map(|j| j.id.as_str()).collect(),
            types: jobs.iter().map(|j| j.jobtype.as_str()).collect(),
            data: jobs.iter().map(|j| j.data.as_slice()).collect(),
            prio: jobs.iter().map(|j| j.priority).collect(),
            dts: jobs.iter().map(|j| j.run_at.unwrap_or(now)).collect(),
            tags: jobs.iter().map(|j| j.tags.join(" ")).collect(),
            parents: jobs
                .iter()
                .map(|j| j.trace.as_ref().map(|t| t.traceparent.as_str()))
                .collect(),
            states: jobs
                .iter()
                .map(|j| j.trace.as_ref().and_then(|t| t.tracestate.as_deref()))
                .collect(),
            repeats: jobs.iter().any(|j| j.repeat_rule().is_some()).then(|| {
                jobs.iter()
                    .map(|j| j.repeat_rule().map(|r| r.to_text()))
                    .collect()
            }),
        }
    }

    /// `query` with the eight columns bound, in order.
    fn bind<'q>(
        &'q self,
        query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        query
            .bind(&self.ids)
            .bind(&self.types)
            .bind(&self.data)
            .bind(&self.prio)
            .bind(&self.dts)
            .bind(&self.tags)
            .bind(&self.parents)
            .bind(&self.states)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobstore_api::limits::MAX_OUTPUT;

    /// An ordinary add is one statement; only past 32 MiB of payload is it
    /// split.
    #[test]
    fn adds_split_only_past_the_chunk_payload() {
        let mib = 1 << 20;
        assert_eq!(PgStore::ADD_CHUNK_BYTES, 32 * mib);
        let jobs = |n: usize| -> Vec<NewJob> {
            (0..n)
                .map(|i| NewJob::new(format!("j{i}"), "t", vec![0; mib]))
                .collect()
        };
        assert_eq!(PgStore::add_chunks(&jobs(32)).len(), 1);
        assert_eq!(PgStore::add_chunks(&jobs(33)).len(), 2);
        assert_eq!(PgStore::add_chunks(&[NewJob::new("a", "t", "")]).len(), 1);
    }

    /// An ordinary release list is one statement; only past 32 MiB of
    /// result output is it split.
    #[test]
    fn releases_split_only_past_the_chunk_output() {
        assert_eq!(PgStore::RELEASE_CHUNK_BYTES / MAX_OUTPUT, 512);
        let archived = |n: usize| -> Vec<JobRelease> {
            (0..n)
                .map(|i| {
                    let result = JobResult::from_status(0).with_output(vec![0; MAX_OUTPUT]);
                    JobRelease::new(format!("j{i}"), Release::Archive(result))
                })
                .collect()
        };
        let chunks = |list: &[JobRelease]| {
            let refs: Vec<&JobRelease> = list.iter().collect();
            PgStore::release_chunks(&refs).len()
        };
        assert_eq!(chunks(&archived(512)), 1);
        assert_eq!(chunks(&archived(513)), 2);
        assert_eq!(chunks(&[JobRelease::new("a", Release::Delete)]), 1);
    }

    /// A repeat's payload counts toward the split as its output does.
    #[test]
    fn repeat_payloads_count_toward_the_split() {
        let mib = 1 << 20;
        let repeats = |n: usize, data: usize, output: usize| -> Vec<JobRelease> {
            (0..n)
                .map(|i| {
                    let how = Release::Repeat {
                        at: 0,
                        result: JobResult::from_status(200).with_output(vec![0; output]),
                        data: Some(vec![0; data]),
                    };
                    JobRelease::new(format!("j{i}"), how)
                })
                .collect()
        };
        let chunks = |list: &[JobRelease]| {
            let refs: Vec<&JobRelease> = list.iter().collect();
            PgStore::release_chunks(&refs).len()
        };
        assert_eq!(chunks(&repeats(32, mib, 0)), 1);
        assert_eq!(chunks(&repeats(33, mib, 0)), 2);
        assert_eq!(chunks(&repeats(16, mib - MAX_OUTPUT, MAX_OUTPUT)), 1);
        assert_eq!(chunks(&repeats(3, 20 * mib, 0)), 3);
        assert_eq!(chunks(&repeats(1, PgStore::MAX_PAYLOAD, MAX_OUTPUT)), 1);
    }
}
