//! Dependencies on PostgreSQL (migration 17): a schema of migration 16
//! with jobs in it takes migration 17 (old rows read back as before, new
//! jobs wait for them, a job held across the migration releases into its
//! new waiters); a cancel runs down a chain of 1,000 jobs in one call; a
//! failure cascades over many jobtypes, counted as every cancel is; adds
//! linking to a target race its release from another handle, and no
//! waiter is left blocked; a plain release list never takes the flow path.
//!
//! Migration 18 (held and skipped edges): a schema of migration 17 with
//! blocked waiters takes it (their edges and policies read as before and
//! end as before, and a new waiter under `hold` holds an old archived
//! target); a held edge survives runs again through `archive.waited`,
//! whether the target ends by a release in a plain list, a cancel or a
//! delete; a job with 1,000 edges, pending and held, is unblocked in one
//! call; `waits_of` reads many waiters' pages in one statement; unblocks
//! race held ends, and adds holding an archived target race its run again.

use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use jobstore_api::{
    DependencyFailure, EdgeState, Job, JobRelease, JobResult, JobState, JobStore, NewJob, Release,
    ResultCode,
};
use jobstore_conformance::services::{postgres_url, unique_namespace};
use jobstore_postgres::{PgStore, PgStoreOptions};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, Executor};

const T0: i64 = 1_700_000_000_000;
const MIN: Duration = Duration::from_secs(60);
/// The last migration before dependencies.
const MIGRATION_16: i64 = 20261208000016;
/// The last migration before held and skipped edges.
const MIGRATION_17: i64 = 20261209000017;

fn options(url: &str, schema: String) -> PgStoreOptions {
    PgStoreOptions::from_url(url)
        .expect("url")
        .schema(schema)
        .max_connections(4)
}

/// Runs `test` on a store in a fresh schema, then drops the schema.
fn with_store<F, Fut>(test: F)
where
    F: FnOnce(PgStore) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    jobstore_conformance::block_on(async {
        let Some(url) = postgres_url().await else {
            return;
        };
        let store = PgStore::connect_with(options(&url, unique_namespace()))
            .await
            .expect("connect");
        finish(store, test).await;
    });
}

/// Runs `test` on `store`, then drops its schema.
async fn finish<F, Fut>(store: PgStore, test: F)
where
    F: FnOnce(PgStore) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let schema = store.schema().to_owned();
    let pool = store.pool().clone();
    let outcome = tokio::spawn(test(store)).await;
    let drop = format!("DROP SCHEMA \"{schema}\" CASCADE");
    sqlx::query(sqlx::AssertSqlSafe(drop))
        .execute(&pool)
        .await
        .expect("drop schema");
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

async fn get(store: &dyn JobStore, id: &str) -> Job {
    store.get_job(id).await.unwrap().expect(id)
}

fn failed() -> JobResult {
    JobResult::from_status(400)
}

/// A schema migrated to version 16 with jobs in it takes migration 17: its
/// jobs read back without dependencies, a new job waits for an old live
/// one and an old archived one, and the old job, held across the
/// migration by a daemon, released into its new waiter unblocks it.
#[test]
fn a_schema_of_migration_16_takes_migration_17() {
    jobstore_conformance::block_on(async {
        let Some(url) = postgres_url().await else {
            return;
        };
        let schema = unique_namespace();
        let base = PgConnectOptions::from_str(&url).expect("url");
        let mut conn = base
            .clone()
            .options([("search_path", schema.as_str())])
            .connect()
            .await
            .expect("connect");
        conn.execute(sqlx::AssertSqlSafe(format!("CREATE SCHEMA \"{schema}\"")))
            .await
            .expect("create schema");
        let mut migrator = sqlx::migrate!();
        migrator.set_locking(false);
        migrator
            .run_direct(Some(MIGRATION_16), &mut conn, false)
            .await
            .expect("migrations 1 to 16");
        conn.execute(
            "SELECT add_jobs(ARRAY['plain', 'held'], ARRAY['t', 't'], \
                             ARRAY['p', 'h']::bytea[], ARRAY[0, 0], \
                             ARRAY[1700000000000, 1700000000000]::int8[], ARRAY['', ''], \
                             ARRAY[NULL, NULL]::text[], ARRAY[NULL, NULL]::text[], \
                             1700000000000, 'c');
             UPDATE jobs SET lock = 'sys-old', dt = 1700000060000, attempts = 1, \
                             claimed_at = 1700000000000 WHERE id = 'held';
             INSERT INTO archive (id, jobtype, data, priority, dt, attempts, create_dt, \
                                  done_dt, code, status, output) \
             VALUES ('done', 't', 'd', 0, 9e15, 1, 5, 6, 'failed', 500, 'out');",
        )
        .await
        .expect("jobs of version 16");
        conn.close().await.unwrap();

        let store = PgStore::connect_with(options(&url, schema))
            .await
            .expect("migration 17");
        finish(store, |store| async move {
            let s: &dyn JobStore = &store;
            assert_eq!(get(s, "plain").await.flow, None);
            assert_eq!(get(s, "done").await.flow, None);
            let out = s
                .add_jobs(
                    &[NewJob::new("w", "u", "")
                        .depends_on(["held", "done"])
                        .on_dependency_failure(DependencyFailure::Run)],
                    T0 + 1,
                )
                .await
                .unwrap();
            assert_eq!(out.new, ["w"]);
            let w = get(s, "w").await;
            assert_eq!((w.state(T0 + 1), w.dt), (JobState::Blocked, T0 + 1));
            assert_eq!(w.flow.as_ref().unwrap().pending, 1);
            let released = s
                .release_jobs(
                    &[JobRelease::new("held", Release::Archive(failed()))],
                    "sys-old",
                    T0 + 5,
                )
                .await
                .unwrap();
            assert_eq!(released, ["held"]);
            let w = get(s, "w").await;
            assert_eq!((w.state(T0 + 5), w.dt), (JobState::Waiting, T0 + 5));
            let waits = s.job_waits("w", None, 10).await.unwrap().unwrap();
            assert_eq!(waits.done.get(&ResultCode::Failed), Some(&2));
        })
        .await;
    });
}

