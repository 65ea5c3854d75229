//! Stored schedules: the statements of the seven schedule methods, their
//! parameters, and the decoding of their rows (see README.md, "Schedules").
//! Every function is one statement; the store validates before calling.

use jobstore_api::{
    Error, JobtypeFilter, Millis, Result, Schedule, ScheduleAdvance, ScheduleRecord,
};
use sqlx::Row;
use sqlx::sqlite::{SqlitePool, SqliteRow};

use crate::error;
use crate::queries;

/// A count as stored: a 64-bit signed integer, clamped.
fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Creates or replaces `s` on `writer`; the record stored.
pub(crate) async fn set(
    writer: &SqlitePool,
    s: &Schedule,
    next_due: Option<Millis>,
    now: Millis,
) -> Result<ScheduleRecord> {
    let row = sqlx::query(queries::SET_SCHEDULE)
        .bind(s.name.as_str())
        .bind(s.definition())
        .bind(s.data.as_slice())
        .bind(next_due)
        .bind(now)
        .fetch_one(writer)
        .await
        .map_err(|e| error::map("set_schedule", e))?;
    record(&row, s.clone())
}

/// The schedule named `name`.
pub(crate) async fn get(reader: &SqlitePool, name: &str) -> Result<Option<ScheduleRecord>> {
    let row = sqlx::query(queries::GET_SCHEDULE)
        .bind(name)
        .fetch_optional(reader)
        .await
        .map_err(|e| error::map("get_schedule", e))?;
    row.as_ref().map(record_from_row).transpose()
}

/// The schedules whose name starts with `prefix`, by name.
pub(crate) async fn list(reader: &SqlitePool, prefix: &str) -> Result<Vec<ScheduleRecord>> {
    let rows = sqlx::query(queries::LIST_SCHEDULES)
        .bind(prefix)
        .bind(JobtypeFilter::prefix_bound(prefix))
        .fetch_all(reader)
        .await
        .map_err(|e| error::map("list_schedules", e))?;
    rows.iter().map(record_from_row).collect()
}

/// Removes the schedule; whether it existed.
pub(crate) async fn delete(writer: &SqlitePool, name: &str) -> Result<bool> {
    let done = sqlx::query(queries::DELETE_SCHEDULE)
        .bind(name)
        .execute(writer)
        .await
        .map_err(|e| error::map("delete_schedule", e))?;
    Ok(done.rows_affected() > 0)
}

/// Pauses or resumes (setting `next_due`); whether it changed.
pub(crate) async fn pause(
    writer: &SqlitePool,
    name: &str,
    paused: bool,
    next_due: Option<Millis>,
    now: Millis,
) -> Result<bool> {
    let done = sqlx::query(queries::PAUSE_SCHEDULE)
        .bind(name)
        .bind(paused)
        .bind(next_due)
        .bind(now)
        .execute(writer)
        .await
        .map_err(|e| error::map("pause_schedule", e))?;
    Ok(done.rows_affected() > 0)
}

/// Up to `limit` schedules due at `now`, by `next_due` then name.
pub(crate) async fn due(
    reader: &SqlitePool,
    now: Millis,
    limit: usize,
) -> Result<Vec<ScheduleRecord>> {
    let rows = sqlx::query(queries::DUE_SCHEDULES)
        .bind(now)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(reader)
        .await
        .map_err(|e| error::map("due_schedules", e))?;
    rows.iter().map(record_from_row).collect()
}

/// The compare-and-set of the firing state; whether it applied.
pub(crate) async fn advance(
    writer: &SqlitePool,
    name: &str,
    version: u64,
    advance: &ScheduleAdvance,
) -> Result<bool> {
    // A version past 2^63 - 1 is none a stored schedule can have.
    let Ok(version) = i64::try_from(version) else {
        return Ok(false);
    };
    let done = sqlx::query(queries::ADVANCE_SCHEDULE)
        .bind(name)
        .bind(version)
        .bind(advance.fired_through)
        .bind(advance.last_job.as_deref())
        .bind(advance.next_due)
        .bind(int(advance.fired))
        .bind(int(advance.skipped))
        .execute(writer)
        .await
        .map_err(|e| error::map("advance_schedule", e))?;
    Ok(done.rows_affected() > 0)
}

