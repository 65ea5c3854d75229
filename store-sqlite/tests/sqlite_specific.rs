//! Behaviour specific to the SQLite store: error mapping, reopening, one
//! contract edge the shared suite does not reach, and the schema the
//! migrations leave.

use std::path::PathBuf;
use std::time::Duration;

use jobstore_api::limits::MAX_OUTPUT;
use jobstore_api::limits::MAX_TIME;
use jobstore_api::{
    ErrorKind, Handler, HandlerLimits, JobEdit, JobRelease, JobResult, JobStore, JobStoreExt,
    NewJob, Release, ResultCode,
};
use jobstore_conformance::services::unique_namespace;
use jobstore_sqlite::SqliteStore;
use sqlx::{ConnectOptions, Connection};

const T0: i64 = 1_700_000_000_000;
const MIN: Duration = Duration::from_secs(60);

/// A fresh database path that is removed (with -wal and -shm) on drop.
struct TempDb(PathBuf);

impl TempDb {
    fn new() -> Self {
        TempDb(std::env::temp_dir().join(format!("{}.db", unique_namespace())))
    }
    fn url(&self, params: &str) -> String {
        format!("sqlite://{}{params}", self.0.display())
    }
    /// A connection of its own to the database, created with the
    /// migrations whose names sort before `first_left_out` only: the
    /// schema an older version left.
    async fn migrated_before(&self, first_left_out: &str) -> sqlx::SqliteConnection {
        let dir = std::env::temp_dir().join(unique_namespace());
        std::fs::create_dir_all(&dir).unwrap();
        let source = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"));
        for entry in std::fs::read_dir(&source).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.as_str() < first_left_out {
                std::fs::copy(&path, dir.join(&name)).unwrap();
            }
        }
        let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&self.0)
            .create_if_missing(true)
            .connect()
            .await
            .unwrap();
        let old = sqlx::migrate::Migrator::new(dir.as_path()).await.unwrap();
        old.run(&mut conn).await.unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        conn
    }
    /// A connection of its own to the database, beside the store's.
    async fn connect(&self) -> sqlx::SqliteConnection {
        sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&self.0)
            .connect()
            .await
            .unwrap()
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut f = self.0.clone().into_os_string();
            f.push(suffix);
            let _ = std::fs::remove_file(f);
        }
    }
}

/// An archived job's `dt` is only pushed 1000 years ahead; the `lock` check
/// keeps it out of claims even later than that (the suite stops at 500).
async fn archived_stays_archived(store: &SqliteStore) {
    store
        .add_jobs(&[NewJob::new("a", "t", "x")], T0)
        .await
        .unwrap();
    let got = store.claim_jobs("t", 1, "owner", MIN, T0).await.unwrap();
    assert_eq!(got.len(), 1);
    let ok = Release::Archive(JobResult::from_status(200));
    assert_eq!(
        store
            .release_all(&["a".to_owned()], "owner", &ok, T0)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        store
            .claim_jobs("t", 1, "other", MIN, MAX_TIME)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.waiting_jobtypes(MAX_TIME).await.unwrap().is_empty());
}

#[tokio::test]
async fn archived_never_eligible_even_at_max_time() {
    let db = TempDb::new();
    let store = SqliteStore::connect(&db.url("")).await.unwrap();
    archived_stays_archived(&store).await;
    store.close().await;
    let memory = SqliteStore::connect("sqlite::memory:").await.unwrap();
    archived_stays_archived(&memory).await;
}

#[tokio::test]
async fn reopening_keeps_everything() {
    let db = TempDb::new();
    let store = SqliteStore::connect(&db.url("?synchronous=normal"))
        .await
        .unwrap();
    store
        .add_jobs(&[NewJob::new("kept", "t", "payload")], T0)
        .await
        .unwrap();
    store.close().await;
    drop(store);
    let again = SqliteStore::connect(&db.url("")).await.unwrap();
    let job = again.get_job("kept").await.unwrap().expect("job survives");
    assert_eq!(job.data, b"payload");
}

#[tokio::test]
async fn held_write_lock_is_unavailable_after_busy_timeout() {
    let db = TempDb::new();
    let store = SqliteStore::connect(&db.url("?busy_timeout_ms=100"))
        .await
        .unwrap();
    // Another "process" holds the write lock.
    let mut other = db.connect().await;
    let tx = other.begin_with("BEGIN IMMEDIATE").await.unwrap();
    let err = store
        .add_jobs(&[NewJob::new("x", "t", "")], T0)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.is_retryable());
    // Reads go on under WAL while the lock is held.
    assert_eq!(store.get_job("x").await.unwrap(), None);
    tx.rollback().await.unwrap();
    store
        .add_jobs(&[NewJob::new("x", "t", "")], T0)
        .await
        .unwrap();
}

/// A claim with nothing eligible for its jobtype answers from a read,
/// without the write lock: while another connection holds that lock it
/// comes back empty at once, though other jobtypes have eligible jobs and
/// its own jobtype a scheduled one.
#[tokio::test]
async fn an_empty_claim_does_not_wait_for_the_write_lock() {
    let db = TempDb::new();
    let store = SqliteStore::connect(&db.url("?busy_timeout_ms=100"))
        .await
        .unwrap();
    let jobs = [
        NewJob::new("other", "u", ""),
        NewJob::new("later", "t", "").run_at(T0 + 3_600_000),
    ];
    store.add_jobs(&jobs, T0).await.unwrap();
    let mut other = db.connect().await;
    let tx = other.begin_with("BEGIN IMMEDIATE").await.unwrap();
    assert_eq!(store.claim_jobs("t", 5, "o", MIN, T0).await.unwrap(), []);
    tx.rollback().await.unwrap();
    assert_eq!(
        store.claim_jobs("u", 5, "o", MIN, T0).await.unwrap().len(),
        1
    );
}

/// Takes a shared lock on the database for the rest of `tx`.
async fn read_a_row(tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>) {
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM other")
        .fetch_one(&mut **tx)
        .await
        .unwrap();
    assert_eq!(n, 1);
}

/// A new file still in rollback-journal mode that another connection is
/// reading (a shared lock, which SQLite's busy handler does not wait out
/// for a change of journal mode): opening the store retries the switch to
/// WAL within the busy timeout, then gives up `Unavailable`; a reader that
/// lets go in time is waited out.
#[tokio::test]
async fn opening_waits_for_the_switch_to_wal_within_the_busy_timeout() {
    let db = TempDb::new();
    let mut other = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&db.0)
        .create_if_missing(true)
        .connect()
        .await
        .unwrap();
    sqlx::query("CREATE TABLE other (x); INSERT INTO other VALUES (1)")
        .execute(&mut other)
        .await
        .unwrap();
    let mut tx = other.begin().await.unwrap();
    read_a_row(&mut tx).await;
    let started = std::time::Instant::now();
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        SqliteStore::connect(&db.url("?busy_timeout_ms=200")),
    )
    .await
    .expect("opening gives up after the busy timeout")
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "gave up after {:?}, before the busy timeout",
        started.elapsed()
    );
    tx.rollback().await.unwrap();
    other.close().await.unwrap();
    // The next opener waits while the lock is held and goes on once it is
    // let go.
    let (held, is_held) = tokio::sync::oneshot::channel();
    let path = db.0.clone();
    let holder = tokio::spawn(async move {
        let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&path)
            .connect()
            .await
            .unwrap();
        let mut tx = conn.begin().await.unwrap();
        read_a_row(&mut tx).await;
        held.send(()).unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        tx.rollback().await.unwrap();
        conn.close().await.unwrap();
    });
    is_held.await.unwrap();
    let store = tokio::time::timeout(
        Duration::from_secs(10),
        SqliteStore::connect(&db.url("?busy_timeout_ms=5000")),
    )
    .await
    .expect("opening ends once the lock is let go")
    .unwrap();
    holder.await.unwrap();
    store
        .add_jobs(&[NewJob::new("j", "t", "")], T0)
        .await
        .unwrap();
    assert!(store.get_job("j").await.unwrap().is_some());
    store.close().await;
}

