//! Properties of the one validation module every backend calls.

use std::time::Duration;

use jobstore_api::limits::{
    MAX_BATCH, MAX_DELAY, MAX_HANDLER_ATTEMPTS, MAX_HANDLER_CONCURRENCY, MAX_ID_LEN,
    MAX_JOBTYPE_LEN, MAX_LEASE, MAX_OUTPUT, MAX_QUERY_JOBTYPES,
};
use jobstore_api::stats::MINUTE_MS;
use jobstore_api::{
    Capabilities, Durations, ErrorKind, Handler, HandlerLimits, JobFlow, JobRelease, JobResult,
    JobtypeFilter, Release, Repeat, ResultCode, StatsDelta, validate,
};
use proptest::prelude::*;

proptest! {
    #[test]
    fn jobtypes_of_the_allowed_alphabet_are_accepted(t in "[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}") {
        prop_assert!(validate::jobtype(&t).is_ok());
    }

    #[test]
    fn jobtypes_with_any_other_character_are_rejected(
        head in "[A-Za-z0-9]{1,10}",
        bad in "[^A-Za-z0-9_.:-]",
        tail in "[a-z]{0,10}",
    ) {
        let t = format!("{head}{bad}{tail}");
        let err = validate::jobtype(&t).unwrap_err();
        prop_assert_eq!(err.kind(), ErrorKind::InvalidInput);
    }

    #[test]
    fn jobtypes_must_start_alphanumeric(first in "[_.:-]", rest in "[a-z]{0,10}") {
        let t = format!("{first}{rest}");
        prop_assert!(validate::jobtype(&t).is_err());
    }

    #[test]
    fn ids_without_control_characters_or_pipes_are_accepted(id in "[^|\\p{Cc}]{1,50}") {
        prop_assume!(id.len() <= MAX_ID_LEN);
        prop_assert!(validate::id(&id).is_ok());
    }

    #[test]
    fn ids_with_a_control_character_or_pipe_are_rejected(
        a in "[a-z]{0,5}",
        bad in "[|\\p{Cc}]",
        b in "[a-z]{0,5}",
    ) {
        let err = validate::id(&format!("{a}{bad}{b}")).unwrap_err();
        prop_assert_eq!(err.kind(), ErrorKind::InvalidInput);
    }

    #[test]
    fn status_classes_map_to_result_codes(status in 0u16..1000) {
        let code = ResultCode::from_status(status);
        let expected = match status {
            100..=199 => ResultCode::Retry,
            200..=299 => ResultCode::Ok,
            400..=499 => ResultCode::Failed,
            _ => ResultCode::Error,
        };
        prop_assert_eq!(code, expected);
    }
}

#[test]
fn length_limits_are_exact() {
    assert!(validate::id(&"x".repeat(MAX_ID_LEN)).is_ok());
    assert!(validate::id(&"x".repeat(MAX_ID_LEN + 1)).is_err());
    assert!(validate::jobtype(&"x".repeat(MAX_JOBTYPE_LEN)).is_ok());
    assert!(validate::jobtype(&"x".repeat(MAX_JOBTYPE_LEN + 1)).is_err());
}

