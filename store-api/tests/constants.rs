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
