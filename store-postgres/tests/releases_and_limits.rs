//! PostgreSQL specifics: a release with more result output, or an add
//! with more payload, than one statement takes; handler versions stored
//! before the limit columns existed; purges in batches; the store's own
//! vacuums of `jobs`; connecting during another store's migration; the
//! methods for tools and `Debug`; the schema the migrations leave; jobs
//! stored before the management columns existed; jobs stored before
//! history and tags; the maintained archive counts under concurrent
//! archives, reruns, deletes and purges; the bound on the stats rows one
//! add prunes; unique keys carried by every path that moves a job between
//! the tables, and read back in every state.

use std::future::Future;
use std::time::{Duration, Instant};

use jobstore_api::limits::{MAX_BATCH, MAX_OUTPUT};
use jobstore_api::{
    Durations, Handler, HandlerLimits, JobQuery, JobRelease, JobResult, JobState, JobStore, NewJob,
    Release, StatsDelta, StatsResolution,
};
use jobstore_conformance::services::{postgres_url, unique_namespace};
use jobstore_postgres::{PgStore, PgStoreOptions};

const T0: i64 = 1_700_000_000_000;

/// Runs `test` on a store in a fresh schema, then drops the schema.
fn with_store<F, Fut>(test: F)
where
    F: FnOnce(PgStore) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    with_store_opts(|o| o, test)
}

/// [`with_store`] with options adjusted by `adjust`.
fn with_store_opts<A, F, Fut>(adjust: A, test: F)
where
    A: FnOnce(PgStoreOptions) -> PgStoreOptions,
    F: FnOnce(PgStore) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    jobstore_conformance::block_on(async {
        let Some(url) = postgres_url().await else {
            return;
        };
        let opts = PgStoreOptions::from_url(&url)
            .expect("url")
            .schema(unique_namespace())
            .max_connections(2);
        let opts = adjust(opts);
        let store = PgStore::connect_with(opts).await.expect("connect");
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
    });
}

/// More than 32 MiB of result output in one list is split over several
/// statements in one transaction; every entry is applied as it says.
#[test]
fn release_with_more_output_than_one_statement_is_split() {
    with_store(|store| async move {
        let n = 520; // 520 x 64 KiB = 32.5 MiB of output
        let jobs: Vec<NewJob> = (0..n + 2)
            .map(|i| NewJob::new(format!("j{i:03}"), "t", "x"))
            .collect();
        store.add_jobs(&jobs, T0).await.unwrap();
        let got = store
            .claim_jobs("t", n + 2, "owner", Duration::from_secs(60), T0)
            .await
            .unwrap();
        assert_eq!(got.len(), n + 2);
        let result =
            |i: usize| JobResult::from_status(500).with_output(vec![(i % 251) as u8; MAX_OUTPUT]);
        let mut releases: Vec<JobRelease> = (0..n)
            .map(|i| JobRelease::new(format!("j{i:03}"), Release::Archive(result(i))))
            .collect();
        releases.push(JobRelease::new(format!("j{n:03}"), Release::Delete));
        releases.push(JobRelease::new(
            format!("j{:03}", n + 1),
            Release::Retry {
                delay: Duration::from_secs(5),
            },
        ));
        let released = store
            .release_jobs(&releases, "owner", T0 + 1)
            .await
            .unwrap();
        assert_eq!(released.len(), n + 2);
        for i in [0, 1, 300, n - 1] {
            let job = store.get_job(&format!("j{i:03}")).await.unwrap().unwrap();
            assert_eq!(job.result, Some(result(i)), "j{i:03}");
        }
        assert_eq!(store.get_job(&format!("j{n:03}")).await.unwrap(), None);
        let retried = store
            .get_job(&format!("j{:03}", n + 1))
            .await
            .unwrap()
            .unwrap();
        assert_eq!((retried.lock.as_str(), retried.dt), ("", T0 + 1 + 5_000));
    });
}

/// Handler versions stored before migration 3 (rows without the limit
/// columns set) read back with no limits.
#[test]
fn handlers_from_before_limits_read_back_without_limits() {
    with_store(|store| async move {
        sqlx::query(
            "INSERT INTO handlers (jobtype, dt, lang, body, eid, before, before_each, after_each) \
             VALUES ('old', 5, 'process', 'cat', NULL, NULL, NULL, NULL)",
        )
        .execute(store.pool())
        .await
        .unwrap();
        let v = store.get_handler("old").await.unwrap().unwrap();
        assert_eq!(v.handler, Handler::new("process", "cat"));
        assert!(v.handler.limits.is_unset());
        let limits = HandlerLimits {
            time_limit_ms: Some(1_000),
            concurrency: Some(2),
            ..HandlerLimits::default()
        };
        store
            .set_handler("old", &Handler::new("process", "cat").limits(limits), 6)
            .await
            .unwrap();
        let listed = store.list_handlers().await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].handler.limits, limits);
    });
}

/// Jobs as stored before migration 6 (rows given only the columns of version
/// 5) read back unmarked and with no result, and every management
/// operation takes them: listing, marking for cancel, run again.
#[test]
fn jobs_from_before_management_read_back_unmarked() {
    with_store(|store| async move {
        sqlx::query(
            "INSERT INTO jobs (id, jobtype, data, priority, dt, lock, attempts, create_dt) \
             VALUES ('free', 'old', 'x', 0, 5, '', 0, 5), ('held', 'old', 'y', 0, 9e15, 'sys-a', 1, 5)",
        )
        .execute(store.pool())
        .await
        .unwrap();
        let free = store.get_job("free").await.unwrap().unwrap();
        assert!(!free.cancel_requested);
        assert_eq!((free.result, free.done_dt), (None, None));
        let page = store
            .list_jobs(&JobQuery::new(JobState::Waiting).with_data(), T0)
            .await
            .unwrap();
        assert_eq!(page.jobs.len(), 1);
        assert_eq!(page.jobs[0].data, b"x");
        let out = store.cancel_jobs(&["held".to_owned()], T0).await.unwrap();
        assert_eq!(out.marked, ["held"]);
        let claimed = store
            .claim_jobs("old", 1, "sys-b", Duration::from_secs(60), T0)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1);
        assert!(!claimed[0].cancel_requested);
        let result = JobResult::from_status(500);
        store
            .release_jobs(
                &[JobRelease::new("free", Release::Archive(result.clone()))],
                "sys-b",
                T0,
            )
            .await
            .unwrap();
        let rerun = store
            .rerun_jobs(&["free".to_owned()], Duration::ZERO, T0 + 1)
            .await
            .unwrap();
        assert_eq!(rerun, ["free"]);
        let again = store.get_job("free").await.unwrap().unwrap();
        assert_eq!((again.lock.as_str(), again.result), ("", Some(result)));
    });
}