/// A whole stored schedule: its name, definition and payload, and its state.
fn record_from_row(row: &SqliteRow) -> Result<ScheduleRecord> {
    let d = |e| error::map("decoding a schedule", e);
    let name: String = row.try_get("name").map_err(d)?;
    let definition: String = row.try_get("definition").map_err(d)?;
    let data: Vec<u8> = row.try_get("data").map_err(d)?;
    record(row, Schedule::from_definition(name, &definition, data)?)
}

/// The record of `schedule` with the state columns of `row`.
fn record(row: &SqliteRow, schedule: Schedule) -> Result<ScheduleRecord> {
    let d = |e| error::map("decoding a schedule", e);
    let unsigned = |column: &str| -> Result<u64> {
        let n: i64 = row.try_get(column).map_err(d)?;
        u64::try_from(n).map_err(|_| {
            Error::backend_msg(format!(
                "schedule {:?}: stored {column} {n} is negative",
                schedule.name
            ))
        })
    };
    Ok(ScheduleRecord {
        version: unsigned("version")?,
        paused: row.try_get("paused").map_err(d)?,
        created_dt: row.try_get("created_dt").map_err(d)?,
        updated_dt: row.try_get("updated_dt").map_err(d)?,
        fired_through: row.try_get("fired_through").map_err(d)?,
        last_job: row.try_get("last_job").map_err(d)?,
        next_due: row.try_get("next_due").map_err(d)?,
        fired: unsigned("fired")?,
        skipped: unsigned("skipped")?,
        schedule,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobstore_api::JobStore;
    use sqlx::{ConnectOptions, Connection};

    use crate::SqliteStore;
    use crate::query_plan::plan;

    const NOW: Millis = 1_700_000_000_000;

    /// The due read is one range of `schedules_due`, in its order (no
    /// sort); the listing one range of the primary key, in its order; every
    /// other statement looks its schedule up by name.
    #[tokio::test]
    async fn schedule_statements_follow_their_indexes() {
        let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
            .in_memory(true)
            .connect()
            .await
            .unwrap();
        crate::store::MIGRATOR
            .run_direct(None, &mut conn, false)
            .await
            .unwrap();
        // `next_due IS NOT NULL` is the range's lower bound (past the NULLs).
        assert_eq!(
            plan(&mut conn, queries::DUE_SCHEDULES, 2).await,
            "SEARCH schedules USING INDEX schedules_due (next_due>? AND next_due<?)"
        );
        assert_eq!(
            plan(&mut conn, queries::LIST_SCHEDULES, 2).await,
            "SEARCH schedules USING PRIMARY KEY (name>? AND name<?)"
        );
        for (sql, params) in [
            (queries::GET_SCHEDULE, 1),
            (queries::DELETE_SCHEDULE, 1),
            (queries::PAUSE_SCHEDULE, 4),
            (queries::ADVANCE_SCHEDULE, 7),
        ] {
            assert_eq!(
                plan(&mut conn, sql, params).await,
                "SEARCH schedules USING PRIMARY KEY (name=?)",
                "{sql}"
            );
        }
        conn.close().await.unwrap();
    }

    /// Counters past 2^63 - 1 saturate there rather than turn into a `REAL`
    /// that no read could decode.
    #[tokio::test]
    async fn counters_saturate() {
        let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
        let s = Schedule::new("big", "* * * * *", "t");
        store.set_schedule(&s, Some(NOW), NOW).await.unwrap();
        for (i, n) in [u64::MAX, i64::MAX as u64, 1].into_iter().enumerate() {
            let adv = ScheduleAdvance {
                fired_through: NOW + i as Millis,
                last_job: None,
                next_due: None,
                fired: n,
                skipped: 1,
            };
            assert!(store.advance_schedule("big", 1, &adv, NOW).await.unwrap());
        }
        let r = store.get_schedule("big").await.unwrap().unwrap();
        assert_eq!((r.fired, r.skipped), (i64::MAX as u64, 3));
        let adv = ScheduleAdvance {
            fired_through: NOW + 10,
            last_job: None,
            next_due: None,
            fired: 1,
            skipped: 0,
        };
        assert!(
            !store
                .advance_schedule("big", u64::MAX, &adv, NOW)
                .await
                .unwrap(),
            "no stored version is past 2^63 - 1"
        );
        store.close().await;
    }
}
