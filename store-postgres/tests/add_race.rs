//! Statements racing a transaction that another connection holds open.
//!
//! An add of an id that another transaction is archiving at that moment
//! must report the id as existing, not insert a second job: the insert
//! waits on the archiving transaction's row lock, and after it commits the
//! id lives only in `archive`.
//!
//! A claim in progress locks only the rows it takes, and a claim beside it
//! passes those by (`SKIP LOCKED`) instead of waiting for them or finding
//! nothing, for waiting and expired jobs alike.
//!
//! A keyed add whose key another transaction has just inserted waits for
//! it: if it commits, the add is a duplicate naming it; if it rolls back,
//! the add is new; if it archives its job before committing, the add is new
//! without a window and, with a window the archive falls in, a duplicate
//! naming the archived job (the insert that got through is undone and the
//! batch decided again). Each keyed add is one statement.

use std::time::Duration;

use jobstore_api::{Duplicate, JobStore, LOCK_DONE, NewJob, Unique};
use jobstore_conformance::services::{postgres_url, unique_namespace};
use jobstore_postgres::{PgStore, PgStoreOptions};

const T0: i64 = 1_700_000_000_000;

#[test]
fn add_racing_archive_reports_existing() {
    jobstore_conformance::block_on(async {
        let Some(store) = fresh_store().await else {
            return;
        };
        let outcome = race(&store).await;
        drop_schema(&store).await;
        outcome.expect("race");
    });
}

/// A store in a schema of its own, with four connections; `None` when no
/// server is configured.
async fn fresh_store() -> Option<PgStore> {
    let url = postgres_url().await?;
    let opts = PgStoreOptions::from_url(&url)
        .expect("url")
        .schema(unique_namespace())
        .max_connections(4);
    Some(PgStore::connect_with(opts).await.expect("connect"))
}

async fn drop_schema(store: &PgStore) {
    let drop = format!("DROP SCHEMA \"{}\" CASCADE", store.schema());
    sqlx::query(sqlx::AssertSqlSafe(drop))
        .execute(store.pool())
        .await
        .expect("drop schema");
}

async fn race(store: &PgStore) -> Result<(), String> {
    store
        .add_jobs(&[NewJob::new("x", "t", "first")], T0)
        .await
        .map_err(|e| e.to_string())?;
    store
        .claim_jobs("t", 1, "sys-a", Duration::from_secs(60), T0)
        .await
        .map_err(|e| e.to_string())?;

    // Another daemon archives "x" and has not committed yet.
    let mut tx = store.pool().begin().await.map_err(|e| e.to_string())?;
    sqlx::query(
        "WITH d AS (DELETE FROM jobs WHERE id = 'x' RETURNING *)
         INSERT INTO archive (id, jobtype, data, priority, dt, attempts, create_dt,
                              done_dt, code, status, output)
         SELECT id, jobtype, data, priority, dt, attempts, create_dt, $1, 'ok', 200, ''
         FROM d",
    )
    .bind(T0 + 1)
    .execute(&mut *tx)
    .await
    .map_err(|e| e.to_string())?;

    // Meanwhile a journal replay adds "x" again: it waits on the row lock.
    let adder = {
        let replay = [NewJob::new("x", "t", "replayed")];
        async move { store.add_jobs(&replay, T0 + 2).await }
    };
    let commit = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        tx.commit().await
    };
    let (added, committed) = tokio::join!(adder, commit);
    committed.map_err(|e| e.to_string())?;
    let added = added.map_err(|e| e.to_string())?;

    if !added.new.is_empty() || added.existing != ["x"] {
        return Err(format!(
            "the replayed add was not reported as existing: {added:?}"
        ));
    }
    let job = store
        .get_job("x")
        .await
        .map_err(|e| e.to_string())?
        .ok_or("x is gone")?;
    if job.lock != LOCK_DONE || job.data != b"first" {
        return Err(format!("x should be the archived original: {job:?}"));
    }
    let counts = store.job_counts(T0 + 3).await.map_err(|e| e.to_string())?;
    let total: u64 = counts.iter().map(|c| c.total()).sum();
    if total != 1 {
        return Err(format!("expected one job in all, got {counts:?}"));
    }
    Ok(())
}

