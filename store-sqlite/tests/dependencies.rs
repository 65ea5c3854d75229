//! Dependencies where the SQLite store has risks of its own: databases
//! from before migrations 13 and 14, a cascade that crosses many jobtypes,
//! a chain of 1,000 cancelled by one call, an archive whose waiters' change
//! fails inside its transaction (the archive does not happen either: there
//! is nothing for `settle_flows` to finish), held edges kept in the file
//! across runs again and reopens, and one unblock of 1,000 edges.

use std::path::PathBuf;
use std::time::Duration;

use jobstore_api::{
    DependencyFailure, EdgeState, EventKind, JobQuery, JobRelease, JobResult, JobState, JobStore,
    JobStoreExt, NewJob, Release, ResultCode, WaitEdge,
};
use jobstore_conformance::services::unique_namespace;
use jobstore_sqlite::SqliteStore;
use sqlx::{ConnectOptions, Connection};

const T0: i64 = 1_700_000_000_000;
const MIN: Duration = Duration::from_secs(60);

struct TempDb(PathBuf);

impl TempDb {
    fn new() -> Self {
        TempDb(std::env::temp_dir().join(format!("{}.db", unique_namespace())))
    }
    fn url(&self) -> String {
        format!("sqlite://{}", self.0.display())
    }
    /// A connection to the database created with the migrations whose
    /// names sort before `first_left_out` only.
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
        let mut conn = self
            .options()
            .create_if_missing(true)
            .connect()
            .await
            .unwrap();
        let old = sqlx::migrate::Migrator::new(dir.as_path()).await.unwrap();
        old.run(&mut conn).await.unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        conn
    }
    fn options(&self) -> sqlx::sqlite::SqliteConnectOptions {
        sqlx::sqlite::SqliteConnectOptions::new().filename(&self.0)
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.0.display()));
        }
    }
}

/// A database of migrations 1 to 12 opens with dependencies: its jobs read
/// without any, a new job waits for an old live one (whose row gets the
/// target marker) and an old archived one (resolved at the add with its
/// stored code), and the old job's archive unblocks it.
#[tokio::test]
async fn a_database_from_before_dependencies_takes_waiters() {
    let db = TempDb::new();
    let mut conn = db.migrated_before("20261209000013").await;
    sqlx::query(
        "INSERT INTO jobs (id, jobtype, priority, dt, lock, attempts, create_dt, data)
         VALUES ('old', 't', 0, ?1, '', 0, ?1, x'')",
    )
    .bind(T0)
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO jobs (id, jobtype, priority, dt, lock, attempts, create_dt, data,
                           done_dt, result_code, result_status)
         VALUES ('gone', 't', 0, ?1, '__done', 1, ?1, x'', ?1, 'failed', 404)",
    )
    .bind(T0)
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();

    let store = SqliteStore::connect(&db.url()).await.unwrap();
    assert!(store.capabilities().dependencies);
    assert_eq!(store.get_job("old").await.unwrap().unwrap().flow, None);
    assert_eq!(
        store
            .job_waits("old", None, 10)
            .await
            .unwrap()
            .unwrap()
            .edges,
        []
    );
    let waiter = NewJob::new("w", "u", "x")
        .depends_on(["old", "gone"])
        .on_dependency_failure(DependencyFailure::Run)
        .run_at(T0 + 5);
    let out = store.add_jobs(&[waiter], T0).await.unwrap();
    assert_eq!(out.new, ["w"]);
    let w = store.get_job("w").await.unwrap().unwrap();
    assert_eq!((w.state(T0), w.dt), (JobState::Blocked, T0 + 5));
    assert_eq!(w.flow.as_ref().map(|f| f.pending), Some(1));
    let mut conn = db.options().connect().await.unwrap();
    let marks: Vec<(String, Option<i64>)> =
        sqlx::query_as("SELECT id, waited FROM jobs WHERE id IN ('old', 'gone') ORDER BY id")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    conn.close().await.unwrap();
    assert_eq!(
        marks,
        [("gone".to_owned(), None), ("old".to_owned(), Some(1))]
    );
    let claimed = store
        .claim_jobs("t", 10, "owner", MIN, T0 + 1)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let ok = JobResult::from_status(200);
    let released = store
        .archive_jobs(&["old".to_owned()], "owner", ok, T0 + 10)
        .await
        .unwrap();
    assert_eq!(released, ["old"]);
    let w = store.get_job("w").await.unwrap().unwrap();
    assert_eq!((w.state(T0 + 10), w.dt), (JobState::Waiting, T0 + 10));
    assert_eq!(
        w.history.last().map(|e| &e.what),
        Some(&EventKind::Unblocked)
    );
    let waits = store.job_waits("w", None, 10).await.unwrap().unwrap();
    assert_eq!(
        waits.edges,
        [
            WaitEdge {
                target: "gone".into(),
                state: EdgeState::Done {
                    code: ResultCode::Failed,
                    status: 404
                }
            },
            WaitEdge {
                target: "old".into(),
                state: EdgeState::Done {
                    code: ResultCode::Ok,
                    status: 200
                }
            },
        ]
    );
    store.close().await;
}