/// A chain of 1,000 jobs, each waiting for the one before: a cancel of
/// the first archives all of them in one call, each naming the one before.
/// Another chain of 1,000 unblocks one link per release.
#[test]
fn a_cancel_runs_down_a_chain_of_1000() {
    with_store(|store| async move {
        let s: &dyn JobStore = &store;
        let n = 1000;
        s.add_jobs(&[NewJob::new("c0000", "t", "")], T0)
            .await
            .unwrap();
        for i in 1..n {
            let job =
                NewJob::new(format!("c{i:04}"), "t", "").depends_on([format!("c{:04}", i - 1)]);
            let out = s.add_jobs(&[job], T0).await.unwrap();
            assert_eq!(out.new.len(), 1);
        }
        let counts = s.job_counts(T0).await.unwrap();
        assert_eq!((counts[0].waiting, counts[0].blocked), (1, n as u64 - 1));
        let out = s.cancel_jobs(&["c0000".to_owned()], T0 + 1).await.unwrap();
        assert_eq!(out.cancelled, ["c0000"]);
        let last = get(s, &format!("c{:04}", n - 1)).await;
        let result = last.result.unwrap();
        assert_eq!(result.code, ResultCode::Cancelled);
        assert_eq!(
            String::from_utf8(result.output).unwrap(),
            format!("[jobstore] dependency c{:04} ended cancelled\n", n - 2)
        );
        let counts = s.job_counts(T0 + 1).await.unwrap();
        assert_eq!(counts[0].blocked, 0);
        assert_eq!(
            counts[0].archived.get(&ResultCode::Cancelled),
            Some(&(n as u64))
        );

        // A chain that runs: each release unblocks the next link only.
        s.add_jobs(&[NewJob::new("r0000", "r", "")], T0 + 2)
            .await
            .unwrap();
        for i in 1..n {
            let job =
                NewJob::new(format!("r{i:04}"), "r", "").depends_on([format!("r{:04}", i - 1)]);
            s.add_jobs(&[job], T0 + 2).await.unwrap();
        }
        for i in 0..n {
            let now = T0 + 3 + i as i64;
            let got = s.claim_jobs("r", 10, "sys", MIN, now).await.unwrap();
            let ids: Vec<&str> = got.iter().map(|j| j.id.as_str()).collect();
            let want = format!("r{i:04}");
            assert_eq!(ids, [want.as_str()]);
            let rel = JobRelease::new(want.clone(), Release::Archive(JobResult::from_status(200)));
            s.release_jobs(&[rel], "sys", now).await.unwrap();
        }
    });
}

