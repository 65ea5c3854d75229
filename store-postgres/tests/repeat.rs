//! Repeating jobs on PostgreSQL (migration 16): a schema of migration 15
//! with jobs in it takes migration 16 (old rows read back without a rule
//! and take repeats, the previous version's add functions still work); the
//! rule travels with its job through every statement that moves a row
//! between the tables; a repeat never touches `archive` or its counts;
//! histories through repeats with the claim pending, stored by a cancel
//! mark, or taken over from an expired lease equal `MemoryStore`'s; repeat
//! payloads count toward the split of a release list; a list mixing every
//! kind applies each entry as it says.

use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

use jobstore_api::{
    Job, JobRelease, JobResult, JobStore, MemoryStore, NewJob, Release, Repeat, Unique,
};
use jobstore_conformance::services::{postgres_url, unique_namespace};
use jobstore_postgres::{PgStore, PgStoreOptions};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, Executor};

const T0: i64 = 1_700_000_000_000;
const MIN: Duration = Duration::from_secs(60);
const HOUR: i64 = 3_600_000;
/// The last migration before repeating jobs.
const MIGRATION_15: i64 = 20261207000015;

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
        let opts = PgStoreOptions::from_url(&url)
            .expect("url")
            .schema(unique_namespace())
            .max_connections(2);
        let store = PgStore::connect_with(opts).await.expect("connect");
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

fn repeating(id: &str, jobtype: &str, rule: &Repeat) -> NewJob {
    NewJob::new(id, jobtype, format!("data of {id}")).repeat(rule.clone())
}

fn rule_of(job: &Job) -> Option<Repeat> {
    job.flow.as_ref()?.repeat.clone()
}

fn repeat_at(id: &str, at: i64, status: u16, data: Option<&str>) -> JobRelease {
    repeat_with(id, at, status, data.map(|d| d.as_bytes().to_vec()))
}

fn repeat_with(id: &str, at: i64, status: u16, data: Option<Vec<u8>>) -> JobRelease {
    JobRelease::new(
        id,
        Release::Repeat {
            at,
            result: JobResult::from_status(status).with_output(format!("run of {id}").into_bytes()),
            data,
        },
    )
}

async fn get(store: &dyn JobStore, id: &str) -> Job {
    store.get_job(id).await.unwrap().expect(id)
}

async fn scalar(store: &PgStore, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(store.pool())
        .await
        .unwrap()
}

