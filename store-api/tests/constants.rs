//! The documented values of the contract's constants, spelled out, so a
//! changed constant is a visible change of the contract (the suite reads the
//! constants themselves and cannot notice).

use std::time::Duration;

use jobstore_api::limits::*;
use jobstore_api::{ARCHIVE_HORIZON_MS, LOCK_DONE, LOCK_FREE, now_millis};

#[test]
fn constants_have_their_documented_values() {
    // 1000 years of 365 days.
    assert_eq!(ARCHIVE_HORIZON_MS, 31_536_000_000_000);
    assert_eq!((LOCK_FREE, LOCK_DONE), ("", "__done"));
    assert_eq!(
        (MAX_ID_LEN, MAX_JOBTYPE_LEN, MAX_SYSID_LEN),
        (200, 200, 200)
    );
    assert_eq!((MAX_CLAIM, MAX_BATCH), (1_000, 10_000));
    assert_eq!(MIN_PAYLOAD_SUPPORT, 1_048_576);
    assert_eq!(MAX_OUTPUT, 65_536);
    assert_eq!(MAX_HANDLER_FIELD, 1_048_576);
    assert_eq!(MAX_HANDLER_ATTEMPTS, 1_000_000);
    assert_eq!(MAX_HANDLER_CONCURRENCY, 10_000);
    assert_eq!(MAX_LEASE, Duration::from_secs(604_800));
    assert_eq!(MAX_DELAY, Duration::from_secs(3_153_600_000));
    // 9999-12-31T23:59:59.999Z
    assert_eq!(MAX_TIME, 253_402_300_799_999);
    assert_eq!(DEFAULT_POLL_INTERVAL, Duration::from_millis(500));
}

#[test]
fn now_millis_reads_the_system_clock() {
    let expected = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let now = now_millis();
    assert!(
        (now - expected).abs() < 60_000,
        "now_millis {now} vs the system clock {expected}"
    );
}

/// Debug output (logs, error messages) names a job and the length of its
/// payload, never the payload; a sysid lease never shows its token.
#[test]
fn debug_output_leaves_out_payloads_and_tokens() {
    let new = jobstore_api::NewJob::new("j1", "t", "secret payload")
        .priority(3)
        .run_at(5);
    assert_eq!(
        format!("{new:?}"),
        r#"NewJob { id: "j1", jobtype: "t", data_len: 14, priority: 3, run_at: Some(5) }"#
    );
    let lease = jobstore_api::SysidLease {
        sysid: "node".into(),
        token: "s3cret-token".into(),
        expires: 7,
    };
    let shown = format!("{lease:?}");
    assert!(!shown.contains("s3cret"), "{shown}");
    assert!(
        shown.contains("\"node\"") && shown.contains("expires: 7"),
        "{shown}"
    );
}
