//! [`SqliteStore`]: the [`JobStore`] on SQLite.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use jobstore_api::batch::split_by_size;
use jobstore_api::history::{
    MAX_HISTORY, PendingClaim, complete_history, history_from_json, tags_from_json, with_added,
};
use jobstore_api::limits::DEFAULT_POLL_INTERVAL;
use jobstore_api::{
    ARCHIVE_HORIZON_MS, AddOutcome, BLOCKED_BASE_MS, Capabilities, DependencyFailure, Duplicate,
    EdgeState, Error, EventKind, FlowState, Handler, HandlerLimits, HandlerVersion, Job, JobCounts,
    JobEvent, JobFlow, JobRelease, JobResult, JobStore, LOCK_BLOCKED, LOCK_DONE, Millis, NewJob,
    OnConflict, Refusal, Release, Repeat, Result, ResultCode, StoredDeps, SysidLease, TraceContext,
    WaitEdge, WaitingJobtype, Waits, WorkNotice, WorkWatcher, duration_ms, validate,
};
use jobstore_api::{
    CancelOutcome, DeleteOutcome, JobEdit, JobPage, JobQuery, JobState, JobtypeFilter, Renewal,
    Schedule, ScheduleAdvance, ScheduleRecord, SortKey, StatsBucket, StatsDelta, StatsQuery,
};
use sqlx::pool::PoolConnection;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection, Row, Sqlite};
use tokio::sync::broadcast;

use crate::error;
use crate::options::{Durability, Location, SqliteOptions};
use crate::queries::{self, ListTypes};
use crate::{schedules, stats};

/// Jobs per multi-row `INSERT` (8 parameters each, far below SQLite's
/// limit of 32,766 parameters per statement).
const ADD_CHUNK: usize = 1_000;
const _: () = assert!(ADD_CHUNK * queries::ADD_JOBS_PARAMS_PER_ROW <= 32_766);
const _: () = assert!(ADD_CHUNK * queries::ADD_KEYED_JOBS_PARAMS_PER_ROW <= 32_766);

/// The statements that append an event keep the newest 20 (the number is
/// written in `queries/*.sql`).
const _: () = assert!(MAX_HISTORY == 20);

/// The statements write [`BLOCKED_BASE_MS`] as a literal.
const _: () = assert!(BLOCKED_BASE_MS == 400_000_000_000_000);

/// An event as the statements append it: a JSON object whose `attempt`
/// the statement sets from the row where it depends on it.
fn event(now: Millis, by: &str, what: EventKind) -> String {
    JobEvent::new(now, by, 0, what).to_json()
}

/// Most result output and repeat payload (raw bytes; twice as much as
/// hex) in one release `UPDATE`: a longer list is split into several
/// statements in one transaction, keeping each JSON parameter far below
/// SQLite's 1 GB limit. Ordinary lists (up to 256 outputs of the 64 KiB
/// maximum) never split; one repeat payload of up to 64 MiB is a
/// statement alone.
const RELEASE_CHUNK_OUTPUT: usize = 16 << 20;

/// The SQLite job store. Cheap to clone: clones share the connection pools
/// (and, in memory, the database). See the crate docs for the design.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// One connection: every statement that writes.
    writer: SqlitePool,
    /// Reads (the same pool as `writer` in memory).
    reader: SqlitePool,
    /// Wake-ups, shared by every store of this process on the same database.
    notices: Arc<broadcast::Sender<WorkNotice>>,
    location: Location,
    /// Archived jobs one purge statement deletes.
    purge_batch: u32,
    /// In memory: an idle connection that keeps the database alive as long
    /// as the store, whatever the pool does with its own connection.
    _anchor: Option<Mutex<SqliteConnection>>,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("location", &self.inner.location)
            .finish_non_exhaustive()
    }
}

pub(crate) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!();

/// Per canonical database path, the wake-up channel of this process's stores.
static NOTIFIERS: LazyLock<Mutex<HashMap<PathBuf, Weak<broadcast::Sender<WorkNotice>>>>> =
    LazyLock::new(Default::default);

fn new_notifier() -> Arc<broadcast::Sender<WorkNotice>> {
    Arc::new(broadcast::channel(1024).0)
}

fn notifier_for(path: &Path) -> Arc<broadcast::Sender<WorkNotice>> {
    let mut map = NOTIFIERS.lock().unwrap_or_else(|e| e.into_inner());
    map.retain(|_, w| w.strong_count() > 0);
    if let Some(sender) = map.get(path).and_then(Weak::upgrade) {
        return sender;
    }
    let sender = new_notifier();
    map.insert(path.to_owned(), Arc::downgrade(&sender));
    sender
}

impl SqliteStore {
    /// The largest payload accepted: 64 MiB.
    pub const MAX_PAYLOAD: usize = 64 << 20;
    /// The cap on counts from `waiting_jobtypes`.
    pub const WAITING_COUNT_CAP: u64 = 10_000;

    /// Opens the store at `url` (`sqlite://path`, `sqlite::memory:`; see
    /// [`SqliteOptions::parse`]), creating the file and running the
    /// migrations as needed.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(SqliteOptions::parse(url)?).await
    }

    /// Opens the store as `options` say.
    pub async fn connect_with(options: SqliteOptions) -> Result<Self> {
        options.check()?;
        match options.location.clone() {
            Location::File(path) => Self::open_file(&path, &options).await,
            Location::Memory => Self::open_memory(&options).await,
        }
    }

    async fn open_file(path: &Path, options: &SqliteOptions) -> Result<Self> {
        let base = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .busy_timeout(options.busy_timeout)
            .synchronous(match options.durability {
                Durability::Full => SqliteSynchronous::Full,
                Durability::Normal => SqliteSynchronous::Normal,
            });
        let mut setup = base.connect().await.map_err(|e| error::map("open", e))?;
        ensure_wal(&mut setup, options.busy_timeout).await?;
        migrate(&mut setup).await?;
        // Closing is best effort: the schema is committed either way.
        let _ = setup.close().await;
        let canonical = std::fs::canonicalize(path)
            .map_err(|e| Error::unavailable(format!("cannot resolve {}", path.display()), e))?;
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_lazy_with(base.clone());
        let reader = SqlitePoolOptions::new()
            .max_connections(options.max_connections)
            .connect_lazy_with(base);
        tracing::debug!(path = %canonical.display(), durability = ?options.durability, "sqlite store opened");
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                writer,
                reader,
                notices: notifier_for(&canonical),
                location: options.location.clone(),
                purge_batch: options.purge_batch,
                _anchor: None,
            }),
        })
    }

    async fn open_memory(options: &SqliteOptions) -> Result<Self> {
        // memdb databases whose name starts with "/" are shared by every
        // connection of the process that opens the same name.
        let name = format!("/jobstore-{}", jobstore_api::new_token());
        let base = SqliteConnectOptions::new()
            .filename(&name)
            .vfs("memdb")
            .create_if_missing(true)
            .busy_timeout(options.busy_timeout);
        let mut anchor = base.connect().await.map_err(|e| error::map("open", e))?;
        migrate(&mut anchor).await?;
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_lazy_with(base);
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                writer: pool.clone(),
                reader: pool,
                notices: new_notifier(),
                location: Location::Memory,
                purge_batch: options.purge_batch,
                _anchor: Some(Mutex::new(anchor)),
            }),
        })
    }

    /// Where the database is.
    pub fn location(&self) -> &Location {
        &self.inner.location
    }

    /// Closes the connection pools of this store and all its clones; every
    /// later call fails `Unavailable`. Dropping the last clone does the same.
    pub async fn close(&self) {
        self.inner.writer.close().await;
        self.inner.reader.close().await;
    }

    fn notify(&self, jobtypes: impl IntoIterator<Item = String>) {
        let unique: HashSet<String> = jobtypes.into_iter().collect();
        for jobtype in unique {
            // No receivers is fine: nobody is waiting.
            let _ = self.inner.notices.send(jobtype);
        }
    }

    /// `add_jobs` of a batch with at least one job with a flow, a unique
    /// key or a repeat rule (README, "Unique keys", "Repeating jobs"): one
    /// `BEGIN IMMEDIATE` transaction, the keys looked up (only when the
    /// batch has one), the batch decided here in batch order as
    /// `MemoryStore` decides it, the jobs decided new inserted with their
    /// keys and rules, the replaced holders edited.
    async fn add_flow_jobs(
        &self,
        jobs: &[NewJob],
        tags: &[String],
        now: Millis,
    ) -> Result<AddOutcome> {
        let m = |e| error::map("add_jobs", e);
        let lookups: Vec<serde_json::Value> = jobs
            .iter()
            .filter_map(|j| {
                let u = j.unique_key()?;
                let since = u.window.map(|w| now - duration_ms(w));
                Some(serde_json::json!([j.id, j.jobtype, u.key, since]))
            })
            .collect();
        let mut tx = self.begin_write("add_jobs").await?;
        let rows: Vec<KeyLookup> = if lookups.is_empty() {
            Vec::new()
        } else {
            let lookups = serde_json::to_string(&lookups)
                .map_err(|e| Error::backend("encoding unique keys as JSON", e))?;
            type Row = (String, bool, Option<String>, Option<bool>, Option<String>);
            sqlx::query_as::<_, Row>(queries::UNIQUE_LOOKUP)
                .bind(lookups)
                .fetch_all(&mut *tx)
                .await
                .map_err(m)?
                .into_iter()
                .map(|(id, known, live, live_free, recent)| KeyLookup {
                    id,
                    known,
                    live,
                    live_free,
                    recent,
                })
                .collect()
        };
        let found: HashMap<&str, &KeyLookup> = rows.iter().map(|r| (r.id.as_str(), r)).collect();
        // The dependencies and the ids of the jobs that have some, as
        // stored before this call (only when the batch has dependencies).
        let mut lookup: Vec<&str> = Vec::new();
        for job in jobs.iter().filter(|j| !j.dependencies().is_empty()) {
            lookup.push(&job.id);
            lookup.extend(job.dependencies().iter().map(String::as_str));
        }
        let stored: HashMap<String, Stored> = if lookup.is_empty() {
            HashMap::new()
        } else {
            lookup.sort_unstable();
            lookup.dedup();
            let lookup = serde_json::to_string(&lookup)
                .map_err(|e| Error::backend("encoding dependencies as JSON", e))?;
            sqlx::query_as::<_, (String, String, Option<String>, Option<i64>)>(queries::DEPS_LOOKUP)
                .bind(lookup)
                .fetch_all(&mut *tx)
                .await
                .map_err(m)?
                .into_iter()
                .map(|(id, lock, code, status)| (id, Stored { lock, code, status }))
                .collect()
        };
        let plan = decide_keyed(jobs, &found, &stored)?;
        let links: HashMap<&str, Link> = jobs
            .iter()
            .zip(&plan.fates)
            .filter(|(j, fate)| matches!(fate, Fate::Insert) && !j.dependencies().is_empty())
            .map(|(j, _)| (j.id.as_str(), link(j, &stored, now)))
            .collect();
        let cancelled_event = format!("[{}]", event(now, "", EventKind::Cancelled));
        let mut inserted: HashSet<String> = HashSet::with_capacity(jobs.len());
        let to_insert: Vec<(&NewJob, &String)> = jobs
            .iter()
            .zip(tags)
            .zip(&plan.fates)
            .filter(|(_, fate)| matches!(fate, Fate::Insert))
            .map(|(jt, _)| jt)
            .collect();
        for chunk in to_insert.chunks(ADD_CHUNK) {
            let mut q = sqlx::query_scalar::<_, String>(AssertSqlSafe(queries::add_keyed_jobs(
                chunk.len(),
            )));
            for (job, tags) in chunk {
                let link = links.get(job.id.as_str());
                let cancel = link.and_then(|l| l.cancel_note.as_deref());
                q = q
                    .bind(job.id.as_str())
                    .bind(job.jobtype.as_str())
                    .bind(job.priority)
                    .bind(link.map_or(job.run_at.unwrap_or(now), |l| l.dt))
                    .bind(now)
                    .bind(job.data.as_slice())
                    .bind(tags.as_str())
                    .bind(job.trace.as_ref().map(|t| t.traceparent.as_str()))
                    .bind(job.trace.as_ref().and_then(|t| t.tracestate.as_deref()))
                    .bind(job.unique_key().map(|u| u.key.as_str()))
                    .bind(job.repeat_rule().map(Repeat::to_text))
                    .bind(link.map_or("", |l| l.lock))
                    .bind(link.map(|l| l.pending))
                    .bind(link.and(job.flow.as_deref()).map(stored_policy))
                    .bind(cancel.map(|_| now))
                    .bind(cancel.map(|_| ResultCode::Cancelled.as_str()))
                    .bind(cancel.map(|_| 0_i64))
                    .bind(cancel.map(|n| n.as_bytes()))
                    .bind(if cancel.is_some() {
                        cancelled_event.as_str()
                    } else {
                        "[]"
                    });
            }
            inserted.extend(q.fetch_all(&mut *tx).await.map_err(m)?);
        }
        if !links.is_empty() {
            let mut edges = Vec::new();
            let mut live: Vec<&str> = Vec::new();
            let mut cancelled = Vec::new();
            for job in jobs {
                let Some(l) = links.get(job.id.as_str()) else {
                    continue;
                };
                if !inserted.contains(&job.id) {
                    continue;
                }
                edges.extend(l.edges.iter().cloned());
                live.extend(l.live.iter().map(String::as_str));
                if l.cancel_note.is_some() {
                    cancelled.push((job.jobtype.as_str(), Some(ResultCode::Cancelled.as_str())));
                }
            }
            if !edges.is_empty() {
                let edges = serde_json::to_string(&edges)
                    .map_err(|e| Error::backend("encoding edges as JSON", e))?;
                sqlx::query(queries::EDGES_INSERT)
                    .bind(edges)
                    .execute(&mut *tx)
                    .await
                    .map_err(m)?;
            }
            if !live.is_empty() {
                live.sort_unstable();
                live.dedup();
                sqlx::query(queries::MARK_TARGETS)
                    .bind(
                        serde_json::to_string(&live)
                            .map_err(|e| Error::backend("encoding ids as JSON", e))?,
                    )
                    .execute(&mut *tx)
                    .await
                    .map_err(m)?;
            }
            add_counts(&mut tx, counts_delta(cancelled, 1)?, "add_jobs").await?;
        }
        let edited = event(now, "", EventKind::Edited);
        for round in &plan.replace_rounds {
            for json in edit_chunks(round)? {
                sqlx::query(queries::EDIT_JOBS)
                    .bind(json)
                    .bind(edited.as_str())
                    .execute(&mut *tx)
                    .await
                    .map_err(m)?;
            }
        }
        tx.commit().await.map_err(m)?;
        let mut outcome = AddOutcome::default();
        let mut jobtypes = Vec::new();
        for (job, fate) in jobs.iter().zip(plan.fates) {
            match fate {
                Fate::Insert if inserted.contains(&job.id) => {
                    outcome.new.push(job.id.clone());
                    jobtypes.push(job.jobtype.clone());
                }
                Fate::Insert | Fate::Existing => outcome.existing.push(job.id.clone()),
                Fate::Duplicate(dup) => outcome.duplicates.push(dup),
                Fate::Refused(refusal) => outcome.refused.push(refusal),
            }
        }
        self.notify(jobtypes);
        Ok(outcome)
    }

    /// The edges of jobs a release deleted (`gone`, from
    /// [`release_delete_flow`]): the waiters' own go, then those of the
    /// jobs some job waits for end as `ended` says (cancelled, in list
    /// order).
    async fn end_deleted(
        &self,
        conn: &mut SqliteConnection,
        gone: &[(String, bool, bool)],
        ended: Vec<(String, ResultCode, u16)>,
        now: Millis,
    ) -> Result<Vec<String>> {
        let waiters: Vec<&str> = gone
            .iter()
            .filter(|(_, _, waiter)| *waiter)
            .map(|(id, ..)| id.as_str())
            .collect();
        forget_waiters(conn, &waiters, "release_jobs").await?;
        if ended.is_empty() {
            return Ok(Vec::new());
        }
        end_edges(conn, ended, now, "release_jobs").await
    }

    async fn begin_write(&self, what: &str) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>> {
        self.inner
            .writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(|e| error::map(what, e))
    }
}