/// A schema migrated to version 15 with jobs in it (live, held, keyed,
/// archived) takes migration 16: its jobs read back without a rule and as
/// they were, a held job takes a repeat, new jobs take rules, and the add
/// functions of the previous version (other signatures) still add jobs.
#[test]
fn a_schema_of_migration_15_takes_migration_16() {
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
            .run_direct(Some(MIGRATION_15), &mut conn, false)
            .await
            .expect("migrations 1 to 15");
        let columns: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM information_schema.columns \
             WHERE table_schema = $1 AND column_name = 'repeat_rule'",
        )
        .bind(&schema)
        .fetch_one(&mut conn)
        .await
        .unwrap();
        assert_eq!(columns, 0, "stopped before migration 16");
        // As the previous version's statements leave them.
        conn.execute(
            "SELECT add_jobs(ARRAY['plain', 'held'], ARRAY['t', 't'], \
                             ARRAY['p', 'h']::bytea[], ARRAY[0, 0], \
                             ARRAY[1700000000000, 1700000000000]::int8[], ARRAY['a b', ''], \
                             ARRAY[NULL, NULL]::text[], ARRAY[NULL, NULL]::text[], \
                             1700000000000, 'c');
             SELECT * FROM add_unique_jobs(ARRAY['keyed'], ARRAY['t'], ARRAY['k']::bytea[], \
                             ARRAY[0], ARRAY[1700000000000]::int8[], ARRAY[''], \
                             ARRAY[NULL]::text[], ARRAY[NULL]::text[], ARRAY['key'], \
                             ARRAY[NULL]::int8[], ARRAY[false], 1700000000000, 'c');
             UPDATE jobs SET lock = 'sys-old', dt = 1700000060000, attempts = 1, \
                             claimed_at = 1700000000000 WHERE id = 'held';
             INSERT INTO archive (id, jobtype, data, priority, dt, attempts, create_dt, \
                                  done_dt, code, status, output, unique_key) \
             VALUES ('done', 't', 'd', 0, 9e15, 1, 5, 6, 'ok', 200, 'out', 'old');",
        )
        .await
        .expect("jobs of version 15");
        conn.close().await.unwrap();

        let opts = PgStoreOptions::from_url(&url)
            .expect("url")
            .schema(schema)
            .max_connections(2);
        let store = PgStore::connect_with(opts).await.expect("migration 16");
        finish(store, |store| async move {
            let s: &dyn JobStore = &store;
            assert_eq!(get(s, "plain").await.flow, None);
            assert_eq!(get(s, "plain").await.tags, ["a", "b"]);
            let keyed = get(s, "keyed").await.flow.expect("a key");
            assert_eq!(
                (keyed.unique_key.as_deref(), keyed.repeat),
                (Some("key"), None)
            );
            let done = get(s, "done").await;
            assert_eq!(done.flow.unwrap().unique_key.as_deref(), Some("old"));
            assert_eq!(done.result.unwrap().output, b"out");

            // A job held across the migration takes a repeat; its pending
            // claim is stored first, as a retry's.
            let released = s
                .release_jobs(
                    &[repeat_at("held", T0 + HOUR, 200, None)],
                    "sys-old",
                    T0 + 5,
                )
                .await
                .unwrap();
            assert_eq!(released, ["held"]);
            let held = get(s, "held").await;
            assert_eq!(
                (
                    held.lock.as_str(),
                    held.dt,
                    held.attempts,
                    held.data.as_slice()
                ),
                ("", T0 + HOUR, 0, b"h".as_slice())
            );
            assert_eq!(held.result.unwrap().output, b"run of held");
            let events: Vec<String> = held
                .history
                .iter()
                .map(|e| format!("{} {} {:?}", e.by, e.attempt, e.what))
                .collect();
            assert_eq!(
                events,
                [
                    " 0 Added",
                    "sys-old 1 Claimed",
                    "sys-old 1 Repeated { code: Ok, status: 200, next_ms: 1700003600000 }"
                ]
            );

            // New jobs take rules, beside keys.
            let rule = Repeat::new("0 6 * * *").time_zone("Europe/Paris");
            let batch = [
                repeating("r", "t", &rule),
                repeating("rk", "t", &rule).unique(Unique::new("other")),
            ];
            assert_eq!(s.add_jobs(&batch, T0).await.unwrap().new, ["r", "rk"]);
            assert_eq!(rule_of(&get(s, "r").await), Some(rule.clone()));
            assert_eq!(rule_of(&get(s, "rk").await), Some(rule));
            let stored: Option<String> =
                sqlx::query_scalar("SELECT repeat_rule FROM jobs WHERE id = 'r'")
                    .fetch_one(store.pool())
                    .await
                    .unwrap();
            assert_eq!(stored.as_deref(), Some("TZ=Europe/Paris 0 6 * * *"));

            // The previous version's add functions, as a daemon of it still
            // running on the schema calls them.
            sqlx::query(
                "SELECT add_jobs(ARRAY['old-add'], ARRAY['t'], ARRAY['o']::bytea[], ARRAY[0], \
                                 ARRAY[1700000000000]::int8[], ARRAY[''], ARRAY[NULL]::text[], \
                                 ARRAY[NULL]::text[], 1700000000000, 'c')",
            )
            .execute(store.pool())
            .await
            .expect("migration 13's add_jobs");
            sqlx::query(
                "SELECT * FROM add_unique_jobs(ARRAY['old-keyed'], ARRAY['t'], \
                     ARRAY['o']::bytea[], ARRAY[0], ARRAY[1700000000000]::int8[], ARRAY[''], \
                     ARRAY[NULL]::text[], ARRAY[NULL]::text[], ARRAY['k2'], \
                     ARRAY[NULL]::int8[], ARRAY[false], 1700000000000, 'c')",
            )
            .execute(store.pool())
            .await
            .expect("migration 15's add_unique_jobs");
            assert_eq!(get(s, "old-add").await.flow, None);
            let old_keyed = get(s, "old-keyed").await.flow.expect("a key");
            assert_eq!(old_keyed.repeat, None);
        })
        .await;
    });
}