/// Jobs as stored before migration 7 (no history, no tags), live and
/// archived, read back with no tags and, for history, their implicit
/// `added` event alone (at their `create_dt`), are counted, and record
/// events from their next change on.
#[test]
fn jobs_from_before_history_read_back_with_only_the_added_event() {
    with_store(|store| async move {
        sqlx::query(
            "INSERT INTO jobs (id, jobtype, data, priority, dt, lock, attempts, create_dt) \
             VALUES ('live', 'old', 'x', 0, 5, '', 0, 5)",
        )
        .execute(store.pool())
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO archive (id, jobtype, data, priority, dt, attempts, create_dt, \
                                  done_dt, code, status, output) \
             VALUES ('done', 'old', 'y', 0, 9e15, 1, 5, 6, 'failed', 500, '')",
        )
        .execute(store.pool())
        .await
        .unwrap();
        for id in ["live", "done"] {
            let job = store.get_job(id).await.unwrap().unwrap();
            assert!(job.tags.is_empty(), "{job:?}");
            assert_eq!(
                job.history,
                [jobstore_api::JobEvent::new(
                    5,
                    "",
                    0,
                    jobstore_api::EventKind::Added
                )],
                "{id}"
            );
        }
        let counts = store.job_counts(T0).await.unwrap();
        assert_eq!(counts.len(), 1);
        assert_eq!(counts[0].waiting, 1);
        assert_eq!(counts[0].archived.values().sum::<u64>(), 1);
        let claimed = store
            .claim_jobs("old", 1, "sys-a", Duration::from_secs(60), T0)
            .await
            .unwrap();
        assert_eq!(claimed[0].history.len(), 2);
        assert_eq!(claimed[0].history[1].by, "sys-a");
    });
}

/// `archive_counts` equals a count of the archive after archives, cancels,
/// reruns, deletes and purges run concurrently on several connections.
#[test]
fn archive_counts_stay_exact_under_concurrency() {
    with_store_opts(
        |o| o.max_connections(6),
        |store| async move {
            let store = std::sync::Arc::new(store);
            let n = 400;
            let jobs: Vec<NewJob> = (0..n)
                .map(|i| NewJob::new(format!("c{i:03}"), ["a", "b"][i % 2], ""))
                .collect();
            store.add_jobs(&jobs, T0).await.unwrap();
            let mut tasks = Vec::new();
            for w in 0..4 {
                let s = store.clone();
                tasks.push(tokio::spawn(async move {
                    let owner = format!("sys-{w}");
                    for round in 0..20 {
                        let t = T0 + round;
                        for jt in ["a", "b"] {
                            let got = s
                                .claim_jobs(jt, 5, &owner, Duration::from_secs(60), t)
                                .await
                                .unwrap();
                            let ids: Vec<String> = got.into_iter().map(|j| j.id).collect();
                            let result =
                                JobResult::from_status(if round % 2 == 0 { 0 } else { 500 });
                            let how = Release::Archive(result);
                            let releases: Vec<JobRelease> = ids
                                .iter()
                                .map(|id| JobRelease::new(id.clone(), how.clone()))
                                .collect();
                            s.release_jobs(&releases, &owner, t).await.unwrap();
                            match round % 4 {
                                1 => {
                                    s.rerun_jobs(&ids[..ids.len().min(2)], Duration::ZERO, t)
                                        .await
                                        .unwrap();
                                }
                                3 => {
                                    s.delete_jobs(&ids[..ids.len().min(1)], t).await.unwrap();
                                }
                                _ => {}
                            }
                        }
                        if round % 5 == 4 {
                            let codes = [jobstore_api::ResultCode::Ok];
                            s.purge_archived(t, &codes).await.unwrap();
                        }
                    }
                }));
            }
            let cancel: Vec<String> = (300..n).map(|i| format!("c{i:03}")).collect();
            store.cancel_jobs(&cancel, T0 + 5).await.unwrap();
            for t in tasks {
                t.await.unwrap();
            }
            let diff: i64 = sqlx::query_scalar(
                "WITH c AS (SELECT jobtype, code, sum(n)::int8 AS n FROM archive_counts \
                            GROUP BY 1, 2 HAVING sum(n) <> 0) \
                 SELECT count(*) FROM ( \
                   (SELECT jobtype, code, count(*) AS n FROM archive GROUP BY 1, 2 \
                    EXCEPT SELECT jobtype, code, n FROM c) \
                   UNION ALL \
                   (SELECT jobtype, code, n FROM c \
                    EXCEPT SELECT jobtype, code, count(*) FROM archive GROUP BY 1, 2)) d",
            )
            .fetch_one(store.pool())
            .await
            .unwrap();
            assert_eq!(diff, 0, "archive_counts differs from the archive");
            let archived: i64 = sqlx::query_scalar("SELECT count(*) FROM archive")
                .fetch_one(store.pool())
                .await
                .unwrap();
            assert!(archived > 0);
        },
    );
}

/// An add with more payload than one statement takes (32 MiB) is split
/// over several statements: every job of the batch is stored with its own
/// payload, new and existing ids are reported as in one statement, and an
/// existing job on either side of a split is left untouched.
#[test]
fn add_with_more_payload_than_one_statement_is_split() {
    with_store(|store| async move {
        let mib = 1 << 20;
        store
            .add_jobs(&[NewJob::new("a05", "t", "old")], T0)
            .await
            .unwrap();
        // 80 jobs of 1 MiB: three statements of at most 32 MiB.
        let jobs: Vec<NewJob> = (0..80)
            .map(|i| NewJob::new(format!("a{i:02}"), "t", vec![i as u8; mib]))
            .collect();
        let out = store.add_jobs(&jobs, T0 + 1).await.unwrap();
        assert_eq!(out.existing, vec!["a05".to_owned()]);
        assert_eq!(out.new.len(), 79);
        assert_eq!(out.new[0], "a00");
        assert_eq!(out.new[78], "a79");
        for i in [0usize, 31, 32, 33, 63, 64, 65, 79] {
            let job = store.get_job(&format!("a{i:02}")).await.unwrap().unwrap();
            assert!(job.data == vec![i as u8; mib], "payload of a{i:02}");
        }
        assert_eq!(
            store.get_job("a05").await.unwrap().unwrap().data,
            b"old",
            "existing job untouched"
        );
        // Adding the whole batch again: every id exists.
        let again = store.add_jobs(&jobs, T0 + 2).await.unwrap();
        assert_eq!((again.new.len(), again.existing.len()), (0, 80));
    });
}