#[test]
fn result_codes_round_trip_through_their_names() {
    for code in ResultCode::ALL {
        assert_eq!(code.as_str().parse::<ResultCode>().unwrap(), code);
    }
    assert_eq!(
        "nope".parse::<ResultCode>().unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
}

#[test]
fn jobtype_lists_may_name_up_to_the_limit() {
    let list = |n: usize| JobtypeFilter::Exact((0..n).map(|i| format!("t{i}")).collect());
    assert!(validate::jobtype_filter(&list(MAX_QUERY_JOBTYPES)).is_ok());
    assert_eq!(
        kind(validate::jobtype_filter(&list(MAX_QUERY_JOBTYPES + 1))),
        Some(ErrorKind::InvalidInput)
    );
}

#[test]
fn stats_may_be_added_for_the_minute_starting_now() {
    let now = 1_700_000_040_000;
    assert_eq!(now % MINUTE_MS, 0);
    let delta = |minute| StatsDelta {
        minute,
        wait: Durations::of(&[1]),
        ..StatsDelta::new("st", minute)
    };
    assert!(validate::stats_deltas(&[delta(now)], now).is_ok());
    assert!(validate::stats_deltas(&[delta(now)], now + 1).is_ok());
    assert_eq!(
        kind(validate::stats_deltas(&[delta(now)], now - 1)),
        Some(ErrorKind::InvalidInput)
    );
}

const NOW: i64 = 1_700_000_000_000;
const CAPS: Capabilities = Capabilities::new(1 << 20).with_repeat();

fn archive(id: &str, output_len: usize) -> JobRelease {
    let mut result = JobResult::from_status(200);
    result.output = vec![b'o'; output_len];
    JobRelease::new(id, Release::Archive(result))
}

fn kind(r: jobstore_api::Result<()>) -> Option<ErrorKind> {
    r.err().map(|e| e.kind())
}

#[test]
fn per_job_releases_are_checked_entry_by_entry() {
    let ok = vec![
        archive("a", MAX_OUTPUT),
        JobRelease::new("b", Release::Retry { delay: MAX_DELAY }),
        JobRelease::new("c", Release::Unget),
        JobRelease::new("d", Release::Delete),
    ];
    assert_eq!(kind(validate::release(&ok, "owner", NOW, &CAPS)), None);
    assert_eq!(kind(validate::release(&[], "owner", NOW, &CAPS)), None);

    let twice = vec![archive("a", 0), JobRelease::new("a", Release::Delete)];
    let err = validate::release(&twice, "owner", NOW, &CAPS).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.to_string().contains("\"a\" appears twice"), "{err}");

    let big = vec![archive("a", 0), archive("b", MAX_OUTPUT + 1)];
    assert_eq!(
        kind(validate::release(&big, "owner", NOW, &CAPS)),
        Some(ErrorKind::TooLarge)
    );
    let late = vec![JobRelease::new(
        "a",
        Release::Retry {
            delay: MAX_DELAY + Duration::from_millis(1),
        },
    )];
    assert_eq!(
        kind(validate::release(&late, "owner", NOW, &CAPS)),
        Some(ErrorKind::InvalidInput)
    );
    let bad_id = vec![archive("a|b", 0)];
    assert_eq!(
        kind(validate::release(&bad_id, "owner", NOW, &CAPS)),
        Some(ErrorKind::InvalidInput)
    );
    assert_eq!(
        kind(validate::release(&ok, "__done", NOW, &CAPS)),
        Some(ErrorKind::InvalidInput)
    );
    assert_eq!(
        kind(validate::release(&ok, "owner", -1, &CAPS)),
        Some(ErrorKind::InvalidInput)
    );
    let many: Vec<JobRelease> = (0..=MAX_BATCH)
        .map(|i| JobRelease::new(format!("j{i}"), Release::Unget))
        .collect();
    assert_eq!(
        kind(validate::release(&many, "owner", NOW, &CAPS)),
        Some(ErrorKind::TooLarge)
    );
    assert_eq!(
        kind(validate::release(&many[..MAX_BATCH], "owner", NOW, &CAPS)),
        None
    );
}

#[test]
fn ids_are_checked_before_the_owner_and_each_entry() {
    // An invalid id is reported even when a later entry is too large, so
    // `release_all` and `release_jobs` fail the same way.
    let list = vec![archive("a", MAX_OUTPUT + 1), archive("b|", 0)];
    assert_eq!(
        kind(validate::release(&list, "owner", NOW, &CAPS)),
        Some(ErrorKind::InvalidInput)
    );
}

fn repeat_entry(at: i64, data: Option<usize>, output: usize) -> Vec<JobRelease> {
    let mut result = JobResult::from_status(200);
    result.output = vec![b'o'; output];
    let data = data.map(|n| vec![b'd'; n]);
    vec![JobRelease::new("r", Release::Repeat { at, result, data })]
}

#[test]
fn repeat_releases_need_the_capability_a_time_and_sizes_in_limits() {
    let check = |list: Vec<JobRelease>, caps: &Capabilities| {
        kind(validate::release(&list, "owner", NOW, caps))
    };
    assert_eq!(check(repeat_entry(NOW + 1, Some(10), 10), &CAPS), None);
    assert_eq!(
        check(repeat_entry(NOW - 1, None, 0), &CAPS),
        None,
        "a time in the past is a time"
    );
    assert_eq!(
        check(repeat_entry(NOW, None, 0), &Capabilities::new(1 << 20)),
        Some(ErrorKind::Unsupported)
    );
    assert_eq!(
        check(repeat_entry(-1, None, 0), &CAPS),
        Some(ErrorKind::InvalidInput)
    );
    assert_eq!(check(repeat_entry(NOW, Some(1 << 20), 0), &CAPS), None);
    assert_eq!(
        check(repeat_entry(NOW, Some((1 << 20) + 1), 0), &CAPS),
        Some(ErrorKind::TooLarge)
    );
    assert_eq!(check(repeat_entry(NOW, None, MAX_OUTPUT), &CAPS), None);
    assert_eq!(
        check(repeat_entry(NOW, None, MAX_OUTPUT + 1), &CAPS),
        Some(ErrorKind::TooLarge)
    );
}

#[test]
fn repeat_rules_are_printable_and_their_zone_has_no_space() {
    let flow = |r: Repeat| {
        let mut f = JobFlow::default();
        f.repeat = Some(r);
        kind(validate::job_flow(&f, &CAPS))
    };
    assert_eq!(
        flow(Repeat::new("0 6 * * *").time_zone("Europe/Paris")),
        None
    );
    assert_eq!(flow(Repeat::new("x".repeat(256))), None);
    for bad in [
        Repeat::new(""),
        Repeat::new("x".repeat(257)),
        Repeat::new("0 6 * * *\n"),
        Repeat::new("TZ=Europe/Paris 0 6 * * *"),
        Repeat::new("HOURLY").time_zone(""),
        Repeat::new("HOURLY").time_zone("Europe Paris"),
        Repeat::new("HOURLY").time_zone("x".repeat(65)),
    ] {
        assert_eq!(flow(bad.clone()), Some(ErrorKind::InvalidInput), "{bad:?}");
    }
    let mut f = JobFlow::default();
    f.repeat = Some(Repeat::new("HOURLY"));
    assert_eq!(
        kind(validate::job_flow(&f, &Capabilities::new(1 << 20))),
        Some(ErrorKind::Unsupported)
    );
}