/// One cancel of the head of a chain of 1,000 jobs (each added alone,
/// waiting for the one before) archives the whole chain in its one
/// transaction, each link naming the one before, and counts it.
#[tokio::test]
async fn a_chain_of_1000_is_cancelled_by_one_call() {
    let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
    store
        .add_job(NewJob::new("j0", "t", "x"), T0)
        .await
        .unwrap();
    for i in 1..1000 {
        let job = NewJob::new(format!("j{i}"), "t", "x").depends_on([format!("j{}", i - 1)]);
        store.add_job(job, T0).await.unwrap();
    }
    let counts = store.job_counts(T0).await.unwrap();
    assert_eq!((counts[0].waiting, counts[0].blocked), (1, 999));
    let started = std::time::Instant::now();
    let out = store.cancel_jobs(&["j0".to_owned()], T0 + 1).await.unwrap();
    assert_eq!(out.cancelled, ["j0"]);
    println!("a chain of 1,000 cancelled in {:?}", started.elapsed());
    for i in [1, 500, 999] {
        let job = store.get_job(&format!("j{i}")).await.unwrap().unwrap();
        let result = job.result.unwrap();
        assert_eq!(result.code, ResultCode::Cancelled);
        let note = format!("[jobstore] dependency j{} ended cancelled\n", i - 1);
        assert_eq!(result.output, note.as_bytes());
        assert_eq!(
            job.history.last().map(|e| &e.what),
            Some(&EventKind::Cancelled)
        );
    }
    let counts = store.job_counts(T0 + 2).await.unwrap();
    assert_eq!(counts[0].blocked, 0);
    assert_eq!(counts[0].archived.get(&ResultCode::Cancelled), Some(&1000));
    store.close().await;
}

/// A failure that cascades over 40 jobtypes (200 waiters in two levels,
/// and a waiter of another policy) changes them all in the archive's
/// transaction: each jobtype's counts, the unblocked one due and waiting.
#[tokio::test]
async fn a_cascade_over_many_jobtypes() {
    let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
    store
        .add_job(NewJob::new("x", "src", "x"), T0)
        .await
        .unwrap();
    let first: Vec<NewJob> = (0..100)
        .map(|i| NewJob::new(format!("a{i}"), format!("t{}", i % 40), "x").depends_on(["x"]))
        .collect();
    store.add_jobs(&first, T0).await.unwrap();
    let second: Vec<NewJob> = (0..100)
        .map(|i| {
            NewJob::new(format!("b{i}"), format!("t{}", (i + 7) % 40), "x")
                .depends_on([format!("a{i}"), format!("a{}", (i + 1) % 100)])
        })
        .chain([NewJob::new("r", "runner", "x")
            .depends_on(["a0"])
            .on_dependency_failure(DependencyFailure::Run)])
        .collect();
    let out = store.add_jobs(&second, T0).await.unwrap();
    assert_eq!(out.new.len(), 101);
    store.claim_jobs("src", 1, "owner", MIN, T0).await.unwrap();
    let failed = Release::Archive(JobResult::from_status(500));
    let released = store
        .release_jobs(&[JobRelease::new("x", failed)], "owner", T0 + 1)
        .await
        .unwrap();
    assert_eq!(released, ["x"]);
    let mut want: std::collections::HashMap<String, u64> = Default::default();
    for job in first
        .iter()
        .chain(&second)
        .filter(|j| j.jobtype.starts_with('t'))
    {
        *want.entry(job.jobtype.clone()).or_default() += 1;
    }
    assert_eq!(want.len(), 40);
    let counts = store.job_counts(T0 + 1).await.unwrap();
    let mut cancelled = 0;
    for c in &counts {
        assert_eq!(c.blocked, 0, "{c:?}");
        if let Some(n) = want.get(&c.jobtype) {
            assert_eq!(c.archived.get(&ResultCode::Cancelled), Some(n), "{c:?}");
            cancelled += n;
        }
    }
    assert_eq!(cancelled, 200);
    let a3 = store.get_job("a3").await.unwrap().unwrap().result.unwrap();
    assert_eq!(a3.output, b"[jobstore] dependency x ended error\n");
    let b3 = store.get_job("b3").await.unwrap().unwrap().result.unwrap();
    assert_eq!(b3.output, b"[jobstore] dependency a3 ended cancelled\n");
    let r = store.get_job("r").await.unwrap().unwrap();
    assert_eq!(r.state(T0 + 1), JobState::Waiting);
    let waits = store.job_waits("r", None, 5).await.unwrap().unwrap();
    assert_eq!(waits.done.get(&ResultCode::Cancelled), Some(&1));
    store.close().await;
}