/// A purge deletes in statements of `purge_batch` rows until one comes
/// back short, and is exact across them.
#[test]
fn purge_runs_in_bounded_batches() {
    with_store_opts(
        |o| o.purge_batch(7),
        |store| async move {
            jobstore_conformance::checks::purge_is_exact_across_batches(&store, 7).await;
        },
    );
}

/// Each add deletes, per resolution, up to twice `MAX_BATCH` of the rows
/// older than the buckets kept (as many as one batch can add, a minute and
/// a day row per delta), oldest first; the next add goes on from there.
#[test]
fn stats_pruning_deletes_a_bounded_number_of_old_rows_per_add() {
    with_store(|store| async move {
        let bound = 2 * MAX_BATCH as i64;
        let mut oldest = Vec::new();
        for res in [StatsResolution::Minute, StatsResolution::Day] {
            let before = res.oldest_kept(T0) - res.width();
            oldest.push(res.oldest_kept(T0));
            sqlx::query(
                "INSERT INTO stats (resolution, jobtype, start, \
                     wait_count, wait_sum_ms, wait_sum_sq_ms, wait_buckets, \
                     run_count, run_sum_ms, run_sum_sq_ms, run_buckets) \
                 SELECT $1, 'old-' || i, $2, 0, 0, 0, array_fill(0::int8, ARRAY[17]), \
                     0, 0, 0, array_fill(0::int8, ARRAY[17]) \
                 FROM generate_series(0, $3) AS i",
            )
            .bind(res.as_str())
            .bind(before)
            .bind(bound)
            .execute(store.pool())
            .await
            .unwrap();
        }
        assert_eq!(old_stats_rows(&store, &oldest).await, 2 * (bound + 1));
        let delta = |minute| StatsDelta {
            wait: Durations::of(&[1]),
            ..StatsDelta::new("new", minute)
        };
        let minute = StatsResolution::Minute.start_of(T0);
        store.add_stats(&[delta(minute)], T0).await.unwrap();
        assert_eq!(
            old_stats_rows(&store, &oldest).await,
            2,
            "one left per resolution"
        );
        store
            .add_stats(&[delta(minute - 60_000)], T0)
            .await
            .unwrap();
        assert_eq!(old_stats_rows(&store, &oldest).await, 0);
    });
}

/// The stats rows older than the oldest buckets kept (`oldest`: minute,
/// day).
async fn old_stats_rows(store: &PgStore, oldest: &[i64]) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM stats \
         WHERE (resolution = 'minute' AND start < $1) \
            OR (resolution = 'day' AND start < $2)",
    )
    .bind(oldest[0])
    .bind(oldest[1])
    .fetch_one(store.pool())
    .await
    .unwrap()
}

/// How often `jobs` of the store's schema was vacuumed by hand (not by
/// autovacuum), from the statistics.
async fn vacuums_of_jobs(store: &PgStore) -> i64 {
    sqlx::query_scalar(
        "SELECT vacuum_count FROM pg_stat_user_tables \
         WHERE schemaname = current_schema() AND relname = 'jobs'",
    )
    .fetch_one(store.pool())
    .await
    .unwrap()
}

/// Claims `n` jobs of jobtype `t` in batches of `batch`, archiving each.
async fn churn(store: &PgStore, n: usize, batch: usize) {
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| NewJob::new(format!("v{i:04}"), "t", "x"))
        .collect();
    store.add_jobs(&jobs, T0).await.unwrap();
    let mut done = 0;
    while done < n {
        let got = store
            .claim_jobs("t", batch, "owner-1", Duration::from_secs(60), T0 + 1)
            .await
            .unwrap();
        assert!(!got.is_empty(), "claimed {done} of {n}");
        let releases: Vec<JobRelease> = got
            .iter()
            .map(|j| JobRelease::new(j.id.clone(), Release::Archive(JobResult::from_status(200))))
            .collect();
        store
            .release_jobs(&releases, "owner-1", T0 + 2)
            .await
            .unwrap();
        done += got.len();
    }
}