/// A failure cascades over many jobtypes: one target, 40 waiters of 40
/// jobtypes, each with a waiter of its own in 40 more: one release
/// archives all 80 as cancelled, and counts them per jobtype.
#[test]
fn a_failure_cascades_over_many_jobtypes() {
    with_store(|store| async move {
        let s: &dyn JobStore = &store;
        s.add_jobs(&[NewJob::new("x", "src", "")], T0)
            .await
            .unwrap();
        let first: Vec<NewJob> = (0..40)
            .map(|i| NewJob::new(format!("a{i:02}"), format!("ta{i:02}"), "").depends_on(["x"]))
            .collect();
        s.add_jobs(&first, T0).await.unwrap();
        let second: Vec<NewJob> = (0..40)
            .map(|i| {
                NewJob::new(format!("b{i:02}"), format!("tb{i:02}"), "")
                    .depends_on([format!("a{i:02}"), "x".to_owned()])
            })
            .collect();
        s.add_jobs(&second, T0).await.unwrap();
        s.claim_jobs("src", 1, "sys", MIN, T0).await.unwrap();
        let rel = JobRelease::new("x", Release::Archive(failed()));
        assert_eq!(s.release_jobs(&[rel], "sys", T0 + 1).await.unwrap(), ["x"]);
        let counts = s.job_counts(T0 + 1).await.unwrap();
        let cancelled: u64 = counts
            .iter()
            .filter(|c| c.jobtype.starts_with('t'))
            .map(|c| c.archived.get(&ResultCode::Cancelled).copied().unwrap_or(0))
            .sum();
        assert_eq!(cancelled, 80);
        assert!(counts.iter().all(|c| c.blocked == 0));
        // Both of b00's edges ended: x directly (it names x, the least
        // failing target of its round), a00 in the next round.
        let b = get(s, "b00").await;
        assert_eq!(
            b.result.unwrap().output,
            b"[jobstore] dependency x ended failed\n"
        );
        let waits = s.job_waits("b00", None, 10).await.unwrap().unwrap();
        assert_eq!(waits.pending, 0);
        assert_eq!(b.flow.unwrap().pending, 0);
    });
}

/// Adds that link to a target race its release from another handle:
/// every waiter is either linked before the archive (and unblocked by it)
/// or finds the target archived; none is left blocked.
#[test]
fn links_race_the_release_of_their_target() {
    with_store(|store| async move {
        let url = postgres_url().await.expect("url");
        let other = Arc::new(
            PgStore::connect_with(options(&url, store.schema().to_owned()))
                .await
                .expect("second handle"),
        );
        let store = Arc::new(store);
        for round in 0..20 {
            let x = format!("x{round:02}");
            let now = T0 + round * 10;
            store
                .add_jobs(&[NewJob::new(x.clone(), "src", "")], now)
                .await
                .unwrap();
            store.claim_jobs("src", 1, "sys", MIN, now).await.unwrap();
            let adds = {
                let store = store.clone();
                let x = x.clone();
                tokio::spawn(async move {
                    for i in 0..10 {
                        let w = NewJob::new(format!("w{round:02}-{i}"), "w", "").depends_on([&x]);
                        let out = store.add_jobs(&[w], now + 1).await.unwrap();
                        assert_eq!(out.new.len(), 1);
                    }
                })
            };
            let rel = JobRelease::new(x.clone(), Release::Archive(JobResult::from_status(200)));
            let released = other.release_jobs(&[rel], "sys", now + 1).await.unwrap();
            assert_eq!(released, [x]);
            adds.await.unwrap();
        }
        let counts = store.job_counts(T0 + 1000).await.unwrap();
        let w = counts.iter().find(|c| c.jobtype == "w").unwrap();
        assert_eq!((w.blocked, w.waiting), (0, 200));
        other.close().await;
    });
}

/// Connects to a fresh schema migrated up to `version` only, for an
/// upgrade test to fill with rows of that version.
async fn schema_at(url: &str, schema: &str, version: i64) -> sqlx::PgConnection {
    let base = PgConnectOptions::from_str(url).expect("url");
    let mut conn = base
        .clone()
        .options([("search_path", schema)])
        .connect()
        .await
        .expect("connect");
    conn.execute(sqlx::AssertSqlSafe(format!("CREATE SCHEMA \"{schema}\"")))
        .await
        .expect("create schema");
    let mut migrator = sqlx::migrate!();
    migrator.set_locking(false);
    migrator
        .run_direct(Some(version), &mut conn, false)
        .await
        .expect("migrations");
    conn
}

fn archive_entry(id: &str, status: u16) -> JobRelease {
    JobRelease::new(id, Release::Archive(JobResult::from_status(status)))
}