/// The store's own claim statement, run here inside a transaction that the
/// test keeps open.
const CLAIM_JOBS: &str = include_str!("../queries/claim_jobs.sql");

#[test]
fn claims_in_progress_pass_each_other() {
    jobstore_conformance::block_on(async {
        let Some(store) = fresh_store().await else {
            return;
        };
        let outcome = pass_each_other(&store).await;
        drop_schema(&store).await;
        outcome.expect("claims");
    });
}

async fn pass_each_other(store: &PgStore) -> Result<(), String> {
    let jobs: Vec<NewJob> = ["waiting", "expired"]
        .iter()
        .flat_map(|t| (0..3).map(move |i| NewJob::new(format!("{t}-{i}"), *t, "")))
        .collect();
    store.add_jobs(&jobs, T0).await.map_err(|e| e.to_string())?;
    let ten = Duration::from_secs(10);
    let taken = store
        .claim_jobs("expired", 3, "sys-a", ten, T0)
        .await
        .map_err(|e| e.to_string())?;
    if taken.len() != 3 {
        return Err(format!("the first claim took {}", taken.len()));
    }
    // 20 s on, the three "expired" leases have run out.
    let now = T0 + 20_000;
    for jobtype in ["waiting", "expired"] {
        let mut tx = store.pool().begin().await.map_err(|e| e.to_string())?;
        let held: Vec<(String,)> = sqlx::query_as(CLAIM_JOBS)
            .bind(jobtype)
            .bind(now)
            .bind(1_i64)
            .bind("sys-b")
            .bind(now + 60_000)
            .fetch_all(&mut *tx)
            .await
            .map_err(|e| e.to_string())?;
        if held.len() != 1 {
            return Err(format!("the held claim of {jobtype} jobs took {held:?}"));
        }
        let beside = store.claim_jobs(jobtype, 3, "sys-c", Duration::from_secs(60), now);
        let got = tokio::time::timeout(Duration::from_secs(10), beside)
            .await
            .map_err(|_| format!("a claim of {jobtype} jobs waited for the held claim"))?
            .map_err(|e| e.to_string())?;
        tx.commit().await.map_err(|e| e.to_string())?;
        let mut ids: Vec<&str> = got.iter().map(|j| j.id.as_str()).collect();
        ids.push(&held[0].0);
        ids.sort_unstable();
        let all: Vec<String> = (0..3).map(|i| format!("{jobtype}-{i}")).collect();
        if ids != all {
            return Err(format!(
                "beside a claim of {} the other claim of {jobtype} jobs took {:?}",
                held[0].0,
                got.iter().map(|j| &j.id).collect::<Vec<_>>()
            ));
        }
    }
    Ok(())
}

/// What the other transaction does with its keyed job "a" after the add
/// has started waiting on its key.
#[derive(Debug, Clone, Copy)]
enum Then {
    Commit,
    Rollback,
    ArchiveAndCommit,
}

#[test]
fn keyed_add_waits_for_an_uncommitted_holder() {
    jobstore_conformance::block_on(async {
        let Some(store) = fresh_store().await else {
            return;
        };
        let mut outcome = Ok(());
        let window = Some(Duration::from_secs(60));
        let cases = [
            (Then::Commit, None, Some("a")),
            (Then::Rollback, None, None),
            (Then::ArchiveAndCommit, None, None),
            (Then::ArchiveAndCommit, window, Some("a")),
        ];
        for (i, (then, window, want)) in cases.into_iter().enumerate() {
            outcome = keyed_race(&store, &format!("t{i}"), then, window, want).await;
            if outcome.is_err() {
                break;
            }
        }
        drop_schema(&store).await;
        outcome.expect("keyed race");
    });
}