/// The rule travels with its job: a release's archive (also over an
/// archived id, its `ON CONFLICT` update), a cancel of a free job, a run
/// again; the rows hold it as `Repeat::to_text`, plain jobs hold NULL.
#[test]
fn rules_travel_with_their_jobs() {
    with_store(|store| async move {
        let s: &dyn JobStore = &store;
        let rule = Repeat::new("HOURLY").time_zone("Asia/Tokyo");
        let jobs = [
            repeating("archived", "t", &rule).priority(3),
            repeating("over", "t", &rule).priority(2),
            repeating("cancelled", "t", &rule).priority(1),
            NewJob::new("plain", "t", "p"),
        ];
        s.add_jobs(&jobs, T0).await.unwrap();
        assert_eq!(
            scalar(
                &store,
                "SELECT count(*) FROM jobs WHERE repeat_rule IS NULL"
            )
            .await,
            1
        );
        let got = s.claim_jobs("t", 2, "sys-a", MIN, T0).await.unwrap();
        assert_eq!(got.len(), 2);
        assert!(got.iter().all(|j| rule_of(j) == Some(rule.clone())));
        // "over": its id archived already (by hand), so the archive takes
        // the ON CONFLICT update.
        sqlx::query(
            "INSERT INTO archive (id, jobtype, data, priority, dt, attempts, create_dt, \
                                  done_dt, code, status, output) \
             VALUES ('over', 'u', 'y', 0, 9e15, 1, 5, 6, 'ok', 200, '')",
        )
        .execute(store.pool())
        .await
        .unwrap();
        let failed = Release::Archive(JobResult::from_status(500));
        let released = s
            .release_jobs(
                &[
                    JobRelease::new("archived", failed.clone()),
                    JobRelease::new("over", failed),
                ],
                "sys-a",
                T0 + 1,
            )
            .await
            .unwrap();
        assert_eq!(released.len(), 2);
        let cancelled = s.cancel_jobs(&["cancelled".to_owned()], T0 + 2).await;
        assert_eq!(cancelled.unwrap().cancelled, ["cancelled"]);
        for id in ["archived", "over", "cancelled"] {
            let job = get(s, id).await;
            assert_eq!(job.lock, "__done", "{id}");
            assert_eq!(rule_of(&job), Some(rule.clone()), "{id}");
        }
        assert_eq!(
            scalar(
                &store,
                "SELECT count(*) FROM archive WHERE repeat_rule = 'TZ=Asia/Tokyo HOURLY'"
            )
            .await,
            3
        );
        let ids = ["archived".to_owned(), "cancelled".to_owned()];
        let rerun = s.rerun_jobs(&ids, Duration::ZERO, T0 + 3).await.unwrap();
        assert_eq!(rerun.len(), 2);
        let got = s.claim_jobs("t", 10, "sys-b", MIN, T0 + 3).await.unwrap();
        let mut rules: Vec<(String, Option<Repeat>)> =
            got.iter().map(|j| (j.id.clone(), rule_of(j))).collect();
        rules.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            rules,
            [
                ("archived".to_owned(), Some(rule.clone())),
                ("cancelled".to_owned(), Some(rule.clone())),
                ("plain".to_owned(), None),
            ]
        );
    });
}

/// A repeat stays in `jobs`: it never inserts into `archive`, so the
/// archive counts (and their triggers) never see it; the job counts as
/// scheduled, then waiting, and its key stays held.
#[test]
fn a_repeat_never_reaches_the_archive() {
    with_store(|store| async move {
        let s: &dyn JobStore = &store;
        let rule = Repeat::new("HOURLY");
        let jobs: Vec<NewJob> = (0..20)
            .map(|i| {
                repeating(&format!("j{i:02}"), "t", &rule).unique(Unique::new(format!("k{i}")))
            })
            .collect();
        s.add_jobs(&jobs, T0).await.unwrap();
        for round in 0..3 {
            let now = T0 + round * HOUR;
            let got = s.claim_jobs("t", 20, "sys-a", MIN, now).await.unwrap();
            assert_eq!(got.len(), 20, "round {round}");
            let rel: Vec<JobRelease> = got
                .iter()
                .map(|j| repeat_at(&j.id, now + HOUR, 200, Some("next")))
                .collect();
            assert_eq!(
                s.release_jobs(&rel, "sys-a", now + 1).await.unwrap().len(),
                20
            );
        }
        assert_eq!(scalar(&store, "SELECT count(*) FROM archive").await, 0);
        assert_eq!(
            scalar(&store, "SELECT count(*) FROM archive_counts").await,
            0
        );
        let counts = s.job_counts(T0 + 2 * HOUR + 1).await.unwrap();
        assert_eq!(
            (
                counts[0].scheduled,
                counts[0].waiting,
                counts[0].archived.len()
            ),
            (20, 0, 0)
        );
        assert_eq!(
            scalar(
                &store,
                "SELECT count(*) FROM jobs WHERE unique_key IS NOT NULL"
            )
            .await,
            20
        );
        let dup = NewJob::new("dup", "t", "d").unique(Unique::new("k7"));
        let out = s.add_jobs(&[dup], T0 + 3 * HOUR).await.unwrap();
        assert_eq!(out.duplicates[0].existing, "j07");
    });
}