/// Claims every eligible job of `jobtype` and archives the one `id` with
/// `status` (the others are handed back).
async fn run_one(s: &dyn JobStore, jobtype: &str, id: &str, status: u16, now: i64) {
    let got = s.claim_jobs(jobtype, 10, "sys", MIN, now).await.unwrap();
    let ids: Vec<&str> = got.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, [id], "{jobtype}");
    let out = s
        .release_jobs(&[archive_entry(id, status)], "sys", now)
        .await
        .unwrap();
    assert_eq!(out, [id]);
}

async fn edges_of(s: &dyn JobStore, id: &str) -> Vec<(String, EdgeState)> {
    let w = s.job_waits(id, None, 1000).await.unwrap().expect(id);
    w.edges.into_iter().map(|e| (e.target, e.state)).collect()
}

async fn marker(store: &PgStore, table: &str, id: &str) -> Option<bool> {
    let sql = format!("SELECT waited FROM {table} WHERE id = $1");
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(store.pool())
        .await
        .unwrap()
        .flatten()
}

/// A schema migrated to version 17 with blocked waiters takes migration
/// 18: their policies and edges read as before (no outputs, pending and
/// done edges), their targets end them as before (a failure cancels the
/// `cancel` waiter, unblocks the `run` one), and a new waiter under
/// `hold` holds an old archived failure until it runs again and ends ok.
#[test]
fn a_schema_of_migration_17_takes_migration_18() {
    jobstore_conformance::block_on(async {
        let Some(url) = postgres_url().await else {
            return;
        };
        let schema = unique_namespace();
        let mut conn = schema_at(&url, &schema, MIGRATION_17).await;
        conn.execute(
            "SELECT add_jobs(ARRAY['t1', 't2'], ARRAY['t', 't'], \
                             ARRAY['a', 'b']::bytea[], ARRAY[0, 0], \
                             ARRAY[1700000000000, 1700000000000]::int8[], ARRAY['', ''], \
                             ARRAY[NULL, NULL]::text[], ARRAY[NULL, NULL]::text[], \
                             1700000000000, 'c');
             UPDATE jobs SET waited = true, lock = 'sys', dt = 1700000060000, attempts = 1, \
                             claimed_at = 1700000000000;
             INSERT INTO archive (id, jobtype, data, priority, dt, attempts, create_dt, \
                                  done_dt, code, status, output) \
             VALUES ('old', 't', 'o', 0, 9e15, 1, 5, 6, 'failed', 404, ''), \
                    ('fine', 't', 'f', 0, 9e15, 1, 5, 6, 'ok', 200, '');
             INSERT INTO jobs (id, jobtype, data, priority, dt, lock, create_dt, pending, \
                               dep_policy) \
             VALUES ('wc', 'w', '', 0, 401700000000000, '__blocked', 1700000000000, 1, 'cancel'), \
                    ('wr', 'w', '', 0, 401700000000000, '__blocked', 1700000000000, 2, 'run');
             INSERT INTO edges (waiter, target, state, code, status) \
             VALUES ('wc', 't1', 'p', NULL, NULL), ('wc', 'fine', 'd', 'ok', 200), \
                    ('wr', 't1', 'p', NULL, NULL), ('wr', 't2', 'p', NULL, NULL);",
        )
        .await
        .expect("jobs of version 17");
        conn.close().await.unwrap();

        let store = PgStore::connect_with(options(&url, schema))
            .await
            .expect("migration 18");
        finish(store, |store| async move {
            let s: &dyn JobStore = &store;
            let wc = get(s, "wc").await;
            let flow = wc.flow.clone().unwrap();
            assert_eq!(
                (flow.on_dependency_failure, flow.with_outputs, flow.pending),
                (DependencyFailure::Cancel, false, 1)
            );
            assert_eq!((wc.state(T0), wc.dt), (JobState::Blocked, T0));
            let waits = s.job_waits("wc", None, 10).await.unwrap().unwrap();
            assert_eq!((waits.pending, waits.held, waits.skipped), (1, 0, 0));
            assert_eq!(waits.done.get(&ResultCode::Ok), Some(&1));
            let released = s
                .release_jobs(
                    &[archive_entry("t1", 500), archive_entry("t2", 200)],
                    "sys",
                    T0 + 5,
                )
                .await
                .unwrap();
            assert_eq!(released.len(), 2);
            let wc = get(s, "wc").await;
            assert_eq!(wc.result.unwrap().code, ResultCode::Cancelled);
            let wr = get(s, "wr").await;
            assert_eq!((wr.state(T0 + 5), wr.dt), (JobState::Waiting, T0 + 5));

            // A new waiter under hold: the old archived failure holds it.
            let out = s
                .add_jobs(
                    &[NewJob::new("wh", "w", "")
                        .depends_on(["old", "fine"])
                        .on_dependency_failure(DependencyFailure::Hold)
                        .with_outputs()],
                    T0 + 6,
                )
                .await
                .unwrap();
            assert_eq!(out.new, ["wh"]);
            let wh = get(s, "wh").await;
            let flow = wh.flow.clone().unwrap();
            assert_eq!(
                (flow.on_dependency_failure, flow.with_outputs, flow.pending),
                (DependencyFailure::Hold, true, 1)
            );
            assert_eq!(marker(&store, "archive", "old").await, Some(true));
            assert_eq!(marker(&store, "archive", "fine").await, None);
            s.rerun_jobs(&["old".to_owned()], Duration::ZERO, T0 + 7)
                .await
                .unwrap();
            run_one(s, "t", "old", 200, T0 + 8).await;
            let wh = get(s, "wh").await;
            assert_eq!((wh.state(T0 + 8), wh.dt), (JobState::Waiting, T0 + 8));
        })
        .await;
    });
}

