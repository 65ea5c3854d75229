//! Behaviours of stored schedules (`set_schedule`, `get_schedule`,
//! `list_schedules`, `delete_schedule`, `pause_schedule`, `due_schedules`,
//! `advance_schedule`). A store that does not declare
//! [`Capabilities::schedules`] must answer every one of them with
//! `Unsupported`; each behaviour checks that instead of their effects.

use jobstore_api::limits::{MAX_RULE_LEN, MAX_TIME_ZONE_LEN};

use super::*;

/// A schedule with every field away from its default, so a store that
/// drops or mixes up one fails the round trip.
fn full(name: &str) -> Schedule {
    Schedule {
        name: name.to_owned(),
        rule: "FINISHED, +1 DAY, WEEKDAY 1, START OF DAY, +6 HOURS".to_owned(),
        time_zone: "America/New_York".to_owned(),
        jobtype: "sc-report".to_owned(),
        data: b"\0\x01\xff{\"x\":1}\n".to_vec(),
        priority: -7,
        tags: vec!["nightly".to_owned(), "team:ops".to_owned()],
        catch_up: CatchUp::All,
        catch_up_window: Duration::from_millis(3_600_123),
        overlap: Overlap::Skip,
        start_at: Some(T0 - 5 * SEC),
        end_at: Some(T0 + 86_400 * SEC),
    }
}

fn plain(name: &str) -> Schedule {
    Schedule::new(name, "*/5 * * * *", "sc-job")
}

fn advance(fired_through: Millis, next_due: Option<Millis>) -> ScheduleAdvance {
    ScheduleAdvance {
        fired_through,
        last_job: Some(format!("job@{fired_through}")),
        next_due,
        fired: 1,
        skipped: 0,
    }
}

async fn read(s: &dyn JobStore, name: &str) -> ScheduleRecord {
    s.get_schedule(name)
        .await
        .expect("get_schedule")
        .unwrap_or_else(|| panic!("schedule {name} not found"))
}

fn names(recs: &[ScheduleRecord]) -> Vec<&str> {
    recs.iter().map(|r| r.schedule.name.as_str()).collect()
}

/// Checks the `Unsupported` answers of a store without schedules; returns
/// whether the store offers them (the behaviour goes on).
async fn offers_schedules(s: &dyn JobStore) -> bool {
    if s.capabilities().schedules {
        return true;
    }
    let what = "a store without schedules";
    assert_kind(
        s.set_schedule(&plain("sc"), Some(T0), T0).await,
        ErrorKind::Unsupported,
        what,
    );
    assert_kind(s.get_schedule("sc").await, ErrorKind::Unsupported, what);
    assert_kind(s.list_schedules("").await, ErrorKind::Unsupported, what);
    assert_kind(s.delete_schedule("sc").await, ErrorKind::Unsupported, what);
    assert_kind(
        s.pause_schedule("sc", true, None, T0).await,
        ErrorKind::Unsupported,
        what,
    );
    assert_kind(s.due_schedules(T0, 10).await, ErrorKind::Unsupported, what);
    assert_kind(
        s.advance_schedule("sc", 1, &advance(T0, None), T0).await,
        ErrorKind::Unsupported,
        what,
    );
    false
}

/// A schedule reads back exactly as set, every field of its definition
/// (binary payload, tags, policies, window to the millisecond, start and
/// end) and a fresh firing state: version 1, not paused, created and
/// updated at `now`, nothing fired, `next_due` as given; from a second
/// handle too. An unknown name reads `None`.
pub async fn schedule_round_trip(c: Ctx) {
    let s = &*c.store;
    if !offers_schedules(s).await {
        return;
    }
    assert_eq!(s.get_schedule("sc-none").await.unwrap(), None);
    let want = ScheduleRecord {
        schedule: full("sc-full"),
        version: 1,
        paused: false,
        created_dt: T0,
        updated_dt: T0,
        fired_through: None,
        last_job: None,
        next_due: Some(T0 + 60 * SEC),
        fired: 0,
        skipped: 0,
    };
    let set = s
        .set_schedule(&full("sc-full"), Some(T0 + 60 * SEC), T0)
        .await
        .unwrap();
    assert_eq!(set, want, "as returned");
    assert_eq!(read(s, "sc-full").await, want, "as read");
    assert_eq!(read(&*c.peer, "sc-full").await, want, "from the peer");
    // The defaults round-trip too, and no next_due is kept as none.
    let set = s.set_schedule(&plain("sc-plain"), None, T0).await.unwrap();
    assert_eq!(set.schedule, plain("sc-plain"));
    assert_eq!(set.next_due, None);
    assert_eq!(read(s, "sc-plain").await, set);
}