/// The same script on `MemoryStore` and on PostgreSQL leaves equal jobs
/// after every step: repeats of a job whose claim is pending, whose claim
/// a cancel mark stored already, and which another owner took over from
/// an expired lease with the claim pending; a repeat clears the cancel
/// mark; ungets, retries and a final archive around them.
#[test]
fn repeat_histories_equal_memory_stores() {
    with_store(|store| async move {
        let mem = MemoryStore::new();
        let stores: [&dyn JobStore; 2] = [&mem, &store];
        let rule = Repeat::new("*/5 * * * *");
        let ids = ["a".to_owned()];
        let mut now = T0;
        let mut step = 0;
        macro_rules! both {
            ($s:ident => $e:expr) => {{
                step += 1;
                let mut outs = Vec::new();
                for $s in stores {
                    outs.push(format!("{:?}", $e.await.unwrap()));
                }
                assert_eq!(outs[0], outs[1], "step {step}");
                let mem_job = get(stores[0], "a").await;
                let pg_job = get(stores[1], "a").await;
                assert_eq!(mem_job, pg_job, "step {step}");
            }};
        }
        both!(s => s.add_jobs(&[repeating("a", "t", &rule).tags(["x"])], now));
        both!(s => s.claim_jobs("t", 1, "sys-a", MIN, now));
        now += 1_000;
        both!(s => s.release_jobs(&[repeat_at("a", now + 10_000, 200, Some("two"))], "sys-a", now));
        now += 10_000;
        both!(s => s.claim_jobs("t", 1, "sys-b", MIN, now));
        // The cancel mark stores the claim: the repeat appends only its own
        // event, and clears the mark.
        both!(s => s.cancel_jobs(&ids, now + 1));
        now += 2_000;
        both!(s => s.release_jobs(&[repeat_at("a", now, 201, None)], "sys-b", now));
        both!(s => s.claim_jobs("t", 1, "sys-a", Duration::from_secs(1), now));
        // The lease runs out; another owner takes the job with its claim
        // still pending, then repeats it.
        now += 5_000;
        both!(s => s.claim_jobs("t", 1, "sys-b", MIN, now));
        both!(s => s.release_jobs(&[repeat_at("a", now + 1, 202, Some(""))], "sys-a", now + 1));
        both!(s => s.release_jobs(&[repeat_at("a", now + 1, 202, Some(""))], "sys-b", now + 1));
        now += 1;
        both!(s => s.claim_jobs("t", 1, "sys-a", MIN, now));
        both!(s => s.release_jobs(&[JobRelease::new("a", Release::Unget)], "sys-a", now));
        both!(s => s.claim_jobs("t", 1, "sys-a", MIN, now));
        both!(s => s.release_jobs(&[JobRelease::new("a", Release::Retry { delay: Duration::ZERO })], "sys-a", now));
        both!(s => s.claim_jobs("t", 1, "sys-a", MIN, now));
        both!(s => s.release_jobs(&[repeat_at("a", now + 60_000, 200, Some("three"))], "sys-a", now + 2));
        now += 60_000;
        // Many repeats: the newest 20 events are kept.
        for _ in 0..12 {
            both!(s => s.claim_jobs("t", 1, "sys-a", MIN, now));
            both!(s => s.release_jobs(&[repeat_at("a", now + 1, 200, None)], "sys-a", now));
            now += 1;
        }
        both!(s => s.claim_jobs("t", 1, "sys-a", MIN, now));
        let failed = Release::Archive(JobResult::from_status(500));
        both!(s => s.release_jobs(&[JobRelease::new("a", failed.clone())], "sys-a", now + 3));
        both!(s => s.rerun_jobs(&ids, Duration::ZERO, now + 4));
        both!(s => s.claim_jobs("t", 1, "sys-a", MIN, now + 4));
    });
}