/// The waiters' change runs in the archive's transaction: when it fails
/// (here a trigger refuses the waiter's cancel), the archive fails with
/// it, the job stays its owner's and the waiter blocked; once the trigger
/// is gone the same release archives and cancels both. `settle_flows` has
/// nothing to finish, ever.
#[tokio::test]
async fn an_archive_whose_waiters_fail_does_not_happen() {
    let db = TempDb::new();
    let store = SqliteStore::connect(&db.url()).await.unwrap();
    store.add_job(NewJob::new("x", "t", "x"), T0).await.unwrap();
    store
        .add_job(NewJob::new("w", "u", "x").depends_on(["x"]), T0)
        .await
        .unwrap();
    store.claim_jobs("t", 1, "owner", MIN, T0).await.unwrap();
    let mut conn = db.options().connect().await.unwrap();
    sqlx::query(
        "CREATE TRIGGER refuse_w BEFORE UPDATE OF lock ON jobs \
         WHEN NEW.id = 'w' AND NEW.lock = '__done' \
         BEGIN SELECT RAISE(ABORT, 'w refused'); END",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let failed = || {
        vec![JobRelease::new(
            "x",
            Release::Archive(JobResult::from_status(404)),
        )]
    };
    let err = store
        .release_jobs(&failed(), "owner", T0 + 1)
        .await
        .unwrap_err();
    assert!(format!("{err:?}").contains("w refused"), "{err:?}");
    let x = store.get_job("x").await.unwrap().unwrap();
    assert_eq!(x.lock, "owner");
    let w = store.get_job("w").await.unwrap().unwrap();
    assert_eq!(w.state(T0 + 1), JobState::Blocked);
    assert_eq!(store.settle_flows(T0 + 3_600_000, 100).await.unwrap(), 0);
    sqlx::query("DROP TRIGGER refuse_w")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let released = store
        .release_jobs(&failed(), "owner", T0 + 2)
        .await
        .unwrap();
    assert_eq!(released, ["x"]);
    let w = store.get_job("w").await.unwrap().unwrap();
    assert_eq!(w.state(T0 + 2), JobState::Archived);
    let counts = store.job_counts(T0 + 2).await.unwrap();
    let u = counts.iter().find(|c| c.jobtype == "u").unwrap();
    assert_eq!(u.archived.get(&ResultCode::Cancelled), Some(&1));
    store.close().await;
}

/// The edges of `waiter` as stored: (target, state, code, status), by target.
async fn stored_edges(
    db: &TempDb,
    waiter: &str,
) -> Vec<(String, String, Option<String>, Option<i64>)> {
    let mut conn = db.options().connect().await.unwrap();
    let rows = sqlx::query_as(
        "SELECT target, state, code, status FROM edges WHERE waiter = ?1 ORDER BY target",
    )
    .bind(waiter)
    .fetch_all(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    rows
}

/// A column of job `id` as stored.
async fn stored_column<T>(db: &TempDb, id: &str, column: &str) -> T
where
    T: Send + Unpin + for<'r> sqlx::Decode<'r, sqlx::Sqlite> + sqlx::Type<sqlx::Sqlite>,
{
    let mut conn = db.options().connect().await.unwrap();
    let sql = format!("SELECT {column} FROM jobs WHERE id = ?1");
    let v = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    v
}

fn held(code: ResultCode, status: u16) -> EdgeState {
    EdgeState::Held { code, status }
}

/// A database of migrations 1 to 13 opens with held edges: its waiter
/// (policy `run`, one pending edge) and its edges read as before, the
/// index of open edges is rebuilt over held ones, and a new waiter under
/// `Hold` on the same old target holds while the old one is unblocked.
#[tokio::test]
async fn a_database_from_before_hold_takes_held_edges() {
    let db = TempDb::new();
    let mut conn = db.migrated_before("20261210000014").await;
    for sql in [
        "INSERT INTO jobs (id, jobtype, priority, dt, lock, attempts, create_dt, data, waited)
         VALUES ('x', 't', 0, ?1, '', 0, ?1, x'', 1)",
        "INSERT INTO jobs (id, jobtype, priority, dt, lock, attempts, create_dt, data,
                           done_dt, result_code, result_status, waited)
         VALUES ('y', 't', 0, ?1, '__done', 1, ?1, x'', ?1, 'ok', 200, 1)",
        "INSERT INTO jobs (id, jobtype, priority, dt, lock, attempts, create_dt, data,
                           pending, dep_policy)
         VALUES ('w', 'u', 0, 400000000000000 + ?1, '__blocked', 0, ?1, x'', 1, 'run')",
        "INSERT INTO edges (waiter, target, state, code, status)
         VALUES ('w', 'x', 'p', NULL, NULL), ('w', 'y', 'd', 'ok', 200)",
    ] {
        sqlx::query(sql).bind(T0).execute(&mut conn).await.unwrap();
    }
    conn.close().await.unwrap();

    let store = SqliteStore::connect(&db.url()).await.unwrap();
    let flow = store.get_job("w").await.unwrap().unwrap().flow.unwrap();
    assert_eq!(
        (flow.pending, flow.on_dependency_failure, flow.with_outputs),
        (1, DependencyFailure::Run, false)
    );
    let waits = store.job_waits("w", None, 10).await.unwrap().unwrap();
    assert_eq!((waits.pending, waits.held, waits.skipped), (1, 0, 0));
    assert_eq!(waits.done.get(&ResultCode::Ok), Some(&1));
    let mut conn = db.options().connect().await.unwrap();
    let index: String =
        sqlx::query_scalar("SELECT sql FROM sqlite_schema WHERE name = 'edges_open'")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    conn.close().await.unwrap();
    assert!(index.ends_with("WHERE state IN ('p', 'h')"), "{index}");

    let h = NewJob::new("h", "u", "x")
        .depends_on(["x"])
        .on_dependency_failure(DependencyFailure::Hold)
        .with_outputs();
    assert_eq!(store.add_jobs(&[h], T0).await.unwrap().new, ["h"]);
    assert_eq!(
        stored_column::<Option<String>>(&db, "h", "dep_policy").await,
        Some("hold+outputs".to_owned())
    );
    store.claim_jobs("t", 1, "owner", MIN, T0).await.unwrap();
    let failed = JobResult::from_status(500);
    store
        .archive_jobs(&["x".to_owned()], "owner", failed, T0 + 1)
        .await
        .unwrap();
    let w = store.get_job("w").await.unwrap().unwrap();
    assert_eq!(w.state(T0 + 1), JobState::Waiting);
    let h = store.get_job("h").await.unwrap().unwrap();
    assert_eq!(h.state(T0 + 1), JobState::Blocked);
    assert_eq!(
        stored_edges(&db, "h").await,
        [(
            "x".to_owned(),
            "h".to_owned(),
            Some("error".to_owned()),
            Some(500)
        )]
    );
    store.close().await;
}