/// A writer connection for a script that opens and commits its own
/// transaction (`BEGIN IMMEDIATE; ...; COMMIT`) in one call. Until
/// [`finished`](Self::finished) says the script ran to its end, dropping it
/// (the script failed, or its call was dropped midway) closes the
/// connection instead of returning it to the pool: SQLite rolls back the
/// transaction the script may have left open, which would otherwise stay
/// open under the pool's next user.
struct ScriptConn {
    conn: PoolConnection<Sqlite>,
    finished: bool,
}

impl ScriptConn {
    async fn acquire(pool: &SqlitePool) -> std::result::Result<Self, sqlx::Error> {
        Ok(Self {
            conn: pool.acquire().await?,
            finished: false,
        })
    }

    fn finished(mut self) {
        self.finished = true;
    }
}

impl std::ops::Deref for ScriptConn {
    type Target = PoolConnection<Sqlite>;
    fn deref(&self) -> &Self::Target {
        &self.conn
    }
}

impl std::ops::DerefMut for ScriptConn {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.conn
    }
}

impl Drop for ScriptConn {
    fn drop(&mut self) {
        if !self.finished {
            self.conn.close_on_drop();
        }
    }
}

/// Switches the file to WAL. Changing the journal mode needs an exclusive
/// lock that SQLite's busy handler does not wait for, so a concurrent opener
/// is waited out here, within the busy timeout.
async fn ensure_wal(conn: &mut SqliteConnection, busy_timeout: Duration) -> Result<()> {
    let deadline = tokio::time::Instant::now() + busy_timeout;
    loop {
        match sqlx::query_scalar::<_, String>("PRAGMA journal_mode = WAL")
            .fetch_one(&mut *conn)
            .await
        {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
            Ok(mode) => {
                return Err(Error::backend_msg(format!(
                    "sqlite could not switch to WAL: journal_mode is {mode}"
                )));
            }
            Err(e) if error::is_busy(&e) && tokio::time::Instant::now() < deadline => {
                tracing::debug!(
                    "sqlite: another connection holds the lock, retrying the switch to WAL"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => return Err(error::map("switch to WAL", e)),
        }
    }
}

/// Runs the embedded migrations inside one `BEGIN IMMEDIATE` transaction, so
/// that concurrent openers of a fresh file apply them exactly once.
async fn migrate(conn: &mut SqliteConnection) -> Result<()> {
    let mut tx = conn
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(|e| error::map("migration", e))?;
    // `run_direct` on the connection itself: `run` takes an `Acquire`,
    // whose higher-ranked bound leaves `connect`'s future not provably
    // `Send` (it could not be spawned).
    MIGRATOR
        .run_direct(None, &mut *tx, false)
        .await
        .map_err(error::map_migrate)?;
    tx.commit().await.map_err(|e| error::map("migration", e))
}

/// One keyed job's row of `queries/unique_lookup.sql`.
struct KeyLookup {
    id: String,
    /// Its id exists.
    known: bool,
    /// The live holder of its key, and whether that one is free.
    live: Option<String>,
    live_free: Option<bool>,
    /// With a window: the most recently archived job with the key, if it
    /// was archived inside the window.
    recent: Option<String>,
}

/// What becomes of one job of a keyed add batch.
enum Fate {
    /// Inserted (new, unless a plain job's id exists).
    Insert,
    /// Its id exists.
    Existing,
    /// Its key is held.
    Duplicate(Duplicate),
    /// A dependency is not a job stored before the call.
    Refused(Refusal),
}

/// A job of an add batch's dependency lookup (`queries/deps_lookup.sql`):
/// a dependency or a job of the batch that existed before the call.
struct Stored {
    lock: String,
    code: Option<String>,
    status: Option<i64>,
}

/// How a new job with dependencies is stored (as `MemoryStore`'s `link`
/// decides it): its lock and `dt`, its open (pending or held) edge count,
/// the output of a cancel when a dependency already failed under
/// `Cancel`, and its edges as `[waiter, target, state, code, status]`.
struct Link {
    lock: &'static str,
    dt: Millis,
    pending: i64,
    cancel_note: Option<String>,
    edges: Vec<serde_json::Value>,
    /// The targets of its open edges, live or held (marked by
    /// `queries/mark_targets.sql`).
    live: Vec<String>,
}

/// The state of new job `job` (with dependencies, all in `stored`).
fn link(job: &NewJob, stored: &HashMap<String, Stored>, now: Millis) -> Link {
    use serde_json::json;
    let mut edges = Vec::new();
    let mut live = Vec::new();
    let mut failed = None;
    let policy = job
        .flow
        .as_ref()
        .map_or_else(DependencyFailure::default, |f| f.on_dependency_failure);
    for dep in job.dependencies() {
        let Some(target) = stored.get(dep) else {
            continue;
        };
        if target.lock == LOCK_DONE {
            let code = target.code.as_deref().unwrap_or(ResultCode::Ok.as_str());
            let status = target.status.unwrap_or(0);
            let ok = code == ResultCode::Ok.as_str();
            if !ok && failed.is_none() {
                failed = Some((dep.as_str(), code));
            }
            if !ok && policy == DependencyFailure::Hold {
                // Held at once; the target's next end resolves it.
                live.push(dep.clone());
                edges.push(json!([job.id, dep, "h", code, status]));
            } else {
                edges.push(json!([job.id, dep, "d", code, status]));
            }
        } else {
            live.push(dep.clone());
            edges.push(json!([job.id, dep, "p", null, null]));
        }
    }
    let pending = i64::try_from(live.len()).unwrap_or(i64::MAX);
    let not_before = job.run_at.unwrap_or(now);
    let (lock, dt, cancel_note) = match failed {
        Some((dep, code)) if policy == DependencyFailure::Cancel => (
            LOCK_DONE,
            now + ARCHIVE_HORIZON_MS,
            Some(format!("[jobstore] dependency {dep} ended {code}\n")),
        ),
        _ if pending > 0 => (LOCK_BLOCKED, BLOCKED_BASE_MS + not_before, None),
        _ => ("", not_before, None),
    };
    Link {
        lock,
        dt,
        pending,
        cancel_note,
        edges,
        live,
    }
}

/// A keyed add batch, decided.
struct KeyedPlan {
    /// Per job of the batch, in order.
    fates: Vec<Fate>,
    /// The payloads duplicates give their free holders: rounds of edits,
    /// each naming a holder at most once, in batch order (almost always
    /// one round).
    replace_rounds: Vec<Vec<JobEdit>>,
}

/// Decides a keyed add batch from the lookups of its keyed jobs, job by job
/// in batch order, as `MemoryStore::add_jobs` does: the id first, then a
/// key taken by an earlier new job of the batch, the live holder, the
/// window's holder.
fn decide_keyed(
    jobs: &[NewJob],
    found: &HashMap<&str, &KeyLookup>,
    stored: &HashMap<String, Stored>,
) -> Result<KeyedPlan> {
    let mut fates = Vec::with_capacity(jobs.len());
    let mut replace_rounds: Vec<Vec<JobEdit>> = Vec::new();
    let mut replaced_times: HashMap<String, usize> = HashMap::new();
    let mut taken: HashMap<(&str, &str), &str> = HashMap::new();
    // The dependencies, checked last: each must be a job stored before
    // the call (`stored` holds only those).
    let unknown_dep = |job: &NewJob| {
        job.dependencies()
            .iter()
            .enumerate()
            .find(|(_, d)| !stored.contains_key(d.as_str()))
            .map(|(i, d)| Refusal::unknown_dependency(&job.id, i, d))
    };
    for job in jobs {
        let Some(u) = job.unique_key() else {
            if job.dependencies().is_empty() {
                fates.push(Fate::Insert);
            } else if stored.contains_key(&job.id) {
                fates.push(Fate::Existing);
            } else if let Some(refusal) = unknown_dep(job) {
                fates.push(Fate::Refused(refusal));
            } else {
                fates.push(Fate::Insert);
            }
            continue;
        };
        let l = found
            .get(job.id.as_str())
            .ok_or_else(|| Error::backend_msg(format!("no unique key lookup for {}", job.id)))?;
        if l.known {
            fates.push(Fate::Existing);
            continue;
        }
        let scope = (job.jobtype.as_str(), u.key.as_str());
        let holder = match (taken.get(&scope), &l.live, &l.recent) {
            (Some(new), _, _) => Some(((*new).to_owned(), true)),
            (None, Some(live), _) => Some((live.clone(), l.live_free.unwrap_or(false))),
            (None, None, Some(recent)) => Some((recent.clone(), false)),
            (None, None, None) => None,
        };
        let Some((existing, free)) = holder else {
            if let Some(refusal) = unknown_dep(job) {
                fates.push(Fate::Refused(refusal));
                continue;
            }
            taken.insert(scope, job.id.as_str());
            fates.push(Fate::Insert);
            continue;
        };
        let replaced = free && u.on_conflict == OnConflict::ReplaceData;
        if replaced {
            let n = replaced_times.entry(existing.clone()).or_default();
            if replace_rounds.len() <= *n {
                replace_rounds.push(Vec::new());
            }
            replace_rounds[*n].push(JobEdit::new(existing.clone()).data(job.data.clone()));
            *n += 1;
        }
        fates.push(Fate::Duplicate(Duplicate {
            id: job.id.clone(),
            existing,
            replaced,
        }));
    }
    Ok(KeyedPlan {
        fates,
        replace_rounds,
    })
}

/// The delete entries `ids` of a release by `owner` (`queries/release_delete_flow.sql`,
/// in the caller's transaction): each deleted job's id, whether some job
/// waits for it and whether it is a waiter.
async fn release_delete_flow(
    conn: &mut SqliteConnection,
    owner: &str,
    ids: &[&str],
) -> Result<Vec<(String, bool, bool)>> {
    let rows: Vec<(String, Option<i64>, bool)> = sqlx::query_as(queries::RELEASE_DELETE_FLOW)
        .bind(owner)
        .bind(serde_json::json!(ids).to_string())
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| error::map("release_jobs", e))?;
    Ok(rows
        .into_iter()
        .map(|(id, waited, waiter)| (id, waited.is_some(), waiter))
        .collect())
}

fn ids_json(ids: &[String]) -> Result<String> {
    serde_json::to_string(ids).map_err(|e| Error::backend("encoding ids as JSON", e))
}

/// Result codes as a JSON array of their stored spellings, for
/// `json_each()` on the SQL side.
fn codes_json(codes: &[ResultCode]) -> Result<String> {
    let names: Vec<&str> = codes.iter().map(|c| c.as_str()).collect();
    serde_json::to_string(&names).map_err(|e| Error::backend("encoding result codes as JSON", e))
}

/// Lowercase hex of `bytes`, for `unhex()` on the SQL side.
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    s
}