#[tokio::test]
async fn debug_output_names_the_store_and_its_file() {
    let db = TempDb::new();
    let store = SqliteStore::connect(&db.url("")).await.unwrap();
    let debug = format!("{store:?}");
    assert!(debug.starts_with("SqliteStore"), "{debug}");
    assert!(debug.contains(&db.0.display().to_string()), "{debug}");
    let memory = SqliteStore::connect("sqlite::memory:").await.unwrap();
    assert!(format!("{memory:?}").contains("Memory"), "{memory:?}");
    store.close().await;
}

#[tokio::test]
async fn unopenable_file_is_unavailable() {
    let dir = std::env::temp_dir().join(unique_namespace());
    let err = SqliteStore::connect(&format!("sqlite://{}/no/such/dir.db", dir.display()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
}

#[tokio::test]
async fn closed_store_is_unavailable() {
    let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
    store.close().await;
    let err = store.get_job("x").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
}

#[tokio::test]
async fn bad_urls_are_invalid_input() {
    for url in ["mysql://x", "sqlite://", "sqlite:x.db?mode=memory"] {
        let err = SqliteStore::connect(url).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{url}: {err}");
    }
}

#[tokio::test]
async fn memory_stores_are_separate() {
    let a = SqliteStore::connect("sqlite::memory:").await.unwrap();
    let b = SqliteStore::connect("sqlite::memory:").await.unwrap();
    a.add_jobs(&[NewJob::new("only-a", "t", "")], T0)
        .await
        .unwrap();
    assert!(a.get_job("only-a").await.unwrap().is_some());
    assert_eq!(b.get_job("only-a").await.unwrap(), None);
}

/// A release with more result output than one statement takes (16 MiB) is
/// split over several statements in one transaction; deletes in the same
/// list are part of it.
#[tokio::test]
async fn release_with_more_output_than_one_statement_is_split() {
    let db = TempDb::new();
    let store = SqliteStore::connect(&db.url("")).await.unwrap();
    let n = 300; // 300 x 64 KiB = 18.75 MiB of output
    let jobs: Vec<NewJob> = (0..n + 2)
        .map(|i| NewJob::new(format!("j{i:03}"), "t", "x"))
        .collect();
    store.add_jobs(&jobs, T0).await.unwrap();
    assert_eq!(
        store
            .claim_jobs("t", n + 2, "owner", MIN, T0)
            .await
            .unwrap()
            .len(),
        n + 2
    );
    let result =
        |i: usize| JobResult::from_status(200).with_output(vec![(i % 251) as u8; MAX_OUTPUT]);
    let mut releases: Vec<JobRelease> = (0..n)
        .map(|i| JobRelease::new(format!("j{i:03}"), Release::Archive(result(i))))
        .collect();
    releases.push(JobRelease::new(format!("j{n:03}"), Release::Delete));
    releases.push(JobRelease::new(format!("j{:03}", n + 1), Release::Unget));
    let released = store
        .release_jobs(&releases, "owner", T0 + 1)
        .await
        .unwrap();
    assert_eq!(released.len(), n + 2);
    for i in [0, 1, 150, n - 1] {
        let job = store.get_job(&format!("j{i:03}")).await.unwrap().unwrap();
        assert_eq!(job.result, Some(result(i)), "j{i:03}");
    }
    assert_eq!(store.get_job(&format!("j{n:03}")).await.unwrap(), None);
    let ungot = store
        .get_job(&format!("j{:03}", n + 1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((ungot.lock.as_str(), ungot.attempts), ("", 0));
}

/// Edits whose payloads add up to more than one statement's share are
/// split (in one transaction) and land whole; an empty payload is a
/// payload, not "leave it".
#[tokio::test]
async fn edits_with_more_payload_than_one_statement_are_split() {
    let db = TempDb::new();
    let store = SqliteStore::connect(&db.url("")).await.unwrap();
    let jobs: Vec<NewJob> = (0..4)
        .map(|i| NewJob::new(format!("e{i}"), "t", "old"))
        .collect();
    store.add_jobs(&jobs, T0).await.unwrap();
    let big = |i: usize| vec![i as u8; 7 << 20];
    let mut edits: Vec<JobEdit> = (0..3)
        .map(|i| JobEdit::new(format!("e{i}")).data(big(i)))
        .collect();
    edits.push(JobEdit::new("e3").data(Vec::new()).priority(4));
    let mut edited = store.edit_jobs(&edits, T0 + 1).await.unwrap();
    edited.sort();
    assert_eq!(edited, ["e0", "e1", "e2", "e3"]);
    for i in 0..3 {
        let job = store.get_job(&format!("e{i}")).await.unwrap().unwrap();
        assert_eq!(job.data, big(i), "e{i}");
    }
    let e3 = store.get_job("e3").await.unwrap().unwrap();
    assert_eq!((e3.data.len(), e3.priority), (0, 4));
}

/// Jobs stored without naming the cancel mark (as every row written before
/// migration 4) read back unmarked, and a claim and a renewal of them say
/// so.
#[tokio::test]
async fn jobs_without_a_stored_mark_are_unmarked() {
    let db = TempDb::new();
    let store = SqliteStore::connect(&db.url("")).await.unwrap();
    let mut conn = db.connect().await;
    sqlx::query(
        "INSERT INTO jobs (id, jobtype, priority, dt, create_dt, data) \
         VALUES ('old', 't', 0, 5, 5, x'01')",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    assert!(
        !store
            .get_job("old")
            .await
            .unwrap()
            .unwrap()
            .cancel_requested
    );
    let got = store.claim_jobs("t", 1, "owner", MIN, T0).await.unwrap();
    assert!(!got[0].cancel_requested);
    let ids = ["old".to_owned()];
    let renewal = store.renew_locks(&ids, "owner", MIN, T0).await.unwrap();
    assert_eq!((renewal.renewed.len(), renewal.cancelled.len()), (1, 0));
    let out = store.cancel_jobs(&ids, T0).await.unwrap();
    assert_eq!(out.marked, ids);
    let renewal = store.renew_locks(&ids, "owner", MIN, T0).await.unwrap();
    assert_eq!(renewal.cancelled, ids);
}

/// Handler versions stored before the limit columns existed (rows with
/// only the first migration's columns) read back with no limits.
#[tokio::test]
async fn handlers_from_before_limits_read_back_without_limits() {
    let db = TempDb::new();
    let store = SqliteStore::connect(&db.url("")).await.unwrap();
    let mut conn = db.connect().await;
    sqlx::query(
        "INSERT INTO handlers (jobtype, dt, lang, body, eid, before_run, before_each, after_each) \
         VALUES ('old', 5, 'process', 'cat', NULL, NULL, NULL, NULL)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    let v = store.get_handler("old").await.unwrap().unwrap();
    assert_eq!(v.handler, Handler::new("process", "cat"));
    assert!(v.handler.limits.is_unset());
    let limits = HandlerLimits {
        max_attempts: Some(3),
        backoff_max_ms: Some(60_000),
        ..HandlerLimits::default()
    };
    store
        .set_handler("old", &Handler::new("process", "cat").limits(limits), 6)
        .await
        .unwrap();
    let listed = store.list_handlers().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].handler.limits, limits);
}

/// A file database runs in WAL mode: the file header says so (bytes 18 and
/// 19, the read and write versions, are 2 only in WAL mode), another
/// connection sees `journal_mode = wal`, and commits go to the `-wal` file.
#[tokio::test]
async fn file_database_runs_in_wal_mode() {
    let db = TempDb::new();
    let store = SqliteStore::connect(&db.url("")).await.unwrap();
    store
        .add_jobs(&[NewJob::new("j", "t", "payload")], T0)
        .await
        .unwrap();
    let header = std::fs::read(&db.0).unwrap();
    assert_eq!(&header[..16], b"SQLite format 3\0");
    assert_eq!((header[18], header[19]), (2, 2), "WAL in the file header");
    let mut wal = db.0.clone().into_os_string();
    wal.push("-wal");
    assert!(
        std::fs::metadata(&wal).unwrap().len() > 0,
        "the commit is in the -wal file"
    );
    let mut conn = db.connect().await;
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(mode, "wal");
    conn.close().await.unwrap();
    store.close().await;
}

/// A purge deletes in statements of `purge_batch` rows until one comes
/// back short, and is exact across them.
#[tokio::test]
async fn purge_runs_in_bounded_batches() {
    let db = TempDb::new();
    let store = SqliteStore::connect(&db.url("?purge_batch=7"))
        .await
        .unwrap();
    jobstore_conformance::checks::purge_is_exact_across_batches(&store, 7).await;
}

/// The tables, columns, indexes and triggers the migrations leave. No query of the
/// store fails or reads differently without a `NOT NULL` or with an index
/// in another order, so this pins them where the API cannot: a change to
/// the schema shows here, and belongs in a new migration.
#[tokio::test]
async fn the_schema_is_the_one_the_migrations_describe() {
    let db = TempDb::new();
    let store = SqliteStore::connect(&db.url("")).await.unwrap();
    let mut conn = db.connect().await;
    let columns: Vec<(String, String, String, bool, Option<String>, i64)> = sqlx::query_as(
        "SELECT m.name, c.name, c.type, c.\"notnull\", c.dflt_value, c.pk
         FROM sqlite_schema m JOIN pragma_table_info(m.name) c
         WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%'
           AND m.name <> '_sqlx_migrations'
         ORDER BY m.name, c.cid",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let mut got = String::new();
    for (table, column, ty, not_null, default, pk) in columns {
        got += &format!("column {table}.{column} {ty}");
        if not_null {
            got += " not null";
        }
        if let Some(d) = default {
            got += &format!(" default {d}");
        }
        if pk > 0 {
            got += " primary key";
        }
        got.push('\n');
    }
    let indexes: Vec<(String,)> = sqlx::query_as(
        "SELECT sql FROM sqlite_schema
         WHERE type IN ('index', 'trigger') AND sql IS NOT NULL ORDER BY type, name",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    for (sql,) in indexes {
        got += &sql.split_whitespace().collect::<Vec<_>>().join(" ");
        got.push('\n');
    }
    conn.close().await.unwrap();
    store.close().await;
    assert_eq!(got, EXPECTED_SCHEMA, "the schema as it stands:\n{got}");
}

const EXPECTED_SCHEMA: &str = "\
column counts.jobtype TEXT not null primary key
column counts.code TEXT not null primary key
column counts.n INTEGER not null
column edges.waiter TEXT not null primary key
column edges.target TEXT not null primary key
column edges.state TEXT not null
column edges.code TEXT
column edges.status INTEGER
column handlers.seq INTEGER primary key
column handlers.jobtype TEXT not null
column handlers.dt INTEGER not null
column handlers.lang TEXT not null
column handlers.body TEXT not null
column handlers.eid TEXT
column handlers.before_run TEXT
column handlers.before_each TEXT
column handlers.after_each TEXT
column handlers.max_attempts INTEGER
column handlers.max_age_ms INTEGER
column handlers.time_limit_ms INTEGER
column handlers.concurrency INTEGER
column handlers.backoff_base_ms INTEGER
column handlers.backoff_max_ms INTEGER
column jobs.id TEXT not null primary key
column jobs.jobtype TEXT not null
column jobs.priority INTEGER not null
column jobs.dt INTEGER not null
column jobs.lock TEXT not null default ''
column jobs.attempts INTEGER not null default 0
column jobs.create_dt INTEGER not null
column jobs.done_dt INTEGER
column jobs.result_code TEXT
column jobs.result_status INTEGER
column jobs.result_output BLOB
column jobs.data BLOB not null
column jobs.cancel_requested INTEGER not null default 0
column jobs.history TEXT not null default '[]'
column jobs.tags TEXT not null default '[]'
column jobs.claimed_at INTEGER
column jobs.claimed_by TEXT
column jobs.traceparent TEXT
column jobs.tracestate TEXT
column jobs.unique_key TEXT
column jobs.repeat TEXT
column jobs.pending INTEGER
column jobs.dep_policy TEXT
column jobs.waited INTEGER
column paused.jobtype TEXT not null primary key
column paused.dt INTEGER not null
column schedules.name TEXT not null primary key
column schedules.version INTEGER not null
column schedules.paused INTEGER not null
column schedules.created_dt INTEGER not null
column schedules.updated_dt INTEGER not null
column schedules.fired_through INTEGER
column schedules.last_job TEXT
column schedules.next_due INTEGER
column schedules.fired INTEGER not null
column schedules.skipped INTEGER not null
column schedules.definition TEXT not null
column schedules.data BLOB not null
column stats.resolution TEXT not null primary key
column stats.jobtype TEXT not null primary key
column stats.start INTEGER not null primary key
column stats.wait_count INTEGER not null
column stats.wait_sum_ms INTEGER not null
column stats.wait_sum_sq_ms REAL not null
column stats.wait_b0 INTEGER not null
column stats.wait_b1 INTEGER not null
column stats.wait_b2 INTEGER not null
column stats.wait_b3 INTEGER not null
column stats.wait_b4 INTEGER not null
column stats.wait_b5 INTEGER not null
column stats.wait_b6 INTEGER not null
column stats.wait_b7 INTEGER not null
column stats.wait_b8 INTEGER not null
column stats.wait_b9 INTEGER not null
column stats.wait_b10 INTEGER not null
column stats.wait_b11 INTEGER not null
column stats.wait_b12 INTEGER not null
column stats.wait_b13 INTEGER not null
column stats.wait_b14 INTEGER not null
column stats.wait_b15 INTEGER not null
column stats.wait_b16 INTEGER not null
column stats.run_count INTEGER not null
column stats.run_sum_ms INTEGER not null
column stats.run_sum_sq_ms REAL not null
column stats.run_b0 INTEGER not null
column stats.run_b1 INTEGER not null
column stats.run_b2 INTEGER not null
column stats.run_b3 INTEGER not null
column stats.run_b4 INTEGER not null
column stats.run_b5 INTEGER not null
column stats.run_b6 INTEGER not null
column stats.run_b7 INTEGER not null
column stats.run_b8 INTEGER not null
column stats.run_b9 INTEGER not null
column stats.run_b10 INTEGER not null
column stats.run_b11 INTEGER not null
column stats.run_b12 INTEGER not null
column stats.run_b13 INTEGER not null
column stats.run_b14 INTEGER not null
column stats.run_b15 INTEGER not null
column stats.run_b16 INTEGER not null
column sysids.sysid TEXT not null primary key
column sysids.token TEXT not null
column sysids.expires INTEGER not null
CREATE INDEX edges_open ON edges (target, waiter) WHERE state IN ('p', 'h')
CREATE INDEX handlers_newest ON handlers (jobtype, dt DESC, seq DESC)
CREATE INDEX jobs_done_code ON jobs (result_code, done_dt, id) WHERE lock = '__done'
CREATE INDEX jobs_done_type ON jobs (jobtype, result_code, done_dt, id) WHERE lock = '__done'
CREATE INDEX jobs_free ON jobs (jobtype, priority DESC, dt, id) WHERE lock = ''
CREATE INDEX jobs_locked ON jobs (jobtype, dt, id) WHERE lock NOT IN ('', '__done')
CREATE UNIQUE INDEX jobs_unique ON jobs (jobtype, unique_key) WHERE unique_key IS NOT NULL AND lock <> '__done'
CREATE INDEX jobs_unique_done ON jobs (jobtype, unique_key, done_dt, id) WHERE unique_key IS NOT NULL AND lock = '__done'
CREATE INDEX schedules_due ON schedules (next_due) WHERE paused = 0 AND next_due IS NOT NULL
CREATE INDEX stats_by_age ON stats (resolution, start)
";

/// A database of the schema before histories and tags (migrations 1 to 4)
/// is upgraded by `connect`: its jobs read back with no tags and, for
/// history, their implicit `Added` event alone (at their `create_dt`), its
/// archive is counted, and the counts follow the changes from then on.
#[tokio::test]
async fn jobs_stored_before_histories_read_empty_and_are_counted() {
    use jobstore_api::{JobCounts, ResultCode};
    let db = TempDb::new();
    let mut conn = db.migrated_before("20261128000005").await;
    sqlx::raw_sql(
        "INSERT INTO jobs (id, jobtype, priority, dt, lock, create_dt, done_dt, result_code, data)
         VALUES ('live', 't', 0, 0, '', 0, NULL, NULL, x''),
                ('ok', 't', 0, 0, '__done', 0, 5, 'ok', x''),
                ('failed', 't', 0, 0, '__done', 0, 5, 'failed', x'')",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();

    let store = SqliteStore::connect(&db.url("")).await.unwrap();
    let live = store.get_job("live").await.unwrap().unwrap();
    let added = jobstore_api::JobEvent::new(0, "", 0, jobstore_api::EventKind::Added);
    assert!(live.tags.is_empty() && live.history == [added], "{live:?}");
    let counts = |waiting, archived: &[(ResultCode, u64)]| {
        vec![JobCounts {
            jobtype: "t".into(),
            waiting,
            archived: archived.iter().copied().collect(),
            ..JobCounts::default()
        }]
    };
    assert_eq!(
        store.job_counts(T0).await.unwrap(),
        counts(1, &[(ResultCode::Ok, 1), (ResultCode::Failed, 1)])
    );
    let got = store.claim_jobs("t", 1, "owner", MIN, T0).await.unwrap();
    assert_eq!(got[0].history.len(), 2, "{:?}", got[0].history);
    let failed = vec!["failed".to_owned()];
    assert_eq!(store.rerun_jobs(&failed, MIN, T0).await.unwrap(), failed);
    assert_eq!(
        store.purge_archived(T0, &[ResultCode::Ok]).await.unwrap(),
        1
    );
    let fail = Release::Archive(JobResult::from_status(500));
    store
        .release_all(&["live".to_owned()], "owner", &fail, T0 + 1)
        .await
        .unwrap();
    let mut want = counts(0, &[(ResultCode::Error, 1)]);
    want[0].scheduled = 1;
    assert_eq!(store.job_counts(T0 + 2).await.unwrap(), want);
    store.close().await;
}

/// The row of a job as stored: its history text and pending claim.
async fn stored_claim(db: &TempDb, id: &str) -> (String, Option<i64>, Option<String>) {
    let mut conn = db.connect().await;
    let row = sqlx::query_as("SELECT history, claimed_at, claimed_by FROM jobs WHERE id = ?1")
        .bind(id)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    row
}

/// An add stores no history (its `Added` event is implicit); a claim and
/// the release that archives the job write the claim into the row and
/// leave the stored history as it is; reads show the `Added`, `Claimed`
/// and `Archived` events all the same, and a run again stores the claim
/// and the archive before its own. A claim of an expired job stores the
/// claim that expired first.
#[tokio::test]
async fn claims_and_archives_leave_the_stored_history_alone() {
    use jobstore_api::{EventKind, JobEvent, ResultCode};
    let db = TempDb::new();
    let store = SqliteStore::connect(&db.url("")).await.unwrap();
    store
        .add_jobs(&[NewJob::new("j", "t", "x")], T0)
        .await
        .unwrap();
    let (added, ..) = stored_claim(&db, "j").await;
    assert_eq!(added, "[]");
    let got = store
        .claim_jobs("t", 1, "sys-a", MIN, T0 + 1)
        .await
        .unwrap();
    assert_eq!(
        stored_claim(&db, "j").await,
        (added.clone(), Some(T0 + 1), None)
    );
    let claimed = JobEvent::new(T0 + 1, "sys-a", 1, EventKind::Claimed);
    let mut want = vec![JobEvent::new(T0, "", 0, EventKind::Added), claimed.clone()];
    assert_eq!(got[0].history, want);
    // The lease runs out; another claim stores the first one's event.
    let later = T0 + 2 * 60_000;
    let got = store.claim_jobs("t", 1, "sys-b", MIN, later).await.unwrap();
    let (history, at, by) = stored_claim(&db, "j").await;
    assert_eq!((at, by), (Some(later), None));
    assert_eq!(
        jobstore_api::history::history_from_json(&history).unwrap(),
        want[1..]
    );
    want.push(JobEvent::new(later, "sys-b", 2, EventKind::Claimed));
    assert_eq!(got[0].history, want);
    let fail = Release::Archive(JobResult::from_status(404));
    store
        .release_all(&["j".to_owned()], "sys-b", &fail, later + 1)
        .await
        .unwrap();
    let (stored, at, by) = stored_claim(&db, "j").await;
    assert_eq!(
        (&stored, at, by.as_deref()),
        (&history, Some(later), Some("sys-b"))
    );
    let archived = EventKind::Archived {
        code: ResultCode::Failed,
        status: 404,
    };
    want.push(JobEvent::new(later + 1, "sys-b", 2, archived));
    assert_eq!(store.get_job("j").await.unwrap().unwrap().history, want);
    // Run again: the claim and the archive are stored, then the Rerun.
    store
        .rerun_jobs(&["j".to_owned()], MIN, later + 2)
        .await
        .unwrap();
    want.push(JobEvent::new(
        later + 2,
        "",
        0,
        EventKind::Rerun { delay_ms: 60_000 },
    ));
    let (stored, at, by) = stored_claim(&db, "j").await;
    assert_eq!((at, by), (None, None));
    assert_eq!(
        jobstore_api::history::history_from_json(&stored).unwrap(),
        want[1..]
    );
    assert_eq!(store.get_job("j").await.unwrap().unwrap().history, want);
    store.close().await;
}

/// A database of migrations 1 to 6 (histories stored whole, counts kept
/// by triggers) is upgraded by `connect`: its jobs, a claim among their
/// stored events, read back as they were stored, the release of a job
/// claimed before the upgrade appends its own `Archived` event, and the
/// counts carried over go on from there without the triggers.
#[tokio::test]
async fn jobs_stored_before_pending_claims_read_as_stored() {
    use jobstore_api::{EventKind, JobCounts, JobEvent, ResultCode};
    let db = TempDb::new();
    let mut conn = db.migrated_before("20261202000007").await;
    let added = JobEvent::new(T0, "", 0, EventKind::Added);
    let claimed = JobEvent::new(T0 + 1, "sys-a", 1, EventKind::Claimed);
    let archived = JobEvent::new(
        T0 + 2,
        "sys-a",
        1,
        EventKind::Archived {
            code: ResultCode::Ok,
            status: 200,
        },
    );
    let json = |events: &[&JobEvent]| serde_json::to_string(events).unwrap();
    sqlx::query(
        "INSERT INTO jobs (id, jobtype, priority, dt, lock, attempts, create_dt, done_dt,
                           result_code, result_status, data, history)
         VALUES ('held', 't', 0, ?1, 'sys-a', 1, ?2, NULL, NULL, NULL, x'', ?3),
                ('done', 't', 0, ?1, '__done', 1, ?2, ?4, 'ok', 200, x'', ?5)",
    )
    .bind(T0 + 60_000)
    .bind(T0)
    .bind(json(&[&added, &claimed]))
    .bind(T0 + 2)
    .bind(json(&[&added, &claimed, &archived]))
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();

    let store = SqliteStore::connect(&db.url("")).await.unwrap();
    let held = store.get_job("held").await.unwrap().unwrap();
    assert_eq!(held.history, [added.clone(), claimed.clone()]);
    let done = store.get_job("done").await.unwrap().unwrap();
    assert_eq!(
        done.history,
        [added.clone(), claimed.clone(), archived.clone()]
    );
    let fail = Release::Archive(JobResult::from_status(404));
    store
        .release_all(&["held".to_owned()], "sys-a", &fail, T0 + 3)
        .await
        .unwrap();
    let held = store.get_job("held").await.unwrap().unwrap();
    let failed = JobEvent::new(
        T0 + 3,
        "sys-a",
        1,
        EventKind::Archived {
            code: ResultCode::Failed,
            status: 404,
        },
    );
    assert_eq!(held.history, [added, claimed, failed]);
    let (stored, at, by) = stored_claim(&db, "held").await;
    assert_eq!((at, by), (None, None));
    assert_eq!(
        jobstore_api::history::history_from_json(&stored).unwrap(),
        held.history
    );
    assert_eq!(
        store.job_counts(T0 + 4).await.unwrap(),
        vec![JobCounts {
            jobtype: "t".into(),
            archived: [(ResultCode::Ok, 1), (ResultCode::Failed, 1)]
                .into_iter()
                .collect(),
            ..JobCounts::default()
        }]
    );
    store
        .rerun_jobs(&["done".to_owned()], MIN, T0 + 5)
        .await
        .unwrap();
    let done = store.get_job("done").await.unwrap().unwrap();
    assert_eq!(done.history.len(), 4, "{:?}", done.history);
    assert_eq!(
        store.job_counts(T0 + 6).await.unwrap()[0].archived,
        [(ResultCode::Failed, 1)].into_iter().collect()
    );
    store.close().await;
}

/// A database of migrations 1 to 7 (before trace context) is upgraded by
/// `connect`: its jobs read back without a trace context, whole otherwise,
/// and run on as before; jobs added from then on keep theirs.
#[tokio::test]
async fn jobs_stored_before_trace_context_read_without_one() {
    let db = TempDb::new();
    let mut conn = db.migrated_before("20261204000008").await;
    sqlx::query(
        "INSERT INTO jobs (id, jobtype, priority, dt, create_dt, data, tags, history)
         VALUES ('old', 't', 3, ?1, ?1, x'6869', '[\"eu\"]', '[]')",
    )
    .bind(T0)
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();

    let store = SqliteStore::connect(&db.url("")).await.unwrap();
    let old = store.get_job("old").await.unwrap().unwrap();
    assert_eq!(
        (old.trace, old.priority, old.data.as_slice()),
        (None, 3, &b"hi"[..])
    );
    assert_eq!(old.tags, ["eu"]);
    let ctx = jobstore_api::TraceContext::parse(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        Some("rojo=1"),
    )
    .unwrap();
    store
        .add_jobs(&[NewJob::new("new", "t", "").trace(ctx.clone())], T0)
        .await
        .unwrap();
    let claimed = store
        .claim_jobs("t", 2, "sys-a", MIN, T0 + 1)
        .await
        .unwrap();
    let traces: Vec<_> = claimed
        .iter()
        .map(|j| (j.id.as_str(), j.trace.clone()))
        .collect();
    assert_eq!(traces, [("old", None), ("new", Some(ctx))]);
    store.close().await;
}

/// A database of migrations 1 to 8 (one claim index of every live job) is
/// upgraded by `connect` to the free jobs' index: the live jobs it holds
/// (waiting, scheduled, running, expired) count, list and claim as before.
#[tokio::test]
async fn live_jobs_stored_before_the_free_index_count_list_and_claim() {
    use jobstore_api::{JobQuery, JobState};

    let db = TempDb::new();
    let mut conn = db.migrated_before("20261205000009").await;
    // At T0: 'due' waits, 'later' is scheduled, 'held' runs (lease to
    // T0 + 1 min), 'lapsed' has an expired lease; 'due' has the lower
    // priority, so claim order is lapsed, due.
    sqlx::query(
        "INSERT INTO jobs (id, jobtype, priority, dt, lock, attempts, create_dt, data) VALUES
            ('due', 't', 1, ?1 - 5, '', 0, ?1 - 10, x''),
            ('later', 't', 1, ?1 + 5000, '', 0, ?1 - 10, x''),
            ('held', 't', 1, ?1 + 60000, 'sys-old', 1, ?1 - 10, x''),
            ('lapsed', 't', 2, ?1 - 1, 'sys-gone', 1, ?1 - 10, x'')",
    )
    .bind(T0)
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();

    let store = SqliteStore::connect(&db.url("")).await.unwrap();
    let counts = store.job_counts(T0).await.unwrap();
    assert_eq!(counts.len(), 1, "{counts:?}");
    assert_eq!(
        (counts[0].waiting, counts[0].scheduled, counts[0].running),
        (2, 1, 1),
        "{counts:?}"
    );
    let listed = |state| {
        let store = &store;
        async move {
            let page = store
                .list_jobs(&JobQuery::new(state).jobtypes(["t"]), T0)
                .await
                .unwrap();
            page.jobs.into_iter().map(|j| j.id).collect::<Vec<_>>()
        }
    };
    assert_eq!(listed(JobState::Waiting).await, ["due"]);
    assert_eq!(listed(JobState::Scheduled).await, ["later"]);
    assert_eq!(listed(JobState::Running).await, ["held"]);
    assert_eq!(listed(JobState::Expired).await, ["lapsed"]);
    let waiting = store.waiting_jobtypes(T0).await.unwrap();
    assert_eq!(
        waiting
            .iter()
            .map(|w| (w.jobtype.as_str(), w.count))
            .collect::<Vec<_>>(),
        [("t", 2)]
    );
    let claimed = store.claim_jobs("t", 10, "sys-a", MIN, T0).await.unwrap();
    let ids: Vec<&str> = claimed.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, ["lapsed", "due"]);
    let counts = store.job_counts(T0).await.unwrap();
    assert_eq!(
        (counts[0].waiting, counts[0].scheduled, counts[0].running),
        (0, 1, 3)
    );
    store.close().await;
}

/// A release that archives opens its transaction in one call and commits
/// it in the next. One that fails inside its transaction (here a trigger
/// refuses one job's archive) changes nothing, counts included, and leaves
/// no transaction open: the connection it used is closed, and the store's
/// next writes work and commit.
#[tokio::test]
async fn a_release_failing_inside_its_transaction_leaves_nothing_behind() {
    let db = TempDb::new();
    let store = SqliteStore::connect(&db.url("")).await.unwrap();
    let jobs = ["a", "boom", "c"].map(|id| NewJob::new(id, "t", "x"));
    store.add_jobs(&jobs, T0).await.unwrap();
    assert_eq!(
        store
            .claim_jobs("t", 3, "owner", MIN, T0)
            .await
            .unwrap()
            .len(),
        3
    );
    let mut conn = db.connect().await;
    sqlx::query(
        "CREATE TRIGGER refuse_boom BEFORE UPDATE OF lock ON jobs \
         WHEN NEW.id = 'boom' AND NEW.lock = '__done' \
         BEGIN SELECT RAISE(ABORT, 'boom refused'); END",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let ok = || Release::Archive(JobResult::from_status(200));
    let all = ["a", "boom", "c"].map(|id| JobRelease::new(id, ok()));
    let err = store.release_jobs(&all, "owner", T0 + 1).await.unwrap_err();
    assert!(format!("{err:?}").contains("boom refused"), "{err:?}");
    let counts = store.job_counts(T0 + 2).await.unwrap();
    assert_eq!(
        (counts[0].running, counts[0].archived.len()),
        (3, 0),
        "nothing archived"
    );
    // The write lock is free: another connection can write at once.
    sqlx::query("DROP TRIGGER refuse_boom")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let released = store.release_jobs(&all, "owner", T0 + 3).await.unwrap();
    assert_eq!(released.len(), 3);
    let counts = store.job_counts(T0 + 4).await.unwrap();
    assert_eq!(counts[0].archived.get(&ResultCode::Ok), Some(&3));
    assert_eq!(counts[0].running, 0);
    // ... and the next ones on the store too, committed for a new store
    store
        .add_jobs(&[NewJob::new("d", "t", "x")], T0 + 5)
        .await
        .unwrap();
    drop(store);
    let again = SqliteStore::connect(&db.url("")).await.unwrap();
    let counts = again.job_counts(T0 + 6).await.unwrap();
    assert_eq!(
        (counts[0].waiting, counts[0].archived.get(&ResultCode::Ok)),
        (1, Some(&3))
    );
}

/// Concurrent sets of one schedule, from two stores on one file (two
/// writers SQLite serializes), lose no version bump: each set returns a
/// version of its own, and the last read is one past them all.
#[tokio::test]
async fn concurrent_schedule_sets_from_two_stores_lose_no_version() {
    use jobstore_api::Schedule;

    let db = TempDb::new();
    let a = SqliteStore::connect(&db.url("")).await.unwrap();
    let b = SqliteStore::connect(&db.url("")).await.unwrap();
    let s = Schedule::new("race", "* * * * *", "t");
    assert_eq!(a.set_schedule(&s, Some(T0), T0).await.unwrap().version, 1);
    let mut set = tokio::task::JoinSet::new();
    for i in 0..16i64 {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        let s = Schedule {
            priority: i as i32,
            ..s.clone()
        };
        set.spawn(async move {
            store
                .set_schedule(&s, Some(T0 + i), T0 + i)
                .await
                .unwrap()
                .version
        });
    }
    let mut versions = set.join_all().await;
    versions.sort_unstable();
    assert_eq!(versions, (2..=17).collect::<Vec<u64>>());
    let read = b.get_schedule("race").await.unwrap().unwrap();
    assert_eq!(read.version, 17);
    assert_eq!(read.created_dt, T0);
    a.close().await;
    b.close().await;
}

/// A database of migrations 1 to 9 opens with schedules: its jobs as
/// they were, and schedules set, due and advanced beside them.
#[tokio::test]
async fn a_database_from_before_schedules_takes_schedules() {
    use jobstore_api::{Schedule, ScheduleAdvance};

    let db = TempDb::new();
    let mut conn = db.migrated_before("20261206000010").await;
    sqlx::query(
        "INSERT INTO jobs (id, jobtype, priority, dt, lock, attempts, create_dt, data)
         VALUES ('old', 't', 0, ?1, '', 0, ?1, x'')",
    )
    .bind(T0)
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();

    let store = SqliteStore::connect(&db.url("")).await.unwrap();
    assert!(store.capabilities().schedules);
    assert!(store.list_schedules("").await.unwrap().is_empty());
    let s = Schedule::new("nightly", "0 3 * * *", "t");
    store.set_schedule(&s, Some(T0), T0).await.unwrap();
    let due = store.due_schedules(T0, 10).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].schedule, s);
    let adv = ScheduleAdvance {
        fired_through: T0,
        last_job: Some("nightly@1".to_owned()),
        next_due: Some(T0 + 86_400_000),
        fired: 1,
        skipped: 0,
    };
    assert!(
        store
            .advance_schedule("nightly", 1, &adv, T0)
            .await
            .unwrap()
    );
    assert!(store.due_schedules(T0, 10).await.unwrap().is_empty());
    assert_eq!(store.get_job("old").await.unwrap().unwrap().jobtype, "t");
    store.close().await;
}

/// A stored definition that does not parse (the file was changed by
/// something else) reads as a backend error, not as a schedule.
#[tokio::test]
async fn a_schedule_whose_definition_does_not_parse_is_a_backend_error() {
    use jobstore_api::Schedule;

    let db = TempDb::new();
    let store = SqliteStore::connect(&db.url("")).await.unwrap();
    let s = Schedule::new("broken", "* * * * *", "t");
    store.set_schedule(&s, Some(T0), T0).await.unwrap();
    let mut conn = db.connect().await;
    sqlx::query("UPDATE schedules SET definition = '{\"rule\": 1}' WHERE name = 'broken'")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let err = store.get_schedule("broken").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Backend, "{err:?}");
    store.close().await;
}

/// A database of migrations 1 to 10 opens with unique keys: its jobs read
/// as plain (no flow) and hold no key, and keyed jobs are added beside
/// them; a plain job's row stores `NULL`, a keyed one its key.
#[tokio::test]
async fn a_database_from_before_unique_keys_takes_keys() {
    use jobstore_api::{FlowState, Unique};

    let db = TempDb::new();
    let mut conn = db.migrated_before("20261207000011").await;
    sqlx::query(
        "INSERT INTO jobs (id, jobtype, priority, dt, lock, attempts, create_dt, data)
         VALUES ('old', 't', 0, ?1, '', 0, ?1, x'')",
    )
    .bind(T0)
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();

    let store = SqliteStore::connect(&db.url("")).await.unwrap();
    assert!(store.capabilities().unique_jobs);
    assert_eq!(store.get_job("old").await.unwrap().unwrap().flow, None);
    let out = store
        .add_jobs(
            &[
                NewJob::new("k", "t", "x").unique(Unique::new("key")),
                NewJob::new("plain", "t", "x"),
                NewJob::new("old", "t", "x").unique(Unique::new("other")),
            ],
            T0,
        )
        .await
        .unwrap();
    assert_eq!(
        (out.new, out.existing),
        (
            vec!["k".to_owned(), "plain".to_owned()],
            vec!["old".to_owned()]
        )
    );
    let job = store.get_job("k").await.unwrap().unwrap();
    assert_eq!(job.flow, Some(Box::new(FlowState::unique("key"))));
    let claimed = store.claim_jobs("t", 10, "owner", MIN, T0).await.unwrap();
    let flows: Vec<_> = claimed
        .iter()
        .map(|j| (j.id.as_str(), j.flow.clone()))
        .collect();
    assert_eq!(
        flows,
        [
            ("k", Some(Box::new(FlowState::unique("key")))),
            ("old", None),
            ("plain", None)
        ]
    );
    let mut conn = db.connect().await;
    let keys: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT id, unique_key FROM jobs ORDER BY id")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    conn.close().await.unwrap();
    assert_eq!(
        keys,
        [
            ("k".to_owned(), Some("key".to_owned())),
            ("old".to_owned(), None),
            ("plain".to_owned(), None)
        ]
    );
    store.close().await;
}

/// A keyed add whose batch fails midway (here: a holder's replacement is
/// refused by a trigger standing in for a failure inside the transaction)
/// stores nothing of the batch: the lookup, insert and replace are one
/// transaction.
#[tokio::test]
async fn a_keyed_add_failing_midway_stores_nothing() {
    use jobstore_api::{OnConflict, Unique};

    let db = TempDb::new();
    let store = SqliteStore::connect(&db.url("")).await.unwrap();
    let u = Unique::new("k").on_conflict(OnConflict::ReplaceData);
    store
        .add_jobs(&[NewJob::new("holder", "t", "old").unique(u.clone())], T0)
        .await
        .unwrap();
    let mut conn = db.connect().await;
    sqlx::query(
        "CREATE TRIGGER no_edits BEFORE UPDATE OF data ON jobs
         BEGIN SELECT RAISE(ABORT, 'no edits'); END",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let batch = [
        NewJob::new("new", "t", "x").unique(Unique::new("other")),
        NewJob::new("dup", "t", "new").unique(u),
    ];
    assert!(store.add_jobs(&batch, T0).await.is_err());
    assert_eq!(store.get_job("new").await.unwrap(), None);
    assert_eq!(store.get_job("holder").await.unwrap().unwrap().data, b"old");
    sqlx::query("DROP TRIGGER no_edits")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let out = store.add_jobs(&batch, T0).await.unwrap();
    assert_eq!(out.new, ["new"]);
    assert_eq!(out.duplicates.len(), 1);
    assert_eq!(store.get_job("holder").await.unwrap().unwrap().data, b"new");
    store.close().await;
}

/// Of archived jobs with one key run again in one call, the first of the
/// call takes the key, whatever the order of their ids or rows (SQLite
/// updates the rows of `id IN (...)` in rowid order, which would make the
/// job added first win).
#[tokio::test]
async fn a_run_again_gives_the_key_to_the_first_of_the_call() {
    use jobstore_api::{JobResult, Unique};

    let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
    for (i, id) in ["a", "b", "c"].into_iter().enumerate() {
        let now = T0 + i as i64;
        let job = NewJob::new(id, "t", "x").unique(Unique::new("k"));
        assert_eq!(store.add_jobs(&[job], now).await.unwrap().new, [id]);
        store.claim_jobs("t", 1, "owner", MIN, now).await.unwrap();
        let how = Release::Archive(JobResult::from_status(500));
        let done = store
            .release_jobs(&[JobRelease::new(id, how)], "owner", now)
            .await
            .unwrap();
        assert_eq!(done, [id]);
    }
    let ids = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let rerun = store
        .rerun_jobs(&ids(&["c", "b", "a"]), Duration::ZERO, T0 + 10)
        .await
        .unwrap();
    assert_eq!(rerun, ["c"]);
    // The key is held again: nothing more of it runs again.
    let rerun = store
        .rerun_jobs(&ids(&["b", "a"]), Duration::ZERO, T0 + 10)
        .await
        .unwrap();
    assert!(rerun.is_empty(), "{rerun:?}");
    store.close().await;
}

/// A database of migrations 1 to 11 opens with repeating jobs: its jobs
/// read as plain (no flow, `repeat` NULL), repeating jobs are added beside
/// them (with and without a key, in one batch with a plain one), their rows
/// store the rule's text, and a repeat release of an old job and of a new
/// one leaves the rows as the README says: free, due at the repeat time,
/// attempts 0, the run's result with no `done_dt`, no pending claim (the
/// `Claimed` event stored, then `Repeated` with the run's attempt), the
/// rule as added, nothing counted as archived.
#[tokio::test]
async fn a_database_from_before_repeat_takes_repeating_jobs() {
    use jobstore_api::{EventKind, FlowState, JobEvent, Repeat, Unique};

    let db = TempDb::new();
    let mut conn = db.migrated_before("20261208000012").await;
    sqlx::query(
        "INSERT INTO jobs (id, jobtype, priority, dt, lock, attempts, create_dt, data, unique_key)
         VALUES ('old', 't', 9, ?1, '', 0, ?1, x'', 'ok')",
    )
    .bind(T0)
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();

    let store = SqliteStore::connect(&db.url("")).await.unwrap();
    assert!(store.capabilities().repeat);
    assert_eq!(
        store.get_job("old").await.unwrap().unwrap().flow,
        Some(Box::new(FlowState::unique("ok")))
    );
    let paris = Repeat::new("0 6 * * *").time_zone("Europe/Paris");
    let out = store
        .add_jobs(
            &[
                NewJob::new("r", "t", "x").repeat(Repeat::new("HOURLY")),
                NewJob::new("plain", "t", "x"),
                NewJob::new("rk", "t", "x")
                    .repeat(paris.clone())
                    .unique(Unique::new("key")),
                NewJob::new("old", "t", "x").repeat(Repeat::new("HOURLY")),
            ],
            T0,
        )
        .await
        .unwrap();
    assert_eq!(out.new, ["r", "plain", "rk"]);
    assert_eq!(out.existing, ["old"]);
    let mut conn = db.connect().await;
    let rows: Vec<(String, Option<String>, Option<String>)> =
        sqlx::query_as("SELECT id, unique_key, repeat FROM jobs ORDER BY id")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    conn.close().await.unwrap();
    let s = |v: &str| Some(v.to_owned());
    assert_eq!(
        rows,
        [
            ("old".to_owned(), s("ok"), None),
            ("plain".to_owned(), None, None),
            ("r".to_owned(), None, s("HOURLY")),
            ("rk".to_owned(), s("key"), s("TZ=Europe/Paris 0 6 * * *")),
        ]
    );
    let claimed = store.claim_jobs("t", 10, "owner", MIN, T0).await.unwrap();
    let flows: Vec<_> = claimed
        .iter()
        .map(|j| {
            (
                j.id.as_str(),
                j.flow.as_ref().and_then(|f| f.repeat.clone()),
            )
        })
        .collect();
    assert_eq!(
        flows,
        [
            ("old", None),
            ("plain", None),
            ("r", Some(Repeat::new("HOURLY"))),
            ("rk", Some(paris.clone()))
        ]
    );
    let at = T0 + 3_600_000;
    let repeat = |id: &str, data: Option<&[u8]>| {
        JobRelease::new(
            id,
            Release::Repeat {
                at,
                result: JobResult::from_status(201).with_output(b"out".to_vec()),
                data: data.map(<[u8]>::to_vec),
            },
        )
    };
    let mut released = store
        .release_jobs(
            &[
                repeat("old", None),
                repeat("rk", Some(b"next")),
                JobRelease::new("plain", Release::Archive(JobResult::from_status(200))),
            ],
            "owner",
            T0 + 5,
        )
        .await
        .unwrap();
    released.sort();
    assert_eq!(released, ["old", "plain", "rk"]);
    let mut conn = db.connect().await;
    type Stored = (
        String,
        i64,
        i64,
        Option<i64>,
        Option<String>,
        Option<i64>,
        Option<Vec<u8>>,
        Vec<u8>,
        Option<i64>,
        String,
    );
    let stored: Vec<Stored> = sqlx::query_as(
        "SELECT lock, dt, attempts, done_dt, result_code, result_status, result_output, data,
                claimed_at, history
         FROM jobs WHERE id IN ('old', 'rk') ORDER BY id",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let counts: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT jobtype, code, n FROM counts WHERE n <> 0")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    conn.close().await.unwrap();
    assert_eq!(counts, [("t".to_owned(), "ok".to_owned(), 1)]);
    for ((lock, dt, attempts, done_dt, code, status, output, data, claimed_at, history), want) in
        stored.into_iter().zip([b"".as_slice(), b"next"])
    {
        assert_eq!(
            (lock.as_str(), dt, attempts, done_dt, claimed_at),
            ("", at, 0, None, None)
        );
        assert_eq!(
            (code.as_deref(), status, output.as_deref(), data.as_slice()),
            (Some("ok"), Some(201), Some(b"out".as_slice()), want)
        );
        let events = jobstore_api::history::history_from_json(&history).unwrap();
        assert_eq!(
            events,
            [
                JobEvent::new(T0, "owner", 1, EventKind::Claimed),
                JobEvent::new(
                    T0 + 5,
                    "owner",
                    1,
                    EventKind::Repeated {
                        code: ResultCode::Ok,
                        status: 201,
                        next_ms: at
                    }
                ),
            ]
        );
    }
    let counts = store.job_counts(at).await.unwrap();
    assert_eq!(
        counts
            .iter()
            .map(|c| (c.waiting, c.scheduled))
            .collect::<Vec<_>>(),
        [(3, 0)],
        "the two repeated, due, and r, its lease expired"
    );
    store.close().await;
}

/// A release list whose repeat payloads add up to more than one
/// statement's share is split over several statements in one transaction,
/// beside archives and a retry: every entry applies, the payloads land
/// whole, the archive is counted once.
#[tokio::test]
async fn a_release_with_large_repeat_payloads_is_split() {
    use jobstore_api::Repeat;

    let db = TempDb::new();
    let store = SqliteStore::connect(&db.url("")).await.unwrap();
    let jobs: Vec<NewJob> = (0..5)
        .map(|i| NewJob::new(format!("j{i}"), "t", "x").repeat(Repeat::new("HOURLY")))
        .collect();
    store.add_jobs(&jobs, T0).await.unwrap();
    assert_eq!(
        store
            .claim_jobs("t", 5, "owner", MIN, T0)
            .await
            .unwrap()
            .len(),
        5
    );
    let payload = |i: u8| vec![i; 12 << 20]; // two of them: 24 MiB, past 16
    let repeat = |i: u8| {
        JobRelease::new(
            format!("j{i}"),
            Release::Repeat {
                at: T0 + 60_000,
                result: JobResult::from_status(200),
                data: Some(payload(i)),
            },
        )
    };
    let releases = [
        JobRelease::new("j0", Release::Archive(JobResult::from_status(200))),
        repeat(1),
        JobRelease::new(
            "j2",
            Release::Retry {
                delay: Duration::from_secs(1),
            },
        ),
        repeat(3),
        JobRelease::new("j4", Release::Archive(JobResult::from_status(500))),
    ];
    let released = store
        .release_jobs(&releases, "owner", T0 + 1)
        .await
        .unwrap();
    assert_eq!(released.len(), 5);
    for i in [1, 3] {
        let job = store.get_job(&format!("j{i}")).await.unwrap().unwrap();
        assert_eq!((job.lock.as_str(), job.dt), ("", T0 + 60_000));
        assert!(job.data == payload(i), "j{i}'s payload");
    }
    let counts = store.job_counts(T0 + 60_000).await.unwrap();
    assert_eq!(counts.len(), 1);
    assert_eq!(
        (counts[0].waiting, counts[0].archived.values().sum::<u64>()),
        (3, 2),
        "{counts:?}"
    );
    store.close().await;
}