/// Setting a schedule again replaces its definition and `next_due`, adds
/// one to its version and sets `updated_dt`; its firing state (watermark,
/// last job, counters), its pause and `created_dt` stay.
pub async fn schedule_set_again_keeps_firing_state(c: Ctx) {
    let s = &*c.store;
    if !offers_schedules(s).await {
        return;
    }
    s.set_schedule(&plain("sc-a"), Some(T0), T0).await.unwrap();
    let adv = ScheduleAdvance {
        fired_through: T0,
        last_job: Some("sc-a@1".to_owned()),
        next_due: Some(T0 + 300 * SEC),
        fired: 2,
        skipped: 3,
    };
    assert!(s.advance_schedule("sc-a", 1, &adv, T0).await.unwrap());
    assert!(
        s.pause_schedule("sc-a", true, None, T0 + SEC)
            .await
            .unwrap()
    );
    let mut changed = full("sc-a");
    changed.rule = "0 6 * * 1".to_owned();
    let got = s
        .set_schedule(&changed, Some(T0 + 900 * SEC), T0 + 2 * SEC)
        .await
        .unwrap();
    let want = ScheduleRecord {
        schedule: changed.clone(),
        version: 2,
        paused: true,
        created_dt: T0,
        updated_dt: T0 + 2 * SEC,
        fired_through: Some(T0),
        last_job: Some("sc-a@1".to_owned()),
        next_due: Some(T0 + 900 * SEC),
        fired: 2,
        skipped: 3,
    };
    assert_eq!(got, want);
    assert_eq!(read(s, "sc-a").await, want);
    let again = s.set_schedule(&changed, None, T0 + 3 * SEC).await.unwrap();
    assert_eq!(again.version, 3);
    assert_eq!(again.next_due, None);
}

/// Lists hold the schedules whose name starts with the prefix (all for an
/// empty one), sorted by name bytewise; a delete removes one schedule,
/// says whether it existed, and a deleted name can be set again as new.
pub async fn schedule_list_and_delete(c: Ctx) {
    let s = &*c.store;
    if !offers_schedules(s).await {
        return;
    }
    assert!(s.list_schedules("").await.unwrap().is_empty());
    for name in ["acme-b", "acme-a", "acme2-a", "acm", "zeta-Z", "zeta-a"] {
        s.set_schedule(&plain(name), Some(T0), T0).await.unwrap();
    }
    assert_eq!(
        names(&s.list_schedules("").await.unwrap()),
        ["acm", "acme-a", "acme-b", "acme2-a", "zeta-Z", "zeta-a"]
    );
    assert_eq!(
        names(&s.list_schedules("acme-").await.unwrap()),
        ["acme-a", "acme-b"]
    );
    assert_eq!(
        names(&s.list_schedules("acme").await.unwrap()),
        ["acme-a", "acme-b", "acme2-a"]
    );
    assert!(s.list_schedules("nobody-").await.unwrap().is_empty());
    assert!(s.delete_schedule("acme-a").await.unwrap());
    assert!(!s.delete_schedule("acme-a").await.unwrap());
    assert!(!s.delete_schedule("never").await.unwrap());
    assert_eq!(s.get_schedule("acme-a").await.unwrap(), None);
    assert_eq!(names(&s.list_schedules("acme-").await.unwrap()), ["acme-b"]);
    let back = s
        .set_schedule(&plain("acme-a"), None, T0 + SEC)
        .await
        .unwrap();
    assert_eq!((back.version, back.created_dt), (1, T0 + SEC));
}

