//! Behaviours of per-jobtype timing stats (`add_stats`, `job_stats`) and of
//! the due time a claim reports (`Job::claimed_due`). A store that does not
//! declare [`Capabilities::stats`] must answer both stats operations with
//! `Unsupported`; each behaviour checks that instead of their effects.

use jobstore_api::stats::{DAY_MS, MINUTE_MS};

use super::*;

/// The start of the minute holding [`T0`].
const M0: Millis = T0 - T0 % MINUTE_MS;

fn delta(jobtype: &str, minute: Millis, wait: &[u64], run: &[u64]) -> StatsDelta {
    StatsDelta {
        jobtype: jobtype.to_owned(),
        minute,
        wait: Durations::of(wait),
        run: Durations::of(run),
    }
}

fn bucket(jobtype: &str, start: Millis, wait: &[u64], run: &[u64]) -> StatsBucket {
    StatsBucket {
        jobtype: jobtype.to_owned(),
        start,
        wait: Durations::of(wait),
        run: Durations::of(run),
    }
}

async fn stats(s: &dyn JobStore, query: StatsQuery, now: Millis) -> Vec<StatsBucket> {
    s.job_stats(&query, now).await.expect("job_stats")
}

fn minutes() -> StatsQuery {
    StatsQuery::new(StatsResolution::Minute)
}

fn days() -> StatsQuery {
    StatsQuery::new(StatsResolution::Day)
}

/// Checks the `Unsupported` answers of a store without stats; returns
/// whether the store offers them (the behaviour goes on).
async fn offers_stats(s: &dyn JobStore) -> bool {
    if s.capabilities().stats {
        return true;
    }
    assert_kind(
        s.add_stats(&[delta("st", M0, &[1], &[])], T0).await,
        ErrorKind::Unsupported,
        "add_stats",
    );
    assert_kind(
        s.job_stats(&minutes(), T0).await,
        ErrorKind::Unsupported,
        "job_stats",
    );
    false
}

/// Deltas add up per jobtype and minute, and per jobtype and UTC day;
/// reads come sorted by jobtype, then start, with every field (count, sum,
/// sum of squares, histogram) summed; a jobtype with nothing added has no
/// bucket.
pub async fn stats_add_and_read(c: Ctx) {
    let s = &*c.store;
    if !offers_stats(s).await {
        return;
    }
    let now = M0 + 10 * MINUTE_MS;
    assert!(stats(s, minutes(), now).await.is_empty());
    s.add_stats(
        &[
            delta("st-b", M0, &[], &[7]),
            delta("st-a", M0, &[10, 2_000], &[50]),
        ],
        now,
    )
    .await
    .unwrap();
    s.add_stats(
        &[
            delta("st-a", M0, &[30], &[]),
            delta("st-a", M0 + MINUTE_MS, &[], &[4_000_000]),
        ],
        now,
    )
    .await
    .unwrap();
    assert_eq!(
        stats(s, minutes(), now).await,
        vec![
            bucket("st-a", M0, &[10, 2_000, 30], &[50]),
            bucket("st-a", M0 + MINUTE_MS, &[], &[4_000_000]),
            bucket("st-b", M0, &[], &[7]),
        ]
    );
    let day = M0 - M0 % DAY_MS;
    assert_eq!(
        stats(s, days(), now).await,
        vec![
            bucket("st-a", day, &[10, 2_000, 30], &[50, 4_000_000]),
            bucket("st-b", day, &[], &[7]),
        ]
    );
    let read = &stats(s, days(), now).await[0];
    assert_eq!(read.wait.mean_ms(), Some(680.0));
    assert_eq!(read.run.sum_sq_ms, 16_000_000_002_500.0);
    let only = minutes().jobtypes(["st-none"]);
    assert!(stats(s, only, now).await.is_empty());
}