/// After `vacuum_every` claimed jobs the store vacuums `jobs` by itself,
/// once per `vacuum_every`, not per claim.
#[test]
fn the_store_vacuums_jobs_after_so_many_claims() {
    with_store_opts(
        |o| o.vacuum_every(100),
        |store| async move {
            assert_eq!(vacuums_of_jobs(&store).await, 0);
            churn(&store, 99, 33).await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert_eq!(vacuums_of_jobs(&store).await, 0, "99 claims: not yet");
            // The 100th claimed job asks for the vacuum.
            let jobs = [NewJob::new("last", "t", "x")];
            store.add_jobs(&jobs, T0).await.unwrap();
            let got = store
                .claim_jobs("t", 10, "owner-1", Duration::from_secs(60), T0 + 1)
                .await
                .unwrap();
            assert_eq!(got.len(), 1);
            let started = Instant::now();
            while vacuums_of_jobs(&store).await < 1 {
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "no vacuum of jobs after 100 claims"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert_eq!(
                vacuums_of_jobs(&store).await,
                1,
                "one vacuum per 100 claims"
            );
        },
    );
}

/// `vacuum_every(0)` leaves `jobs` to autovacuum.
#[test]
fn vacuum_every_zero_never_vacuums() {
    with_store_opts(
        |o| o.vacuum_every(0),
        |store| async move {
            churn(&store, 300, 50).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert_eq!(vacuums_of_jobs(&store).await, 0);
        },
    );
}

/// A store's `Debug` names it, its schema and its notification channel,
/// and never the password of its URL; `drop_schema` and `close` do what
/// they say.
#[test]
fn debug_output_and_the_tools_methods() {
    jobstore_conformance::block_on(async {
        let Some(url) = postgres_url().await else {
            return;
        };
        // The URL's own password, or one added (which trust authentication
        // ignores).
        let mut with_password = url::Url::parse(&url).expect("url");
        let password = match with_password.password() {
            Some(p) => p.to_owned(),
            None => {
                with_password
                    .set_password(Some("s3cret"))
                    .expect("password");
                "s3cret".to_owned()
            }
        };
        let schema = unique_namespace();
        let opts = PgStoreOptions::from_url(with_password.as_str())
            .expect("url")
            .schema(&schema);
        let store = PgStore::connect_with(opts).await.expect("connect");
        let debug = format!("{store:?}");
        assert!(debug.starts_with("PgStore {"), "{debug}");
        assert!(debug.contains(&format!("\"{schema}\"")), "{debug}");
        assert_eq!(store.channel(), format!("jobstore:{schema}"));
        assert!(debug.contains(store.channel()), "{debug}");
        assert!(!debug.contains(&format!(":{password}@")), "{debug}");
        // drop_schema removes the schema; close closes the pool, after
        // which calls fail instead of reconnecting.
        let schemas = || {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM pg_namespace WHERE nspname = $1")
                .bind(&schema)
                .fetch_one(store.pool())
        };
        assert_eq!(schemas().await.expect("count schemas"), 1);
        store.drop_schema().await.expect("drop schema");
        assert_eq!(schemas().await.expect("count schemas"), 0);
        store.close().await;
        assert!(store.pool().is_closed());
        assert!(store.get_job("a").await.is_err());
    });
}

/// A store connecting while another holds its schema's migration lock
/// waits for the lock (up to 30 s, however short its acquire timeout),
/// then connects.
#[test]
fn connecting_waits_for_a_migration_in_progress() {
    use sqlx::Connection;
    jobstore_conformance::block_on(async {
        let Some(url) = postgres_url().await else {
            return;
        };
        let schema = unique_namespace();
        let mut holder = sqlx::PgConnection::connect(&url).await.expect("connect");
        sqlx::query("SELECT pg_advisory_lock(hashtextextended($1, 0))")
            .bind(format!("jobstore migrate {schema}"))
            .execute(&mut holder)
            .await
            .expect("take the migration lock");
        let opts = PgStoreOptions::from_url(&url)
            .expect("url")
            .schema(&schema)
            .acquire_timeout(Duration::from_millis(500));
        let start = Instant::now();
        // `connect_with` is spawned: its future is `Send`.
        let connecting = tokio::spawn(PgStore::connect_with(opts));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(
            !connecting.is_finished(),
            "connected (or gave up) while another held the migration lock"
        );
        holder.close().await.expect("let go of the lock");
        let store = connecting
            .await
            .expect("join")
            .expect("connect once the lock is let go");
        assert!(start.elapsed() >= Duration::from_secs(2));
        store
            .add_jobs(&[NewJob::new("a", "t", "x")], T0)
            .await
            .unwrap();
        store.drop_schema().await.expect("drop schema");
    });
}

/// The tables, columns, constraints, indexes and storage settings that the
/// migrations leave, as one text with the schema's name left out (NOT NULL
/// shows with its column: PostgreSQL 18 also lists it as a constraint). No query
/// of the store fails or reads differently without a `NOT NULL` or with an
/// index in another order, so this pins them where the API cannot: a
/// change to the schema shows here, and belongs in a new migration.
#[test]
fn the_schema_is_the_one_the_migrations_describe() {
    with_store(|store| async move {
        let got = schema_text(&store).await;
        assert_eq!(got, EXPECTED_SCHEMA, "the schema as it stands:\n{got}");
    });
}

/// A column as `information_schema` describes it: table, name, type,
/// nullable, default, collation.
type Column = (
    String,
    String,
    String,
    String,
    Option<String>,
    Option<String>,
);

async fn schema_text(store: &PgStore) -> String {
    let schema = store.schema();
    let pool = store.pool();
    let mut out = String::new();
    let columns: Vec<Column> = sqlx::query_as(
        "SELECT table_name::text, column_name::text, data_type::text,
                    is_nullable::text, column_default::text, collation_name::text
             FROM information_schema.columns
             WHERE table_schema = $1 AND table_name <> '_sqlx_migrations'
             ORDER BY table_name, ordinal_position",
    )
    .bind(schema)
    .fetch_all(pool)
    .await
    .expect("columns");
    for (table, column, ty, nullable, default, collation) in columns {
        let null = if nullable == "YES" {
            "null"
        } else {
            "not null"
        };
        out += &format!("column {table}.{column} {ty} {null}");
        if let Some(d) = default {
            out += &format!(" default {d}");
        }
        if let Some(c) = collation {
            out += &format!(" collate {c}");
        }
        out.push('\n');
    }
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT c.relname::text || ' ' || n.conname::text, pg_get_constraintdef(n.oid)
         FROM pg_constraint n JOIN pg_class c ON c.oid = n.conrelid
         WHERE n.connamespace = $1::regnamespace AND n.contype IN ('c', 'f', 'p', 'u', 'x')
           AND c.relname <> '_sqlx_migrations'
         UNION ALL
         SELECT indexname::text, indexdef FROM pg_indexes
         WHERE schemaname = $1 AND tablename <> '_sqlx_migrations'
         UNION ALL
         SELECT relname::text, array_to_string(reloptions, ', ')
         FROM pg_class
         WHERE relnamespace = $1::regnamespace AND relkind = 'r' AND reloptions IS NOT NULL
         ORDER BY 1, 2",
    )
    .bind(schema)
    .fetch_all(pool)
    .await
    .expect("constraints, indexes and settings");
    for (name, def) in rows {
        let def = def
            .replace(&format!("\"{schema}\"."), "")
            .replace(&format!("{schema}."), "");
        out += &format!("{name}: {def}\n");
    }
    out
}

