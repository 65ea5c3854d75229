//! Per-jobtype timing stats: the rows `add_stats` upserts, the reads of
//! `job_stats`, and the decoding of buckets (see README.md, "Stats").

use jobstore_api::stats::HISTOGRAM_BUCKETS;
use jobstore_api::{
    Durations, Error, JobtypeFilter, Millis, Result, StatsBucket, StatsDelta, StatsQuery,
    StatsResolution,
};
use sqlx::sqlite::{SqliteConnection, SqlitePool, SqliteRow};
use sqlx::{AssertSqlSafe, Row};

use crate::error;
use crate::queries;

/// The statements name the histogram columns `b0` to `b16`.
const _: () = assert!(HISTOGRAM_BUCKETS == 17);

/// Columns of one [`Durations`]: count, sum, sum of squares, histogram.
const DURATION_COLUMNS: usize = 3 + HISTOGRAM_BUCKETS;

/// Buckets per multi-row upsert (43 parameters each, far below SQLite's
/// limit of 32,766 parameters per statement).
const ADD_CHUNK: usize = 700;
const _: () = assert!(ADD_CHUNK * queries::STATS_ADD_PARAMS_PER_ROW <= 32_766);
const _: () = assert!(queries::STATS_ADD_PARAMS_PER_ROW == 3 + 2 * DURATION_COLUMNS);

/// One stored bucket a delta adds to.
struct AddRow<'a> {
    resolution: StatsResolution,
    start: Millis,
    delta: &'a StatsDelta,
}

/// The buckets `deltas` add to at `now`, in order: each delta's minute and
/// its day, those still kept.
fn rows(deltas: &[StatsDelta], now: Millis) -> Vec<AddRow<'_>> {
    let mut rows = Vec::with_capacity(deltas.len() * 2);
    for delta in deltas {
        for resolution in [StatsResolution::Minute, StatsResolution::Day] {
            let start = resolution.start_of(delta.minute);
            if start >= resolution.oldest_kept(now) {
                rows.push(AddRow {
                    resolution,
                    start,
                    delta,
                });
            }
        }
    }
    rows
}

/// A count or sum as stored: a 64-bit signed integer, clamped.
fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Adds `deltas` at `now`, on `conn` inside the caller's `BEGIN IMMEDIATE`
/// transaction: drops the buckets no longer kept, then upserts the
/// deltas' buckets.
pub(crate) async fn add(
    conn: &mut SqliteConnection,
    deltas: &[StatsDelta],
    now: Millis,
) -> Result<()> {
    let m = |e| error::map("add_stats", e);
    sqlx::query(queries::STATS_PRUNE)
        .bind(StatsResolution::Minute.oldest_kept(now))
        .bind(StatsResolution::Day.oldest_kept(now))
        .execute(&mut *conn)
        .await
        .map_err(m)?;
    for chunk in rows(deltas, now).chunks(ADD_CHUNK) {
        let mut q = sqlx::query(AssertSqlSafe(queries::stats_add(chunk.len())));
        for row in chunk {
            q = q
                .bind(row.resolution.as_str())
                .bind(row.delta.jobtype.as_str())
                .bind(row.start);
            for d in [&row.delta.wait, &row.delta.run] {
                q = q.bind(int(d.count)).bind(int(d.sum_ms)).bind(d.sum_sq_ms);
                for &n in &d.buckets {
                    q = q.bind(int(n));
                }
            }
        }
        q.execute(&mut *conn).await.map_err(m)?;
    }
    Ok(())
}

/// The buckets `query` asks for at `now`, from `pool`, in order.
pub(crate) async fn read(
    pool: &SqlitePool,
    query: &StatsQuery,
    now: Millis,
) -> Result<Vec<StatsBucket>> {
    let resolution = query.resolution.as_str();
    let oldest = query.resolution.oldest_kept(now);
    let q = match &query.jobtypes {
        JobtypeFilter::Exact(list) => sqlx::query(queries::STATS_READ_EXACT)
            .bind(resolution)
            .bind(oldest)
            .bind(
                serde_json::to_string(list)
                    .map_err(|e| Error::backend("encoding jobtypes as JSON", e))?,
            ),
        JobtypeFilter::All => sqlx::query(queries::STATS_READ_RANGE)
            .bind(resolution)
            .bind(oldest)
            .bind(String::new())
            .bind(JobtypeFilter::prefix_bound("")),
        JobtypeFilter::Prefix(prefix) => sqlx::query(queries::STATS_READ_RANGE)
            .bind(resolution)
            .bind(oldest)
            .bind(prefix.clone())
            .bind(JobtypeFilter::prefix_bound(prefix)),
    };
    let rows = q
        .fetch_all(pool)
        .await
        .map_err(|e| error::map("job_stats", e))?;
    rows.iter().map(bucket_from_row).collect()
}

/// A bucket as read: jobtype, start, then the wait and the run
/// [`Durations`], [`DURATION_COLUMNS`] columns each.
fn bucket_from_row(row: &SqliteRow) -> Result<StatsBucket> {
    let d = |e| error::map("decoding stats", e);
    Ok(StatsBucket {
        jobtype: row.try_get(0).map_err(d)?,
        start: row.try_get(1).map_err(d)?,
        wait: durations_at(row, 2)?,
        run: durations_at(row, 2 + DURATION_COLUMNS)?,
    })
}

