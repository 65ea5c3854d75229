//! Per-jobtype timing stats: one hash per jobtype, resolution and bucket
//! start (`{P:T}:stats:<resolution>:<start>`), added to by `stats_add.lua`
//! and read by `stats_read.lua`, one call per jobtype; old buckets expire
//! by themselves (see the crate docs, "Stats").

use std::collections::BTreeMap;

use futures::future::{try_join, try_join_all};
use jobstore_api::stats::HISTOGRAM_BUCKETS;
use jobstore_api::{
    Durations, Millis, Result, StatsBucket, StatsDelta, StatsQuery, StatsResolution,
};
use redis::Value;

use crate::decode::{bytes, int};
use crate::error::{malformed, map};
use crate::scripts::SCRIPTS;
use crate::store::RedisStore;

/// Both resolutions, each delta is added to.
const RESOLUTIONS: [StatsResolution; 2] = [StatsResolution::Minute, StatsResolution::Day];

/// The field letter of each kind of duration in a bucket hash: wait, run.
const WAIT: u8 = b'w';
const RUN: u8 = b'r';

/// A batch's sums per jobtype, then per bucket (resolution, start): wait
/// and run.
type Sums<'a> = BTreeMap<&'a str, BTreeMap<(StatsResolution, Millis), (Durations, Durations)>>;

/// The deltas summed per jobtype and bucket: each into its minute and
/// into the UTC day holding it, leaving out buckets that start before the
/// oldest kept at `now`.
fn sum_batch(deltas: &[StatsDelta], now: Millis) -> Sums<'_> {
    let mut sums = Sums::new();
    for d in deltas {
        for res in RESOLUTIONS {
            let start = res.start_of(d.minute);
            if start < res.oldest_kept(now) {
                continue;
            }
            let (wait, run) = sums
                .entry(d.jobtype.as_str())
                .or_default()
                .entry((res, start))
                .or_default();
            wait.merge(&d.wait);
            run.merge(&d.run);
        }
    }
    sums
}

/// How long the hash of the bucket starting at `start` is kept, counted
/// from `now`: until one bucket width after the bucket leaves the window
/// (`start + kept × width`). Positive for every bucket the window holds.
fn ttl_ms(res: StatsResolution, start: Millis, now: Millis) -> Millis {
    start + (res.kept() + 1) * res.width() - now
}

/// A Redis integer (signed 64-bit): sums past it are capped there, as the
/// contract's sums saturate.
fn redis_int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The integer and float increments of one kind of duration, fields that
/// would add 0 left out.
fn increments(
    kind: u8,
    d: &Durations,
    ints: &mut Vec<(String, i64)>,
    floats: &mut Vec<(String, f64)>,
) {
    let kind = char::from(kind);
    let mut int_field = |name: String, n: u64| {
        if n > 0 {
            ints.push((name, redis_int(n)));
        }
    };
    int_field(format!("{kind}c"), d.count);
    int_field(format!("{kind}s"), d.sum_ms);
    for (i, n) in d.buckets.iter().enumerate() {
        int_field(format!("{kind}{i}"), *n);
    }
    if d.sum_sq_ms != 0.0 {
        floats.push((format!("{kind}q"), d.sum_sq_ms));
    }
}

/// Fills `wait` and `run` from a bucket hash's fields (`HGETALL`); fields
/// it does not know are passed over.
fn decode_bucket(fields: Vec<Value>, wait: &mut Durations, run: &mut Durations) -> Result<()> {
    if !fields.len().is_multiple_of(2) {
        return Err(malformed("stats bucket fields"));
    }
    let mut it = fields.into_iter();
    while let (Some(name), Some(value)) = (it.next(), it.next()) {
        let name = bytes(name, "stats field")?;
        let value = bytes(value, "stats value")?;
        let (d, rest) = match name.split_first() {
            Some((&WAIT, rest)) => (&mut *wait, rest),
            Some((&RUN, rest)) => (&mut *run, rest),
            _ => continue,
        };
        let text = std::str::from_utf8(&value).map_err(|_| malformed("stats value"))?;
        let count = || {
            text.parse::<u64>()
                .map_err(|_| malformed("stats count or sum"))
        };
        match rest {
            b"c" => d.count = count()?,
            b"s" => d.sum_ms = count()?,
            b"q" => {
                d.sum_sq_ms = text
                    .parse::<f64>()
                    .map_err(|_| malformed("stats sum of squares"))?;
            }
            digits => {
                let i = std::str::from_utf8(digits)
                    .ok()
                    .and_then(|s| s.parse::<usize>().ok())
                    .filter(|i| *i < HISTOGRAM_BUCKETS);
                if let Some(i) = i {
                    d.buckets[i] = count()?;
                }
            }
        }
    }
    Ok(())
}