/// The JSON object of one release entry that keeps its job (see
/// `queries/release_keep.sql`), a retry, unget or repeat with its event by
/// `owner` (an archive's event, when the statement appends one, is built
/// there from the entry's code and status); `None` for a delete.
fn keep_entry(r: &JobRelease, owner: &str, now: Millis) -> Option<serde_json::Value> {
    use serde_json::json;
    let event = |what| serde_json::to_value(JobEvent::new(now, owner, 0, what)).ok();
    Some(match &r.how {
        Release::Retry { delay } => {
            let what = EventKind::Retried {
                delay_ms: u64::try_from(duration_ms(*delay)).unwrap_or(0),
                status: r.status,
            };
            json!({ "id": r.id, "k": "r", "dt": now + duration_ms(*delay), "e": event(what) })
        }
        Release::Unget => {
            json!({ "id": r.id, "k": "u", "dt": now, "e": event(EventKind::HandedBack) })
        }
        Release::Archive(result) => json!({
            "id": r.id,
            "k": "a",
            "c": result.code.as_str(),
            "s": result.status,
            "o": hex(&result.output),
        }),
        Release::Repeat { at, result, data } => {
            let what = EventKind::Repeated {
                code: result.code,
                status: result.status,
                next_ms: *at,
            };
            json!({
                "id": r.id,
                "k": "p",
                "dt": at,
                "c": result.code.as_str(),
                "s": result.status,
                "o": hex(&result.output),
                "d": data.as_deref().map(hex),
                "e": event(what),
            })
        }
        Release::Delete => return None,
    })
}

/// Bytes an entry puts in a release statement's JSON (before hex): its
/// result output, and a repeat's new payload.
fn entry_bytes(r: &JobRelease) -> usize {
    let data = match &r.how {
        Release::Repeat {
            data: Some(data), ..
        } => data.len(),
        _ => 0,
    };
    r.how.output_len().saturating_add(data)
}

/// Splits the entries that keep their job into JSON arrays of at most
/// [`RELEASE_CHUNK_OUTPUT`] bytes of output and repeat payloads each (one
/// for any ordinary list; an entry larger than that alone).
fn keep_chunks(releases: &[JobRelease], owner: &str, now: Millis) -> Result<Vec<String>> {
    split_by_size(releases, RELEASE_CHUNK_OUTPUT, entry_bytes)
        .into_iter()
        .map(|run| {
            run.iter()
                .filter_map(|r| keep_entry(r, owner, now))
                .collect::<Vec<_>>()
        })
        .filter(|entries| !entries.is_empty())
        .map(|entries| {
            serde_json::to_string(&entries)
                .map_err(|e| Error::backend("encoding releases as JSON", e))
        })
        .collect()
}

/// What one statement moved into the archive (`sign` 1) or out of it
/// (`sign` -1): the jobs' (jobtype, result code) pairs, a job archived
/// without a code counting as `ok`, grouped as the JSON parameter of
/// `queries/counts_add.sql`; `None` when there are none.
fn counts_delta<'a>(
    jobs: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    sign: i64,
) -> Result<Option<String>> {
    let mut groups: BTreeMap<(&str, &str), i64> = BTreeMap::new();
    for (jobtype, code) in jobs {
        *groups
            .entry((jobtype, code.unwrap_or(ResultCode::Ok.as_str())))
            .or_default() += sign;
    }
    if groups.is_empty() {
        return Ok(None);
    }
    let rows: Vec<(&str, &str, i64)> = groups.into_iter().map(|((j, c), n)| (j, c, n)).collect();
    serde_json::to_string(&rows)
        .map(Some)
        .map_err(|e| Error::backend("encoding archive counts as JSON", e))
}

/// Adds `delta` (from [`counts_delta`]) to the archive counts, in the
/// transaction of the statement whose rows it counts.
async fn add_counts(
    tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>,
    delta: Option<String>,
    what: &str,
) -> Result<()> {
    if let Some(json) = delta {
        sqlx::query(queries::COUNTS_ADD)
            .bind(json)
            .execute(&mut **tx)
            .await
            .map_err(|e| error::map(what, e))?;
    }
    Ok(())
}

/// A waiter as the ends of its edges leave it (`queries/waiters_read.sql`,
/// then the store's decision).
struct Waiter {
    jobtype: String,
    lock: String,
    pending: i64,
    cancel: bool,
    /// Some job waits for it: cancelled, it ends its own edges.
    waited: bool,
    /// "n" only its pending count changes, "u" unblocked, "c" cancelled.
    kind: &'static str,
    note: String,
}

/// Ends the open (pending or held) edges of the jobs of `ended` (each left
/// the live states with that result code and status; deleted:
/// `cancelled`, 0), in the caller's transaction on `conn`, as
/// `MemoryStore`'s `end_edges` does: one job after the other in the order
/// given, each with its whole cascade, level by level (the waiters its end
/// cancels, then theirs), and within a level the targets in the order they
/// ended and each target's waiters by id. Per level four statements
/// whatever its width: the edges ended (`edges_end.sql`, which holds again
/// those of blocked waiters under `Hold` that the end leaves other than
/// `ok`: nothing else changes for them), the waiters of the others read
/// (`waiters_read.sql`), the waiters changed (`waiters_apply.sql`) and the
/// cancels counted. Returns the jobtypes of the jobs unblocked (to notify
/// after the commit).
async fn end_edges(
    conn: &mut SqliteConnection,
    ended: Vec<(String, ResultCode, u16)>,
    now: Millis,
    what: &str,
) -> Result<Vec<String>> {
    use serde_json::json;
    let m = |e| error::map(what, e);
    let unblocked = event(now, "", EventKind::Unblocked);
    let cancelled = event(now, "", EventKind::Cancelled);
    let mut woken = Vec::new();
    for first in ended {
        let mut level = vec![first];
        while !level.is_empty() {
            let targets: Vec<serde_json::Value> = level
                .iter()
                .map(|(t, code, status)| json!([t, code.as_str(), status]))
                .collect();
            let hits: Vec<(String, String, String)> = sqlx::query_as(queries::EDGES_END)
                .bind(serde_json::Value::from(targets).to_string())
                .fetch_all(&mut *conn)
                .await
                .map_err(m)?;
            // A held edge changes nothing else: its waiter stays blocked
            // with the same count of open edges.
            let mut hits: Vec<(String, String)> = hits
                .into_iter()
                .filter(|(.., state)| state != "h")
                .map(|(w, t, _)| (w, t))
                .collect();
            if hits.is_empty() {
                break;
            }
            let position: HashMap<&str, usize> = level
                .iter()
                .enumerate()
                .map(|(i, (t, ..))| (t.as_str(), i))
                .collect();
            hits.sort_by(|a, b| {
                let pa = position.get(a.1.as_str()).copied().unwrap_or(usize::MAX);
                let pb = position.get(b.1.as_str()).copied().unwrap_or(usize::MAX);
                pa.cmp(&pb).then_with(|| a.0.cmp(&b.0))
            });
            let mut ids: Vec<&str> = hits.iter().map(|(w, _)| w.as_str()).collect();
            ids.sort_unstable();
            ids.dedup();
            type Row = (
                String,
                String,
                String,
                Option<i64>,
                Option<String>,
                Option<i64>,
            );
            let rows: Vec<Row> = sqlx::query_as(queries::WAITERS_READ)
                .bind(json!(ids).to_string())
                .fetch_all(&mut *conn)
                .await
                .map_err(m)?;
            let mut waiters: BTreeMap<String, Waiter> = BTreeMap::new();
            for (id, jobtype, lock, pending, policy, waited) in rows {
                let cancel = stored_deps(pending, policy.as_deref())?
                    .is_none_or(|d| d.policy == DependencyFailure::Cancel);
                waiters.insert(
                    id,
                    Waiter {
                        jobtype,
                        lock,
                        pending: pending.unwrap_or(0),
                        cancel,
                        waited: waited.is_some(),
                        kind: "n",
                        note: String::new(),
                    },
                );
            }
            let mut next = Vec::new();
            let mut archived = Vec::new();
            for (w, t) in &hits {
                let Some(st) = waiters.get_mut(w) else {
                    continue;
                };
                st.pending = (st.pending - 1).max(0);
                if st.lock != LOCK_BLOCKED {
                    continue;
                }
                let code = position
                    .get(t.as_str())
                    .map_or(ResultCode::Ok, |&i| level[i].1);
                if code != ResultCode::Ok && st.cancel {
                    st.lock = LOCK_DONE.to_owned();
                    st.kind = "c";
                    st.note = format!("[jobstore] dependency {t} ended {code}\n");
                    archived.push(st.jobtype.clone());
                    if st.waited {
                        next.push((w.clone(), ResultCode::Cancelled, 0));
                    }
                } else if st.pending == 0 {
                    st.lock = String::new();
                    st.kind = "u";
                    woken.push(st.jobtype.clone());
                }
            }
            let changes: Vec<serde_json::Value> = waiters
                .iter()
                .map(|(id, st)| json!({"id": id, "n": st.pending, "k": st.kind, "o": hex(st.note.as_bytes())}))
                .collect();
            sqlx::query(queries::WAITERS_APPLY)
                .bind(serde_json::Value::from(changes).to_string())
                .bind(now)
                .bind(now + ARCHIVE_HORIZON_MS)
                .bind(unblocked.as_str())
                .bind(cancelled.as_str())
                .execute(&mut *conn)
                .await
                .map_err(m)?;
            let delta = counts_delta(
                archived
                    .iter()
                    .map(|j| (j.as_str(), Some(ResultCode::Cancelled.as_str()))),
                1,
            )?;
            if let Some(delta) = delta {
                sqlx::query(queries::COUNTS_ADD)
                    .bind(delta)
                    .execute(&mut *conn)
                    .await
                    .map_err(m)?;
            }
            level = next;
        }
    }
    Ok(woken)
}

/// Adds one row of `queries/job_waits.sql` or `queries/waits_of.sql` to
/// `waits`: part 1 a count of edges by state (`'p'` pending, `'h'` held,
/// `'s'` skipped, `'d'` done) and code, part 2 an edge of the page.
fn add_wait_row(
    waits: &mut Waits,
    part: i64,
    target: Option<String>,
    state: Option<String>,
    code: Option<String>,
    status: Option<i64>,
    n: i64,
) -> Result<()> {
    let code = || {
        ResultCode::from_str(code.as_deref().unwrap_or(ResultCode::Ok.as_str()))
            .map_err(|e| Error::backend("stored edge result code", e))
    };
    let status =
        || u16::try_from(status.unwrap_or(0)).map_err(|e| Error::backend("stored edge status", e));
    let state = match state.as_deref() {
        None => return Ok(()),
        Some("p") => EdgeState::Pending,
        Some("s") => EdgeState::Skipped,
        Some("h") => EdgeState::Held {
            code: code()?,
            status: if part == 2 { status()? } else { 0 },
        },
        Some("d") => EdgeState::Done {
            code: code()?,
            status: if part == 2 { status()? } else { 0 },
        },
        Some(other) => {
            return Err(Error::backend_msg(format!(
                "stored edge state {other:?} is not p, h, d or s"
            )));
        }
    };
    match (part, target) {
        (1, _) => waits.count(state, count(n)),
        (2, Some(target)) => waits.edges.push(WaitEdge { target, state }),
        _ => {}
    }
    Ok(())
}

/// Drops the edges of deleted or purged waiters, in the caller's
/// transaction.
async fn forget_waiters(conn: &mut SqliteConnection, ids: &[&str], what: &str) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    sqlx::query(queries::FORGET_WAITERS)
        .bind(serde_json::json!(ids).to_string())
        .execute(&mut *conn)
        .await
        .map_err(|e| error::map(what, e))?;
    Ok(())
}