const EXPECTED_SCHEMA: &str = "\
column archive.id text not null collate C
column archive.jobtype text not null collate C
column archive.data bytea not null
column archive.priority integer not null
column archive.dt bigint not null
column archive.attempts integer not null
column archive.create_dt bigint not null
column archive.done_dt bigint not null
column archive.code text not null
column archive.status integer not null
column archive.output bytea not null
column archive.history jsonb not null default '[]'::jsonb
column archive.tags ARRAY not null default '{}'::text[]
column archive.claimed_at bigint null
column archive.claimed_by text null collate C
column archive.traceparent text null
column archive.tracestate text null
column archive.unique_key text null collate C
column archive.repeat_rule text null
column archive.pending integer null
column archive.dep_policy text null
column archive.waited boolean null
column archive_counts.jobtype text not null collate C
column archive_counts.code text not null
column archive_counts.n bigint not null
column archive_counts.slot smallint not null
column edges.waiter text not null collate C
column edges.target text not null collate C
column edges.state \"char\" not null
column edges.code text null
column edges.status integer null
column handlers.seq bigint not null default nextval('handlers_seq_seq'::regclass)
column handlers.jobtype text not null collate C
column handlers.dt bigint not null
column handlers.lang text not null
column handlers.body text not null
column handlers.eid text null
column handlers.before text null
column handlers.before_each text null
column handlers.after_each text null
column handlers.max_attempts bigint null
column handlers.max_age_ms bigint null
column handlers.time_limit_ms bigint null
column handlers.concurrency bigint null
column handlers.backoff_base_ms bigint null
column handlers.backoff_max_ms bigint null
column jobs.id text not null collate C
column jobs.jobtype text not null collate C
column jobs.data bytea not null
column jobs.priority integer not null
column jobs.dt bigint not null
column jobs.lock text not null default ''::text collate C
column jobs.attempts integer not null default 0
column jobs.create_dt bigint not null
column jobs.cancel_requested boolean not null default false
column jobs.code text null
column jobs.status integer null
column jobs.output bytea null
column jobs.history jsonb not null default '[]'::jsonb
column jobs.tags ARRAY not null default '{}'::text[]
column jobs.claimed_at bigint null
column jobs.traceparent text null
column jobs.tracestate text null
column jobs.unique_key text null collate C
column jobs.repeat_rule text null
column jobs.pending integer null
column jobs.dep_policy text null
column jobs.waited boolean null
column paused.jobtype text not null collate C
column paused.dt bigint not null
column schedules.name text not null collate C
column schedules.definition jsonb not null
column schedules.data bytea not null
column schedules.version bigint not null
column schedules.paused boolean not null
column schedules.created_dt bigint not null
column schedules.updated_dt bigint not null
column schedules.fired_through bigint null
column schedules.last_job text null collate C
column schedules.next_due bigint null
column schedules.fired bigint not null
column schedules.skipped bigint not null
column stats.resolution text not null
column stats.jobtype text not null collate C
column stats.start bigint not null
column stats.wait_count bigint not null
column stats.wait_sum_ms bigint not null
column stats.wait_sum_sq_ms double precision not null
column stats.wait_buckets ARRAY not null
column stats.run_count bigint not null
column stats.run_sum_ms bigint not null
column stats.run_sum_sq_ms double precision not null
column stats.run_buckets ARRAY not null
column sysids.sysid text not null collate C
column sysids.token text not null
column sysids.expires bigint not null
archive archive_code_check: CHECK ((code = ANY (ARRAY['ok'::text, 'failed'::text, 'retry'::text, 'error'::text, 'cancelled'::text, 'timeout'::text])))
archive archive_pkey: PRIMARY KEY (id)
archive_by_code: CREATE INDEX archive_by_code ON archive USING btree (code, done_dt, id)
archive_by_type: CREATE INDEX archive_by_type ON archive USING btree (jobtype, code, done_dt, id)
archive_counts archive_counts_pkey: PRIMARY KEY (jobtype, code, slot)
archive_counts_pkey: CREATE UNIQUE INDEX archive_counts_pkey ON archive_counts USING btree (jobtype, code, slot)
archive_pkey: CREATE UNIQUE INDEX archive_pkey ON archive USING btree (id)
archive_unique: CREATE INDEX archive_unique ON archive USING btree (jobtype, unique_key, done_dt, id) WHERE (unique_key IS NOT NULL)
edges edges_pkey: PRIMARY KEY (waiter, target)
edges_open: CREATE INDEX edges_open ON edges USING btree (target, waiter) WHERE (state = ANY (ARRAY['p'::\"char\", 'h'::\"char\"]))
edges_pkey: CREATE UNIQUE INDEX edges_pkey ON edges USING btree (waiter, target)
handlers handlers_pkey: PRIMARY KEY (seq)
handlers_newest: CREATE INDEX handlers_newest ON handlers USING btree (jobtype, dt DESC, seq DESC)
handlers_pkey: CREATE UNIQUE INDEX handlers_pkey ON handlers USING btree (seq)
jobs: fillfactor=90, autovacuum_vacuum_scale_factor=0.01, autovacuum_vacuum_insert_scale_factor=0.01, autovacuum_analyze_scale_factor=0.02, vacuum_truncate=false
jobs jobs_lock_check: CHECK ((lock <> '__done'::text))
jobs jobs_pkey: PRIMARY KEY (id)
jobs_free: CREATE INDEX jobs_free ON jobs USING btree (jobtype, priority DESC, dt, id) WHERE (lock = ''::text)
jobs_leased: CREATE INDEX jobs_leased ON jobs USING btree (jobtype, dt) WHERE (lock <> ''::text)
jobs_pkey: CREATE UNIQUE INDEX jobs_pkey ON jobs USING btree (id)
jobs_unique: CREATE UNIQUE INDEX jobs_unique ON jobs USING btree (jobtype, unique_key) WHERE (unique_key IS NOT NULL)
paused paused_pkey: PRIMARY KEY (jobtype)
paused_pkey: CREATE UNIQUE INDEX paused_pkey ON paused USING btree (jobtype)
schedules schedules_pkey: PRIMARY KEY (name)
schedules_due: CREATE INDEX schedules_due ON schedules USING btree (next_due, name) WHERE ((NOT paused) AND (next_due IS NOT NULL))
schedules_pkey: CREATE UNIQUE INDEX schedules_pkey ON schedules USING btree (name)
stats: fillfactor=50
stats stats_pkey: PRIMARY KEY (resolution, jobtype, start)
stats stats_resolution_check: CHECK ((resolution = ANY (ARRAY['minute'::text, 'day'::text])))
stats stats_run_buckets_check: CHECK ((cardinality(run_buckets) = 17))
stats stats_wait_buckets_check: CHECK ((cardinality(wait_buckets) = 17))
stats_by_age: CREATE INDEX stats_by_age ON stats USING btree (resolution, start)
stats_pkey: CREATE UNIQUE INDEX stats_pkey ON stats USING btree (resolution, jobtype, start)
sysids sysids_pkey: PRIMARY KEY (sysid)
sysids_pkey: CREATE UNIQUE INDEX sysids_pkey ON sysids USING btree (sysid)
";

/// A job claimed before migration 10 (its `claimed` event stored, no
/// pending claim) and archived after it gets its `archived` event
/// appended: it reads claimed once and archived once.
#[test]
fn a_claim_stored_before_migration_10_is_archived_once() {
    use jobstore_api::{EventKind, JobEvent};
    with_store(|store| async move {
        store
            .add_jobs(&[NewJob::new("old", "t", "x")], T0)
            .await
            .unwrap();
        // As migration 7's claim left it.
        sqlx::query(
            "UPDATE jobs SET lock = 'sys-a', dt = $1, attempts = 1, \
             history = history || jsonb_build_array(jsonb_build_object( \
                 'at', $2::int8, 'by', 'sys-a', 'attempt', 1, 'event', 'claimed')) \
             WHERE id = 'old'",
        )
        .bind(T0 + 60_000)
        .bind(T0 + 1)
        .execute(store.pool())
        .await
        .unwrap();
        let how = Release::Archive(JobResult::from_status(200));
        store
            .release_jobs(&[JobRelease::new("old", how)], "sys-a", T0 + 2)
            .await
            .unwrap();
        let job = store.get_job("old").await.unwrap().unwrap();
        let archived = EventKind::Archived {
            code: jobstore_api::ResultCode::Ok,
            status: 200,
        };
        assert_eq!(
            job.history,
            vec![
                JobEvent::new(T0, "", 0, EventKind::Added),
                JobEvent::new(T0 + 1, "sys-a", 1, EventKind::Claimed),
                JobEvent::new(T0 + 2, "sys-a", 1, archived),
            ]
        );
        let pending: Option<i64> =
            sqlx::query_scalar("SELECT claimed_at FROM archive WHERE id = 'old'")
                .fetch_one(store.pool())
                .await
                .unwrap();
        assert_eq!(pending, None);
    });
}

/// An add stores no history (the `added` event is implicit, read back
/// from `create_dt`), and a claim and the release that archives the job
/// leave it so: the claim is in `claimed_at` and the archived row's
/// `claimed_at` and `claimed_by`; reads show added, claimed, archived.
#[test]
fn claim_and_archive_store_no_events() {
    use jobstore_api::EventKind;
    with_store(|store| async move {
        store
            .add_jobs(&[NewJob::new("a", "t", "x")], T0)
            .await
            .unwrap();
        let stored = || {
            sqlx::query_as::<_, (String, Option<i64>)>(
                "SELECT history::text, claimed_at FROM jobs WHERE id = 'a'",
            )
            .fetch_one(store.pool())
        };
        let (added, _) = stored().await.unwrap();
        assert_eq!(added, "[]");
        let got = store
            .claim_jobs("t", 1, "sys-a", Duration::from_secs(60), T0 + 1)
            .await
            .unwrap();
        assert_eq!(got[0].history.len(), 2, "added, claimed");
        assert_eq!(stored().await.unwrap(), (added.clone(), Some(T0 + 1)));
        let how = Release::Archive(JobResult::from_status(200));
        store
            .release_jobs(&[JobRelease::new("a", how)], "sys-a", T0 + 2)
            .await
            .unwrap();
        let row: (String, Option<i64>, Option<String>) = sqlx::query_as(
            "SELECT history::text, claimed_at, claimed_by FROM archive WHERE id = 'a'",
        )
        .fetch_one(store.pool())
        .await
        .unwrap();
        assert_eq!(row, (added, Some(T0 + 1), Some("sys-a".to_owned())));
        let history = store.get_job("a").await.unwrap().unwrap().history;
        let kinds: Vec<_> = history.iter().map(|e| (e.at, e.what.clone())).collect();
        assert_eq!(
            kinds,
            [
                (T0, EventKind::Added),
                (T0 + 1, EventKind::Claimed),
                (
                    T0 + 2,
                    EventKind::Archived {
                        code: jobstore_api::ResultCode::Ok,
                        status: 200
                    }
                )
            ]
        );
    });
}

/// An archive over an archived id (a job in `jobs` whose id is archived
/// too, which only a hand-made row gives) replaces the archived row and
/// moves its count from the old (jobtype, code) to the new one; archives
/// without a conflict count as inserts.
#[test]
fn an_archive_over_an_archived_id_moves_its_count() {
    with_store(|store| async move {
        store
            .add_jobs(
                &[NewJob::new("dup", "t", "x"), NewJob::new("b", "t", "x")],
                T0,
            )
            .await
            .unwrap();
        let got = store
            .claim_jobs("t", 2, "sys-a", Duration::from_secs(60), T0 + 1)
            .await
            .unwrap();
        assert_eq!(got.len(), 2);
        let ok = Release::Archive(JobResult::from_status(200));
        store
            .release_jobs(&[JobRelease::new("dup", ok.clone())], "sys-a", T0 + 2)
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO jobs (id, jobtype, data, priority, dt, lock, attempts, create_dt) \
             VALUES ('dup', 'u', 'y', 0, $1, 'sys-a', 1, 5)",
        )
        .bind(T0 + 60_000)
        .execute(store.pool())
        .await
        .unwrap();
        let failed = Release::Archive(JobResult::from_status(500));
        let released = store
            .release_jobs(
                &[JobRelease::new("dup", failed), JobRelease::new("b", ok)],
                "sys-a",
                T0 + 3,
            )
            .await
            .unwrap();
        assert_eq!(released.len(), 2);
        let counts: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT jobtype, code, sum(n)::int8 FROM archive_counts \
             GROUP BY 1, 2 HAVING sum(n) <> 0 ORDER BY 1, 2",
        )
        .fetch_all(store.pool())
        .await
        .unwrap();
        let want = [("t", "ok", 1), ("u", "error", 1)];
        let want: Vec<(String, String, i64)> = want
            .iter()
            .map(|(t, c, n)| (t.to_string(), c.to_string(), *n))
            .collect();
        assert_eq!(counts, want);
        let job = store.get_job("dup").await.unwrap().unwrap();
        assert_eq!(
            (job.jobtype.as_str(), job.data.as_slice()),
            ("u", &b"y"[..])
        );
    });
}

/// A cancel over an archived id (a hand-made free row whose id is archived
/// with its claim pending) replaces the archived row's pending claim too:
/// the history ends with the cancel, not with the older claim and result.
#[test]
fn a_cancel_over_an_archived_id_leaves_no_pending_claim() {
    use jobstore_api::EventKind;
    with_store(|store| async move {
        store
            .add_jobs(&[NewJob::new("dup", "t", "x")], T0)
            .await
            .unwrap();
        store
            .claim_jobs("t", 1, "sys-a", Duration::from_secs(60), T0 + 1)
            .await
            .unwrap();
        let ok = Release::Archive(JobResult::from_status(200));
        store
            .release_jobs(&[JobRelease::new("dup", ok)], "sys-a", T0 + 2)
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO jobs (id, jobtype, data, priority, dt, lock, attempts, create_dt) \
             VALUES ('dup', 't', 'y', 0, $1, '', 0, 5)",
        )
        .bind(T0 + 3)
        .execute(store.pool())
        .await
        .unwrap();
        let out = store
            .cancel_jobs(&["dup".to_owned()], T0 + 4)
            .await
            .unwrap();
        assert_eq!(out.cancelled, vec!["dup".to_owned()]);
        let job = store.get_job("dup").await.unwrap().unwrap();
        let kinds: Vec<EventKind> = job.history.iter().map(|e| e.what.clone()).collect();
        assert_eq!(kinds.last(), Some(&EventKind::Cancelled), "{kinds:?}");
        assert!(
            !kinds
                .iter()
                .any(|k| matches!(k, EventKind::Claimed | EventKind::Archived { .. })),
            "{kinds:?}"
        );
    });
}

