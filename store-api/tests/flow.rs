//! The unique-key contract's own types: a flow that asks for nothing, the
//! conflict policies' wire names, and the builders.

use std::time::Duration;

use jobstore_api::{Error, FlowState, JobFlow, NewJob, OnConflict, Unique};

#[test]
fn unique_flow_is_empty_only_without_a_key() {
    assert!(JobFlow::default().is_empty());
    let job = NewJob::new("a", "t", vec![]).unique(Unique::new("k"));
    let flow = job.flow.as_deref().expect("a keyed job has a flow");
    assert!(!flow.is_empty());
    assert_eq!(job.unique_key(), Some(&Unique::new("k")));
    assert_eq!(NewJob::new("b", "t", vec![]).unique_key(), None);
}

#[test]
fn unique_on_conflict_names_parse_back() {
    assert_eq!(OnConflict::Keep.name(), "keep");
    assert_eq!(OnConflict::ReplaceData.name(), "replace_data");
    for c in [OnConflict::Keep, OnConflict::ReplaceData] {
        assert_eq!(c.name().parse::<OnConflict>().unwrap(), c);
    }
    for bad in ["", "Keep", "replace", "xyzzy"] {
        let e = bad.parse::<OnConflict>().unwrap_err();
        assert!(
            matches!(&e, Error::InvalidInput { message } if message.contains("on_conflict")),
            "{bad:?}: {e:?}"
        );
    }
    assert_eq!(OnConflict::default(), OnConflict::Keep);
}

#[test]
fn unique_builders_set_their_field() {
    let u = Unique::new("k");
    assert_eq!((u.window, u.on_conflict), (None, OnConflict::Keep));
    let u = Unique::new("k")
        .window(Duration::from_secs(60))
        .on_conflict(OnConflict::ReplaceData);
    assert_eq!(u.key, "k");
    assert_eq!(u.window, Some(Duration::from_secs(60)));
    assert_eq!(u.on_conflict, OnConflict::ReplaceData);
    assert_eq!(FlowState::unique("k").unique_key.as_deref(), Some("k"));
}

/// A rule's stored text is the rule alone in UTC, `TZ=<zone> <rule>`
/// otherwise, and reads back as the same rule.
#[test]
fn repeat_rules_round_trip_through_their_text() {
    use jobstore_api::Repeat;
    let utc = Repeat::new("0 6 * * *");
    assert_eq!(utc.to_text(), "0 6 * * *");
    let paris = Repeat::new("FINISHED, +1 DAY").time_zone("Europe/Paris");
    assert_eq!(paris.to_text(), "TZ=Europe/Paris FINISHED, +1 DAY");
    for r in [
        utc,
        paris,
        Repeat::new("@daily"),
        Repeat::new("TZ").time_zone("Etc/GMT+5"),
    ] {
        assert_eq!(Repeat::from_text(&r.to_text()), r, "{r:?}");
    }
    assert_eq!(Repeat::from_text("TZ=nospace"), Repeat::new("TZ=nospace"));
    let job = jobstore_api::NewJob::new("a", "t", "d").repeat(Repeat::new("HOURLY"));
    assert_eq!(job.repeat_rule(), Some(&Repeat::new("HOURLY")));
    assert_eq!(
        FlowState::of(job.flow.as_deref().unwrap()).and_then(|f| f.repeat),
        Some(Repeat::new("HOURLY"))
    );
    assert_eq!(FlowState::from_parts(None, None), None);
    // What every backend's read builds from its columns or fields.
    let read = FlowState::from_parts(Some("k".into()), Some("TZ=Europe/Paris HOURLY")).unwrap();
    assert_eq!(read.unique_key.as_deref(), Some("k"));
    assert_eq!(
        read.repeat,
        Some(Repeat::new("HOURLY").time_zone("Europe/Paris"))
    );
    let rule_only = FlowState::from_parts(None, Some("@daily")).unwrap();
    assert_eq!(
        (rule_only.unique_key, rule_only.repeat),
        (None, Some(Repeat::new("@daily")))
    );
}