/// Minute buckets are read for the last hour and day buckets for the last
/// 30 days, counted from the bucket holding `now`; a delta older than the
/// minutes kept adds to its day only, and one older than the days kept
/// adds nothing.
pub async fn stats_keep_the_last_hour_and_30_days(c: Ctx) {
    let s = &*c.store;
    if !offers_stats(s).await {
        return;
    }
    let now = M0 + 30 * SEC;
    let day = M0 - M0 % DAY_MS;
    s.add_stats(
        &[
            delta("sw", M0 - 59 * MINUTE_MS, &[1], &[]),
            delta("sw", M0 - 60 * MINUTE_MS, &[2], &[]),
            delta("sw", day - 29 * DAY_MS, &[3], &[]),
            delta("sw", day - 30 * DAY_MS, &[4], &[]),
            delta("sw", M0, &[], &[5]),
        ],
        now,
    )
    .await
    .unwrap();
    assert_eq!(
        stats(s, minutes(), now).await,
        vec![
            bucket("sw", M0 - 59 * MINUTE_MS, &[1], &[]),
            bucket("sw", M0, &[], &[5]),
        ],
        "the minute an hour back is gone"
    );
    assert_eq!(
        stats(s, days(), now).await,
        vec![
            bucket("sw", day - 29 * DAY_MS, &[3], &[]),
            bucket("sw", day, &[1, 2], &[5]),
        ],
        "the day 30 days back is gone"
    );
    // A minute later, the oldest minute has left the window; the next day,
    // the oldest day has.
    assert_eq!(
        stats(s, minutes(), now + MINUTE_MS).await,
        vec![bucket("sw", M0, &[], &[5])]
    );
    assert_eq!(
        stats(s, days(), day + DAY_MS).await,
        vec![bucket("sw", day, &[1, 2], &[5])]
    );
    // Adding later still counts into a bucket kept.
    s.add_stats(&[delta("sw", M0, &[6], &[])], now + MINUTE_MS)
        .await
        .unwrap();
    assert_eq!(
        stats(s, minutes(), now + MINUTE_MS).await,
        vec![bucket("sw", M0, &[6], &[5])]
    );
}

/// Stats are read for every jobtype, a list of them, or a prefix.
pub async fn stats_filter_by_jobtype(c: Ctx) {
    let s = &*c.store;
    if !offers_stats(s).await {
        return;
    }
    let now = M0 + 5 * SEC;
    s.add_stats(
        &[
            delta("acme:mail", M0, &[1], &[]),
            delta("acme:sms", M0, &[2], &[]),
            delta("acme", M0, &[3], &[]),
            delta("other", M0, &[4], &[]),
        ],
        now,
    )
    .await
    .unwrap();
    let names = |b: Vec<StatsBucket>| b.into_iter().map(|b| b.jobtype).collect::<Vec<_>>();
    assert_eq!(
        names(stats(s, minutes(), now).await),
        ids(&["acme", "acme:mail", "acme:sms", "other"])
    );
    let prefix = minutes().prefix("acme:");
    assert_eq!(
        names(stats(s, prefix, now).await),
        ids(&["acme:mail", "acme:sms"])
    );
    let exact = days().jobtypes(["other", "acme", "nope"]);
    assert_eq!(names(stats(s, exact, now).await), ids(&["acme", "other"]));
}

/// Bad deltas and queries are refused with the error naming the field, and
/// a refused batch adds nothing, not even its valid deltas.
pub async fn stats_bad_input_rejected(c: Ctx) {
    let s = &*c.store;
    if !offers_stats(s).await {
        return;
    }
    let now = M0 + 5 * SEC;
    // Each bad delta is alone in its (jobtype, minute) beside `good`, so
    // that it is refused for its own fault.
    let good = delta("sb-good", M0, &[1], &[2]);
    let bad = delta("sb", M0, &[1], &[2]);
    let mut uneven = bad.clone();
    uneven.wait.buckets[3] += 1;
    let mut negative = bad.clone();
    negative.run.sum_sq_ms = -1.0;
    let mut nan = bad.clone();
    nan.run.sum_sq_ms = f64::NAN;
    let mut sums_without_count = delta("sb", M0, &[], &[2]);
    sums_without_count.wait.sum_ms = 3;
    let cases: Vec<(&str, StatsDelta)> = vec![
        ("unaligned minute", delta("sb", M0 + 1, &[1], &[])),
        ("minute after now", delta("sb", M0 + MINUTE_MS, &[1], &[])),
        ("empty", delta("sb", M0, &[], &[])),
        ("buckets not adding up", uneven),
        ("negative sum of squares", negative),
        ("NaN sum of squares", nan),
        ("sums without durations", sums_without_count),
        ("bad jobtype", delta("s b", M0, &[1], &[])),
        ("negative minute", delta("sb", -MINUTE_MS * 10, &[1], &[])),
    ];
    for (what, bad) in cases {
        assert_kind(
            s.add_stats(&[good.clone(), bad], now).await,
            ErrorKind::InvalidInput,
            what,
        );
    }
    assert_kind(
        s.add_stats(&[good.clone(), good.clone()], now).await,
        ErrorKind::InvalidInput,
        "the same jobtype and minute twice",
    );
    let many: Vec<StatsDelta> = (0..=MAX_BATCH)
        .map(|i| delta(&format!("sb-{i}"), M0, &[1], &[]))
        .collect();
    assert_kind(
        s.add_stats(&many, now).await,
        ErrorKind::TooLarge,
        "more than MAX_BATCH deltas",
    );
    assert_kind(
        s.add_stats(std::slice::from_ref(&good), -1).await,
        ErrorKind::InvalidInput,
        "now",
    );
    assert!(stats(s, minutes(), now).await.is_empty(), "nothing added");
    s.add_stats(&[], now).await.unwrap();
    for (what, q) in [
        (
            "empty jobtype list",
            minutes().jobtypes(Vec::<String>::new()),
        ),
        ("bad jobtype", minutes().jobtypes(["a b"])),
        ("empty prefix", minutes().prefix("")),
    ] {
        assert_kind(s.job_stats(&q, now).await, ErrorKind::InvalidInput, what);
    }
    assert_kind(
        s.job_stats(&minutes(), -1).await,
        ErrorKind::InvalidInput,
        "now",
    );
}