/// Releases that mix retries with archives, their entries in no order,
/// racing cancels and renewals of the same jobs, all succeed. Each
/// statement locks its jobs in id order when the planner joins from the
/// ids (a release, one statement per kind of entry); on this small table
/// it may hash-join and lock in table order, and PostgreSQL then ends a
/// cycle by aborting one statement (`40P01`), which the store runs again.
#[test]
fn mixed_releases_racing_cancels_and_renewals_all_succeed() {
    with_store_opts(
        |o| o.max_connections(6),
        |store| async move {
            let lease = Duration::from_secs(60);
            for round in 0..20 {
                let now = T0 + round;
                let ids: Vec<String> = (0..40).map(|i| format!("r{round}-{i:02}")).collect();
                let jobs: Vec<NewJob> = ids.iter().map(|id| NewJob::new(id, "t", "")).collect();
                store.add_jobs(&jobs, now).await.unwrap();
                let got = store.claim_jobs("t", 40, "o", lease, now).await.unwrap();
                assert_eq!(got.len(), 40);
                let releases: Vec<JobRelease> = ids
                    .iter()
                    .rev()
                    .enumerate()
                    .map(|(i, id)| {
                        let how = if i % 2 == 0 {
                            Release::Retry {
                                delay: Duration::from_secs(3600),
                            }
                        } else {
                            Release::Archive(JobResult::from_status(0))
                        };
                        JobRelease::new(id.clone(), how)
                    })
                    .collect();
                let (released, cancelled, renewed) = tokio::join!(
                    store.release_jobs(&releases, "o", now),
                    store.cancel_jobs(&ids, now),
                    store.renew_locks(&ids, "o", lease, now),
                );
                assert_eq!(released.unwrap().len(), 40, "round {round}");
                cancelled.unwrap();
                renewed.unwrap();
            }
        },
    );
}