/// Splits edits into JSON arrays of `{"id", "p", "dt", "d"}` objects (see
/// `queries/edit_jobs.sql`; absent fields are null, payloads hex) of at
/// most [`RELEASE_CHUNK_OUTPUT`] bytes of payload each (one for any
/// ordinary batch).
fn edit_chunks(edits: &[JobEdit]) -> Result<Vec<String>> {
    use serde_json::json;
    split_by_size(edits, RELEASE_CHUNK_OUTPUT, |e| {
        e.data.as_ref().map_or(0, Vec::len)
    })
    .into_iter()
    .filter(|run| !run.is_empty())
    .map(|run| {
        let entries: Vec<serde_json::Value> = run
            .iter()
            .map(|e| {
                json!({
                    "id": e.id,
                    "p": e.priority,
                    "dt": e.run_at,
                    "d": e.data.as_deref().map(hex),
                })
            })
            .collect();
        serde_json::to_string(&entries).map_err(|e| Error::backend("encoding edits as JSON", e))
    })
    .collect()
}

/// How one [`JobQuery`] is read: the statement's shape and the values of
/// its parameters (see `queries/list_*.sql`).
struct ListPlan {
    template: &'static str,
    types: ListTypes,
    /// The index the jobtypes are walked on, and its partial-index
    /// condition.
    rows: (&'static str, &'static str),
    /// Waiting and expired: the cursor's priority (above every priority
    /// without a cursor).
    cursor_priority: i64,
    /// The `(dt, id)` the ranges start after (ascending orders) or end
    /// before (archived).
    bound: (Millis, String),
    low: String,
    high: String,
    exact: String,
}

impl ListPlan {
    fn new(query: &JobQuery, now: Millis) -> Result<Self> {
        let after: Option<&SortKey> = query.resume_after()?;
        let (types, low, high, exact) = match &query.jobtypes {
            JobtypeFilter::All => (ListTypes::Range, String::new(), "~".to_owned(), "[]".into()),
            JobtypeFilter::Prefix(p) => (
                ListTypes::Range,
                p.clone(),
                JobtypeFilter::prefix_bound(p),
                "[]".into(),
            ),
            JobtypeFilter::Exact(list) => (
                ListTypes::Exact,
                String::new(),
                String::new(),
                ids_json(list)?,
            ),
        };
        const FREE: (&str, &str) = ("jobs_free", "lock = ''");
        const LOCKED: (&str, &str) = ("jobs_locked", "lock NOT IN ('', '__done')");
        const DONE: (&str, &str) = ("jobs_done_type", "lock = '__done'");
        let key = |k: &SortKey| (k.dt, k.id.clone());
        // After the cursor in claim order; without one, before everything.
        let claim_order = || match after {
            Some(k) => (i64::from(k.priority), key(k)),
            None => (i64::MAX, (-1, String::new())),
        };
        // Due later than now: (dt, id) > (now + 1, ''), every id being
        // longer than ''; the later of that and the cursor.
        let later_than_now = || {
            let floor = (now + 1, String::new());
            (0, after.map(key).filter(|k| *k > floor).unwrap_or(floor))
        };
        let (template, rows, (cursor_priority, bound)) = match query.state {
            JobState::Waiting => (queries::LIST_WAITING, FREE, claim_order()),
            JobState::Expired => (queries::LIST_EXPIRED, LOCKED, claim_order()),
            JobState::Scheduled => (queries::LIST_SCHEDULED, FREE, later_than_now()),
            JobState::Running => (queries::LIST_RUNNING, LOCKED, later_than_now()),
            // Blocked rows sit at the end of jobs_locked, their dt offset
            // by BLOCKED_BASE_MS; the cursor holds the not-before time.
            JobState::Blocked => (
                queries::LIST_BLOCKED,
                LOCKED,
                (
                    0,
                    after.map_or((BLOCKED_BASE_MS, String::new()), |k| {
                        (BLOCKED_BASE_MS + k.dt, k.id.clone())
                    }),
                ),
            ),
            JobState::Archived => {
                // Archived before `archived.to`: (done_dt, id) < (to, '');
                // the earlier of that and the cursor.
                let ceiling = (query.archived.to.unwrap_or(i64::MAX), String::new());
                let bound = after.map(key).filter(|k| *k < ceiling).unwrap_or(ceiling);
                let template = if query.jobtypes == JobtypeFilter::All {
                    queries::LIST_ARCHIVED_CODE
                } else {
                    queries::LIST_ARCHIVED_TYPE
                };
                (template, DONE, (0, bound))
            }
        };
        Ok(ListPlan {
            template,
            types,
            rows,
            cursor_priority,
            bound,
            low,
            high,
            exact,
        })
    }
}

fn decode<T>(what: &str, r: std::result::Result<T, sqlx::Error>) -> Result<T> {
    r.map_err(|e| error::map(what, e))
}

fn job_from_row(row: &SqliteRow) -> Result<Job> {
    let d = |e| error::map("decoding a job", e);
    let attempts: i64 = row.try_get("attempts").map_err(d)?;
    let attempts = u32::try_from(attempts).map_err(|e| Error::backend("stored attempts", e))?;
    let lock: String = row.try_get("lock").map_err(d)?;
    let done_dt: Option<Millis> = row.try_get("done_dt").map_err(d)?;
    let code: Option<String> = row.try_get("result_code").map_err(d)?;
    let result = match code {
        None => None,
        Some(code) => {
            let status: Option<i64> = row.try_get("result_status").map_err(d)?;
            let output: Option<Vec<u8>> = row.try_get("result_output").map_err(d)?;
            Some(stored_result(&code, status, output.unwrap_or_default())?)
        }
    };
    // The claim kept in the row: by the lock while the job is locked, by
    // `claimed_by` once the release that ended it archived the job (whose
    // `Archived` event is then the row's result too).
    let archived = lock == LOCK_DONE;
    let claim = row
        .try_get::<Option<Millis>, _>("claimed_at")
        .map_err(d)?
        .map(|at| -> Result<PendingClaim> {
            let by = if archived {
                row.try_get::<Option<String>, _>("claimed_by")
                    .map_err(d)?
                    .unwrap_or_default()
            } else {
                lock.clone()
            };
            Ok(PendingClaim {
                at,
                by,
                attempt: attempts,
            })
        })
        .transpose()?;
    let ended = match (&result, done_dt) {
        (Some(r), Some(at)) if archived => Some((at, r.code, r.status)),
        _ => None,
    };
    let stored = history_from_json(&row.try_get::<String, _>("history").map_err(d)?)?;
    let create_dt: Millis = row.try_get("create_dt").map_err(d)?;
    Ok(Job {
        id: row.try_get("id").map_err(d)?,
        jobtype: row.try_get("jobtype").map_err(d)?,
        data: row
            .try_get::<Option<Vec<u8>>, _>("data")
            .map_err(d)?
            .unwrap_or_default(),
        priority: row.try_get("priority").map_err(d)?,
        dt: read_dt(row.try_get("dt").map_err(d)?, &lock),
        attempts,
        create_dt,
        done_dt,
        result,
        cancel_requested: row.try_get::<i64, _>("cancel_requested").map_err(d)? != 0,
        tags: tags_from_json(&row.try_get::<String, _>("tags").map_err(d)?)?,
        history: complete_history(with_added(stored, create_dt), claim, ended),
        claimed_due: None,
        flow: FlowState::from_stored(
            row.try_get("unique_key").map_err(d)?,
            row.try_get::<Option<String>, _>("repeat")
                .map_err(d)?
                .as_deref(),
            stored_deps(
                row.try_get("pending").map_err(d)?,
                row.try_get::<Option<String>, _>("dep_policy")
                    .map_err(d)?
                    .as_deref(),
            )?,
        ),
        lock,
        trace: row
            .try_get::<Option<String>, _>("traceparent")
            .map_err(d)?
            .map(|traceparent| -> Result<TraceContext> {
                Ok(TraceContext {
                    traceparent,
                    tracestate: row.try_get("tracestate").map_err(d)?,
                })
            })
            .transpose()?,
    })
}

/// A job's `dt` as read: a blocked job's not-before time (stored as
/// [`BLOCKED_BASE_MS`] + it), every other job's as stored.
fn read_dt(dt: Millis, lock: &str) -> Millis {
    if lock == LOCK_BLOCKED {
        dt - BLOCKED_BASE_MS
    } else {
        dt
    }
}

/// What `dep_policy` marks a run handed its dependencies' outputs with
/// (`JobFlow::with_outputs`), after the policy's name.
const WITH_OUTPUTS: &str = "+outputs";

/// The stored `dep_policy` of a job with dependencies: the policy's name,
/// then [`WITH_OUTPUTS`] if its run gets their outputs.
fn stored_policy(flow: &JobFlow) -> String {
    let name = flow.on_dependency_failure.name();
    if flow.with_outputs {
        format!("{name}{WITH_OUTPUTS}")
    } else {
        name.to_owned()
    }
}

/// A job's dependencies as stored: `pending` and `dep_policy` (both `NULL`
/// for a job added without dependencies).
fn stored_deps(pending: Option<i64>, policy: Option<&str>) -> Result<Option<StoredDeps>> {
    let Some(pending) = pending else {
        return Ok(None);
    };
    let pending =
        u32::try_from(pending).map_err(|e| Error::backend("stored pending dependencies", e))?;
    let (policy, with_outputs) = match policy {
        Some(p) => {
            let (name, outputs) = match p.strip_suffix(WITH_OUTPUTS) {
                Some(name) => (name, true),
                None => (p, false),
            };
            let policy = DependencyFailure::from_str(name)
                .map_err(|e| Error::backend("stored dependency policy", e))?;
            (policy, outputs)
        }
        None => (DependencyFailure::default(), false),
    };
    Ok(Some(
        StoredDeps::new(pending, policy).with_outputs(with_outputs),
    ))
}

/// A job's stored result: its code's name, its status (`NULL` reads 0)
/// and its output.
fn stored_result(code: &str, status: Option<i64>, output: Vec<u8>) -> Result<JobResult> {
    Ok(JobResult {
        code: ResultCode::from_str(code).map_err(|e| Error::backend("stored result code", e))?,
        status: u16::try_from(status.unwrap_or(0))
            .map_err(|e| Error::backend("stored result status", e))?,
        output,
    })
}

/// What a claim knows of every job it takes: the rest comes from the
/// row `queries/claim_take.sql` returns.
struct Claimed<'a> {
    jobtype: &'a str,
    owner: &'a str,
    expires: Millis,
    now: Millis,
}

impl Claimed<'_> {
    /// The claimed job of a row of `claim_take.sql`: id, priority,
    /// attempts, create_dt, data, and the JSON array of the fields usually
    /// empty (`NULL` when all are).
    fn job(&self, row: &SqliteRow) -> Result<Job> {
        type Rest = (
            Option<String>,
            Option<i64>,
            Option<String>,
            i64,
            Vec<String>,
            Vec<JobEvent>,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<i64>,
            Option<String>,
        );
        let d = |e| error::map("decoding a claimed job", e);
        let attempts: i64 = row.try_get(2).map_err(d)?;
        let attempts = u32::try_from(attempts).map_err(|e| Error::backend("stored attempts", e))?;
        let create_dt: Millis = row.try_get(3).map_err(d)?;
        let rest: Option<String> = row.try_get(5).map_err(d)?;
        let (
            code,
            status,
            output,
            cancel,
            tags,
            stored,
            traceparent,
            tracestate,
            key,
            rule,
            pending,
            policy,
        ): Rest = match rest {
            None => (
                None,
                None,
                None,
                0,
                Vec::new(),
                Vec::new(),
                None,
                None,
                None,
                None,
                None,
                None,
            ),
            Some(text) => serde_json::from_str(&text)
                .map_err(|e| Error::backend("malformed claimed job fields", e))?,
        };
        let result = match code {
            None => None,
            Some(code) => {
                let output = hex::decode(output.unwrap_or_default())
                    .map_err(|e| Error::backend("stored result output", e))?;
                Some(stored_result(&code, status, output)?)
            }
        };
        let claim = PendingClaim {
            at: self.now,
            by: self.owner.to_owned(),
            attempt: attempts,
        };
        Ok(Job {
            id: row.try_get(0).map_err(d)?,
            jobtype: self.jobtype.to_owned(),
            data: row
                .try_get::<Option<Vec<u8>>, _>(4)
                .map_err(d)?
                .unwrap_or_default(),
            priority: row.try_get(1).map_err(d)?,
            dt: self.expires,
            lock: self.owner.to_owned(),
            attempts,
            create_dt,
            done_dt: None,
            result,
            cancel_requested: cancel != 0,
            tags,
            history: complete_history(with_added(stored, create_dt), Some(claim), None),
            claimed_due: None,
            flow: FlowState::from_stored(
                key,
                rule.as_deref(),
                stored_deps(pending, policy.as_deref())?,
            ),
            trace: traceparent.map(|traceparent| TraceContext {
                traceparent,
                tracestate,
            }),
        })
    }
}