/// A held edge survives runs again through `archive.waited`: its target
/// fails in a plain release list (the flow path takes it), is run again
/// and fails again (held with the new result), is run again and
/// cancelled by an operator (held, cancelled), run again and deleted
/// (held for good: nothing can end it again). A second waiter, linked to
/// the target while archived, resolves with the first.
#[test]
fn a_held_edge_survives_runs_again() {
    with_store(|store| async move {
        let s: &dyn JobStore = &store;
        let hold = |id: &str, deps: &[&str]| {
            NewJob::new(id, "w", "")
                .depends_on(deps.iter().map(|d| (*d).to_owned()))
                .on_dependency_failure(DependencyFailure::Hold)
        };
        let plain: Vec<NewJob> = (0..20)
            .map(|i| NewJob::new(format!("p{i:02}"), "t", ""))
            .chain([NewJob::new("x", "t", "")])
            .collect();
        s.add_jobs(&plain, T0).await.unwrap();
        s.add_jobs(&[hold("h1", &["x"])], T0).await.unwrap();
        s.claim_jobs("t", 100, "sys", MIN, T0).await.unwrap();
        let mut list: Vec<JobRelease> = (0..20)
            .map(|i| archive_entry(&format!("p{i:02}"), 200))
            .collect();
        list.push(archive_entry("x", 503));
        assert_eq!(
            s.release_jobs(&list, "sys", T0 + 1).await.unwrap().len(),
            21
        );
        let held = |code, status| EdgeState::Held { code, status };
        assert_eq!(
            edges_of(s, "h1").await,
            [("x".to_owned(), held(ResultCode::Error, 503))]
        );
        assert_eq!(marker(&store, "archive", "x").await, Some(true));
        // Linked while archived: held at once.
        s.add_jobs(&[hold("h2", &["x", "p00"])], T0 + 1)
            .await
            .unwrap();
        assert_eq!(get(s, "h2").await.flow.unwrap().pending, 1);

        // Run again: the marker comes back; it fails again.
        let x = ["x".to_owned()];
        s.rerun_jobs(&x, Duration::ZERO, T0 + 2).await.unwrap();
        assert_eq!(marker(&store, "jobs", "x").await, Some(true));
        run_one(s, "t", "x", 404, T0 + 2).await;
        let again = ("x".to_owned(), held(ResultCode::Failed, 404));
        assert_eq!(edges_of(s, "h1").await, std::slice::from_ref(&again));
        let ok = EdgeState::Done {
            code: ResultCode::Ok,
            status: 200,
        };
        assert_eq!(edges_of(s, "h2").await, [("p00".to_owned(), ok), again]);
        for w in ["h1", "h2"] {
            assert_eq!(get(s, w).await.state(T0 + 2), JobState::Blocked, "{w}");
        }
        // Run again and cancelled by an operator: held, cancelled.
        s.rerun_jobs(&x, Duration::ZERO, T0 + 3).await.unwrap();
        let out = s.cancel_jobs(&x, T0 + 3).await.unwrap();
        assert_eq!(out.cancelled, x);
        assert_eq!(
            edges_of(s, "h1").await,
            [("x".to_owned(), held(ResultCode::Cancelled, 0))]
        );
        // Run again and deleted: held for good.
        s.rerun_jobs(&x, Duration::ZERO, T0 + 4).await.unwrap();
        let out = s.delete_jobs(&x, T0 + 4).await.unwrap();
        assert_eq!(out.deleted, x);
        for w in ["h1", "h2"] {
            let job = get(s, w).await;
            assert_eq!(
                (job.state(T0 + 4), job.flow.unwrap().pending),
                (JobState::Blocked, 1),
                "{w}"
            );
        }
        let waits = s.job_waits("h2", None, 10).await.unwrap().unwrap();
        assert_eq!((waits.pending, waits.held, waits.skipped), (0, 1, 0));
        assert_eq!(waits.done.get(&ResultCode::Ok), Some(&1));
        // The operator lets them run.
        let both = ["h1".to_owned(), "h2".to_owned()];
        let mut got = s.unblock_jobs(&both, T0 + 5).await.unwrap();
        got.sort();
        assert_eq!(got, both);
    });
}