/// A release PostgreSQL aborts to break a deadlock is run again and
/// succeeds: another transaction holds job `b` while the release, having
/// locked `a`, waits for it, then asks for `a` itself. The release waited
/// first, so its deadlock check (after `deadlock_timeout`, 1 s) runs
/// first and aborts it; the other transaction gets `a` and commits, and
/// the release, run again, archives both.
#[test]
fn a_release_aborted_to_break_a_deadlock_runs_again() {
    with_store_opts(
        |o| o.max_connections(4),
        |store| async move {
            let jobs = [NewJob::new("a", "t", ""), NewJob::new("b", "t", "")];
            store.add_jobs(&jobs, T0).await.unwrap();
            let lease = Duration::from_secs(60);
            let got = store.claim_jobs("t", 2, "o", lease, T0).await.unwrap();
            assert_eq!(got.len(), 2);
            let mut other = store.pool().acquire().await.unwrap();
            sqlx::query("BEGIN").execute(&mut *other).await.unwrap();
            sqlx::query("SELECT 1 FROM jobs WHERE id = 'b' FOR UPDATE")
                .execute(&mut *other)
                .await
                .unwrap();
            let ok = || Release::Archive(JobResult::from_status(200));
            let releases = [JobRelease::new("a", ok()), JobRelease::new("b", ok())];
            let (released, ()) = tokio::join!(store.release_jobs(&releases, "o", T0 + 1), async {
                // the release has locked a and waits for b by now
                tokio::time::sleep(Duration::from_millis(300)).await;
                sqlx::query("SELECT 1 FROM jobs WHERE id = 'a' FOR UPDATE")
                    .execute(&mut *other)
                    .await
                    .expect("the release, not this transaction, is aborted");
                sqlx::query("COMMIT").execute(&mut *other).await.unwrap();
            });
            let mut released = released.expect("run again after the deadlock");
            released.sort();
            assert_eq!(released, ["a", "b"]);
            for id in ["a", "b"] {
                let job = store.get_job(id).await.unwrap().unwrap();
                assert_eq!(job.lock, "__done", "{id}");
            }
        },
    );
}

/// A statement PostgreSQL aborts with a deadlock error every time runs
/// four times in all (three more after the first), then the error reaches
/// the caller as a retryable `Unavailable`; another error is not run
/// again. A statement-level trigger on `jobs` raises the error and counts
/// the statements in a sequence (which a rollback does not undo).
#[test]
fn a_statement_that_keeps_deadlocking_runs_four_times_then_fails() {
    with_store(|store| async move {
        store
            .add_jobs(&[NewJob::new("a", "t", "")], T0)
            .await
            .unwrap();
        let lease = Duration::from_secs(60);
        store.claim_jobs("t", 1, "o", lease, T0).await.unwrap();
        let raise = |code: &str| {
            format!(
                "CREATE OR REPLACE FUNCTION jobs_fail() RETURNS trigger LANGUAGE plpgsql AS $$ \
                 BEGIN PERFORM nextval('tries'); \
                 RAISE EXCEPTION 'forced' USING ERRCODE = '{code}'; END $$"
            )
        };
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE SEQUENCE tries; {}; \
             CREATE TRIGGER jobs_fail BEFORE UPDATE ON jobs \
             FOR EACH STATEMENT EXECUTE FUNCTION jobs_fail()",
            raise("deadlock_detected")
        )))
        .execute(store.pool())
        .await
        .unwrap();
        let tries = || sqlx::query_scalar::<_, i64>("SELECT last_value FROM tries");
        let ids = ["a".to_owned()];
        let err = store
            .renew_locks(&ids, "o", lease, T0 + 1)
            .await
            .unwrap_err();
        assert!(err.is_retryable(), "{err:?}");
        assert_eq!(tries().fetch_one(store.pool()).await.unwrap(), 4);
        sqlx::raw_sql(sqlx::AssertSqlSafe(raise("raise_exception")))
            .execute(store.pool())
            .await
            .unwrap();
        let err = store
            .renew_locks(&ids, "o", lease, T0 + 1)
            .await
            .unwrap_err();
        assert!(!err.is_retryable(), "{err:?}");
        assert_eq!(tries().fetch_one(store.pool()).await.unwrap(), 5);
    });
}

