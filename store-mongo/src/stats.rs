//! The `stats` collection: one document per jobtype, resolution and bucket
//! start; `add_stats` as one `update` command of upserts (`$inc`) and one
//! pruning `delete` command, `job_stats` as one sorted `find` (see the
//! crate docs, "stats", "add_stats" and "job_stats").

use futures::TryStreamExt;
use jobstore_api::stats::{Durations, HISTOGRAM_BUCKETS};
use jobstore_api::{
    Error, JobtypeFilter, Millis, Result, StatsBucket, StatsDelta, StatsQuery, StatsResolution,
};
use mongodb::bson::{Bson, Document, doc};
use mongodb::options::{Hint, ReadPreference, SelectionCriteria};

use crate::conn::{STATS_PRUNE_INDEX, STATS_READ_INDEX};
use crate::error::{self, DUPLICATE_KEY};
use crate::store::{MongoStore, RELEASE_COMMAND_BYTES, pack};

/// Field names of the `stats` collection (the durations' fields are
/// [`WAIT`] or [`RUN`] followed by `_count`, `_sum_ms`, `_sum_sq_ms` and
/// `_h0` .. `_h16`).
mod s {
    pub const ID: &str = "_id";
    pub const JOBTYPE: &str = "jobtype";
    pub const RES: &str = "res";
    pub const START: &str = "start";
}

/// The prefix of the wait times' fields.
const WAIT: &str = "wait";
/// The prefix of the run times' fields.
const RUN: &str = "run";

/// How many buckets one reply of a read carries (the server also stops a
/// batch at 16 MiB): a read of the last hour's minutes of up to 166
/// jobtypes is one round trip.
const READ_BATCH: u32 = 10_000;

/// How many times the upserts that lost an insert race (a duplicate key:
/// nothing applied) are sent again.
const DUPLICATE_RESENDS: usize = 3;

/// The `_id` of a bucket: `<res>:<start>:<jobtype>` (neither `res` nor
/// `start` holds a `:`, so two buckets never share one).
fn bucket_id(res: StatsResolution, start: Millis, jobtype: &str) -> String {
    format!("{}:{start}:{jobtype}", res.as_str())
}

/// A `u64` counter as BSON: Int64, saturating at `i64::MAX`.
fn int(v: u64) -> Bson {
    Bson::Int64(i64::try_from(v).unwrap_or(i64::MAX))
}

/// Adds `d`'s non-zero fields, named after `prefix`, to the `$inc`
/// document `inc`.
fn increments(inc: &mut Document, prefix: &str, d: &Durations) {
    if d.count == 0 {
        return;
    }
    inc.insert(format!("{prefix}_count"), int(d.count));
    if d.sum_ms > 0 {
        inc.insert(format!("{prefix}_sum_ms"), int(d.sum_ms));
    }
    inc.insert(format!("{prefix}_sum_sq_ms"), Bson::Double(d.sum_sq_ms));
    for (i, n) in d.buckets.iter().enumerate() {
        if *n > 0 {
            inc.insert(format!("{prefix}_h{i}"), int(*n));
        }
    }
}

/// The upsert adding `delta` to its bucket of `res` starting at `start`.
fn upsert(delta: &StatsDelta, res: StatsResolution, start: Millis) -> Document {
    let mut inc = Document::new();
    increments(&mut inc, WAIT, &delta.wait);
    increments(&mut inc, RUN, &delta.run);
    doc! {
        "q": { s::ID: bucket_id(res, start, &delta.jobtype) },
        "u": {
            "$set": { s::JOBTYPE: &delta.jobtype, s::RES: res.as_str(), s::START: start },
            "$inc": inc,
        },
        "upsert": true,
    }
}

/// An upper bound of the BSON size of [`upsert`] for `jobtype`: the
/// jobtype (in `_id` and `$set`) and room for the other fields (at most
/// 40 counters of at most 32 bytes each, the statement's keys).
fn upsert_size(jobtype: &str) -> usize {
    2 * jobtype.len() + 1_600
}

