//! Per-jobtype timing statistics kept in the store
//! ([`JobStore::add_stats`](crate::JobStore::add_stats),
//! [`JobStore::job_stats`](crate::JobStore::job_stats)).
//!
//! Two durations are kept per jobtype: the **wait** time of each claim
//! (from when the job was due, [`Job::claimed_due`](crate::Job::claimed_due),
//! to when it was handed out) and the **run** time of each run that ended
//! with a result (from its claim to its retry or archive). Each is a
//! [`Durations`]: count, sum, sum of squares (so mean and variance) and a
//! histogram over [`HISTOGRAM_BOUNDS_MS`]. They are kept in buckets of one
//! minute for the last [`STATS_MINUTES`] minutes and of one UTC day for the
//! last [`STATS_DAYS`] days. Callers add [`StatsDelta`]s (a daemon sums its
//! own samples per jobtype and minute and sends them every few seconds);
//! the store adds each delta to its minute and to its day, so every daemon
//! sharing a store contributes and a restart loses nothing sent.

use serde::{Deserialize, Serialize};

use crate::manage::JobtypeFilter;
use crate::types::Millis;

/// A minute, in milliseconds.
pub const MINUTE_MS: Millis = 60_000;
/// A UTC day, in milliseconds.
pub const DAY_MS: Millis = 86_400_000;
/// How many minute buckets are kept: the last hour's.
pub const STATS_MINUTES: i64 = 60;
/// How many day buckets are kept: the last 30 days'.
pub const STATS_DAYS: i64 = 30;

/// The histogram's bucket upper bounds, inclusive, in milliseconds: a
/// duration of `d` ms falls in the first bucket whose bound is `>= d`, or
/// in the last bucket (`+inf`) past them all.
pub const HISTOGRAM_BOUNDS_MS: [u64; 16] = [
    5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000, 900_000,
    3_600_000,
];

/// How many histogram buckets a [`Durations`] has: one per bound and one
/// past the last.
pub const HISTOGRAM_BUCKETS: usize = HISTOGRAM_BOUNDS_MS.len() + 1;

/// A set of durations, summed: enough for the count, mean, variance and a
/// histogram. Two sums add up field by field ([`Durations::merge`]), which
/// is how stores keep them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Durations {
    /// How many durations.
    pub count: u64,
    /// Their sum, in milliseconds.
    pub sum_ms: u64,
    /// The sum of their squares, in ms².
    pub sum_sq_ms: f64,
    /// How many fell in each histogram bucket ([`HISTOGRAM_BOUNDS_MS`]);
    /// they add up to `count`.
    pub buckets: [u64; HISTOGRAM_BUCKETS],
}

impl Default for Durations {
    fn default() -> Self {
        Durations {
            count: 0,
            sum_ms: 0,
            sum_sq_ms: 0.0,
            buckets: [0; HISTOGRAM_BUCKETS],
        }
    }
}

impl Durations {
    /// The histogram bucket of a duration of `ms` milliseconds.
    pub fn bucket_of(ms: u64) -> usize {
        HISTOGRAM_BOUNDS_MS.partition_point(|&bound| bound < ms)
    }

    /// Durations holding these, in order.
    pub fn of(durations: &[u64]) -> Self {
        let mut d = Durations::default();
        for &ms in durations {
            d.record(ms);
        }
        d
    }

    /// Adds one duration. Counts and sums stop at `u64::MAX`.
    pub fn record(&mut self, ms: u64) {
        self.count = self.count.saturating_add(1);
        self.sum_ms = self.sum_ms.saturating_add(ms);
        self.sum_sq_ms += (ms as f64) * (ms as f64);
        let b = &mut self.buckets[Self::bucket_of(ms)];
        *b = b.saturating_add(1);
    }