/// A keyed job keeps its key through every move between `jobs` and
/// `archive` (a release's archive, a cancel, a run again) and every read
/// shows it (get, claim, the listing of each state): the rows themselves
/// carry it, and `jobs_unique` / `archive_unique` hold exactly the keyed
/// rows. A plain job has no key anywhere.
#[test]
fn unique_keys_travel_with_their_jobs() {
    with_store(|store| async move {
        use jobstore_api::{FlowState, Unique};
        let key_of = |j: &jobstore_api::Job| j.flow.as_ref().and_then(|f| f.unique_key.clone());
        let keyed = |id: &str| NewJob::new(id, "uk", "").unique(Unique::new(format!("key {id}")));
        store
            .add_jobs(
                &[
                    keyed("run"),
                    keyed("cancel"),
                    NewJob::new("plain", "uk", ""),
                ],
                T0,
            )
            .await
            .unwrap();
        let claimed = store
            .claim_jobs("uk", 3, "sys-a", Duration::from_secs(60), T0)
            .await
            .unwrap();
        let keys: Vec<_> = claimed.iter().map(|j| (j.id.as_str(), key_of(j))).collect();
        assert_eq!(keys.len(), 3);
        for (id, key) in keys {
            let want = (id != "plain").then(|| format!("key {id}"));
            assert_eq!(key, want, "claim of {id}");
        }
        let running = store
            .list_jobs(&JobQuery::new(JobState::Running), T0)
            .await
            .unwrap();
        assert_eq!(
            running.jobs.iter().filter(|j| key_of(j).is_some()).count(),
            2
        );
        // "run" archived by a release, "cancel" handed back then cancelled.
        store
            .release_jobs(
                &[
                    JobRelease::new("run", Release::Archive(JobResult::from_status(200))),
                    JobRelease::new("cancel", Release::Unget),
                    JobRelease::new("plain", Release::Archive(JobResult::from_status(200))),
                ],
                "sys-a",
                T0 + 1,
            )
            .await
            .unwrap();
        let waiting = store
            .list_jobs(&JobQuery::new(JobState::Waiting), T0 + 1)
            .await
            .unwrap();
        assert_eq!(waiting.jobs.len(), 1);
        assert_eq!(key_of(&waiting.jobs[0]).as_deref(), Some("key cancel"));
        store
            .cancel_jobs(&["cancel".to_owned()], T0 + 2)
            .await
            .unwrap();
        let archived = store
            .list_jobs(&JobQuery::new(JobState::Archived), T0 + 3)
            .await
            .unwrap();
        let mut keys: Vec<_> = archived
            .jobs
            .iter()
            .map(|j| (j.id.clone(), key_of(j)))
            .collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                ("cancel".to_owned(), Some("key cancel".to_owned())),
                ("plain".to_owned(), None),
                ("run".to_owned(), Some("key run".to_owned())),
            ]
        );
        let job = store.get_job("run").await.unwrap().unwrap();
        assert_eq!(job.flow, Some(Box::new(FlowState::unique("key run"))));
        assert_eq!(store.get_job("plain").await.unwrap().unwrap().flow, None);
        let entries = |sql: &'static str| {
            let pool = store.pool().clone();
            async move {
                let row: (i64,) = sqlx::query_as(sql).fetch_one(&pool).await.unwrap();
                row.0
            }
        };
        // Index-only counts through the partial indexes' predicates.
        let in_archive = "SELECT count(*) FROM archive WHERE unique_key IS NOT NULL";
        let in_jobs = "SELECT count(*) FROM jobs WHERE unique_key IS NOT NULL";
        assert_eq!((entries(in_jobs).await, entries(in_archive).await), (0, 2));
        // Run again: back in jobs with the key, held again.
        let rerun = store
            .rerun_jobs(
                &["run".to_owned(), "plain".to_owned()],
                Duration::ZERO,
                T0 + 4,
            )
            .await
            .unwrap();
        assert_eq!(rerun.len(), 2);
        let job = store.get_job("run").await.unwrap().unwrap();
        assert_eq!(key_of(&job).as_deref(), Some("key run"));
        assert_eq!(store.get_job("plain").await.unwrap().unwrap().flow, None);
        assert_eq!((entries(in_jobs).await, entries(in_archive).await), (1, 1));
        let again = store
            .add_jobs(&[keyed("run").unique(Unique::new("key run"))], T0 + 5)
            .await
            .unwrap();
        assert_eq!(again.existing, ["run"]);
        let other = NewJob::new("other", "uk", "").unique(Unique::new("key run"));
        let out = store.add_jobs(&[other], T0 + 5).await.unwrap();
        assert_eq!(out.duplicates.len(), 1);
        assert_eq!(out.duplicates[0].existing, "run");
    });
}

/// Of archived jobs of one key run again in one call, the first listed
/// takes the key (as `MemoryStore` walks the ids; rerun_jobs.sql inserts
/// in the call's order), whatever the ids' own order.
#[test]
fn a_run_again_gives_the_key_to_the_first_of_the_call() {
    with_store(|store| async move {
        use jobstore_api::Unique;
        let lease = Duration::from_secs(60);
        for (i, id) in ["a", "b", "c"].into_iter().enumerate() {
            let now = T0 + i as i64;
            let job = NewJob::new(id, "t", "x").unique(Unique::new("k"));
            assert_eq!(store.add_jobs(&[job], now).await.unwrap().new, [id]);
            store.claim_jobs("t", 1, "owner", lease, now).await.unwrap();
            let how = Release::Archive(JobResult::from_status(500));
            let done = store
                .release_jobs(&[JobRelease::new(id, how)], "owner", now)
                .await
                .unwrap();
            assert_eq!(done, [id]);
        }
        let ids = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let rerun = store
            .rerun_jobs(&ids(&["b", "c", "a"]), Duration::ZERO, T0 + 10)
            .await
            .unwrap();
        assert_eq!(rerun, ["b"]);
    });
}