/// The upserts of `deltas` at `now`: each delta to its minute and its day,
/// where that bucket is still kept; with each its size bound.
fn upserts(deltas: &[StatsDelta], now: Millis) -> Vec<(Document, usize)> {
    let mut out = Vec::with_capacity(2 * deltas.len());
    for d in deltas {
        for res in [StatsResolution::Minute, StatsResolution::Day] {
            let start = res.start_of(d.minute);
            if start >= res.oldest_kept(now) {
                out.push((upsert(d, res, start), upsert_size(&d.jobtype)));
            }
        }
    }
    out
}

/// The pruning statements: per resolution, the buckets starting before
/// the oldest kept at `now` (one range of the `prune` index each).
fn prune_statements(now: Millis) -> Vec<Document> {
    [StatsResolution::Minute, StatsResolution::Day]
        .into_iter()
        .map(|res| {
            doc! {
                "q": { s::RES: res.as_str(), s::START: { "$lt": res.oldest_kept(now) } },
                "limit": 0,
                "hint": STATS_PRUNE_INDEX,
            }
        })
        .collect()
}

/// The filter of a read: the buckets of `query`'s resolution and jobtypes
/// kept at `now`.
fn read_filter(query: &StatsQuery, now: Millis) -> Document {
    let mut filter = doc! {
        s::RES: query.resolution.as_str(),
        s::START: { "$gte": query.resolution.oldest_kept(now) },
    };
    match &query.jobtypes {
        JobtypeFilter::All => {}
        JobtypeFilter::Exact(list) => {
            filter.insert(s::JOBTYPE, doc! { "$in": list });
        }
        JobtypeFilter::Prefix(prefix) => {
            let bound = JobtypeFilter::prefix_bound(prefix);
            filter.insert(s::JOBTYPE, doc! { "$gte": prefix, "$lt": bound });
        }
    }
    filter
}

fn malformed(field: &str) -> Error {
    Error::backend_msg(format!(
        "malformed stats document in MongoDB: field {field:?} is of the wrong type"
    ))
}

/// A counter: absent is 0; Int64, Int32, or an integral double (what the
/// shell and JavaScript tools write), never negative.
fn counter(d: &Document, field: &str) -> Result<u64> {
    match d.get(field) {
        None | Some(Bson::Null) => Ok(0),
        Some(Bson::Int64(v)) => u64::try_from(*v).map_err(|_| malformed(field)),
        Some(Bson::Int32(v)) => u64::try_from(*v).map_err(|_| malformed(field)),
        Some(Bson::Double(v)) if v.fract() == 0.0 && *v >= 0.0 => Ok(*v as u64),
        _ => Err(malformed(field)),
    }
}

/// A sum of squares: absent is 0; a double, or an integer.
fn float(d: &Document, field: &str) -> Result<f64> {
    match d.get(field) {
        None | Some(Bson::Null) => Ok(0.0),
        Some(Bson::Double(v)) => Ok(*v),
        Some(Bson::Int64(v)) => Ok(*v as f64),
        Some(Bson::Int32(v)) => Ok(f64::from(*v)),
        _ => Err(malformed(field)),
    }
}

/// The durations stored under `prefix`.
fn durations(d: &Document, prefix: &str) -> Result<Durations> {
    let mut buckets = [0; HISTOGRAM_BUCKETS];
    for (i, b) in buckets.iter_mut().enumerate() {
        *b = counter(d, &format!("{prefix}_h{i}"))?;
    }
    Ok(Durations {
        count: counter(d, &format!("{prefix}_count"))?,
        sum_ms: counter(d, &format!("{prefix}_sum_ms"))?,
        sum_sq_ms: float(d, &format!("{prefix}_sum_sq_ms"))?,
        buckets,
    })
}

/// A stored bucket.
fn bucket_from_doc(d: &Document) -> Result<StatsBucket> {
    let jobtype = match d.get(s::JOBTYPE) {
        Some(Bson::String(t)) => t.clone(),
        _ => return Err(malformed(s::JOBTYPE)),
    };
    let start = match d.get(s::START) {
        Some(Bson::Int64(v)) => *v,
        Some(Bson::Int32(v)) => i64::from(*v),
        _ => return Err(malformed(s::START)),
    };
    Ok(StatsBucket {
        jobtype,
        start,
        wait: durations(d, WAIT)?,
        run: durations(d, RUN)?,
    })
}