/// A job waiting on 1,000 targets, 500 of them failed under `hold`
/// (held) and 500 live (pending), is unblocked by one call: every edge
/// skipped, the job free once, and the targets' later ends change
/// nothing. `waits_of` reads it and 99 more waiters in one statement.
#[test]
fn an_unblock_skips_1000_edges_in_one_call() {
    with_store(|store| async move {
        let s: &dyn JobStore = &store;
        let n = 1000;
        let targets: Vec<String> = (0..n).map(|i| format!("t{i:04}")).collect();
        let jobs: Vec<NewJob> = targets
            .iter()
            .map(|t| NewJob::new(t.clone(), "t", ""))
            .collect();
        s.add_jobs(&jobs, T0).await.unwrap();
        let got = s.claim_jobs("t", 500, "sys", MIN, T0).await.unwrap();
        let failed: Vec<JobRelease> = got.iter().map(|j| archive_entry(&j.id, 500)).collect();
        s.release_jobs(&failed, "sys", T0).await.unwrap();
        let big = NewJob::new("big", "w", "")
            .depends_on(targets.clone())
            .on_dependency_failure(DependencyFailure::Hold);
        let small: Vec<NewJob> = (0..99)
            .map(|i| NewJob::new(format!("s{i:02}"), "w", "").depends_on(targets[n - 3..].to_vec()))
            .collect();
        s.add_jobs(&[big], T0 + 1).await.unwrap();
        s.add_jobs(&small, T0 + 1).await.unwrap();
        let waits = s.job_waits("big", None, 10).await.unwrap().unwrap();
        assert_eq!((waits.pending, waits.held), (500, 500));
        assert_eq!(get(s, "big").await.flow.unwrap().pending, 1000);

        let mut ids: Vec<String> = (0..99).map(|i| format!("s{i:02}")).collect();
        ids.push("big".to_owned());
        ids.push("nobody".to_owned());
        let many = s.waits_of(&ids, 2).await.unwrap();
        assert_eq!(many.len(), 100);
        let big = many.iter().find(|w| w.id == "big").unwrap();
        assert_eq!((big.pending, big.held, big.edges.len()), (500, 500, 2));
        assert_eq!(big.next.as_deref(), Some("t0001"));

        let got = s.unblock_jobs(&["big".to_owned()], T0 + 2).await.unwrap();
        assert_eq!(got, ["big"]);
        let waits = s.job_waits("big", None, 10).await.unwrap().unwrap();
        assert_eq!((waits.pending, waits.held, waits.skipped), (0, 0, 1000));
        let job = get(s, "big").await;
        assert_eq!(
            (job.state(T0 + 2), job.dt, job.flow.unwrap().pending),
            (JobState::Waiting, T0 + 2, 0)
        );
        // The live targets end: the skipped edges stay skipped.
        let got = s.claim_jobs("t", 500, "sys", MIN, T0 + 3).await.unwrap();
        let ok: Vec<JobRelease> = got.iter().map(|j| archive_entry(&j.id, 200)).collect();
        s.release_jobs(&ok, "sys", T0 + 3).await.unwrap();
        let waits = s.job_waits("big", None, 10).await.unwrap().unwrap();
        assert_eq!(waits.skipped, 1000);
        let job = get(s, "big").await;
        let unblocked = job
            .history
            .iter()
            .filter(|e| e.what == jobstore_api::EventKind::Unblocked)
            .count();
        assert_eq!((job.state(T0 + 3), unblocked), (JobState::Waiting, 1));
    });
}