/// The [`Durations`] in the columns from `first` on.
fn durations_at(row: &SqliteRow, first: usize) -> Result<Durations> {
    let int = |i: usize| -> Result<u64> {
        let n: i64 = row
            .try_get(i)
            .map_err(|e| error::map("decoding stats", e))?;
        u64::try_from(n).map_err(|e| Error::backend("stored stats count", e))
    };
    let mut buckets = [0; HISTOGRAM_BUCKETS];
    for (i, b) in buckets.iter_mut().enumerate() {
        *b = int(first + 3 + i)?;
    }
    Ok(Durations {
        count: int(first)?,
        sum_ms: int(first + 1)?,
        sum_sq_ms: row
            .try_get(first + 2)
            .map_err(|e| error::map("decoding stats", e))?,
        buckets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobstore_api::JobStore;
    use jobstore_api::stats::{DAY_MS, MINUTE_MS};
    use sqlx::{ConnectOptions, Connection};

    use crate::SqliteStore;
    use crate::query_plan::plan;

    const NOW: Millis = 1_700_000_000_000;

    fn delta(jobtype: &str, minute: Millis, wait: &[u64]) -> StatsDelta {
        StatsDelta {
            wait: Durations::of(wait),
            ..StatsDelta::new(jobtype, minute)
        }
    }

    /// A delta adds to its minute and its day while each is kept; an old
    /// minute only to its day, an old day to nothing.
    #[test]
    fn each_delta_adds_to_its_minute_and_day_still_kept() {
        let minute = StatsResolution::Minute.start_of(NOW);
        let day = StatsResolution::Day.start_of(NOW);
        let deltas = [
            delta("a", minute, &[1]),
            delta("a", minute - 60 * MINUTE_MS, &[1]),
            delta("a", day - 30 * DAY_MS, &[1]),
        ];
        let got: Vec<(StatsResolution, Millis)> = rows(&deltas, NOW)
            .iter()
            .map(|r| (r.resolution, r.start))
            .collect();
        assert_eq!(
            got,
            [
                (StatsResolution::Minute, minute),
                (StatsResolution::Day, day),
                (StatsResolution::Day, day),
            ]
        );
    }

    /// A batch of more buckets than one upsert holds is split into several
    /// statements in its transaction, and adds every delta.
    #[tokio::test]
    async fn batches_past_one_statement_add_everything() {
        let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
        let minute = StatsResolution::Minute.start_of(NOW);
        let deltas: Vec<StatsDelta> = (0..ADD_CHUNK)
            .map(|i| {
                delta(
                    &format!("t{i:04}"),
                    minute - (i as Millis % 2) * MINUTE_MS,
                    &[1],
                )
            })
            .collect();
        assert!(rows(&deltas, NOW).len() > ADD_CHUNK);
        store.add_stats(&deltas, NOW).await.unwrap();
        for resolution in [StatsResolution::Minute, StatsResolution::Day] {
            let read = store
                .job_stats(&StatsQuery::new(resolution), NOW)
                .await
                .unwrap();
            let want: Vec<(String, Millis)> = deltas
                .iter()
                .map(|d| (d.jobtype.clone(), resolution.start_of(d.minute)))
                .collect();
            let got: Vec<(String, Millis)> =
                read.iter().map(|b| (b.jobtype.clone(), b.start)).collect();
            assert_eq!(got, want, "{resolution:?}");
            assert!(read.iter().all(|b| b.wait == Durations::of(&[1])));
        }
        store.close().await;
    }

    /// Sums past 2^63 - 1 saturate there rather than turn into a `REAL`
    /// that no read could decode.
    #[tokio::test]
    async fn integer_sums_saturate() {
        let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
        let minute = StatsResolution::Minute.start_of(NOW);
        let huge = [delta("big", minute, &[u64::MAX / 2 + 1])];
        store.add_stats(&huge, NOW).await.unwrap();
        store.add_stats(&huge, NOW).await.unwrap();
        let read = store
            .job_stats(&StatsQuery::new(StatsResolution::Minute), NOW)
            .await
            .unwrap();
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].wait.count, 2);
        assert_eq!(read[0].wait.sum_ms, i64::MAX as u64);
        assert_eq!(read[0].wait.buckets[HISTOGRAM_BUCKETS - 1], 2);
        store.close().await;
    }

    /// Reads follow the primary key in its order (no sort), a list one
    /// range per jobtype; the prune is two ranges of `stats_by_age`.
    #[tokio::test]
    async fn stats_statements_follow_their_indexes() {
        let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
            .in_memory(true)
            .connect()
            .await
            .unwrap();
        crate::store::MIGRATOR
            .run_direct(None, &mut conn, false)
            .await
            .unwrap();
        let range = plan(&mut conn, queries::STATS_READ_RANGE, 4).await;
        assert_eq!(
            range,
            "SEARCH stats USING PRIMARY KEY (resolution=? AND jobtype>? AND jobtype<?)",
        );
        let exact = plan(&mut conn, queries::STATS_READ_EXACT, 3).await;
        assert!(
            exact.contains(
                "SEARCH stats USING PRIMARY KEY (resolution=? AND jobtype=? AND start>?)"
            ),
            "{exact}"
        );
        assert!(!exact.contains("SCAN stats"), "{exact}");
        assert!(!exact.contains("TEMP B-TREE"), "{exact}");
        let prune = plan(&mut conn, queries::STATS_PRUNE, 2).await;
        assert_eq!(
            prune
                .matches("SEARCH stats USING INDEX stats_by_age (resolution=? AND start<?)")
                .count(),
            2,
            "{prune}"
        );
        assert!(!prune.contains("SCAN stats"), "{prune}");
        conn.close().await.unwrap();
    }
}