/// The indexes (in the command's `updates`) of the statements of an
/// `update` reply that failed with a duplicate key, if every failed
/// statement did (`None` when another error is there: the reply is then
/// mapped as any other).
pub(crate) fn duplicate_key_failures(reply: &Document) -> Option<Vec<usize>> {
    if reply.contains_key("writeConcernError") {
        return None;
    }
    let Some(Bson::Array(errors)) = reply.get("writeErrors") else {
        return Some(Vec::new());
    };
    errors
        .iter()
        .map(|e| {
            let e = e.as_document()?;
            let code = match e.get("code")? {
                Bson::Int32(c) => i64::from(*c),
                Bson::Int64(c) => *c,
                _ => return None,
            };
            let index = match e.get("index")? {
                Bson::Int32(i) => usize::try_from(*i).ok()?,
                Bson::Int64(i) => usize::try_from(*i).ok()?,
                _ => return None,
            };
            (code == i64::from(DUPLICATE_KEY)).then_some(index)
        })
        .collect()
}

impl MongoStore {
    /// Adds `deltas` (validated) to their buckets and drops the buckets no
    /// longer kept at `now`: the upsert command(s) and the pruning delete,
    /// sent at the same time.
    pub(crate) async fn add_stats_batch(&self, deltas: &[StatsDelta], now: Millis) -> Result<()> {
        if deltas.is_empty() {
            return Ok(());
        }
        let commands = pack(upserts(deltas, now), RELEASE_COMMAND_BYTES);
        let add = async {
            for command in commands {
                self.send_upserts(command).await?;
            }
            Ok::<(), Error>(())
        };
        futures::try_join!(add, self.prune_stats(now))?;
        Ok(())
    }

    /// One `update` command of `statements` (upserts) on `stats`; the
    /// statements that failed with a duplicate key (an insert that lost
    /// the race for a new bucket to a concurrent add, on a server that did
    /// not retry it as an update itself) applied nothing, and are sent
    /// again. Any other failure fails the call; nothing is sent again
    /// after it (an increment sent twice could count twice).
    async fn send_upserts(&self, mut statements: Vec<Document>) -> Result<()> {
        const WHAT: &str = "add stats";
        for _ in 0..=DUPLICATE_RESENDS {
            let reply = self
                .call(WHAT, self.write_command("update", "updates", &statements))
                .await?;
            match duplicate_key_failures(&reply) {
                Some(failed) if failed.is_empty() => return Ok(()),
                Some(failed) => {
                    statements = failed
                        .into_iter()
                        .filter_map(|i| statements.get(i).cloned())
                        .collect();
                }
                None => return error::check_write_reply(WHAT, &reply),
            }
        }
        Err(Error::backend_msg(
            "MongoDB add stats failed: upserts kept failing with duplicate keys",
        ))
    }

    /// Drops the buckets older than those kept at `now`: one `delete`
    /// command, one range of the `prune` index per resolution.
    async fn prune_stats(&self, now: Millis) -> Result<()> {
        const WHAT: &str = "prune stats";
        let reply = self
            .call(
                WHAT,
                self.write_command("delete", "deletes", &prune_statements(now)),
            )
            .await?;
        error::check_write_reply(WHAT, &reply)
    }