/// Concurrent adds to the same buckets, through two handles, sum exactly.
pub async fn stats_concurrent_adds_sum_exactly(c: Ctx) {
    let s = &*c.store;
    if !offers_stats(s).await {
        return;
    }
    let now = M0 + 5 * SEC;
    let mut tasks = Vec::new();
    for k in 0..8u64 {
        let store = if k % 2 == 0 {
            c.store.clone()
        } else {
            c.peer.clone()
        };
        tasks.push(tokio::spawn(async move {
            for j in 0..15u64 {
                let ms = k * 1_000 + j * 7;
                store
                    .add_stats(
                        &[
                            delta("sc", M0, &[ms], &[ms + 1]),
                            delta("sc-other", M0 - MINUTE_MS, &[], &[ms]),
                        ],
                        now,
                    )
                    .await
                    .expect("add_stats");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let all: Vec<u64> = (0..8u64)
        .flat_map(|k| (0..15u64).map(move |j| k * 1_000 + j * 7))
        .collect();
    let plus_one: Vec<u64> = all.iter().map(|ms| ms + 1).collect();
    assert_eq!(
        stats(s, minutes(), now).await,
        vec![
            bucket("sc", M0, &all, &plus_one),
            bucket("sc-other", M0 - MINUTE_MS, &[], &all),
        ]
    );
    let day = M0 - M0 % DAY_MS;
    assert_eq!(
        stats(s, days(), now).await,
        vec![
            bucket("sc", day, &all, &plus_one),
            bucket("sc-other", day, &[], &all),
        ]
    );
}

/// Each job a claim hands out carries the `dt` it had before the claim
/// (when it was due; for an expired job, when its lease expired); reads
/// of the job afterwards carry none.
pub async fn claim_reports_when_each_job_was_due(c: Ctx) {
    let s = &*c.store;
    add(
        s,
        vec![
            NewJob::new("cd-1", "cd", "x").run_at(T0 - 5 * SEC),
            NewJob::new("cd-2", "cd", "x"),
            NewJob::new("cd-3", "cd", "x").run_at(T0 + 2 * SEC),
        ],
        T0,
    )
    .await;
    let first = claim(s, "cd", 10, OWNER, T0 + 3 * SEC).await;
    let due: Vec<(String, Option<Millis>)> = first
        .iter()
        .map(|j| (j.id.clone(), j.claimed_due))
        .collect();
    assert_eq!(
        due,
        vec![
            ("cd-1".to_owned(), Some(T0 - 5 * SEC)),
            ("cd-2".to_owned(), Some(T0)),
            ("cd-3".to_owned(), Some(T0 + 2 * SEC)),
        ]
    );
    let stored = get(s, "cd-1").await;
    assert_eq!(stored.claimed_due, None, "a read carries no due time");
    assert_eq!(
        Job {
            claimed_due: None,
            ..first[0].clone()
        },
        stored,
        "the rest of a claimed job is as stored"
    );
    // Expired: due when its lease ran out.
    let lease_end = T0 + 3 * SEC + 60 * SEC;
    let again = claim(s, "cd", 1, OTHER, lease_end + 10 * SEC).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].claimed_due, Some(lease_end));
    let page = s
        .list_jobs(
            &JobQuery::new(JobState::Running).jobtypes(ids(&["cd"])),
            lease_end + 11 * SEC,
        )
        .await;
    if let Ok(page) = page {
        assert!(page.jobs.iter().all(|j| j.claimed_due.is_none()));
    }
}