/// A stored limit column: `NULL` is not set; a value out of the field's
/// range (only by editing the database by hand) is a backend error.
fn limit<T: TryFrom<i64>>(row: &SqliteRow, column: &str) -> Result<Option<T>> {
    let v: Option<i64> = row
        .try_get(column)
        .map_err(|e| error::map("decoding a handler", e))?;
    v.map(|v| {
        T::try_from(v).map_err(|_| {
            Error::backend_msg(format!("stored handler limit {column} {v} is out of range"))
        })
    })
    .transpose()
}

/// A limit as bound to its column (validated limits fit an `i64`).
fn limit_param<T: Into<u64>>(v: Option<T>) -> Option<i64> {
    v.map(|v| i64::try_from(v.into()).unwrap_or(i64::MAX))
}

fn handler_from_row(row: &SqliteRow) -> Result<HandlerVersion> {
    let d = |e| error::map("decoding a handler", e);
    let seq: i64 = row.try_get("seq").map_err(d)?;
    let limits = HandlerLimits {
        max_attempts: limit(row, "max_attempts")?,
        max_age_ms: limit(row, "max_age_ms")?,
        time_limit_ms: limit(row, "time_limit_ms")?,
        concurrency: limit(row, "concurrency")?,
        backoff_base_ms: limit(row, "backoff_base_ms")?,
        backoff_max_ms: limit(row, "backoff_max_ms")?,
    };
    Ok(HandlerVersion {
        id: seq.to_string(),
        jobtype: row.try_get("jobtype").map_err(d)?,
        dt: row.try_get("dt").map_err(d)?,
        handler: Handler {
            method: row.try_get("lang").map_err(d)?,
            body: row.try_get("body").map_err(d)?,
            eid: row.try_get("eid").map_err(d)?,
            before: row.try_get("before_run").map_err(d)?,
            before_each: row.try_get("before_each").map_err(d)?,
            after_each: row.try_get("after_each").map_err(d)?,
            limits,
        },
    })
}

fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

