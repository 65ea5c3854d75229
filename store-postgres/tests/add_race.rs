//! An add of an id that another transaction is archiving at that moment
//! must report the id as existing, not insert a second job: the insert
//! waits on the archiving transaction's row lock, and after it commits the
//! id lives only in `archive`.

use std::time::Duration;

use jobstore_api::{JobStore, LOCK_DONE, NewJob};
use jobstore_conformance::services::{postgres_url, unique_namespace};
use jobstore_postgres::{PgStore, PgStoreOptions};

const T0: i64 = 1_700_000_000_000;

#[test]
fn add_racing_archive_reports_existing() {
    jobstore_conformance::block_on(async {
        let Some(url) = postgres_url().await else {
            return;
        };
        let opts = PgStoreOptions::from_url(&url)
            .expect("url")
            .schema(unique_namespace())
            .max_connections(4);
        let store = PgStore::connect_with(opts).await.expect("connect");
        let outcome = race(&store).await;
        let drop = format!("DROP SCHEMA \"{}\" CASCADE", store.schema());
        sqlx::query(sqlx::AssertSqlSafe(drop))
            .execute(store.pool())
            .await
            .expect("drop schema");
        outcome.expect("race");
    });
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
