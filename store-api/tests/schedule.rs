//! The schedule contract's own types: the policies' names, the definition
//! stores keep as JSON, and the advance's compare-and-set rule.

use std::time::Duration;

use jobstore_api::{
    CatchUp, Error, Overlap, Schedule, ScheduleAdvance, ScheduleRecord,
    schedule::DEFAULT_CATCH_UP_WINDOW,
};

#[test]
fn schedule_policies_parse_their_own_names_only() {
    let names: Vec<_> = CatchUp::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(names, ["all", "last", "none"]);
    for c in CatchUp::ALL {
        assert_eq!(CatchUp::parse(c.as_str()).unwrap(), c);
    }
    let names: Vec<_> = Overlap::ALL.iter().map(|o| o.as_str()).collect();
    assert_eq!(names, ["allow", "skip"]);
    for o in Overlap::ALL {
        assert_eq!(Overlap::parse(o.as_str()).unwrap(), o);
    }
    for bad in ["", "ALL", "xyzzy", "allow"] {
        let e = CatchUp::parse(bad).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidInput { message } if message.contains("catch_up")),
            "{bad:?}: {e:?}"
        );
    }
    for bad in ["", "Skip", "xyzzy", "all"] {
        let e = Overlap::parse(bad).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidInput { message } if message.contains("overlap")),
            "{bad:?}: {e:?}"
        );
    }
    assert_eq!(CatchUp::default(), CatchUp::Last);
    assert_eq!(Overlap::default(), Overlap::Allow);
}

#[test]
fn schedule_new_has_the_documented_defaults() {
    let s = Schedule::new("acme-s", "* * * * *", "acme-t");
    assert_eq!(
        s,
        Schedule {
            name: "acme-s".into(),
            rule: "* * * * *".into(),
            time_zone: "UTC".into(),
            jobtype: "acme-t".into(),
            data: vec![],
            priority: 0,
            tags: vec![],
            catch_up: CatchUp::Last,
            catch_up_window: Duration::from_secs(24 * 3600),
            overlap: Overlap::Allow,
            start_at: None,
            end_at: None,
        }
    );
    assert_eq!(DEFAULT_CATCH_UP_WINDOW, Duration::from_secs(86_400));
}

#[test]
fn schedule_definitions_round_trip_without_name_and_payload() {
    let s = Schedule {
        time_zone: "Europe/Paris".into(),
        data: vec![0, 1, 255],
        priority: -7,
        tags: vec!["a".into(), "b c".into()],
        catch_up: CatchUp::All,
        catch_up_window: Duration::from_millis(90_061),
        overlap: Overlap::Skip,
        start_at: Some(1_000),
        end_at: Some(2_000),
        ..Schedule::new("acme-s", "*/5 * * * *", "acme-t")
    };
    let d = s.definition();
    assert!(!d.contains("acme-s"), "{d}");
    let back = Schedule::from_definition("acme-s".into(), &d, vec![0, 1, 255]).unwrap();
    assert_eq!(back, s);
    // Fields a definition may leave out read as their defaults.
    let short = r#"{"rule":"@daily","time_zone":"UTC","jobtype":"t","priority":1,
        "catch_up":"none","catch_up_window_ms":5,"overlap":"allow"}"#;
    let back = Schedule::from_definition("n".into(), short, vec![]).unwrap();
    assert_eq!(
        (back.tags.len(), back.start_at, back.end_at, back.catch_up),
        (0, None, None, CatchUp::None)
    );
    assert_eq!(back.catch_up_window, Duration::from_millis(5));
    // A window past u64 milliseconds saturates.
    let huge = Schedule {
        catch_up_window: Duration::MAX,
        ..Schedule::new("n", "r", "t")
    };
    let back = Schedule::from_definition("n".into(), &huge.definition(), vec![]).unwrap();
    assert_eq!(back.catch_up_window, Duration::from_millis(u64::MAX));
}

#[test]
fn schedule_definitions_that_do_not_parse_are_backend_errors() {
    for bad in ["", "{", "{}", r#"{"rule":1}"#] {
        let e = Schedule::from_definition("acme-s".into(), bad, vec![]).unwrap_err();
        assert!(matches!(e, Error::Backend { .. }), "{bad:?}: {e:?}");
        assert!(e.to_string().contains("acme-s"), "{e}");
    }
}

fn advance(fired_through: i64, fired: u64, skipped: u64) -> ScheduleAdvance {
    ScheduleAdvance {
        fired_through,
        last_job: None,
        next_due: Some(fired_through + 1),
        fired,
        skipped,
    }
}

#[test]
fn schedule_advances_apply_past_the_watermark() {
    assert!(!advance(10, 0, 0).moves());
    assert!(advance(10, 1, 0).moves());
    assert!(advance(10, 0, 1).moves());
    for (fired, skipped) in [(1, 0), (0, 1), (2, 3)] {
        let a = advance(10, fired, skipped);
        assert!(a.applies_after(None));
        assert!(a.applies_after(Some(9)));
        assert!(!a.applies_after(Some(10)), "{fired} {skipped}");
        assert!(!a.applies_after(Some(11)));
    }
    let a = advance(10, 0, 0);
    assert!(a.applies_after(None));
    assert!(a.applies_after(Some(9)));
    assert!(a.applies_after(Some(10)));
    assert!(!a.applies_after(Some(11)));
}

#[test]
fn schedule_advances_add_to_the_record() {
    let mut rec = ScheduleRecord {
        schedule: Schedule::new("acme-s", "* * * * *", "acme-t"),
        version: 3,
        paused: false,
        created_dt: 1,
        updated_dt: 2,
        fired_through: Some(5),
        last_job: Some("old".into()),
        next_due: Some(6),
        fired: 4,
        skipped: 7,
    };
    advance(10, 2, 3).apply(&mut rec);
    assert_eq!(
        (rec.fired_through, rec.last_job.as_deref(), rec.next_due),
        (Some(10), Some("old"), Some(11))
    );
    assert_eq!((rec.fired, rec.skipped), (6, 10));
    ScheduleAdvance {
        last_job: Some("new".into()),
        next_due: None,
        ..advance(12, 1, 0)
    }
    .apply(&mut rec);
    assert_eq!(
        (rec.fired_through, rec.last_job.as_deref(), rec.next_due),
        (Some(12), Some("new"), None)
    );
    assert_eq!((rec.fired, rec.skipped, rec.version), (7, 10, 3));
}