#[async_trait]
impl JobStore for SqliteStore {
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
        if jobs.is_empty() {
            return Ok(AddOutcome::default());
        }
        let tags = jobs
            .iter()
            .map(|j| serde_json::to_string(&j.tags).map_err(|e| Error::backend("encoding tags", e)))
            .collect::<Result<Vec<_>>>()?;
        if jobs.iter().any(|j| j.flow.is_some()) {
            return self.add_flow_jobs(jobs, &tags, now).await;
        }
        let mut tx = self.begin_write("add_jobs").await?;
        let mut inserted: HashSet<String> = HashSet::with_capacity(jobs.len());
        for (chunk, tags) in jobs.chunks(ADD_CHUNK).zip(tags.chunks(ADD_CHUNK)) {
            let mut q =
                sqlx::query_scalar::<_, String>(AssertSqlSafe(queries::add_jobs(chunk.len())));
            for (job, tags) in chunk.iter().zip(tags) {
                q = q
                    .bind(job.id.as_str())
                    .bind(job.jobtype.as_str())
                    .bind(job.priority)
                    .bind(job.run_at.unwrap_or(now))
                    .bind(now)
                    .bind(job.data.as_slice())
                    .bind(tags.as_str())
                    .bind(job.trace.as_ref().map(|t| t.traceparent.as_str()))
                    .bind(job.trace.as_ref().and_then(|t| t.tracestate.as_deref()));
            }
            let new = q
                .fetch_all(&mut *tx)
                .await
                .map_err(|e| error::map("add_jobs", e))?;
            inserted.extend(new);
        }
        tx.commit().await.map_err(|e| error::map("add_jobs", e))?;
        let mut outcome = AddOutcome::default();
        let mut jobtypes = Vec::new();
        for job in jobs {
            if inserted.contains(&job.id) {
                outcome.new.push(job.id.clone());
                jobtypes.push(job.jobtype.clone());
            } else {
                outcome.existing.push(job.id.clone());
            }
        }
        self.notify(jobtypes);
        Ok(outcome)
    }

    async fn waiting_jobtypes(&self, now: Millis) -> Result<Vec<WaitingJobtype>> {
        validate::time("now", now)?;
        let cap = i64::try_from(Self::WAITING_COUNT_CAP).unwrap_or(i64::MAX);
        let rows = sqlx::query(queries::WAITING_JOBTYPES)
            .bind(now)
            .bind(cap)
            .fetch_all(&self.inner.reader)
            .await
            .map_err(|e| error::map("waiting_jobtypes", e))?;
        let mut waiting = Vec::with_capacity(rows.len());
        for r in &rows {
            let n = count(decode("waiting_jobtypes", r.try_get("n"))?);
            if n > 0 {
                waiting.push(WaitingJobtype {
                    jobtype: decode("waiting_jobtypes", r.try_get("jobtype"))?,
                    count: n,
                });
            }
        }
        Ok(waiting)
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
        // A read first, so that an empty claim never takes the write lock.
        let any: bool = sqlx::query_scalar(queries::CLAIM_EXISTS)
            .bind(jobtype)
            .bind(now)
            .fetch_one(&self.inner.reader)
            .await
            .map_err(|e| error::map("claim_jobs", e))?;
        if !any {
            return Ok(Vec::new());
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut tx = self.begin_write("claim_jobs").await?;
        let picked: Vec<(String, Millis)> = sqlx::query_as(queries::CLAIM_PICK)
            .bind(jobtype)
            .bind(now)
            .bind(limit)
            .fetch_all(&mut *tx)
            .await
            .map_err(|e| error::map("claim_jobs", e))?;
        if picked.is_empty() {
            tx.commit().await.map_err(|e| error::map("claim_jobs", e))?;
            return Ok(Vec::new());
        }
        let ids: Vec<String> = picked.iter().map(|(id, _)| id.clone()).collect();
        let rows = sqlx::query(queries::CLAIM_TAKE)
            .bind(owner)
            .bind(now + duration_ms(lease))
            .bind(ids_json(&ids)?)
            .bind(now)
            .fetch_all(&mut *tx)
            .await
            .map_err(|e| error::map("claim_jobs", e))?;
        tx.commit().await.map_err(|e| error::map("claim_jobs", e))?;
        // RETURNING has no defined order: put the jobs back in claim order,
        // each with the dt it had before the claim.
        let picked: HashMap<&str, (usize, Millis)> = picked
            .iter()
            .enumerate()
            .map(|(i, (id, due))| (id.as_str(), (i, *due)))
            .collect();
        let claim = Claimed {
            jobtype,
            owner,
            expires: now + duration_ms(lease),
            now,
        };
        let mut jobs = rows
            .iter()
            .map(|row| claim.job(row))
            .collect::<Result<Vec<_>>>()?;
        for job in &mut jobs {
            job.claimed_due = picked.get(job.id.as_str()).map(|&(_, due)| due);
        }
        jobs.sort_by_key(|j| picked.get(j.id.as_str()).map_or(usize::MAX, |&(i, _)| i));
        Ok(jobs)
    }

    async fn renew_locks(
        &self,
        ids: &[String],
        owner: &str,
        lease: Duration,
        now: Millis,
    ) -> Result<Renewal> {
        validate::renew(ids, owner, lease, now)?;
        if ids.is_empty() {
            return Ok(Renewal::default());
        }
        let rows: Vec<(String, i64)> = sqlx::query_as(queries::RENEW_LOCKS)
            .bind(now + duration_ms(lease))
            .bind(owner)
            .bind(ids_json(ids)?)
            .fetch_all(&self.inner.writer)
            .await
            .map_err(|e| error::map("renew_locks", e))?;
        let mut renewal = Renewal::default();
        for (id, marked) in rows {
            if marked != 0 {
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
        let keep = keep_chunks(releases, owner, now)?;
        let deletes: Vec<&str> = releases
            .iter()
            .filter(|r| matches!(r.how, Release::Delete))
            .map(|r| r.id.as_str())
            .collect();
        let deletes = if deletes.is_empty() {
            None
        } else {
            Some(
                serde_json::to_string(&deletes)
                    .map_err(|e| Error::backend("encoding ids as JSON", e))?,
            )
        };
        let archives = releases
            .iter()
            .any(|r| matches!(r.how, Release::Archive(_)));
        let m = |e| error::map("release_jobs", e);
        let keep_query = |json: String| {
            sqlx::query_as::<_, (String, String, Option<i64>)>(queries::RELEASE_KEEP)
                .bind(owner)
                .bind(now)
                .bind(now + ARCHIVE_HORIZON_MS)
                .bind(json)
        };
        let delete_query = |json: String| {
            sqlx::query_scalar::<_, String>(queries::RELEASE_DELETE)
                .bind(owner)
                .bind(json)
        };
        // The result code of each entry that archives its job, None for
        // those that free it: the statement returns ids and jobtypes only.
        let archives_code: HashMap<&str, Option<&str>> = releases
            .iter()
            .filter_map(|r| match &r.how {
                Release::Archive(res) => Some((r.id.as_str(), Some(res.code.as_str()))),
                Release::Retry { .. } | Release::Unget | Release::Repeat { .. } => {
                    Some((r.id.as_str(), None))
                }
                Release::Delete => None,
            })
            .collect();
        let code_of = |id: &str| archives_code.get(id).copied().flatten();
        // What each entry's job ends with, if it leaves the live states
        // (an archive: its result; a delete: cancelled, 0), in list order:
        // the edges of those some job waits for end in that order.
        let position: HashMap<&str, usize> = releases
            .iter()
            .enumerate()
            .map(|(i, r)| (r.id.as_str(), i))
            .collect();
        let end_of = |id: &str| -> Option<(String, ResultCode, u16)> {
            let r = &releases[*position.get(id)?];
            match &r.how {
                Release::Archive(res) => Some((r.id.clone(), res.code, res.status)),
                Release::Delete => Some((r.id.clone(), ResultCode::Cancelled, 0)),
                _ => None,
            }
        };
        let in_order = |mut ids: Vec<&str>| -> Vec<(String, ResultCode, u16)> {
            ids.sort_by_key(|id| position.get(id).copied().unwrap_or(usize::MAX));
            ids.into_iter().filter_map(end_of).collect()
        };
        let mut kept: Vec<(String, String, Option<i64>)> = Vec::new();
        let mut deleted: Vec<String> = Vec::new();
        let mut woken: Vec<String> = Vec::new();
        match (keep.len(), deletes) {
            (0, None) => return Ok(Vec::new()),
            // One statement that archives nothing: autocommit.
            (1, None) if !archives => {
                let json = keep.into_iter().next().expect("one chunk");
                kept = keep_query(json)
                    .fetch_all(&self.inner.writer)
                    .await
                    .map_err(m)?;
            }
            // Archives of one chunk, the usual release: the transaction
            // begins with the release and ends with the counts, in two
            // calls (see RELEASE_BEGIN).
            (1, None) => {
                let json = keep.into_iter().next().expect("one chunk");
                let mut conn = ScriptConn::acquire(&self.inner.writer).await.map_err(m)?;
                kept = sqlx::query_as::<_, (String, String, Option<i64>)>(queries::RELEASE_BEGIN)
                    .bind(owner)
                    .bind(now)
                    .bind(now + ARCHIVE_HORIZON_MS)
                    .bind(json)
                    .fetch_all(&mut **conn)
                    .await
                    .map_err(m)?;
                // Archived jobs some job waits for (never a plain job):
                // their edges end before the commit.
                let waited: Vec<&str> = kept
                    .iter()
                    .filter(|(id, _, w)| w.is_some() && code_of(id).is_some())
                    .map(|(id, ..)| id.as_str())
                    .collect();
                if !waited.is_empty() {
                    woken = end_edges(&mut conn, in_order(waited), now, "release_jobs").await?;
                }
                let archived = kept
                    .iter()
                    .filter_map(|(id, jobtype, _)| Some((jobtype.as_str(), Some(code_of(id)?))));
                match counts_delta(archived, 1)? {
                    Some(delta) => sqlx::query(queries::COUNTS_ADD_COMMIT)
                        .bind(delta)
                        .execute(&mut **conn)
                        .await
                        .map_err(m)?,
                    None => sqlx::query("COMMIT")
                        .execute(&mut **conn)
                        .await
                        .map_err(m)?,
                };
                conn.finished();
            }
            // Deletes alone: jobs without edges in autocommit; the
            // others (and entries lost to another owner) in a transaction
            // with their edges.
            (0, Some(json)) => {
                deleted = delete_query(json)
                    .fetch_all(&self.inner.writer)
                    .await
                    .map_err(m)?;
                let done: HashSet<&str> = deleted.iter().map(String::as_str).collect();
                let rest: Vec<&str> = releases
                    .iter()
                    .filter(|r| matches!(r.how, Release::Delete) && !done.contains(r.id.as_str()))
                    .map(|r| r.id.as_str())
                    .collect();
                if !rest.is_empty() {
                    let mut tx = self.begin_write("release_jobs").await?;
                    let gone = release_delete_flow(&mut tx, owner, &rest).await?;
                    let ended = in_order(
                        gone.iter()
                            .filter(|(_, w, _)| *w)
                            .map(|(id, ..)| id.as_str())
                            .collect(),
                    );
                    woken = self.end_deleted(&mut tx, &gone, ended, now).await?;
                    tx.commit().await.map_err(m)?;
                    deleted.extend(gone.into_iter().map(|(id, ..)| id));
                }
            }
            // Several chunks (over 32 MiB of output), or deletes beside
            // them: one transaction, one commit, the counts from the
            // released rows.
            (_, deletes) => {
                let mut tx = self.begin_write("release_jobs").await?;
                for json in keep {
                    kept.extend(keep_query(json).fetch_all(&mut *tx).await.map_err(m)?);
                }
                let mut gone = Vec::new();
                if deletes.is_some() {
                    let ids: Vec<&str> = releases
                        .iter()
                        .filter(|r| matches!(r.how, Release::Delete))
                        .map(|r| r.id.as_str())
                        .collect();
                    gone = release_delete_flow(&mut tx, owner, &ids).await?;
                }
                let waiters: Vec<&str> = gone
                    .iter()
                    .filter(|(_, _, waiter)| *waiter)
                    .map(|(id, ..)| id.as_str())
                    .collect();
                forget_waiters(&mut tx, &waiters, "release_jobs").await?;
                let waited: Vec<&str> = kept
                    .iter()
                    .filter(|(id, _, w)| w.is_some() && code_of(id).is_some())
                    .map(|(id, ..)| id.as_str())
                    .chain(
                        gone.iter()
                            .filter(|(_, w, _)| *w)
                            .map(|(id, ..)| id.as_str()),
                    )
                    .collect();
                if !waited.is_empty() {
                    woken = end_edges(&mut tx, in_order(waited), now, "release_jobs").await?;
                }
                deleted = gone.into_iter().map(|(id, ..)| id).collect();
                let archived = kept
                    .iter()
                    .filter_map(|(id, jobtype, _)| Some((jobtype.as_str(), Some(code_of(id)?))));
                add_counts(&mut tx, counts_delta(archived, 1)?, "release_jobs").await?;
                tx.commit().await.map_err(m)?;
            }
        }
        let mut released = deleted;
        let mut freed = woken;
        for (id, jobtype, _) in kept {
            if code_of(&id).is_none() {
                freed.push(jobtype);
            }
            released.push(id);
        }
        self.notify(freed);
        Ok(released)
    }

    async fn update_data(&self, id: &str, owner: &str, data: &[u8], now: Millis) -> Result<bool> {
        validate::update_data(id, owner, data, &self.capabilities(), now)?;
        let done = sqlx::query(queries::UPDATE_DATA)
            .bind(data)
            .bind(id)
            .bind(owner)
            .execute(&self.inner.writer)
            .await
            .map_err(|e| error::map("update_data", e))?;
        Ok(done.rows_affected() > 0)
    }

    async fn cancel_jobs(&self, ids: &[String], now: Millis) -> Result<CancelOutcome> {
        validate::cancel(ids, now)?;
        if ids.is_empty() {
            return Ok(CancelOutcome::default());
        }
        let m = |e| error::map("cancel_jobs", e);
        let cancel = |ids: String| {
            sqlx::query_as::<_, (String, String, String, Option<i64>)>(queries::CANCEL_JOBS)
                .bind(now)
                .bind(now + ARCHIVE_HORIZON_MS)
                .bind(ids)
                .bind(event(now, "", EventKind::Cancelled))
                .bind(event(now, "", EventKind::CancelRequested))
        };
        let mut tx = self.begin_write("cancel_jobs").await?;
        let mut rows = cancel(ids_json(ids)?)
            .fetch_all(&mut *tx)
            .await
            .map_err(m)?;
        let mut woken = Vec::new();
        if rows
            .iter()
            .any(|(_, lock, _, waited)| lock == LOCK_DONE && waited.is_some())
        {
            // A job some job waits for was cancelled: its cascade may reach
            // jobs later in the list, which the reference cancels one id
            // after the other. Done again that way (this path only).
            tx.rollback().await.map_err(m)?;
            tx = self.begin_write("cancel_jobs").await?;
            rows.clear();
            for id in ids {
                let row = cancel(ids_json(std::slice::from_ref(id))?)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(m)?;
                let Some(row) = row else {
                    continue;
                };
                if row.1 == LOCK_DONE && row.3.is_some() {
                    let ended = vec![(id.clone(), ResultCode::Cancelled, 0)];
                    woken.extend(end_edges(&mut tx, ended, now, "cancel_jobs").await?);
                }
                rows.push(row);
            }
        }
        let cancelled = rows
            .iter()
            .filter(|(_, lock, ..)| lock == LOCK_DONE)
            .map(|(_, _, jobtype, _)| (jobtype.as_str(), Some(ResultCode::Cancelled.as_str())));
        add_counts(&mut tx, counts_delta(cancelled, 1)?, "cancel_jobs").await?;
        tx.commit().await.map_err(m)?;
        self.notify(woken);
        let mut outcome = CancelOutcome::default();
        for (id, lock, ..) in rows {
            if lock == LOCK_DONE {
                outcome.cancelled.push(id);
            } else {
                outcome.marked.push(id);
            }
        }
        Ok(outcome)
    }

    async fn get_job(&self, id: &str) -> Result<Option<Job>> {
        validate::id(id)?;
        let row = sqlx::query(queries::GET_JOB)
            .bind(id)
            .fetch_optional(&self.inner.reader)
            .await
            .map_err(|e| error::map("get_job", e))?;
        row.as_ref().map(job_from_row).transpose()
    }

    async fn get_jobs(&self, ids: &[String]) -> Result<Vec<Job>> {
        validate::ids(ids)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(queries::GET_JOBS)
            .bind(ids_json(ids)?)
            .fetch_all(&self.inner.reader)
            .await
            .map_err(|e| error::map("get_jobs", e))?;
        rows.iter().map(job_from_row).collect()
    }

    async fn purge_archived(&self, before: Millis, codes: &[ResultCode]) -> Result<u64> {
        validate::time("before", before)?;
        if codes.is_empty() {
            return Ok(0);
        }
        let codes = codes_json(codes)?;
        // Bounded statements: other writes (claims, adds) get the single
        // writer between them. Archived jobs only ever get newer than
        // `before`, so the batches run out.
        let batch = self.inner.purge_batch;
        let mut total = 0;
        let m = |e| error::map("purge_archived", e);
        loop {
            let mut tx = self.begin_write("purge_archived").await?;
            let gone: Vec<(String, Option<String>, Option<String>)> =
                sqlx::query_as(queries::PURGE_ARCHIVED)
                    .bind(before)
                    .bind(i64::from(batch))
                    .bind(&codes)
                    .fetch_all(&mut *tx)
                    .await
                    .map_err(m)?;
            let delta = counts_delta(gone.iter().map(|(j, c, _)| (j.as_str(), c.as_deref())), -1)?;
            add_counts(&mut tx, delta, "purge_archived").await?;
            let waiters: Vec<&str> = gone.iter().filter_map(|(.., w)| w.as_deref()).collect();
            forget_waiters(&mut tx, &waiters, "purge_archived").await?;
            tx.commit().await.map_err(m)?;
            let n = u64::try_from(gone.len()).unwrap_or(u64::MAX);
            total += n;
            if n < u64::from(batch) {
                return Ok(total);
            }
        }
    }

    async fn job_counts(&self, now: Millis) -> Result<Vec<JobCounts>> {
        validate::time("now", now)?;
        let rows = sqlx::query(queries::JOB_COUNTS)
            .bind(now)
            .fetch_all(&self.inner.reader)
            .await
            .map_err(|e| error::map("job_counts", e))?;
        let mut by_type: BTreeMap<String, JobCounts> = BTreeMap::new();
        for row in &rows {
            let d = |e| error::map("job_counts", e);
            let jobtype: String = row.try_get("jobtype").map_err(d)?;
            let code: Option<String> = row.try_get("code").map_err(d)?;
            let c = by_type.entry(jobtype.clone()).or_insert_with(|| JobCounts {
                jobtype,
                ..JobCounts::default()
            });
            match code {
                Some(code) => {
                    let code = ResultCode::from_str(&code)
                        .map_err(|e| Error::backend("stored result code", e))?;
                    let total: i64 = row.try_get("total").map_err(d)?;
                    *c.archived.entry(code).or_default() += count(total);
                }
                None => {
                    c.waiting += count(row.try_get("waiting").map_err(d)?);
                    c.scheduled += count(row.try_get("scheduled").map_err(d)?);
                    c.running += count(row.try_get("running").map_err(d)?);
                    c.blocked += count(row.try_get("blocked").map_err(d)?);
                }
            }
        }
        Ok(by_type.into_values().collect())
    }

    async fn list_jobs(&self, query: &JobQuery, now: Millis) -> Result<JobPage> {
        validate::job_query(query, now)?;
        let plan = ListPlan::new(query, now)?;
        let sql = queries::list_jobs(
            plan.template,
            plan.types,
            plan.rows,
            query.with_data,
            query.tag.is_some(),
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(now)
            .bind(i64::try_from(query.limit + 1).unwrap_or(i64::MAX))
            .bind(plan.cursor_priority)
            .bind(plan.bound.0)
            .bind(plan.bound.1)
            .bind(query.created.from.unwrap_or(i64::MIN))
            .bind(query.created.to.unwrap_or(i64::MAX))
            .bind(query.archived.from.unwrap_or(i64::MIN))
            .bind(plan.low)
            .bind(plan.high)
            .bind(plan.exact)
            .bind(codes_json(&query.code_set())?)
            .bind(query.tag.as_deref())
            .fetch_all(&self.inner.reader)
            .await
            .map_err(|e| error::map("list_jobs", e))?;
        let jobs = rows.iter().map(job_from_row).collect::<Result<Vec<_>>>()?;
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
        let m = |e| error::map("rerun_jobs", e);
        let mut tx = self.begin_write("rerun_jobs").await?;
        let rows: Vec<(String, String, Option<String>)> = sqlx::query_as(queries::RERUN_JOBS)
            .bind(now + duration_ms(delay))
            .bind(ids_json(ids)?)
            .bind(event(
                now,
                "",
                EventKind::Rerun {
                    delay_ms: u64::try_from(duration_ms(delay)).unwrap_or(0),
                },
            ))
            .fetch_all(&mut *tx)
            .await
            .map_err(m)?;
        let left = rows.iter().map(|(_, j, c)| (j.as_str(), c.as_deref()));
        add_counts(&mut tx, counts_delta(left, -1)?, "rerun_jobs").await?;
        tx.commit().await.map_err(m)?;
        let (rerun, jobtypes): (Vec<String>, Vec<String>) = rows
            .into_iter()
            .map(|(id, jobtype, _)| (id, jobtype))
            .unzip();
        self.notify(jobtypes);
        Ok(rerun)
    }

    async fn delete_jobs(&self, ids: &[String], now: Millis) -> Result<DeleteOutcome> {
        validate::ids(ids)?;
        validate::time("now", now)?;
        if ids.is_empty() {
            return Ok(DeleteOutcome::default());
        }
        let json = ids_json(ids)?;
        let m = |e| error::map("delete_jobs", e);
        type Row = (String, String, String, Option<String>, Option<i64>, bool);
        let delete = |ids: String| sqlx::query_as::<_, Row>(queries::DELETE_JOBS).bind(ids);
        // A live job some job waits for: its edges end as cancelled.
        let ends = |(_, _, lock, _, waited, _): &Row| lock != LOCK_DONE && waited.is_some();
        let mut tx = self.begin_write("delete_jobs").await?;
        let mut rows: Vec<Row> = delete(json.clone()).fetch_all(&mut *tx).await.map_err(m)?;
        let mut woken = Vec::new();
        if rows.iter().any(ends) {
            // Its cascade may reach jobs later in the list, which the
            // reference deletes one id after the other (a job it cancels
            // first is then deleted archived). Done again that way (this
            // path only).
            tx.rollback().await.map_err(m)?;
            tx = self.begin_write("delete_jobs").await?;
            rows.clear();
            for id in ids {
                let row = delete(ids_json(std::slice::from_ref(id))?)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(m)?;
                let Some(row) = row else {
                    continue;
                };
                if row.5 {
                    forget_waiters(&mut tx, &[id.as_str()], "delete_jobs").await?;
                }
                if ends(&row) {
                    let ended = vec![(id.clone(), ResultCode::Cancelled, 0)];
                    woken.extend(end_edges(&mut tx, ended, now, "delete_jobs").await?);
                }
                rows.push(row);
            }
        } else {
            let waiters: Vec<&str> = rows.iter().filter(|r| r.5).map(|r| r.0.as_str()).collect();
            forget_waiters(&mut tx, &waiters, "delete_jobs").await?;
        }
        let archived = rows
            .iter()
            .filter(|(_, _, lock, ..)| lock == LOCK_DONE)
            .map(|(_, jobtype, _, code, ..)| (jobtype.as_str(), code.as_deref()));
        add_counts(&mut tx, counts_delta(archived, -1)?, "delete_jobs").await?;
        let running: Vec<String> = sqlx::query_scalar(queries::DELETE_LOCKED)
            .bind(&json)
            .fetch_all(&mut *tx)
            .await
            .map_err(m)?;
        tx.commit().await.map_err(m)?;
        self.notify(woken);
        let deleted = rows.into_iter().map(|(id, ..)| id).collect();
        Ok(DeleteOutcome { deleted, running })
    }

    async fn edit_jobs(&self, edits: &[JobEdit], now: Millis) -> Result<Vec<String>> {
        validate::edits(edits, &self.capabilities(), now)?;
        let chunks = edit_chunks(edits)?;
        let m = |e| error::map("edit_jobs", e);
        let edited_event = event(now, "", EventKind::Edited);
        let edit_query = |json: String| {
            sqlx::query_as::<_, (String, String, i64)>(queries::EDIT_JOBS)
                .bind(json)
                .bind(edited_event.clone())
        };
        let rows = match chunks.len() {
            0 => return Ok(Vec::new()),
            1 => {
                let json = chunks.into_iter().next().expect("one chunk");
                edit_query(json)
                    .fetch_all(&self.inner.writer)
                    .await
                    .map_err(m)?
            }
            _ => {
                let mut tx = self.begin_write("edit_jobs").await?;
                let mut rows = Vec::new();
                for json in chunks {
                    rows.extend(edit_query(json).fetch_all(&mut *tx).await.map_err(m)?);
                }
                tx.commit().await.map_err(m)?;
                rows
            }
        };
        let mut edited = Vec::with_capacity(rows.len());
        let mut due = Vec::new();
        for (id, jobtype, dt) in rows {
            if dt <= now {
                due.push(jobtype);
            }
            edited.push(id);
        }
        self.notify(due);
        Ok(edited)
    }

    async fn job_waits(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<Waits>> {
        validate::waits(id, after, limit)?;
        type Row = (
            i64,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<i64>,
            i64,
        );
        let rows: Vec<Row> = sqlx::query_as(queries::JOB_WAITS)
            .bind(id)
            .bind(after.unwrap_or(""))
            .bind(i64::try_from(limit + 1).unwrap_or(i64::MAX))
            .fetch_all(&self.inner.reader)
            .await
            .map_err(|e| error::map("job_waits", e))?;
        if !rows.iter().any(|r| r.0 == 0 && r.5 != 0) {
            return Ok(None);
        }
        let mut waits = Waits {
            id: id.to_owned(),
            ..Waits::default()
        };
        for (part, target, state, c, status, n) in rows {
            add_wait_row(&mut waits, part, target, state, c, status, n)?;
        }
        waits.end_page(limit);
        Ok(Some(waits))
    }

    async fn waits_of(&self, ids: &[String], limit: usize) -> Result<Vec<Waits>> {
        validate::waits_of(ids, limit)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        type Row = (
            i64,
            String,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<i64>,
            i64,
        );
        let rows: Vec<Row> = sqlx::query_as(queries::WAITS_OF)
            .bind(ids_json(ids)?)
            .bind(i64::try_from(limit + 1).unwrap_or(i64::MAX))
            .fetch_all(&self.inner.reader)
            .await
            .map_err(|e| error::map("waits_of", e))?;
        let mut by_id: BTreeMap<String, Waits> = BTreeMap::new();
        for (part, waiter, target, state, c, status, n) in rows {
            let waits = by_id.entry(waiter).or_insert_with_key(|id| Waits {
                id: id.clone(),
                ..Waits::default()
            });
            add_wait_row(waits, part, target, state, c, status, n)?;
        }
        Ok(by_id
            .into_values()
            .map(|mut waits| {
                waits.edges.sort_by(|a, b| a.target.cmp(&b.target));
                waits.end_page(limit);
                waits
            })
            .collect())
    }

    async fn unblock_jobs(&self, ids: &[String], now: Millis) -> Result<Vec<String>> {
        validate::cancel(ids, now)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let m = |e| error::map("unblock_jobs", e);
        let list = ids_json(ids)?;
        let mut tx = self.begin_write("unblock_jobs").await?;
        sqlx::query(queries::UNBLOCK_EDGES)
            .bind(list.as_str())
            .execute(&mut *tx)
            .await
            .map_err(m)?;
        let rows: Vec<(String, String)> = sqlx::query_as(queries::UNBLOCK_JOBS)
            .bind(list.as_str())
            .bind(now)
            .bind(event(now, "", EventKind::Unblocked))
            .fetch_all(&mut *tx)
            .await
            .map_err(m)?;
        tx.commit().await.map_err(m)?;
        let (unblocked, jobtypes): (Vec<String>, Vec<String>) = rows.into_iter().unzip();
        self.notify(jobtypes);
        Ok(unblocked)
    }

    async fn pause_jobtype(&self, jobtype: &str, paused: bool, now: Millis) -> Result<bool> {
        validate::pause(jobtype, now)?;
        let m = |e| error::map("pause_jobtype", e);
        let done = if paused {
            sqlx::query(queries::PAUSE_JOBTYPE)
                .bind(jobtype)
                .bind(now)
                .execute(&self.inner.writer)
                .await
                .map_err(m)?
        } else {
            sqlx::query(queries::RESUME_JOBTYPE)
                .bind(jobtype)
                .execute(&self.inner.writer)
                .await
                .map_err(m)?
        };
        let changed = done.rows_affected() > 0;
        if changed && !paused {
            self.notify([jobtype.to_owned()]);
        }
        Ok(changed)
    }

    async fn paused_jobtypes(&self) -> Result<Vec<String>> {
        sqlx::query_scalar(queries::PAUSED_JOBTYPES)
            .fetch_all(&self.inner.reader)
            .await
            .map_err(|e| error::map("paused_jobtypes", e))
    }

    async fn add_stats(&self, deltas: &[StatsDelta], now: Millis) -> Result<()> {
        validate::stats_deltas(deltas, now)?;
        if deltas.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin_write("add_stats").await?;
        stats::add(&mut tx, deltas, now).await?;
        tx.commit().await.map_err(|e| error::map("add_stats", e))
    }

    async fn job_stats(&self, query: &StatsQuery, now: Millis) -> Result<Vec<StatsBucket>> {
        validate::stats_query(query, now)?;
        stats::read(&self.inner.reader, query, now).await
    }

    async fn watch(&self) -> Result<WorkWatcher> {
        Ok(WorkWatcher::notified(
            self.inner.notices.subscribe(),
            DEFAULT_POLL_INTERVAL,
            None,
        ))
    }

    async fn set_handler(
        &self,
        jobtype: &str,
        handler: &Handler,
        now: Millis,
    ) -> Result<HandlerVersion> {
        validate::handler(jobtype, handler, now)?;
        let seq: i64 = sqlx::query_scalar(queries::SET_HANDLER)
            .bind(jobtype)
            .bind(now)
            .bind(handler.method.as_str())
            .bind(handler.body.as_str())
            .bind(handler.eid.as_deref())
            .bind(handler.before.as_deref())
            .bind(handler.before_each.as_deref())
            .bind(handler.after_each.as_deref())
            .bind(limit_param(handler.limits.max_attempts))
            .bind(limit_param(handler.limits.max_age_ms))
            .bind(limit_param(handler.limits.time_limit_ms))
            .bind(limit_param(handler.limits.concurrency))
            .bind(limit_param(handler.limits.backoff_base_ms))
            .bind(limit_param(handler.limits.backoff_max_ms))
            .fetch_one(&self.inner.writer)
            .await
            .map_err(|e| error::map("set_handler", e))?;
        Ok(HandlerVersion {
            id: seq.to_string(),
            jobtype: jobtype.to_owned(),
            dt: now,
            handler: handler.clone(),
        })
    }

    async fn get_handler(&self, jobtype: &str) -> Result<Option<HandlerVersion>> {
        validate::jobtype(jobtype)?;
        let row = sqlx::query(queries::GET_HANDLER)
            .bind(jobtype)
            .fetch_optional(&self.inner.reader)
            .await
            .map_err(|e| error::map("get_handler", e))?;
        row.as_ref().map(handler_from_row).transpose()
    }

    async fn delete_handler(&self, jobtype: &str) -> Result<bool> {
        validate::jobtype(jobtype)?;
        let done = sqlx::query(queries::DELETE_HANDLER)
            .bind(jobtype)
            .execute(&self.inner.writer)
            .await
            .map_err(|e| error::map("delete_handler", e))?;
        Ok(done.rows_affected() > 0)
    }

    async fn list_handlers(&self) -> Result<Vec<HandlerVersion>> {
        let rows = sqlx::query(queries::LIST_HANDLERS)
            .fetch_all(&self.inner.reader)
            .await
            .map_err(|e| error::map("list_handlers", e))?;
        rows.iter().map(handler_from_row).collect()
    }

    async fn set_schedule(
        &self,
        s: &Schedule,
        next_due: Option<Millis>,
        now: Millis,
    ) -> Result<ScheduleRecord> {
        validate::schedule(s, next_due, &self.capabilities(), now)?;
        schedules::set(&self.inner.writer, s, next_due, now).await
    }

    async fn get_schedule(&self, name: &str) -> Result<Option<ScheduleRecord>> {
        validate::schedule_name(name)?;
        schedules::get(&self.inner.reader, name).await
    }

    async fn list_schedules(&self, prefix: &str) -> Result<Vec<ScheduleRecord>> {
        validate::schedule_prefix(prefix)?;
        schedules::list(&self.inner.reader, prefix).await
    }

    async fn delete_schedule(&self, name: &str) -> Result<bool> {
        validate::schedule_name(name)?;
        schedules::delete(&self.inner.writer, name).await
    }

    async fn pause_schedule(
        &self,
        name: &str,
        paused: bool,
        next_due: Option<Millis>,
        now: Millis,
    ) -> Result<bool> {
        validate::schedule_pause(name, next_due, now)?;
        schedules::pause(&self.inner.writer, name, paused, next_due, now).await
    }

    async fn due_schedules(&self, now: Millis, limit: usize) -> Result<Vec<ScheduleRecord>> {
        validate::due_schedules(now, limit)?;
        schedules::due(&self.inner.reader, now, limit).await
    }

    async fn advance_schedule(
        &self,
        name: &str,
        version: u64,
        advance: &ScheduleAdvance,
        now: Millis,
    ) -> Result<bool> {
        validate::schedule_advance(name, version, advance, now)?;
        schedules::advance(&self.inner.writer, name, version, advance).await
    }

    async fn reserve_sysid(&self, sysid: &str, ttl: Duration, now: Millis) -> Result<SysidLease> {
        validate::sysid_lease(sysid, ttl, now)?;
        let lease = SysidLease {
            sysid: sysid.to_owned(),
            token: jobstore_api::new_token(),
            expires: now + duration_ms(ttl),
        };
        let won: Option<String> = sqlx::query_scalar(queries::RESERVE_SYSID)
            .bind(sysid)
            .bind(lease.token.as_str())
            .bind(lease.expires)
            .bind(now)
            .fetch_optional(&self.inner.writer)
            .await
            .map_err(|e| error::map("reserve_sysid", e))?;
        match won {
            Some(_) => Ok(lease),
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
        let done = sqlx::query(queries::RENEW_SYSID)
            .bind(expires)
            .bind(lease.sysid.as_str())
            .bind(lease.token.as_str())
            .execute(&self.inner.writer)
            .await
            .map_err(|e| error::map("renew_sysid", e))?;
        if done.rows_affected() == 0 {
            return Err(Error::sysid_lost(&lease.sysid));
        }
        Ok(SysidLease {
            expires,
            ..lease.clone()
        })
    }

    async fn release_sysid(&self, lease: &SysidLease) -> Result<bool> {
        validate::sysid(&lease.sysid)?;
        let done = sqlx::query(queries::RELEASE_SYSID)
            .bind(lease.sysid.as_str())
            .bind(lease.token.as_str())
            .execute(&self.inner.writer)
            .await
            .map_err(|e| error::map("release_sysid", e))?;
        Ok(done.rows_affected() > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archived(n: usize, output: usize) -> Vec<JobRelease> {
        (0..n)
            .map(|i| {
                let result = JobResult::from_status(200).with_output(vec![b'x'; output]);
                JobRelease::new(format!("j{i}"), Release::Archive(result))
            })
            .collect()
    }

    /// An ordinary release list is one statement, whatever its outputs; only
    /// past `RELEASE_CHUNK_OUTPUT` bytes of output is it split.
    #[test]
    fn release_lists_split_only_past_the_chunk_output() {
        let max = jobstore_api::limits::MAX_OUTPUT;
        // 256 outputs of the maximum are exactly one chunk's worth.
        assert_eq!(RELEASE_CHUNK_OUTPUT / max, 256);
        assert_eq!(keep_chunks(&archived(256, max), "o", 0).unwrap().len(), 1);
        assert_eq!(keep_chunks(&archived(257, max), "o", 0).unwrap().len(), 2);
        assert_eq!(keep_chunks(&archived(1, 0), "o", 0).unwrap().len(), 1);
    }

    /// A repeat's new payload counts towards a statement's bytes beside the
    /// outputs: a list with a large one is split, the payload's entry
    /// alone when it is past the chunk by itself; an entry keeps its hex
    /// payload, or null to keep the job's.
    #[test]
    fn repeat_payloads_count_towards_the_chunk() {
        let repeat = |id: &str, data: Option<usize>| {
            JobRelease::new(
                id,
                Release::Repeat {
                    at: 5,
                    result: JobResult::from_status(200).with_output(b"o".to_vec()),
                    data: data.map(|n| vec![b'd'; n]),
                },
            )
        };
        let small = [repeat("a", Some(2)), repeat("b", None)];
        let chunks = keep_chunks(&small, "o", 0).unwrap();
        assert_eq!(chunks.len(), 1);
        let entries: serde_json::Value = serde_json::from_str(&chunks[0]).unwrap();
        assert_eq!(
            (
                &entries[0]["k"],
                &entries[0]["dt"],
                &entries[0]["o"],
                &entries[0]["d"]
            ),
            (
                &serde_json::json!("p"),
                &serde_json::json!(5),
                &serde_json::json!("6f"),
                &serde_json::json!("6464")
            )
        );
        assert_eq!(entries[1]["d"], serde_json::Value::Null);
        assert_eq!(
            entries[0]["e"],
            serde_json::json!({"at": 0, "by": "o", "attempt": 0, "event": "repeated",
                               "code": "ok", "status": 200, "next_ms": 5})
        );
        let mut big = archived(2, 10);
        big.insert(1, repeat("big", Some(RELEASE_CHUNK_OUTPUT)));
        assert_eq!(keep_chunks(&big, "o", 0).unwrap().len(), 3);
        let mut fits = archived(2, 10);
        fits.push(repeat("fits", Some(RELEASE_CHUNK_OUTPUT - 30)));
        assert_eq!(keep_chunks(&fits, "o", 0).unwrap().len(), 1);
    }

    /// Every listing shape reads the jobs through an index, in ranges
    /// (never a scan of the jobs table), and its ranges are the ones the
    /// README names; purges keep their range per code.
    #[tokio::test]
    async fn listings_and_purges_follow_their_indexes() {
        use jobstore_api::{ResultCode, TimeRange};
        let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
        let now = 1_000_000;
        let mut cases = Vec::new();
        for state in [
            JobState::Waiting,
            JobState::Scheduled,
            JobState::Running,
            JobState::Expired,
            JobState::Archived,
            JobState::Blocked,
        ] {
            let filters = [
                JobQuery::new(state),
                JobQuery::new(state).prefix("acme:"),
                JobQuery::new(state).jobtypes(["a", "b"]),
            ];
            for q in filters {
                cases.push(q.clone().created(TimeRange::new(Some(5), None)));
                cases.push(q);
            }
        }
        cases.push(
            JobQuery::new(JobState::Archived)
                .codes([ResultCode::Failed])
                .archived(TimeRange::new(Some(10), Some(20))),
        );
        let tagged: Vec<JobQuery> = cases.iter().map(|q| q.clone().tag("eu")).collect();
        cases.extend(tagged);
        for q in cases {
            let plan = ListPlan::new(&q, now).unwrap();
            let sql =
                queries::list_jobs(plan.template, plan.types, plan.rows, false, q.tag.is_some());
            let explained: Vec<(i64, i64, i64, String)> =
                sqlx::query_as(AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")))
                    .bind(now)
                    .bind(101_i64)
                    .bind(plan.cursor_priority)
                    .bind(plan.bound.0)
                    .bind(plan.bound.1.clone())
                    .bind(i64::MIN)
                    .bind(i64::MAX)
                    .bind(i64::MIN)
                    .bind(plan.low.clone())
                    .bind(plan.high.clone())
                    .bind(plan.exact.clone())
                    .bind("[\"ok\"]")
                    .bind(q.tag.clone())
                    .fetch_all(&store.inner.reader)
                    .await
                    .unwrap();
            let text: Vec<&str> = explained.iter().map(|r| r.3.as_str()).collect();
            let text = text.join("\n");
            assert!(!text.contains("SCAN jobs"), "{q:?}:\n{text}");
            let (index, range) = match q.state {
                JobState::Waiting => (
                    "jobs_free",
                    "(jobtype=? AND priority=? AND (dt,id)>(?,?) AND dt<?)",
                ),
                JobState::Scheduled => {
                    ("jobs_free", "(jobtype=? AND priority=? AND (dt,id)>(?,?))")
                }
                JobState::Running => ("jobs_locked", "(jobtype=? AND (dt,id)>(?,?) AND dt<?)"),
                JobState::Blocked => ("jobs_locked", "(jobtype=? AND (dt,id)>(?,?))"),
                JobState::Expired => ("jobs_locked", "(jobtype=? AND dt<?)"),
                JobState::Archived if q.jobtypes == JobtypeFilter::All => (
                    "jobs_done_code",
                    "(result_code=? AND done_dt>? AND (done_dt,id)<(?,?))",
                ),
                JobState::Archived => (
                    "jobs_done_type",
                    "(jobtype=? AND result_code=? AND done_dt>? AND (done_dt,id)<(?,?))",
                ),
            };
            let want = format!("SEARCH jobs USING INDEX {index} {range}");
            assert!(text.contains(&want), "{q:?}: wants {want}:\n{text}");
        }
        let purge: Vec<(i64, i64, i64, String)> = sqlx::query_as(AssertSqlSafe(format!(
            "EXPLAIN QUERY PLAN {}",
            queries::PURGE_ARCHIVED
        )))
        .bind(now)
        .bind(10_i64)
        .bind("[\"ok\"]")
        .fetch_all(&store.inner.reader)
        .await
        .unwrap();
        let text: Vec<&str> = purge.iter().map(|r| r.3.as_str()).collect();
        assert!(
            text.iter()
                .any(|l| l.contains("INDEX jobs_done_code (result_code=? AND done_dt<?)")),
            "{text:?}"
        );
        // Counts read the live jobs through their partial indexes and the
        // counts table, never the archive.
        let counts: Vec<(i64, i64, i64, String)> = sqlx::query_as(AssertSqlSafe(format!(
            "EXPLAIN QUERY PLAN {}",
            queries::JOB_COUNTS
        )))
        .bind(now)
        .fetch_all(&store.inner.reader)
        .await
        .unwrap();
        let text: Vec<&str> = counts.iter().map(|r| r.3.as_str()).collect();
        let jobs: Vec<&str> = text
            .iter()
            .copied()
            .filter(|l| l.contains(" jobs"))
            .collect();
        assert_eq!(
            jobs,
            [
                "SCAN jobs USING COVERING INDEX jobs_free",
                "SCAN jobs USING INDEX jobs_locked"
            ],
            "{text:?}"
        );
        assert!(text.contains(&"SCAN counts"), "{text:?}");
        store.close().await;
    }

    /// The statements that name the owner look their jobs up by primary
    /// key (the owner, written `+?n` so that the planner does not prepare
    /// them again for each value, filters the rows found).
    #[tokio::test]
    async fn owner_statements_look_jobs_up_by_id() {
        let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
        for (sql, params) in [
            (queries::RELEASE_KEEP, 4),
            (queries::RELEASE_DELETE, 2),
            (queries::RENEW_LOCKS, 3),
            (queries::UPDATE_DATA, 3),
        ] {
            assert!(sql.contains("lock = +?"), "{sql}");
            let mut q = sqlx::query_as::<_, (i64, i64, i64, String)>(AssertSqlSafe(format!(
                "EXPLAIN QUERY PLAN {sql}"
            )));
            for _ in 0..params {
                q = q.bind("[]");
            }
            let plan = q.fetch_all(&store.inner.reader).await.unwrap();
            let text: Vec<&str> = plan.iter().map(|r| r.3.as_str()).collect();
            assert!(
                text.contains(&"SEARCH jobs USING INDEX sqlite_autoindex_jobs_1 (id=?)"),
                "{sql}: {text:?}"
            );
            assert!(!text.iter().any(|l| l.contains("SCAN jobs")), "{text:?}");
        }
        store.close().await;
    }

    /// The unique-key statements read the keys' indexes: the add's lookup
    /// one probe of `jobs_unique` per key and one backwards range of
    /// `jobs_unique_done` (no sort) per window; the run again's guard one
    /// probe of `jobs_unique`, the rows still by id, and the call's first
    /// job of each key materialized inside the guard (only when a keyed row
    /// reaches it).
    #[tokio::test]
    async fn unique_key_statements_follow_their_indexes() {
        let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
        let plan = |sql: &'static str, params: usize| {
            let store = store.clone();
            async move {
                let mut q = sqlx::query_as::<_, (i64, i64, i64, String)>(AssertSqlSafe(format!(
                    "EXPLAIN QUERY PLAN {sql}"
                )));
                for _ in 0..params {
                    q = q.bind("[]");
                }
                let rows = q.fetch_all(&store.inner.reader).await.unwrap();
                rows.into_iter().map(|r| r.3).collect::<Vec<String>>()
            }
        };
        let lookup = plan(queries::UNIQUE_LOOKUP, 1).await;
        for want in [
            "SEARCH jobs USING COVERING INDEX sqlite_autoindex_jobs_1 (id=?)",
            "SEARCH h USING INDEX jobs_unique (jobtype=? AND unique_key=?)",
            "SEARCH a USING COVERING INDEX jobs_unique_done (jobtype=? AND unique_key=? AND done_dt>?)",
        ] {
            assert!(lookup.iter().any(|l| l == want), "{want}: {lookup:?}");
        }
        assert!(
            !lookup.iter().any(|l| l.contains("TEMP B-TREE")),
            "{lookup:?}"
        );
        let rerun = plan(queries::RERUN_JOBS, 3).await;
        for want in [
            "SEARCH jobs USING INDEX sqlite_autoindex_jobs_1 (id=?)",
            "SEARCH h USING INDEX jobs_unique (jobtype=? AND unique_key=?)",
            "MATERIALIZE f",
        ] {
            assert!(rerun.iter().any(|l| l == want), "{want}: {rerun:?}");
        }
        assert!(!rerun.iter().any(|l| l.contains("SCAN jobs")), "{rerun:?}");
        store.close().await;
    }

    /// The statements of held and skipped edges follow their indexes: a
    /// target's end one range of `edges_open` per target (pending and held
    /// edges), the waiter's row read by primary key; an unblock and
    /// `waits_of` one primary-key range of `edges` per listed job, the jobs
    /// by id. None scans a table.
    #[tokio::test]
    async fn edge_statements_follow_their_indexes() {
        let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
        let plan = |sql: &'static str, params: usize| {
            let store = store.clone();
            async move {
                let mut q = sqlx::query_as::<_, (i64, i64, i64, String)>(AssertSqlSafe(format!(
                    "EXPLAIN QUERY PLAN {sql}"
                )));
                for _ in 0..params {
                    q = q.bind("[]");
                }
                let rows = q.fetch_all(&store.inner.reader).await.unwrap();
                rows.into_iter().map(|r| r.3).collect::<Vec<String>>()
            }
        };
        let by_id = "SEARCH j USING INDEX sqlite_autoindex_jobs_1 (id=?)";
        for (sql, params, wants) in [
            (
                queries::EDGES_END,
                1,
                vec![
                    "SEARCH edges USING INDEX edges_open (target=?)",
                    "SEARCH w USING INDEX sqlite_autoindex_jobs_1 (id=?)",
                ],
            ),
            (
                queries::UNBLOCK_EDGES,
                1,
                vec!["SEARCH edges USING PRIMARY KEY (waiter=?)", by_id],
            ),
            (
                queries::UNBLOCK_JOBS,
                3,
                vec!["SEARCH jobs USING INDEX sqlite_autoindex_jobs_1 (id=?)"],
            ),
            (
                queries::WAITS_OF,
                2,
                vec!["SEARCH e USING PRIMARY KEY (waiter=?)"],
            ),
        ] {
            let got = plan(sql, params).await;
            for want in wants {
                assert!(got.iter().any(|l| l == want), "{want}: {got:?}");
            }
            let scans_a_table = |l: &String| {
                ["SCAN jobs", "SCAN edges", "SCAN j", "SCAN e", "SCAN w"]
                    .iter()
                    .any(|t| l.strip_prefix(t).is_some_and(|rest| rest.is_empty()))
            };
            assert!(!got.iter().any(scans_a_table), "{got:?}");
        }
        store.close().await;
    }

    /// A database that cannot run in WAL (here: in memory, whose mode stays
    /// `memory`) is refused, not used in another mode.
    #[tokio::test]
    async fn ensure_wal_refuses_a_database_that_stays_in_another_mode() {
        let mut conn = SqliteConnectOptions::new()
            .in_memory(true)
            .connect()
            .await
            .unwrap();
        let err = ensure_wal(&mut conn, Duration::from_millis(100))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("journal_mode is memory"), "{err}");
    }
}