    /// Adds every duration of `other`. Counts and sums stop at `u64::MAX`.
    pub fn merge(&mut self, other: &Durations) {
        self.count = self.count.saturating_add(other.count);
        self.sum_ms = self.sum_ms.saturating_add(other.sum_ms);
        self.sum_sq_ms += other.sum_sq_ms;
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *mine = mine.saturating_add(*theirs);
        }
    }

    /// Whether it holds no duration.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The mean, in milliseconds (`None` when empty).
    pub fn mean_ms(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum_ms as f64 / self.count as f64)
    }

    /// The (population) variance, in ms² (`None` when empty).
    pub fn variance_ms2(&self) -> Option<f64> {
        let mean = self.mean_ms()?;
        Some((self.sum_sq_ms / self.count as f64 - mean * mean).max(0.0))
    }

    /// The upper bound of the bucket holding the `q` quantile (0..=1), in
    /// milliseconds; `None` when empty or when it is the last bucket
    /// (past [`HISTOGRAM_BOUNDS_MS`]).
    pub fn quantile_bound_ms(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return HISTOGRAM_BOUNDS_MS.get(i).copied();
            }
        }
        None
    }
}

/// What a caller adds to one jobtype's stats for one minute.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatsDelta {
    /// The jobtype.
    pub jobtype: String,
    /// The start of the minute (a multiple of [`MINUTE_MS`], not after
    /// `now`).
    pub minute: Millis,
    /// Wait times of the claims in that minute.
    pub wait: Durations,
    /// Run times of the runs that ended in that minute.
    pub run: Durations,
}

impl StatsDelta {
    /// An empty delta for `jobtype` in the minute holding `at`.
    pub fn new(jobtype: impl Into<String>, at: Millis) -> Self {
        StatsDelta {
            jobtype: jobtype.into(),
            minute: StatsResolution::Minute.start_of(at),
            wait: Durations::default(),
            run: Durations::default(),
        }
    }
}

/// The width of a stats bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatsResolution {
    /// One minute; the last [`STATS_MINUTES`] are kept.
    Minute,
    /// One UTC day; the last [`STATS_DAYS`] are kept.
    Day,
}

impl StatsResolution {
    /// The bucket width in milliseconds.
    pub const fn width(self) -> Millis {
        match self {
            StatsResolution::Minute => MINUTE_MS,
            StatsResolution::Day => DAY_MS,
        }
    }

    /// How many buckets are kept.
    pub const fn kept(self) -> i64 {
        match self {
            StatsResolution::Minute => STATS_MINUTES,
            StatsResolution::Day => STATS_DAYS,
        }
    }

    /// The start of the bucket holding `at`.
    pub const fn start_of(self, at: Millis) -> Millis {
        at.div_euclid(self.width()) * self.width()
    }

    /// The start of the oldest bucket kept at `now`: buckets starting
    /// before it are gone (the bucket holding `now` and the `kept() - 1`
    /// before it remain).
    pub const fn oldest_kept(self, now: Millis) -> Millis {
        self.start_of(now) - (self.kept() - 1) * self.width()
    }

    /// The name used in storage and on the wire: `minute` or `day`.
    pub const fn as_str(self) -> &'static str {
        match self {
            StatsResolution::Minute => "minute",
            StatsResolution::Day => "day",
        }
    }
}

/// Which stats [`JobStore::job_stats`](crate::JobStore::job_stats) reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsQuery {
    /// The jobtypes (validated like [`JobQuery::jobtypes`](crate::JobQuery::jobtypes)).
    pub jobtypes: JobtypeFilter,
    /// Minutes or days.
    pub resolution: StatsResolution,
}

impl StatsQuery {
    /// Every jobtype's buckets of this width.
    pub fn new(resolution: StatsResolution) -> Self {
        StatsQuery {
            jobtypes: JobtypeFilter::All,
            resolution,
        }
    }

    /// Only these jobtypes.
    pub fn jobtypes<I, S>(mut self, jobtypes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.jobtypes = JobtypeFilter::exact(jobtypes);
        self
    }

    /// Only jobtypes starting with `prefix`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.jobtypes = JobtypeFilter::Prefix(prefix.into());
        self
    }
}