/// Another transaction inserts job "a" of `jobtype` with key "k" and keeps
/// it open; an add of "b" with the same key starts, and 300 ms later the
/// transaction does `then`. The add must name `want` as the holder, or be
/// new.
async fn keyed_race(
    store: &PgStore,
    jobtype: &str,
    then: Then,
    window: Option<Duration>,
    want: Option<&str>,
) -> Result<(), String> {
    let e = |e: sqlx::Error| e.to_string();
    let a = format!("{jobtype}-a");
    let b = format!("{jobtype}-b");
    let mut tx = store.pool().begin().await.map_err(e)?;
    sqlx::query(
        "INSERT INTO jobs (id, jobtype, data, priority, dt, create_dt, unique_key)
         VALUES ($1, $2, '', 0, $3, $3, 'k')",
    )
    .bind(&a)
    .bind(jobtype)
    .bind(T0)
    .execute(&mut *tx)
    .await
    .map_err(e)?;
    let mut unique = Unique::new("k");
    unique.window = window;
    let job = [NewJob::new(b.as_str(), jobtype, "b").unique(unique)];
    let adder = store.add_jobs(&job, T0 + 2);
    let other = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        match then {
            Then::Commit => tx.commit().await,
            Then::Rollback => tx.rollback().await,
            Then::ArchiveAndCommit => {
                sqlx::query(
                    "WITH d AS (DELETE FROM jobs WHERE id = $1 RETURNING *)
                     INSERT INTO archive (id, jobtype, data, priority, dt, attempts, create_dt,
                                          done_dt, code, status, output, unique_key)
                     SELECT id, jobtype, data, priority, dt, attempts, create_dt, $2, 'ok',
                            200, '', unique_key
                     FROM d",
                )
                .bind(&a)
                .bind(T0 + 1)
                .execute(&mut *tx)
                .await?;
                tx.commit().await
            }
        }
    };
    let (added, other) = tokio::join!(adder, other);
    other.map_err(e)?;
    let added = added.map_err(|e| e.to_string())?;
    let ok = match want {
        Some(holder) => {
            added.new.is_empty()
                && added.duplicates
                    == [Duplicate {
                        id: b.clone(),
                        existing: format!("{jobtype}-{holder}"),
                        replaced: false,
                    }]
        }
        None => added.new == [b.clone()],
    };
    if !ok {
        return Err(format!("{then:?} with window {window:?}: {added:?}"));
    }
    Ok(())
}

/// A keyed batch mixing duplicates of stored holders (replaced), a key
/// twice in the batch (the second replaces the first's payload) and a
/// plain job: one call of `add_unique_jobs`, and the holders read back
/// with the new payloads and one `edited` event each.
#[test]
fn a_mixed_keyed_batch_replaces_in_batch_order() {
    jobstore_conformance::block_on(async {
        let Some(store) = fresh_store().await else {
            return;
        };
        let outcome = mixed_batch(&store).await;
        drop_schema(&store).await;
        outcome.expect("mixed batch");
    });
}

async fn mixed_batch(store: &PgStore) -> Result<(), String> {
    use jobstore_api::{EventKind, OnConflict};
    let e = |e: jobstore_api::Error| e.to_string();
    let keyed = |id: &str, key: &str| {
        NewJob::new(id, "t", format!("data of {id}"))
            .unique(Unique::new(key).on_conflict(OnConflict::ReplaceData))
    };
    store
        .add_jobs(&[keyed("h1", "k1"), keyed("h2", "k2")], T0)
        .await
        .map_err(e)?;
    let batch = [
        keyed("d1", "k1"),
        keyed("d2", "k2"),
        keyed("n3", "k3"),
        keyed("d3", "k3"),
        keyed("e1", "k1"),
        NewJob::new("plain", "t", "p"),
    ];
    let out = store.add_jobs(&batch, T0 + 1).await.map_err(e)?;
    let holders: Vec<(&str, &str, bool)> = out
        .duplicates
        .iter()
        .map(|d| (d.id.as_str(), d.existing.as_str(), d.replaced))
        .collect();
    if out.new != ["n3", "plain"]
        || holders
            != [
                ("d1", "h1", true),
                ("d2", "h2", true),
                ("d3", "n3", true),
                ("e1", "h1", true),
            ]
    {
        return Err(format!("{out:?}"));
    }
    for (id, data, edits) in [
        ("h1", "data of e1", 2),
        ("h2", "data of d2", 1),
        ("n3", "data of d3", 1),
    ] {
        let job = store.get_job(id).await.map_err(e)?.ok_or("gone")?;
        let n = job
            .history
            .iter()
            .filter(|ev| ev.what == EventKind::Edited)
            .count();
        if job.data != data.as_bytes() || n != edits {
            return Err(format!("{id}: {job:?}"));
        }
    }
    Ok(())
}