/// `unblock_jobs` racing failing ends under `hold`, on two handles: each
/// waiter is either unblocked (returned, its edge skipped, free) or held
/// (not returned, still blocked with its edge held); a second unblock
/// frees the held ones.
#[test]
fn unblocks_race_held_ends() {
    with_store(|store| async move {
        let url = postgres_url().await.expect("url");
        let other = Arc::new(
            PgStore::connect_with(options(&url, store.schema().to_owned()))
                .await
                .expect("second handle"),
        );
        let store = Arc::new(store);
        let targets: Vec<String> = (0..40).map(|i| format!("t{i:02}")).collect();
        let waiters: Vec<String> = (0..40).map(|i| format!("w{i:02}")).collect();
        let jobs: Vec<NewJob> = targets
            .iter()
            .map(|t| NewJob::new(t.clone(), "t", ""))
            .collect();
        store.add_jobs(&jobs, T0).await.unwrap();
        let jobs: Vec<NewJob> = targets
            .iter()
            .zip(&waiters)
            .map(|(t, w)| {
                NewJob::new(w.clone(), "w", "")
                    .depends_on([t.clone()])
                    .on_dependency_failure(DependencyFailure::Hold)
            })
            .collect();
        store.add_jobs(&jobs, T0).await.unwrap();
        store.claim_jobs("t", 40, "sys", MIN, T0).await.unwrap();
        let mut set = tokio::task::JoinSet::new();
        for (k, chunk) in targets.chunks(10).enumerate() {
            let s = if k % 2 == 0 {
                store.clone()
            } else {
                other.clone()
            };
            let list: Vec<JobRelease> = chunk.iter().map(|t| archive_entry(t, 500)).collect();
            set.spawn(async move {
                s.release_jobs(&list, "sys", T0 + 1).await.unwrap();
                Vec::new()
            });
        }
        for (k, chunk) in waiters.chunks(10).enumerate() {
            let s = if k % 2 == 0 {
                other.clone()
            } else {
                store.clone()
            };
            let list = chunk.to_vec();
            set.spawn(async move { s.unblock_jobs(&list, T0 + 1).await.unwrap() });
        }
        let unblocked: std::collections::HashSet<String> =
            set.join_all().await.into_iter().flatten().collect();
        let s: &dyn JobStore = &*store;
        let mut held = Vec::new();
        for (w, t) in waiters.iter().zip(&targets) {
            let job = get(s, w).await;
            let edges = edges_of(s, w).await;
            if unblocked.contains(w) {
                assert_eq!(edges, [(t.clone(), EdgeState::Skipped)], "{w}");
                assert_eq!(job.state(T0 + 1), JobState::Waiting, "{w}");
            } else {
                let want = EdgeState::Held {
                    code: ResultCode::Error,
                    status: 500,
                };
                assert_eq!(edges, [(t.clone(), want)], "{w}");
                assert_eq!(job.state(T0 + 1), JobState::Blocked, "{w}");
                held.push(w.clone());
            }
        }
        let mut got = s.unblock_jobs(&waiters, T0 + 2).await.unwrap();
        got.sort();
        assert_eq!(got, held);
        let counts = s.job_counts(T0 + 2).await.unwrap();
        let w = counts.iter().find(|c| c.jobtype == "w").unwrap();
        assert_eq!((w.blocked, w.waiting), (0, 40));
        other.close().await;
    });
}

/// Adds under `hold` linking to an archived failure race its run again
/// (and its next end) from another handle: every edge is held before the
/// run again and resolved by the end, or made to the live job and ended
/// by it; no waiter is left blocked.
#[test]
fn held_links_race_the_run_again_of_their_target() {
    with_store(|store| async move {
        let url = postgres_url().await.expect("url");
        let other = Arc::new(
            PgStore::connect_with(options(&url, store.schema().to_owned()))
                .await
                .expect("second handle"),
        );
        let store = Arc::new(store);
        for round in 0..20 {
            let x = format!("x{round:02}");
            let now = T0 + round * 10;
            store
                .add_jobs(&[NewJob::new(x.clone(), "src", "")], now)
                .await
                .unwrap();
            run_one(&*store, "src", &x, 500, now).await;
            let adds = {
                let store = store.clone();
                let x = x.clone();
                tokio::spawn(async move {
                    for i in 0..10 {
                        let w = NewJob::new(format!("w{round:02}-{i}"), "w", "")
                            .depends_on([&x])
                            .on_dependency_failure(DependencyFailure::Hold);
                        let out = store.add_jobs(&[w], now + 1).await.unwrap();
                        assert_eq!(out.new.len(), 1);
                    }
                })
            };
            let rerun = other
                .rerun_jobs(std::slice::from_ref(&x), Duration::ZERO, now + 1)
                .await
                .unwrap();
            assert_eq!(rerun, std::slice::from_ref(&x));
            adds.await.unwrap();
            run_one(&*other, "src", &x, 200, now + 2).await;
        }
        let counts = store.job_counts(T0 + 1000).await.unwrap();
        let w = counts.iter().find(|c| c.jobtype == "w").unwrap();
        assert_eq!((w.blocked, w.waiting), (0, 200));
        other.close().await;
    });
}