/// One jobtype's stats over one bucket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatsBucket {
    /// The jobtype.
    pub jobtype: String,
    /// The bucket's start (a multiple of its width).
    pub start: Millis,
    /// Wait times of the claims in it.
    pub wait: Durations,
    /// Run times of the runs that ended in it.
    pub run: Durations,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_follow_the_bounds() {
        assert_eq!(Durations::bucket_of(0), 0);
        assert_eq!(Durations::bucket_of(5), 0);
        assert_eq!(Durations::bucket_of(6), 1);
        assert_eq!(Durations::bucket_of(1_000), 7);
        assert_eq!(Durations::bucket_of(1_001), 8);
        assert_eq!(Durations::bucket_of(3_600_000), 15);
        assert_eq!(Durations::bucket_of(3_600_001), 16);
        assert_eq!(Durations::bucket_of(u64::MAX), HISTOGRAM_BUCKETS - 1);
    }

    #[test]
    fn mean_variance_and_quantiles() {
        let d = Durations::of(&[10, 20, 30, 40]);
        assert_eq!(d.count, 4);
        assert_eq!(d.sum_ms, 100);
        assert_eq!(d.sum_sq_ms, 3_000.0);
        assert_eq!(d.mean_ms(), Some(25.0));
        assert_eq!(d.variance_ms2(), Some(125.0));
        assert_eq!(d.quantile_bound_ms(0.5), Some(25));
        assert_eq!(d.quantile_bound_ms(1.0), Some(50));
        assert_eq!(d.quantile_bound_ms(0.0), Some(10));
        assert_eq!(Durations::of(&[4_000_000]).quantile_bound_ms(0.5), None);
        let empty = Durations::default();
        assert!(empty.is_empty());
        assert_eq!(empty.mean_ms(), None);
        assert_eq!(empty.variance_ms2(), None);
        assert_eq!(empty.quantile_bound_ms(0.5), None);
    }

    #[test]
    fn merge_adds_field_by_field() {
        let mut a = Durations::of(&[1, 2_000]);
        a.merge(&Durations::of(&[7, 4_000_000]));
        assert_eq!(a, Durations::of(&[1, 2_000, 7, 4_000_000]));
    }

    #[test]
    fn sums_stop_at_the_largest_u64() {
        let mut a = Durations::of(&[u64::MAX]);
        a.merge(&a.clone());
        a.record(u64::MAX);
        assert_eq!(a.count, 3);
        assert_eq!(a.sum_ms, u64::MAX);
        let mut buckets = [0; HISTOGRAM_BUCKETS];
        buckets[0] = u64::MAX;
        let mut full = Durations {
            count: u64::MAX,
            buckets,
            ..Durations::default()
        };
        full.merge(&Durations::of(&[1]));
        full.record(2);
        assert_eq!((full.count, full.buckets[0]), (u64::MAX, u64::MAX));
    }

    #[test]
    fn buckets_of_each_width() {
        let t = 1_700_000_123_456;
        assert_eq!(StatsResolution::Minute.start_of(t), 1_700_000_100_000);
        assert_eq!(StatsResolution::Day.start_of(t), 1_699_920_000_000);
        assert_eq!(
            StatsResolution::Minute.oldest_kept(t),
            1_700_000_100_000 - 59 * MINUTE_MS
        );
        assert_eq!(
            StatsResolution::Day.oldest_kept(t),
            1_699_920_000_000 - 29 * DAY_MS
        );
        assert_eq!(StatsDelta::new("a", t).minute, 1_700_000_100_000);
        assert_eq!(StatsResolution::Minute.start_of(-1), -MINUTE_MS);
    }

    #[test]
    fn resolutions_are_named_alike_in_storage_and_on_the_wire() {
        for (res, name) in [
            (StatsResolution::Minute, "minute"),
            (StatsResolution::Day, "day"),
        ] {
            assert_eq!(res.as_str(), name);
            assert_eq!(serde_json::to_value(res).unwrap(), name);
        }
    }
}