impl RedisStore {
    /// `add_stats` after validation: the batch summed per jobtype and
    /// bucket, then `SADD {P}:jobtypes` and one `stats_add.lua` per
    /// jobtype, concurrently.
    pub(crate) async fn add_stats_batch(&self, deltas: &[StatsDelta], now: Millis) -> Result<()> {
        let sums = sum_batch(deltas, now);
        if sums.is_empty() {
            return Ok(());
        }
        let mut register = redis::cmd("SADD");
        register.arg(self.keys.jobtypes());
        for jobtype in sums.keys() {
            register.arg(*jobtype);
        }
        let mut c = self.conn();
        let register = async move {
            register
                .query_async::<i64>(&mut c)
                .await
                .map_err(|e| map(e, "SADD jobtypes"))
        };
        let calls = sums.iter().map(|(jobtype, buckets)| {
            let k = self.keys.jobtype(jobtype);
            let mut inv = SCRIPTS.stats_add.prepare_invoke();
            for (&(res, start), (wait, run)) in buckets {
                let (mut ints, mut floats) = (Vec::new(), Vec::new());
                increments(WAIT, wait, &mut ints, &mut floats);
                increments(RUN, run, &mut ints, &mut floats);
                inv.key(k.stats_bucket(res, start))
                    .arg(ttl_ms(res, start, now))
                    .arg(ints.len())
                    .arg(floats.len());
                for (field, n) in ints {
                    inv.arg(field).arg(n);
                }
                for (field, x) in floats {
                    // Rust prints the shortest text that reads back as
                    // the same f64, never in exponent form.
                    inv.arg(field).arg(x.to_string());
                }
            }
            let mut c = self.conn();
            async move {
                inv.invoke_async::<i64>(&mut c)
                    .await
                    .map_err(|e| map(e, "add stats"))
            }
        });
        // The SADD is written first: on one server it runs before the
        // scripts.
        try_join(register, try_join_all(calls)).await?;
        Ok(())
    }

    /// `job_stats` after validation: the jobtypes of the query, sorted,
    /// then one `stats_read.lua` per jobtype with the keys of every bucket
    /// the window at `now` holds, concurrently.
    pub(crate) async fn read_stats(
        &self,
        query: &StatsQuery,
        now: Millis,
    ) -> Result<Vec<StatsBucket>> {
        let mut types = self.query_jobtypes(&query.jobtypes).await?;
        types.sort();
        types.dedup();
        let res = query.resolution;
        let oldest = res.oldest_kept(now);
        let starts: Vec<Millis> = (0..res.kept()).map(|i| oldest + i * res.width()).collect();
        let starts = &starts;
        let calls = types.into_iter().map(|jobtype| {
            let k = self.keys.jobtype(&jobtype);
            let mut inv = SCRIPTS.stats_read.prepare_invoke();
            for &start in starts {
                inv.key(k.stats_bucket(res, start));
            }
            let mut c = self.conn();
            async move {
                let reply: Vec<Value> = inv
                    .invoke_async(&mut c)
                    .await
                    .map_err(|e| map(e, "read stats"))?;
                if !reply.len().is_multiple_of(2) {
                    return Err(malformed("stats reply length"));
                }
                let mut out = Vec::with_capacity(reply.len() / 2);
                let mut it = reply.into_iter();
                while let (Some(pos), Some(fields)) = (it.next(), it.next()) {
                    let start = usize::try_from(int(&pos, "stats bucket position")?)
                        .ok()
                        .and_then(|p| p.checked_sub(1))
                        .and_then(|i| starts.get(i))
                        .ok_or_else(|| malformed("stats bucket position"))?;
                    let Value::Array(fields) = fields else {
                        return Err(malformed("stats bucket fields"));
                    };
                    let mut bucket = StatsBucket {
                        jobtype: jobtype.clone(),
                        start: *start,
                        wait: Durations::default(),
                        run: Durations::default(),
                    };
                    decode_bucket(fields, &mut bucket.wait, &mut bucket.run)?;
                    out.push(bucket);
                }
                Ok(out)
            }
        });
        Ok(try_join_all(calls).await?.into_iter().flatten().collect())
    }
}

