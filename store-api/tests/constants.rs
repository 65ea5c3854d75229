//! The documented values of the contract's constants, spelled out, so a
//! changed constant is a visible change of the contract (the suite reads the
//! constants themselves and cannot notice), and the small behaviours of the
//! types that no store operation shows (Debug and Display output, totals).

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
        .run_at(5)
        .tags(["eu"]);
    assert_eq!(
        format!("{new:?}"),
        r#"NewJob { id: "j1", jobtype: "t", data_len: 14, priority: 3, run_at: Some(5), tags: ["eu"], trace: None, flow: None }"#
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

/// A job's Debug output shows its payload's length, not the payload.
#[test]
fn job_debug_shows_the_payload_length_only() {
    let job = jobstore_api::Job {
        id: "j1".into(),
        jobtype: "t".into(),
        data: b"secret payload".to_vec(),
        priority: 0,
        dt: 1,
        lock: "sys-a".into(),
        attempts: 2,
        create_dt: 0,
        done_dt: None,
        result: None,
        cancel_requested: false,
        tags: vec![],
        history: vec![],
        claimed_due: Some(1),
        trace: None,
        flow: None,
    };
    let shown = format!("{job:?}");
    assert!(!shown.contains("secret"), "{shown}");
    assert!(
        shown.starts_with(r#"Job { id: "j1", jobtype: "t", data_len: 14,"#)
            && shown.contains(r#"lock: "sys-a", attempts: 2"#)
            && shown.ends_with("claimed_due: Some(1), flow: None }"),
        "{shown}"
    );
}

/// Result codes display as their names (logs, metrics labels, the CLI).
#[test]
fn result_codes_display_as_their_names() {
    for code in jobstore_api::ResultCode::ALL {
        assert_eq!(code.to_string(), code.as_str());
        assert!(!code.to_string().is_empty());
    }
}

/// A jobtype's total counts every state and every result code.
#[test]
fn job_counts_total_adds_every_state() {
    use jobstore_api::{JobCounts, ResultCode};
    let counts = JobCounts {
        jobtype: "t".into(),
        waiting: 1,
        scheduled: 2,
        running: 4,
        blocked: 32,
        archived: [(ResultCode::Ok, 8), (ResultCode::Error, 16)].into(),
    };
    assert_eq!(counts.total(), 63);
}

/// `is_unset` is true for the default limits only.
#[test]
fn handler_limits_unset_only_when_nothing_is_set() {
    use jobstore_api::HandlerLimits;
    assert!(HandlerLimits::default().is_unset());
    let one = HandlerLimits {
        concurrency: Some(1),
        ..HandlerLimits::default()
    };
    assert!(!one.is_unset());
}

#[test]
fn only_an_archive_carries_result_output() {
    use jobstore_api::{JobResult, Release};
    let archive = Release::Archive(JobResult::from_status(1).with_output(vec![7; 300]));
    assert_eq!(archive.output_len(), 300);
    assert_eq!(Release::Archive(JobResult::from_status(0)).output_len(), 0);
    assert_eq!(Release::Delete.output_len(), 0);
    assert_eq!(Release::Unget.output_len(), 0);
    let retry = Release::Retry {
        delay: Duration::from_secs(1),
    };
    assert_eq!(retry.output_len(), 0);
}
