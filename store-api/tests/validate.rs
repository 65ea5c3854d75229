//! Properties of the one validation module every backend calls.

use jobstore_api::limits::{MAX_ID_LEN, MAX_JOBTYPE_LEN};
use jobstore_api::{ErrorKind, ResultCode, validate};
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
