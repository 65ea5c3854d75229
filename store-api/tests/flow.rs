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