    /// A write command (`update` or `delete`) of `statements` on `stats`,
    /// unordered, with the store's write concern, on the primary.
    fn write_command(
        &self,
        command: &str,
        field: &str,
        statements: &[Document],
    ) -> mongodb::action::RunCommand<'_> {
        self.db
            .run_command(doc! {
                command: self.stats.name(),
                field: statements,
                "ordered": false,
                "writeConcern": { "w": "majority", "wtimeout": self.wtimeout_ms() },
            })
            .selection_criteria(SelectionCriteria::ReadPreference(ReadPreference::Primary))
    }

    /// The buckets `query` selects at `now`, sorted by jobtype, then start:
    /// one `find` on the `read` index, which holds that order.
    pub(crate) async fn read_stats(
        &self,
        query: &StatsQuery,
        now: Millis,
    ) -> Result<Vec<StatsBucket>> {
        let docs: Vec<Document> = self
            .read("read stats", async {
                self.stats
                    .find(read_filter(query, now))
                    .sort(doc! { s::JOBTYPE: 1, s::START: 1 })
                    .hint(Hint::Name(STATS_READ_INDEX.to_owned()))
                    .projection(doc! { s::ID: 0, s::RES: 0 })
                    .batch_size(READ_BATCH)
                    .await?
                    .try_collect()
                    .await
            })
            .await?;
        docs.iter().map(bucket_from_doc).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobstore_api::stats::{DAY_MS, HISTOGRAM_BOUNDS_MS, MINUTE_MS};

    const NOW: Millis = 1_700_000_000_000;

    fn delta(minute: Millis, wait: &[u64], run: &[u64]) -> StatsDelta {
        StatsDelta {
            jobtype: "t:x".to_owned(),
            minute,
            wait: Durations::of(wait),
            run: Durations::of(run),
        }
    }

    /// An upsert names its bucket by `_id` alone and increments only the
    /// delta's non-zero fields.
    #[test]
    fn an_upsert_increments_the_non_zero_fields_of_one_bucket() {
        let minute = StatsResolution::Minute.start_of(NOW);
        let st = upsert(
            &delta(minute, &[7, 2_000], &[]),
            StatsResolution::Minute,
            minute,
        );
        assert_eq!(
            st.get_document("q").unwrap(),
            &doc! { "_id": format!("minute:{minute}:t:x") }
        );
        assert_eq!(st.get_bool("upsert"), Ok(true));
        let u = st.get_document("u").unwrap();
        assert_eq!(
            u.get_document("$set").unwrap(),
            &doc! { "jobtype": "t:x", "res": "minute", "start": minute }
        );
        assert_eq!(
            u.get_document("$inc").unwrap(),
            &doc! {
                "wait_count": 2_i64,
                "wait_sum_ms": 2_007_i64,
                "wait_sum_sq_ms": 4_000_049.0,
                "wait_h1": 1_i64,
                "wait_h8": 1_i64,
            }
        );
    }

    /// The size bound holds for the largest statement: every counter of
    /// both durations set, at its largest.
    #[test]
    fn the_size_bound_covers_every_field() {
        let mut every: Vec<u64> = HISTOGRAM_BOUNDS_MS.to_vec();
        every.push(u64::MAX);
        let mut d = delta(StatsResolution::Minute.start_of(NOW), &every, &every);
        d.jobtype = "j".repeat(jobstore_api::limits::MAX_JOBTYPE_LEN);
        d.wait.count = u64::MAX;
        let st = upsert(&d, StatsResolution::Minute, d.minute);
        let inc = st.get_document("u").unwrap().get_document("$inc").unwrap();
        assert_eq!(inc.len(), 2 * (3 + HISTOGRAM_BUCKETS));
        let len = mongodb::bson::to_vec(&st).unwrap().len();
        assert!(upsert_size(&d.jobtype) >= len, "{len}");
    }

    /// A delta adds to its minute and its day while they are kept; older
    /// than the minutes kept, to its day only; older than the days kept,
    /// to nothing.
    #[test]
    fn deltas_reach_the_buckets_still_kept() {
        let minute = StatsResolution::Minute.start_of(NOW);
        let day = StatsResolution::Day.start_of(NOW);
        let ids = |deltas: &[StatsDelta]| -> Vec<String> {
            upserts(deltas, NOW)
                .iter()
                .map(|(st, _)| {
                    st.get_document("q")
                        .unwrap()
                        .get_str("_id")
                        .unwrap()
                        .to_owned()
                })
                .collect()
        };
        assert_eq!(
            ids(&[delta(minute - 59 * MINUTE_MS, &[1], &[])]),
            [
                format!("minute:{}:t:x", minute - 59 * MINUTE_MS),
                format!("day:{day}:t:x")
            ]
        );
        assert_eq!(
            ids(&[delta(minute - 60 * MINUTE_MS, &[1], &[])]),
            [format!("day:{day}:t:x")]
        );
        assert!(ids(&[delta(day - 30 * DAY_MS, &[1], &[])]).is_empty());
    }

    /// Pruning drops, per resolution, what starts before the oldest bucket
    /// kept, through the `prune` index.
    #[test]
    fn pruning_is_one_range_per_resolution() {
        let st = prune_statements(NOW);
        assert_eq!(st.len(), 2);
        assert_eq!(
            st[0].get_document("q").unwrap(),
            &doc! { "res": "minute", "start": { "$lt": StatsResolution::Minute.oldest_kept(NOW) } }
        );
        assert_eq!(
            st[1].get_document("q").unwrap(),
            &doc! { "res": "day", "start": { "$lt": StatsResolution::Day.oldest_kept(NOW) } }
        );
        assert!(st.iter().all(|s| s.get_str("hint") == Ok("prune")));
        assert!(st.iter().all(|s| s.get_i32("limit") == Ok(0)));
    }

    #[test]
    fn reads_filter_by_resolution_window_and_jobtypes() {
        let q = StatsQuery::new(StatsResolution::Day).prefix("a:");
        let oldest = StatsResolution::Day.oldest_kept(NOW);
        assert_eq!(
            read_filter(&q, NOW),
            doc! { "res": "day", "start": { "$gte": oldest }, "jobtype": { "$gte": "a:", "$lt": "a:~" } }
        );
        let q = StatsQuery::new(StatsResolution::Minute).jobtypes(["b", "a"]);
        assert_eq!(
            read_filter(&q, NOW).get_document("jobtype").unwrap(),
            &doc! { "$in": ["b", "a"] }
        );
        let q = StatsQuery::new(StatsResolution::Minute);
        assert!(!read_filter(&q, NOW).contains_key("jobtype"));
    }

    /// Stored buckets read back: absent counters are 0, integers of any
    /// width and integral doubles are read, negative counters are not.
    #[test]
    fn buckets_read_back() {
        let d = doc! {
            "jobtype": "t", "start": 60_000_i64,
            "run_count": 2_i32, "run_sum_ms": 8.0, "run_sum_sq_ms": 40_i64,
            "run_h0": 1_i64, "run_h1": 1_i64,
        };
        let b = bucket_from_doc(&d).unwrap();
        assert_eq!(b.jobtype, "t");
        assert_eq!(b.start, 60_000);
        assert_eq!(b.wait, Durations::default());
        assert_eq!(b.run, Durations::of(&[2, 6]));
        // Integers of either width, as other tools may write them.
        let mut narrow = d.clone();
        narrow.insert("start", 60_000_i32);
        narrow.insert("run_sum_sq_ms", 40_i32);
        assert_eq!(bucket_from_doc(&narrow).unwrap(), b);
        let mut bad = d.clone();
        bad.insert("run_h3", -1_i64);
        assert!(bucket_from_doc(&bad).is_err());
        // A double counter must be integral and not negative.
        for v in [1.5, -1.0] {
            let mut bad = d.clone();
            bad.insert("run_h3", v);
            assert!(bucket_from_doc(&bad).is_err(), "{v}");
        }
        let mut bad = d;
        bad.remove("jobtype");
        assert!(bucket_from_doc(&bad).is_err());
    }

    /// Only statements that all failed with a duplicate key are sent
    /// again; any other error, or a write concern error, is reported.
    #[test]
    fn duplicate_keys_are_told_from_other_failures() {
        assert_eq!(
            duplicate_key_failures(&doc! { "ok": 1, "n": 2 }),
            Some(vec![])
        );
        let dup = |index: i32, code: i32| doc! { "index": index, "code": code, "errmsg": "x" };
        assert_eq!(
            duplicate_key_failures(
                &doc! { "ok": 1, "writeErrors": [dup(0, 11000), dup(3, 11000)] }
            ),
            Some(vec![0, 3])
        );
        assert_eq!(
            duplicate_key_failures(&doc! { "ok": 1, "writeErrors": [dup(0, 11000), dup(1, 2)] }),
            None
        );
        let wide = doc! { "index": 2_i64, "code": 11000_i64, "errmsg": "x" };
        assert_eq!(
            duplicate_key_failures(&doc! { "ok": 1, "writeErrors": [wide] }),
            Some(vec![2])
        );
        assert_eq!(
            duplicate_key_failures(&doc! { "ok": 1, "writeConcernError": { "code": 64 } }),
            None
        );
    }
}