#[cfg(test)]
mod tests {
    use jobstore_api::stats::{DAY_MS, MINUTE_MS};

    use super::*;

    const T: Millis = 1_700_000_123_456;

    fn delta(jobtype: &str, minute: Millis, wait: &[u64], run: &[u64]) -> StatsDelta {
        StatsDelta {
            jobtype: jobtype.to_owned(),
            minute,
            wait: Durations::of(wait),
            run: Durations::of(run),
        }
    }

    /// A batch is summed per jobtype and bucket: minutes apart, days
    /// together, buckets the window no longer holds left out.
    #[test]
    fn a_batch_is_summed_per_jobtype_and_bucket() {
        let m = StatsResolution::Minute.start_of(T);
        let day = StatsResolution::Day.start_of(T);
        let deltas = [
            delta("a", m, &[1], &[]),
            delta("a", m - MINUTE_MS, &[2], &[3]),
            delta("a", m - 60 * MINUTE_MS, &[4], &[]),
            delta("b", day - 30 * DAY_MS, &[5], &[]),
        ];
        let sums = sum_batch(&deltas, T);
        assert_eq!(sums.keys().copied().collect::<Vec<_>>(), ["a"]);
        let a = &sums["a"];
        assert_eq!(a.len(), 3, "{a:?}");
        assert_eq!(a[&(StatsResolution::Minute, m)].0, Durations::of(&[1]));
        assert_eq!(
            a[&(StatsResolution::Minute, m - MINUTE_MS)],
            (Durations::of(&[2]), Durations::of(&[3]))
        );
        assert_eq!(
            a[&(StatsResolution::Day, day)],
            (Durations::of(&[1, 2, 4]), Durations::of(&[3]))
        );
    }

    /// A bucket is kept one width past the window that holds it.
    #[test]
    fn buckets_expire_one_width_after_the_window() {
        for res in RESOLUTIONS {
            let oldest = res.oldest_kept(T);
            let ttl = ttl_ms(res, oldest, T);
            assert!(ttl > res.width() && ttl <= 2 * res.width(), "{res:?} {ttl}");
            let newest = res.start_of(T);
            assert!(ttl_ms(res, newest, T) <= (res.kept() + 1) * res.width());
        }
    }

    /// What is sent is what is read back; zero fields are not sent.
    #[test]
    fn fields_round_trip() {
        let wait = Durations::of(&[0, 7, 4_000_000]);
        let run = Durations::of(&[12]);
        let (mut ints, mut floats) = (Vec::new(), Vec::new());
        increments(WAIT, &wait, &mut ints, &mut floats);
        increments(RUN, &run, &mut ints, &mut floats);
        assert!(ints.iter().all(|(_, n)| *n > 0));
        assert!(ints.iter().any(|(f, _)| f == "w16"));
        let mut fields: Vec<Value> = Vec::new();
        for (f, n) in ints {
            fields.push(Value::BulkString(f.into_bytes()));
            fields.push(Value::BulkString(n.to_string().into_bytes()));
        }
        for (f, x) in floats {
            fields.push(Value::BulkString(f.into_bytes()));
            fields.push(Value::BulkString(x.to_string().into_bytes()));
        }
        // Fields it does not know, a histogram bucket past the last among
        // them, are passed over.
        for unknown in ["zz", "w17", "rx"] {
            fields.push(Value::BulkString(unknown.as_bytes().to_vec()));
            fields.push(Value::BulkString(b"1".to_vec()));
        }
        let (mut w, mut r) = (Durations::default(), Durations::default());
        decode_bucket(fields, &mut w, &mut r).unwrap();
        assert_eq!((w, r), (wait, run));
        assert_eq!(redis_int(u64::MAX), i64::MAX);
    }
}