fn with_limits(limits: HandlerLimits) -> Handler {
    Handler::new("process", "true").limits(limits)
}

fn limits_error(limits: HandlerLimits) -> Option<String> {
    validate::handler("t", &with_limits(limits), NOW)
        .err()
        .map(|e| {
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
            e.to_string()
        })
}

#[test]
fn handler_limits_bounds_are_exact() {
    let to_ms = |d: Duration| u64::try_from(d.as_millis()).unwrap();
    let max_delay = to_ms(MAX_DELAY);
    let max_lease = to_ms(MAX_LEASE);
    let all = HandlerLimits {
        max_attempts: Some(MAX_HANDLER_ATTEMPTS),
        max_age_ms: Some(max_delay),
        time_limit_ms: Some(max_lease),
        concurrency: Some(MAX_HANDLER_CONCURRENCY),
        backoff_base_ms: Some(max_delay),
        backoff_max_ms: Some(max_delay),
    };
    assert_eq!(limits_error(all), None);
    assert_eq!(limits_error(HandlerLimits::default()), None);
    let ones = HandlerLimits {
        max_attempts: Some(1),
        max_age_ms: Some(1),
        time_limit_ms: Some(1),
        concurrency: Some(1),
        backoff_base_ms: Some(1),
        backoff_max_ms: Some(1),
    };
    assert_eq!(limits_error(ones), None);
    let cases: [(&str, HandlerLimits); 12] = [
        (
            "max_attempts",
            HandlerLimits {
                max_attempts: Some(0),
                ..Default::default()
            },
        ),
        (
            "max_attempts",
            HandlerLimits {
                max_attempts: Some(MAX_HANDLER_ATTEMPTS + 1),
                ..Default::default()
            },
        ),
        (
            "max_age_ms",
            HandlerLimits {
                max_age_ms: Some(0),
                ..Default::default()
            },
        ),
        (
            "max_age_ms",
            HandlerLimits {
                max_age_ms: Some(max_delay + 1),
                ..Default::default()
            },
        ),
        (
            "time_limit_ms",
            HandlerLimits {
                time_limit_ms: Some(0),
                ..Default::default()
            },
        ),
        (
            "time_limit_ms",
            HandlerLimits {
                time_limit_ms: Some(max_lease + 1),
                ..Default::default()
            },
        ),
        (
            "concurrency",
            HandlerLimits {
                concurrency: Some(0),
                ..Default::default()
            },
        ),
        (
            "concurrency",
            HandlerLimits {
                concurrency: Some(MAX_HANDLER_CONCURRENCY + 1),
                ..Default::default()
            },
        ),
        (
            "backoff_base_ms",
            HandlerLimits {
                backoff_base_ms: Some(0),
                ..Default::default()
            },
        ),
        (
            "backoff_base_ms",
            HandlerLimits {
                backoff_base_ms: Some(max_delay + 1),
                ..Default::default()
            },
        ),
        (
            "backoff_max_ms",
            HandlerLimits {
                backoff_max_ms: Some(0),
                ..Default::default()
            },
        ),
        (
            "backoff_max_ms",
            HandlerLimits {
                backoff_max_ms: Some(max_delay + 1),
                ..Default::default()
            },
        ),
    ];
    for (field, limits) in cases {
        let msg = limits_error(limits).unwrap_or_else(|| panic!("{limits:?} accepted"));
        assert!(msg.contains(&format!("limits.{field} ")), "{msg}");
    }
    let inverted = HandlerLimits {
        backoff_base_ms: Some(2),
        backoff_max_ms: Some(1),
        ..Default::default()
    };
    let msg = limits_error(inverted).unwrap();
    assert!(
        msg.contains("backoff_base_ms") && msg.contains("backoff_max_ms"),
        "{msg}"
    );
    let base_only = HandlerLimits {
        backoff_base_ms: Some(max_delay),
        ..Default::default()
    };
    assert_eq!(limits_error(base_only), None);
}

#[test]
fn handlers_stored_before_limits_read_back_without_limits() {
    let old = r#"{"lang":"process","body":"cat","eid":null,"before":null,"before_each":null,"after_each":null}"#;
    let h: Handler = serde_json::from_str(old).unwrap();
    assert_eq!(h, Handler::new("process", "cat"));
    assert!(h.limits.is_unset());
    let partial = r#"{"lang":"process","body":"cat","eid":null,"before":null,"before_each":null,"after_each":null,"limits":{"max_attempts":3}}"#;
    let h: Handler = serde_json::from_str(partial).unwrap();
    assert_eq!(
        h.limits,
        HandlerLimits {
            max_attempts: Some(3),
            ..Default::default()
        }
    );
    let round: Handler = serde_json::from_str(&serde_json::to_string(&h).unwrap()).unwrap();
    assert_eq!(round, h);
}
