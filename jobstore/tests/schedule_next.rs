//! `jobstore schedule next` on the real binary: a rule's next firing times,
//! offline, as lines and as JSON, and a bad rule's error.

use std::process::{Command, Output};

use serde_json::Value;

fn jobstore(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_jobstore"))
        .args(args)
        // No daemon: a URL that nothing answers would show in a failure.
        .env("JOBSTORE_URL", "http://127.0.0.1:9")
        .output()
        .unwrap()
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn cron_in_a_zone() {
    let out = ok(&jobstore(&[
        "schedule",
        "next",
        "30 2 * * *",
        "--time-zone",
        "Europe/Berlin",
        "--from",
        "2026-03-28T12:00:00Z",
        "--count",
        "2",
    ]));
    // 02:30 does not occur on 29 March: the gap's end, 03:00 CEST.
    assert_eq!(
        out,
        "2026-03-29T01:00:00Z  2026-03-29T03:00:00+02:00[Europe/Berlin]\n\
         2026-03-30T00:30:00Z  2026-03-30T02:30:00+02:00[Europe/Berlin]\n"
    );

    // Epoch milliseconds, UTC, the default count of 5.
    let out = ok(&jobstore(&["schedule", "next", "0 6 * * *", "--from", "0"]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "{out}");
    assert_eq!(lines[0], "1970-01-01T06:00:00Z");
    assert_eq!(lines[4], "1970-01-05T06:00:00Z");
}

#[test]
fn repeat_rule_as_json() {
    let out = ok(&jobstore(&[
        "schedule",
        "next",
        "FINISHED, +1 DAY, WEEKDAY 1, START OF DAY, +6 HOURS",
        "--from",
        "2026-12-02T15:20:00Z",
        "--count",
        "3",
        "--json",
    ]));
    let v: Value = serde_json::from_str(&out).unwrap();
    let utc: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["utc"].as_str().unwrap())
        .collect();
    assert_eq!(
        utc,
        [
            "2026-12-07T06:00:00Z",
            "2026-12-14T06:00:00Z",
            "2026-12-21T06:00:00Z"
        ]
    );
    assert_eq!(v[0]["at"], 1_796_623_200_000_i64);
    assert_eq!(v[0]["local"], "2026-12-07T06:00:00+00:00[UTC]");
}

#[test]
fn bad_rules_exit_with_the_error() {
    for (args, message) in [
        (
            &["schedule", "next", "FINISHED, +1 FORTNIGHT"][..],
            "rule: expected MINUTES, HOURS, DAYS, MONTHS or YEARS at `FORTNIGHT`",
        ),
        (
            &["schedule", "next", "0 0 30 2 *", "--from", "0"][..],
            "rule: `0 0 30 2 *` has no occurrence within ten years after 1970-01-01T00:00:00Z",
        ),
        (
            &[
                "schedule",
                "next",
                "DAILY",
                "--time-zone",
                "Mars/Olympus_Mons",
            ][..],
            "time_zone: unknown time zone `Mars/Olympus_Mons`",
        ),
        (
            &["schedule", "next", "DAILY", "--from", "yesterday"][..],
            "from: `yesterday` is neither RFC 3339 nor epoch milliseconds",
        ),
    ] {
        let o = jobstore(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            stderr.starts_with(&format!("jobstore: {message}")),
            "{args:?}: {stderr}"
        );
        assert!(o.stdout.is_empty());
    }
    // More than 100 is a usage error too.
    let o = jobstore(&["schedule", "next", "DAILY", "--count", "101"]);
    assert_eq!(o.status.code(), Some(2));
}