/// Due schedules are those not paused whose `next_due` is at or before
/// `now`, by `next_due` then name, at most `limit`; one without `next_due`
/// is never due. A pause takes a schedule out (`next_due` kept), a resume
/// puts it back with the `next_due` given; pausing a paused schedule, or
/// resuming a running one or an unknown one, changes nothing and says so.
pub async fn schedule_due_pause_and_resume(c: Ctx) {
    let s = &*c.store;
    if !offers_schedules(s).await {
        return;
    }
    let due = |now: Millis, limit: usize| async move {
        names(&s.due_schedules(now, limit).await.unwrap())
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    for (name, next) in [
        ("d-late", Some(T0 + 3 * SEC)),
        ("d-b", Some(T0 + SEC)),
        ("d-a", Some(T0 + SEC)),
        ("d-first", Some(T0)),
        ("d-never", None),
    ] {
        s.set_schedule(&plain(name), next, T0).await.unwrap();
    }
    assert!(due(T0 - 1, 10).await.is_empty());
    assert_eq!(due(T0 + SEC, 10).await, ["d-first", "d-a", "d-b"]);
    assert_eq!(due(T0 + SEC, 2).await, ["d-first", "d-a"]);
    assert_eq!(
        due(MAX_TIME, 1_000).await,
        ["d-first", "d-a", "d-b", "d-late"]
    );

    assert!(s.pause_schedule("d-a", true, None, T0 + SEC).await.unwrap());
    assert!(!s.pause_schedule("d-a", true, None, T0 + SEC).await.unwrap());
    let paused = read(s, "d-a").await;
    assert!(paused.paused);
    assert_eq!(paused.next_due, Some(T0 + SEC), "a pause keeps next_due");
    assert_eq!(paused.updated_dt, T0 + SEC);
    assert_eq!(due(T0 + 5 * SEC, 10).await, ["d-first", "d-b", "d-late"]);

    assert!(!s.pause_schedule("d-b", false, Some(T0), T0).await.unwrap());
    assert!(
        !s.pause_schedule("d-none", false, Some(T0), T0)
            .await
            .unwrap()
    );
    assert!(!s.pause_schedule("d-none", true, None, T0).await.unwrap());
    assert_eq!(read(s, "d-b").await.next_due, Some(T0 + SEC), "unchanged");

    assert!(
        s.pause_schedule("d-a", false, Some(T0 + 4 * SEC), T0 + 2 * SEC)
            .await
            .unwrap()
    );
    let resumed = read(s, "d-a").await;
    assert!(!resumed.paused);
    assert_eq!(resumed.next_due, Some(T0 + 4 * SEC));
    assert_eq!(resumed.updated_dt, T0 + 2 * SEC);
    assert_eq!(
        due(T0 + 5 * SEC, 10).await,
        ["d-first", "d-b", "d-late", "d-a"]
    );
    // A resume to no next_due: never due.
    assert!(s.pause_schedule("d-a", true, None, T0).await.unwrap());
    assert!(s.pause_schedule("d-a", false, None, T0).await.unwrap());
    assert_eq!(due(MAX_TIME, 10).await, ["d-first", "d-b", "d-late"]);
}

/// An advance applies only to the version it names and only past the
/// stored watermark: an equal watermark is refused when it fires or skips
/// anything and taken when it only moves `next_due`; an earlier one is
/// refused; the first advance of a schedule applies whatever its
/// watermark. Counters add up; no `last_job` keeps the stored one. An
/// unknown schedule is `false`.
pub async fn schedule_advance_compare_and_set(c: Ctx) {
    let s = &*c.store;
    if !offers_schedules(s).await {
        return;
    }
    s.set_schedule(&plain("adv"), Some(T0), T0).await.unwrap();
    assert!(
        !s.advance_schedule("adv-none", 1, &advance(T0, None), T0)
            .await
            .unwrap()
    );
    assert!(
        !s.advance_schedule("adv", 2, &advance(T0, None), T0)
            .await
            .unwrap(),
        "version 2"
    );
    assert_eq!(read(s, "adv").await.fired_through, None, "nothing applied");

    assert!(
        s.advance_schedule("adv", 1, &advance(T0 + 10 * SEC, Some(T0 + 20 * SEC)), T0)
            .await
            .unwrap()
    );
    let r = read(s, "adv").await;
    assert_eq!(
        (
            r.fired_through,
            r.last_job.as_deref(),
            r.next_due,
            r.fired,
            r.skipped
        ),
        (
            Some(T0 + 10 * SEC),
            Some("job@1700000010000"),
            Some(T0 + 20 * SEC),
            1,
            0
        )
    );
    // The same watermark again, firing: refused. Earlier: refused.
    assert!(
        !s.advance_schedule("adv", 1, &advance(T0 + 10 * SEC, None), T0)
            .await
            .unwrap()
    );
    assert!(
        !s.advance_schedule("adv", 1, &advance(T0 + 9 * SEC, None), T0)
            .await
            .unwrap()
    );
    let skip_only = ScheduleAdvance {
        fired_through: T0 + 10 * SEC,
        last_job: None,
        next_due: None,
        fired: 0,
        skipped: 1,
    };
    assert!(
        !s.advance_schedule("adv", 1, &skip_only, T0).await.unwrap(),
        "a skip moves"
    );
    assert_eq!(read(s, "adv").await, r, "refused advances change nothing");

    // Only next_due, at the same watermark: taken; last_job kept.
    let postpone = ScheduleAdvance {
        fired_through: T0 + 10 * SEC,
        last_job: None,
        next_due: Some(T0 + 25 * SEC),
        fired: 0,
        skipped: 0,
    };
    assert!(
        s.advance_schedule("adv", 1, &postpone, T0 + SEC)
            .await
            .unwrap()
    );
    let r = read(s, "adv").await;
    assert_eq!(
        (r.fired_through, r.last_job.as_deref(), r.next_due, r.fired),
        (
            Some(T0 + 10 * SEC),
            Some("job@1700000010000"),
            Some(T0 + 25 * SEC),
            1
        )
    );
    // Later, skipping three and firing two, with no next due.
    let later = ScheduleAdvance {
        fired_through: T0 + 30 * SEC,
        last_job: Some("adv@30".to_owned()),
        next_due: None,
        fired: 2,
        skipped: 3,
    };
    assert!(
        s.advance_schedule("adv", 1, &later, T0 + 2 * SEC)
            .await
            .unwrap()
    );
    let r = read(s, "adv").await;
    assert_eq!(
        (
            r.fired_through,
            r.last_job.as_deref(),
            r.next_due,
            r.fired,
            r.skipped,
            r.version
        ),
        (Some(T0 + 30 * SEC), Some("adv@30"), None, 3, 3, 1)
    );
    assert!(
        s.due_schedules(MAX_TIME, 10).await.unwrap().is_empty(),
        "ended"
    );
    // A new version: the old one's advances are refused.
    s.set_schedule(&plain("adv"), Some(T0), T0).await.unwrap();
    assert!(
        !s.advance_schedule("adv", 1, &advance(T0 + 40 * SEC, None), T0)
            .await
            .unwrap()
    );
    assert!(
        s.advance_schedule("adv", 2, &advance(T0 + 40 * SEC, None), T0)
            .await
            .unwrap()
    );
    // A paused schedule still takes an advance.
    assert!(s.pause_schedule("adv", true, None, T0).await.unwrap());
    assert!(
        s.advance_schedule("adv", 2, &advance(T0 + 50 * SEC, Some(T0)), T0)
            .await
            .unwrap()
    );
    assert!(
        s.due_schedules(MAX_TIME, 10).await.unwrap().is_empty(),
        "paused"
    );
}

/// Concurrent advances of one version to one watermark, from both handles:
/// exactly one applies, and the counters hold its counts once. Advances to
/// different watermarks race the same way: the store ends at one of them
/// and never goes back.
pub async fn schedule_concurrent_advances_apply_once(c: Ctx) {
    let s = &*c.store;
    if !offers_schedules(s).await {
        return;
    }
    s.set_schedule(&plain("race"), Some(T0), T0).await.unwrap();
    for round in 1..=3i64 {
        let mut set = tokio::task::JoinSet::new();
        for i in 0..16 {
            let store = if i % 2 == 0 {
                c.store.clone()
            } else {
                c.peer.clone()
            };
            set.spawn(async move {
                let adv = ScheduleAdvance {
                    fired_through: T0 + round * 100 * SEC,
                    last_job: Some(format!("race@{round}-{i}")),
                    next_due: Some(T0 + round * 100 * SEC + 1),
                    fired: 1,
                    skipped: 2,
                };
                store.advance_schedule("race", 1, &adv, T0).await.unwrap()
            });
        }
        let won = set.join_all().await.into_iter().filter(|w| *w).count();
        assert_eq!(won, 1, "round {round}: advances applied");
        let r = read(s, "race").await;
        assert_eq!((r.fired, r.skipped), (round as u64, 2 * round as u64));
        assert_eq!(r.fired_through, Some(T0 + round * 100 * SEC));
    }
    // Different watermarks at once: the watermark ends at one of them and
    // never below the highest that applied.
    let mut set = tokio::task::JoinSet::new();
    for i in 1..=12i64 {
        let store = if i % 2 == 0 {
            c.store.clone()
        } else {
            c.peer.clone()
        };
        set.spawn(async move {
            let adv = advance(T0 + 1_000 * SEC + i, None);
            (
                i,
                store.advance_schedule("race", 1, &adv, T0).await.unwrap(),
            )
        });
    }
    let applied: Vec<i64> = set
        .join_all()
        .await
        .into_iter()
        .filter_map(|(i, won)| won.then_some(i))
        .collect();
    let r = read(s, "race").await;
    let top = *applied.iter().max().expect("one applied");
    assert_eq!(r.fired_through, Some(T0 + 1_000 * SEC + top));
    assert_eq!(r.fired, 3 + applied.len() as u64);
}

/// Concurrent sets of one schedule, from both handles, each bump the
/// version once: a new schedule set by 16 callers at once ends at version
/// 16, each caller got a different version back, and the record holds one
/// of the definitions that were set.
pub async fn schedule_concurrent_sets_bump_the_version_once_each(c: Ctx) {
    let s = &*c.store;
    if !offers_schedules(s).await {
        return;
    }
    let mut set = tokio::task::JoinSet::new();
    for i in 0..16i32 {
        let store = if i % 2 == 0 {
            c.store.clone()
        } else {
            c.peer.clone()
        };
        set.spawn(async move {
            let sched = Schedule {
                priority: i,
                ..plain("racing")
            };
            store
                .set_schedule(&sched, Some(T0), T0)
                .await
                .unwrap()
                .version
        });
    }
    let mut versions = set.join_all().await;
    versions.sort_unstable();
    assert_eq!(versions, (1..=16).collect::<Vec<u64>>());
    let rec = read(s, "racing").await;
    assert_eq!(rec.version, 16);
    assert!((0..16).contains(&rec.schedule.priority));
    assert_eq!(
        (rec.created_dt, rec.fired, rec.fired_through),
        (T0, 0, None)
    );
}

/// Bad input is `InvalidInput` (a payload over the store's limit
/// `TooLarge`), before anything is stored: names outside the jobtype
/// alphabet, empty or oversized or control-character rules and time
/// zones, a bad template (jobtype, tags), an end not after the start,
/// times out of range, a window over the longest delay, a limit outside
/// 1..=1000, version 0.
pub async fn schedule_bad_input_rejected(c: Ctx) {
    let s = &*c.store;
    if !offers_schedules(s).await {
        return;
    }
    let bad: Vec<(&str, Schedule)> = vec![
        ("empty name", plain("")),
        ("name with a space", plain("a b")),
        ("name with a slash", plain("a/b")),
        (
            "empty rule",
            Schedule {
                rule: String::new(),
                ..plain("x")
            },
        ),
        (
            "long rule",
            Schedule {
                rule: "*".repeat(MAX_RULE_LEN + 1),
                ..plain("x")
            },
        ),
        (
            "rule with a newline",
            Schedule {
                rule: "* * * * *\n* * * * *".into(),
                ..plain("x")
            },
        ),
        (
            "empty zone",
            Schedule {
                time_zone: String::new(),
                ..plain("x")
            },
        ),
        (
            "long zone",
            Schedule {
                time_zone: "Z".repeat(MAX_TIME_ZONE_LEN + 1),
                ..plain("x")
            },
        ),
        (
            "bad jobtype",
            Schedule {
                jobtype: "no spaces".into(),
                ..plain("x")
            },
        ),
        (
            "bad tag",
            Schedule {
                tags: vec!["a b".into()],
                ..plain("x")
            },
        ),
        (
            "end before start",
            Schedule {
                start_at: Some(T0),
                end_at: Some(T0),
                ..plain("x")
            },
        ),
        (
            "start out of range",
            Schedule {
                start_at: Some(-1),
                ..plain("x")
            },
        ),
        (
            "end out of range",
            Schedule {
                end_at: Some(MAX_TIME + 1),
                ..plain("x")
            },
        ),
        (
            "window too long",
            Schedule {
                catch_up_window: MAX_DELAY + Duration::from_millis(1),
                ..plain("x")
            },
        ),
    ];
    for (what, sched) in bad {
        assert_kind(
            s.set_schedule(&sched, Some(T0), T0).await,
            ErrorKind::InvalidInput,
            what,
        );
    }
    assert_kind(
        s.set_schedule(&plain("x"), Some(MAX_TIME + 1), T0).await,
        ErrorKind::InvalidInput,
        "next_due out of range",
    );
    let big = Schedule {
        data: vec![0; s.capabilities().max_payload + 1],
        ..plain("x")
    };
    assert_kind(
        s.set_schedule(&big, None, T0).await,
        ErrorKind::TooLarge,
        "payload",
    );
    assert!(
        s.list_schedules("").await.unwrap().is_empty(),
        "nothing stored"
    );

    assert_kind(s.get_schedule("a b").await, ErrorKind::InvalidInput, "get");
    assert_kind(
        s.delete_schedule("").await,
        ErrorKind::InvalidInput,
        "delete",
    );
    assert_kind(
        s.list_schedules("a b").await,
        ErrorKind::InvalidInput,
        "list",
    );
    assert_kind(
        s.due_schedules(T0, 0).await,
        ErrorKind::InvalidInput,
        "limit 0",
    );
    assert_kind(
        s.due_schedules(T0, 1_001).await,
        ErrorKind::InvalidInput,
        "limit 1001",
    );
    assert_kind(s.due_schedules(-1, 1).await, ErrorKind::InvalidInput, "now");
    assert_kind(
        s.pause_schedule("x", false, Some(-5), T0).await,
        ErrorKind::InvalidInput,
        "resume to a bad time",
    );
    s.set_schedule(&plain("x"), Some(T0), T0).await.unwrap();
    assert_kind(
        s.advance_schedule("x", 0, &advance(T0, None), T0).await,
        ErrorKind::InvalidInput,
        "version 0",
    );
    assert_kind(
        s.advance_schedule("x", 1, &advance(MAX_TIME + 1, None), T0)
            .await,
        ErrorKind::InvalidInput,
        "watermark",
    );
    let bad_job = ScheduleAdvance {
        last_job: Some("a|b".into()),
        ..advance(T0, None)
    };
    assert_kind(
        s.advance_schedule("x", 1, &bad_job, T0).await,
        ErrorKind::InvalidInput,
        "last_job",
    );
    assert_eq!(read(s, "x").await.fired_through, None, "no advance applied");
}

/// Schedules of one namespace are invisible to another: same names, set,
/// listed, due, advanced, paused and deleted on one side, leave the
/// other's exactly as they were.
pub async fn schedules_isolated_between_namespaces(a: Ctx, b: Ctx) {
    let (a, b) = (&*a.store, &*b.store);
    if !offers_schedules(a).await {
        return;
    }
    let kept = a.set_schedule(&full("iso-x"), Some(T0), T0).await.unwrap();
    assert_eq!(b.get_schedule("iso-x").await.unwrap(), None);
    assert!(b.list_schedules("").await.unwrap().is_empty());
    assert!(b.due_schedules(MAX_TIME, 10).await.unwrap().is_empty());
    assert!(
        !b.advance_schedule("iso-x", 1, &advance(T0, None), T0)
            .await
            .unwrap()
    );
    assert!(!b.pause_schedule("iso-x", true, None, T0).await.unwrap());
    assert!(!b.delete_schedule("iso-x").await.unwrap());
    // The same name in b is its own schedule.
    let other = b
        .set_schedule(&plain("iso-x"), Some(T0 + SEC), T0 + SEC)
        .await
        .unwrap();
    assert_eq!(other.version, 1);
    assert!(
        b.advance_schedule("iso-x", 1, &advance(T0, None), T0)
            .await
            .unwrap()
    );
    assert!(b.pause_schedule("iso-x", true, None, T0).await.unwrap());
    assert!(b.delete_schedule("iso-x").await.unwrap());
    assert_eq!(read(a, "iso-x").await, kept);
    assert_eq!(names(&a.due_schedules(T0, 10).await.unwrap()), ["iso-x"]);
}