/// One list with every kind of entry, sorted apart by the store into its
/// two statements: each entry applied as it says, the payload replaced
/// only where a repeat brings one (an empty one included).
#[test]
fn a_list_mixing_every_kind_applies_each_entry() {
    with_store(|store| async move {
        let s: &dyn JobStore = &store;
        let rule = Repeat::new("HOURLY");
        let ids = ["a", "b", "c", "d", "e", "f", "g"];
        let jobs: Vec<NewJob> = ids.iter().map(|id| repeating(id, "t", &rule)).collect();
        s.add_jobs(&jobs, T0).await.unwrap();
        s.claim_jobs("t", 10, "sys-a", MIN, T0).await.unwrap();
        let at = T0 + HOUR;
        let list = [
            repeat_at("g", at, 200, None),
            JobRelease::new("f", Release::Delete),
            repeat_at("e", at, 201, Some("")),
            JobRelease::new("d", Release::Archive(JobResult::from_status(500))),
            JobRelease::new("c", Release::Unget),
            JobRelease::new(
                "b",
                Release::Retry {
                    delay: Duration::from_secs(7),
                },
            ),
            repeat_at("a", at + 1, 202, Some("new a")),
        ];
        let mut released = s.release_jobs(&list, "sys-a", T0 + 1).await.unwrap();
        released.sort();
        assert_eq!(released, ["a", "b", "c", "d", "e", "f", "g"]);
        let a = get(s, "a").await;
        assert_eq!(
            (
                a.dt,
                a.attempts,
                a.data.as_slice(),
                a.result.map(|r| r.status)
            ),
            (at + 1, 0, b"new a".as_slice(), Some(202))
        );
        let b = get(s, "b").await;
        assert_eq!((b.dt, b.attempts, b.result), (T0 + 1 + 7_000, 1, None));
        let c = get(s, "c").await;
        assert_eq!((c.dt, c.attempts, c.result), (T0 + 1, 0, None));
        let d = get(s, "d").await;
        assert_eq!(
            (d.lock.as_str(), rule_of(&d)),
            ("__done", Some(rule.clone()))
        );
        let e = get(s, "e").await;
        assert_eq!((e.data.as_slice(), e.done_dt), (b"".as_slice(), None));
        assert_eq!(s.get_job("f").await.unwrap(), None);
        let g = get(s, "g").await;
        assert_eq!(
            (g.data.as_slice(), g.result.map(|r| r.output)),
            (b"data of g".as_slice(), Some(b"run of g".to_vec()))
        );
    });
}

/// Repeat payloads count toward the split of a release list: three
/// repeats of 20 MiB each (60 MiB, no output to speak of) go as several
/// statements, and every entry is applied.
#[test]
fn repeat_payloads_split_a_long_list() {
    with_store(|store| async move {
        let s: &dyn JobStore = &store;
        let rule = Repeat::new("HOURLY");
        let jobs: Vec<NewJob> = (0..3)
            .map(|i| repeating(&format!("j{i}"), "t", &rule))
            .collect();
        s.add_jobs(&jobs, T0).await.unwrap();
        s.claim_jobs("t", 3, "sys-a", MIN, T0).await.unwrap();
        let big = vec![b'x'; 20 << 20];
        let list: Vec<JobRelease> = (0..3)
            .map(|i| {
                let mut data = big.clone();
                data[0] = b'0' + i as u8;
                repeat_with(&format!("j{i}"), T0 + HOUR, 200, Some(data))
            })
            .collect();
        let released = s.release_jobs(&list, "sys-a", T0 + 1).await.unwrap();
        assert_eq!(released.len(), 3);
        for i in 0..3u8 {
            let j = get(s, &format!("j{i}")).await;
            assert_eq!(
                (j.data.len(), j.data[0], j.dt),
                (20 << 20, b'0' + i, T0 + HOUR)
            );
        }
    });
}