/// A held edge lives in the file: held at the add on a failed target
/// (which gets the target marker), held by a failed end, kept through
/// runs again, a reopen and a second failure (with the new result), and
/// resolved by the end after the next run again. The waiter is never
/// claimed while held; once free, its claim and its listing carry the
/// policy and `with_outputs`.
#[tokio::test]
async fn a_held_edge_survives_runs_again_and_reopens() {
    let db = TempDb::new();
    let store = SqliteStore::connect(&db.url()).await.unwrap();
    store
        .add_jobs(
            &[
                NewJob::new("a", "t", "a"),
                NewJob::new("c", "t", "c").priority(-1),
            ],
            T0,
        )
        .await
        .unwrap();
    store.claim_jobs("t", 1, "owner", MIN, T0).await.unwrap();
    store
        .archive_jobs(&["a".to_owned()], "owner", JobResult::from_status(404), T0)
        .await
        .unwrap();
    let h = NewJob::new("h", "u", "x")
        .depends_on(["a", "c"])
        .on_dependency_failure(DependencyFailure::Hold)
        .with_outputs();
    store.add_jobs(&[h], T0 + 1).await.unwrap();
    assert_eq!(
        stored_column::<Option<i64>>(&db, "a", "waited").await,
        Some(1)
    );
    assert_eq!(
        stored_edges(&db, "h").await,
        [
            (
                "a".to_owned(),
                "h".to_owned(),
                Some("failed".to_owned()),
                Some(404)
            ),
            ("c".to_owned(), "p".to_owned(), None, None),
        ]
    );
    store
        .claim_jobs("t", 1, "owner", MIN, T0 + 2)
        .await
        .unwrap();
    store
        .archive_jobs(
            &["c".to_owned()],
            "owner",
            JobResult::from_status(503),
            T0 + 2,
        )
        .await
        .unwrap();
    let waits = store.job_waits("h", None, 10).await.unwrap().unwrap();
    assert_eq!((waits.pending, waits.held), (0, 2));
    assert_eq!(
        store
            .get_job("h")
            .await
            .unwrap()
            .unwrap()
            .flow
            .unwrap()
            .pending,
        2
    );
    store.close().await;

    // Reopened: run both again; `c` ends ok, `a` fails again.
    let store = SqliteStore::connect(&db.url()).await.unwrap();
    let both = ["a".to_owned(), "c".to_owned()];
    let mut again = store
        .rerun_jobs(&both, Duration::ZERO, T0 + 3)
        .await
        .unwrap();
    again.sort();
    assert_eq!(again, both);
    assert!(
        store
            .claim_jobs("u", 1, "owner", MIN, T0 + 3)
            .await
            .unwrap()
            .is_empty()
    );
    let claimed = store
        .claim_jobs("t", 2, "owner", MIN, T0 + 3)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    store
        .release_jobs(
            &[
                JobRelease::new("a", Release::Archive(JobResult::from_status(410))),
                JobRelease::new("c", Release::Archive(JobResult::from_status(200))),
            ],
            "owner",
            T0 + 4,
        )
        .await
        .unwrap();
    let waits = store.job_waits("h", None, 10).await.unwrap().unwrap();
    assert_eq!(
        waits.edges.iter().map(|e| e.state).collect::<Vec<_>>(),
        [
            held(ResultCode::Failed, 410),
            EdgeState::Done {
                code: ResultCode::Ok,
                status: 200
            }
        ]
    );
    let h = store.get_job("h").await.unwrap().unwrap();
    assert_eq!(
        (h.state(T0 + 4), h.flow.unwrap().pending),
        (JobState::Blocked, 1)
    );
    store.close().await;

    let store = SqliteStore::connect(&db.url()).await.unwrap();
    store
        .rerun_jobs(&["a".to_owned()], Duration::ZERO, T0 + 5)
        .await
        .unwrap();
    store
        .claim_jobs("t", 1, "owner", MIN, T0 + 5)
        .await
        .unwrap();
    store
        .archive_jobs(
            &["a".to_owned()],
            "owner",
            JobResult::from_status(200),
            T0 + 6,
        )
        .await
        .unwrap();
    let listed = store
        .list_jobs(&JobQuery::new(JobState::Waiting), T0 + 6)
        .await
        .unwrap();
    let flow = listed.jobs[0].flow.clone().unwrap();
    assert_eq!(
        (
            listed.jobs[0].id.as_str(),
            flow.with_outputs,
            flow.on_dependency_failure
        ),
        ("h", true, DependencyFailure::Hold)
    );
    let claimed = store
        .claim_jobs("u", 1, "owner", MIN, T0 + 6)
        .await
        .unwrap();
    let flow = claimed[0].flow.clone().unwrap();
    assert_eq!(
        (flow.pending, flow.with_outputs, flow.on_dependency_failure),
        (0, true, DependencyFailure::Hold)
    );
    let unblocked = claimed[0]
        .history
        .iter()
        .filter(|e| e.what == EventKind::Unblocked)
        .count();
    assert_eq!(unblocked, 1);
    store.close().await;
}