/// A plain release list is applied by its one statement: no entry comes
/// back for the flow path, and a job with waiters does (counted by the
/// edges it ends).
#[test]
fn plain_lists_never_take_the_flow_path() {
    with_store(|store| async move {
        let s: &dyn JobStore = &store;
        let jobs: Vec<NewJob> = (0..50)
            .map(|i| NewJob::new(format!("p{i:02}"), "t", ""))
            .collect();
        s.add_jobs(&jobs, T0).await.unwrap();
        s.add_jobs(&[NewJob::new("w", "u", "").depends_on(["p07"])], T0)
            .await
            .unwrap();
        s.claim_jobs("t", 50, "sys", MIN, T0).await.unwrap();
        let marked: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE waited")
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(marked, 1);
        let rels: Vec<JobRelease> = (0..50)
            .map(|i| JobRelease::new(format!("p{i:02}"), Release::Archive(failed())))
            .collect();
        let released = s.release_jobs(&rels, "sys", T0 + 1).await.unwrap();
        assert_eq!(released.len(), 50);
        let w = get(s, "w").await;
        assert_eq!(w.result.unwrap().code, ResultCode::Cancelled);
        let edges: Vec<(String, String, String)> =
            sqlx::query_as("SELECT waiter, target, state::text FROM edges")
                .fetch_all(store.pool())
                .await
                .unwrap();
        assert_eq!(edges, [("w".into(), "p07".into(), "d".into())]);
    });
}

/// The archive and delete entries the plain statement does not return go
/// through the flow path, which applies those of jobs with edges and
/// nothing for a lost one: a job with a waiter is archived and unblocks
/// it, a job with edges of its own is deleted with them, a job whose lease
/// ran out and which another owner claimed stays theirs, an unknown id
/// changes nothing.
#[test]
fn entries_not_returned_take_the_flow_path() {
    with_store(|store| async move {
        let s: &dyn JobStore = &store;
        let later = T0 + 2 * MIN.as_millis() as i64;
        s.add_jobs(&[NewJob::new("y", "y", "")], T0).await.unwrap();
        s.claim_jobs("y", 1, "sys", MIN, T0).await.unwrap();
        let rel = JobRelease::new("y", Release::Archive(JobResult::from_status(200)));
        assert_eq!(s.release_jobs(&[rel], "sys", T0).await.unwrap(), ["y"]);
        let jobs = vec![
            NewJob::new("t0", "t", ""),
            NewJob::new("t1", "t", ""),
            NewJob::new("x", "t", ""),
            NewJob::new("d", "t", "").depends_on(["y"]),
            NewJob::new("lost", "l", ""),
        ];
        s.add_jobs(&jobs, T0).await.unwrap();
        s.add_jobs(&[NewJob::new("w", "u", "").depends_on(["x"])], T0)
            .await
            .unwrap();
        s.claim_jobs("l", 1, "sys", MIN, T0).await.unwrap();
        s.claim_jobs("l", 1, "other", MIN, later).await.unwrap();
        assert_eq!(
            s.claim_jobs("t", 10, "sys", MIN, later)
                .await
                .unwrap()
                .len(),
            4
        );
        let archive = || Release::Archive(JobResult::from_status(200));
        let rels = [
            JobRelease::new("t0", archive()),
            JobRelease::new("t1", Release::Delete),
            JobRelease::new("x", archive()),
            JobRelease::new("d", Release::Delete),
            JobRelease::new("lost", archive()),
            JobRelease::new("nope", archive()),
        ];
        let mut released = s.release_jobs(&rels, "sys", later + 1).await.unwrap();
        released.sort();
        assert_eq!(released, ["d", "t0", "t1", "x"]);
        let lost = get(s, "lost").await;
        assert_eq!(
            (lost.state(later + 1), lost.lock.as_str()),
            (JobState::Running, "other")
        );
        assert_eq!(get(s, "w").await.state(later + 1), JobState::Waiting);
        assert!(s.get_job("d").await.unwrap().is_none());
        assert!(s.get_job("nope").await.unwrap().is_none());
        let edges: Vec<(String, String, String)> =
            sqlx::query_as("SELECT waiter, target, state::text FROM edges")
                .fetch_all(store.pool())
                .await
                .unwrap();
        assert_eq!(edges, [("w".into(), "x".into(), "d".into())]);
    });
}
