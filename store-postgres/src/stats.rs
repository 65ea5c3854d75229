//! Per-jobtype timing stats: the `add_stats` and `job_stats` statements
//! (`queries/add_stats.sql`, `queries/job_stats.sql`), their parameters and
//! the decoding of their rows. See the README, "Stats".

use jobstore_api::limits::MAX_BATCH;
use jobstore_api::stats::{DAY_MS, HISTOGRAM_BUCKETS};
use jobstore_api::{
    Durations, Error, JobtypeFilter, Millis, Result, StatsBucket, StatsDelta, StatsQuery,
    StatsResolution,
};
use sqlx::PgPool;
use sqlx::postgres::PgRow;

use crate::error::map;
use crate::queries as q;
use crate::store::get;

/// Most rows one add deletes per resolution: as many as one batch can
/// add (a minute and a day row per delta), so pruning keeps pace with
/// adds while each statement's work stays bounded.
const PRUNE_ROWS: i64 = 2 * MAX_BATCH as i64;

/// The Durations of a batch as the statement's parallel arrays: counts,
/// sums, sums of squares, and every histogram back to back.
#[derive(Default)]
struct Columns {
    counts: Vec<i64>,
    sums: Vec<i64>,
    squares: Vec<f64>,
    buckets: Vec<i64>,
}

impl Columns {
    fn with_capacity(n: usize) -> Self {
        Columns {
            counts: Vec::with_capacity(n),
            sums: Vec::with_capacity(n),
            squares: Vec::with_capacity(n),
            buckets: Vec::with_capacity(n * HISTOGRAM_BUCKETS),
        }
    }

    fn push(&mut self, what: &str, d: &Durations) -> Result<()> {
        self.counts.push(bigint(what, "count", d.count)?);
        self.sums.push(bigint(what, "sum_ms", d.sum_ms)?);
        self.squares.push(d.sum_sq_ms);
        for &n in &d.buckets {
            self.buckets.push(bigint(what, "buckets", n)?);
        }
        Ok(())
    }
}

/// A count or sum as its `bigint` column holds it.
fn bigint(what: &str, field: &str, v: u64) -> Result<i64> {
    i64::try_from(v).map_err(|_| {
        Error::invalid(format!(
            "{what}.{field} {v} is more than the store holds ({})",
            i64::MAX
        ))
    })
}

/// Adds validated `deltas` at `now`: one statement (see
/// `queries/add_stats.sql`); none for an empty batch.
pub(crate) async fn add(pool: &PgPool, deltas: &[StatsDelta], now: Millis) -> Result<()> {
    if deltas.is_empty() {
        return Ok(());
    }
    let mut jobtypes = Vec::with_capacity(deltas.len());
    let mut minutes = Vec::with_capacity(deltas.len());
    let mut wait = Columns::with_capacity(deltas.len());
    let mut run = Columns::with_capacity(deltas.len());
    for d in deltas {
        jobtypes.push(d.jobtype.as_str());
        minutes.push(d.minute);
        wait.push("wait", &d.wait)?;
        run.push("run", &d.run)?;
    }
    sqlx::query(q::ADD_STATS)
        .bind(jobtypes)
        .bind(minutes)
        .bind(wait.counts)
        .bind(wait.sums)
        .bind(wait.squares)
        .bind(wait.buckets)
        .bind(run.counts)
        .bind(run.sums)
        .bind(run.squares)
        .bind(run.buckets)
        .bind(HISTOGRAM_BUCKETS as i32)
        .bind(DAY_MS)
        .bind(StatsResolution::Minute.oldest_kept(now))
        .bind(StatsResolution::Day.oldest_kept(now))
        .bind(PRUNE_ROWS)
        .execute(pool)
        .await
        .map_err(|e| map("add_stats", e))?;
    Ok(())
}

/// The buckets `query` selects, kept at `now` (see
/// `queries/job_stats.sql`), as stored: sorted by jobtype, then start.
pub(crate) async fn read(
    pool: &PgPool,
    query: &StatsQuery,
    now: Millis,
) -> Result<Vec<StatsBucket>> {
    let (list, from, to): (Option<&[String]>, String, String) = match &query.jobtypes {
        JobtypeFilter::All => (None, String::new(), JobtypeFilter::prefix_bound("")),
        JobtypeFilter::Exact(list) => (Some(list), String::new(), String::new()),
        JobtypeFilter::Prefix(p) => (None, p.clone(), JobtypeFilter::prefix_bound(p)),
    };
    let rows = sqlx::query(q::JOB_STATS)
        .bind(query.resolution.as_str())
        .bind(query.resolution.oldest_kept(now))
        .bind(list)
        .bind(from)
        .bind(to)
        .fetch_all(pool)
        .await
        .map_err(|e| map("job_stats", e))?;
    rows.iter().map(bucket_from_row).collect()
}

/// A bucket from a row of `queries/job_stats.sql`: jobtype, start, then
/// the wait and the run Durations (count, sum, sum of squares, histogram).
fn bucket_from_row(row: &PgRow) -> Result<StatsBucket> {
    Ok(StatsBucket {
        jobtype: get(row, 0)?,
        start: get(row, 1)?,
        wait: durations_from_row(row, 2)?,
        run: durations_from_row(row, 6)?,
    })
}

/// The Durations in columns `i..i + 4` of `row`.
fn durations_from_row(row: &PgRow, i: usize) -> Result<Durations> {
    let stored: Vec<i64> = get(row, i + 3)?;
    let mut buckets = [0; HISTOGRAM_BUCKETS];
    if stored.len() != buckets.len() {
        return Err(Error::backend_msg(format!(
            "a stored histogram has {} buckets, not {HISTOGRAM_BUCKETS}",
            stored.len()
        )));
    }
    for (bucket, n) in buckets.iter_mut().zip(stored) {
        *bucket = unsigned(n)?;
    }
    Ok(Durations {
        count: unsigned(get(row, i)?)?,
        sum_ms: unsigned(get(row, i + 1)?)?,
        sum_sq_ms: get(row, i + 2)?,
        buckets,
    })
}

/// A stored count or sum (never negative, unless edited by hand).
fn unsigned(n: i64) -> Result<u64> {
    u64::try_from(n).map_err(|_| Error::backend_msg(format!("a stored stats count is {n}")))
}