/// One `unblock_jobs` call skips a job's 1,000 edges (500 pending, 500
/// held) in its transaction; `waits_of` reads it beside 999 other waiters
/// in one statement, each as `job_waits` reads it; the skipped targets'
/// later ends change nothing.
#[tokio::test]
async fn one_unblock_skips_1000_edges() {
    let db = TempDb::new();
    let store = SqliteStore::connect(&db.url()).await.unwrap();
    let targets: Vec<String> = (0..1000).map(|i| format!("t{i:04}")).collect();
    let adds: Vec<NewJob> = targets
        .iter()
        .enumerate()
        .map(|(i, id)| NewJob::new(id.clone(), "t", "").priority(if i < 500 { 1 } else { 0 }))
        .collect();
    store.add_jobs(&adds, T0).await.unwrap();
    let mut waiters = vec![
        NewJob::new("w", "u", "")
            .depends_on(targets.clone())
            .on_dependency_failure(DependencyFailure::Hold),
    ];
    // 999 other waiters, three edges each (some on the same targets).
    waiters.extend(
        (1..1000)
            .map(|i| {
                NewJob::new(format!("o{i:04}"), "v", "").depends_on([
                    targets[i].clone(),
                    targets[(i * 7) % 1000].clone(),
                    targets[(i * 13 + 1) % 1000].clone(),
                ])
            })
            .filter(|j| {
                let d = j.dependencies();
                d[0] != d[1] && d[1] != d[2] && d[0] != d[2]
            }),
    );
    store.add_jobs(&waiters, T0).await.unwrap();
    let first = store
        .claim_jobs("t", 500, "owner", MIN, T0 + 1)
        .await
        .unwrap();
    let first: Vec<String> = first.into_iter().map(|j| j.id).collect();
    assert_eq!(first, targets[..500]);
    store
        .archive_jobs(&first, "owner", JobResult::from_status(500), T0 + 1)
        .await
        .unwrap();
    let waits = store.job_waits("w", None, 1).await.unwrap().unwrap();
    assert_eq!((waits.pending, waits.held, waits.skipped), (500, 500, 0));

    let ids: Vec<String> = waiters
        .iter()
        .map(|j| j.id.clone())
        .chain(["nope".to_owned()])
        .collect();
    let many = store.waits_of(&ids, 2).await.unwrap();
    assert_eq!(many.len(), waiters.len());
    for w in &many {
        let one = store.job_waits(&w.id, None, 2).await.unwrap().unwrap();
        assert_eq!(*w, one);
    }

    let started = std::time::Instant::now();
    let unblocked = store
        .unblock_jobs(&["w".to_owned(), "o0001".to_owned()], T0 + 2)
        .await
        .unwrap();
    println!("1,000 edges skipped in {:?}", started.elapsed());
    assert_eq!(unblocked, ["w"]);
    let waits = store.job_waits("w", None, 1000).await.unwrap().unwrap();
    assert_eq!((waits.pending, waits.held, waits.skipped), (0, 0, 1000));
    assert!(waits.edges.iter().all(|e| e.state == EdgeState::Skipped));
    let mut conn = db.options().connect().await.unwrap();
    let open: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM edges INDEXED BY edges_open
         WHERE state IN ('p', 'h') AND waiter = 'w'",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    assert_eq!(open, 0);

    let rest = store
        .claim_jobs("t", 500, "owner", MIN, T0 + 3)
        .await
        .unwrap();
    let rest: Vec<String> = rest.into_iter().map(|j| j.id).collect();
    store
        .archive_jobs(&rest, "owner", JobResult::from_status(200), T0 + 3)
        .await
        .unwrap();
    let w = store.get_job("w").await.unwrap().unwrap();
    assert_eq!(
        (w.lock.as_str(), w.dt, w.flow.unwrap().pending),
        ("", T0 + 2, 0)
    );
    let n = w
        .history
        .iter()
        .filter(|e| e.what == EventKind::Unblocked)
        .count();
    assert_eq!(n, 1);
    let waits = store.waits_of(&["w".to_owned()], 5).await.unwrap();
    assert_eq!(
        (waits[0].skipped, waits[0].next.as_deref()),
        (1000, Some("t0004"))
    );
    store.close().await;
}
