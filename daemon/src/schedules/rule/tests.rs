//! Rules with concrete expected times: cron and repeat rules in UTC and in
//! zones across both DST transitions, SQLite's month-end normalization,
//! `WEEKDAY`, `START OF`, the canned forms, and every error.

use super::*;

/// Epoch milliseconds of an RFC 3339 time.
fn ms(s: &str) -> Millis {
    s.parse::<Timestamp>().unwrap().as_millisecond()
}

fn rule(text: &str, tz: &str) -> Rule {
    Rule::parse(text, tz).unwrap_or_else(|e| panic!("{text} in {tz}: {e}"))
}

/// The next `n` times after `from`, as RFC 3339.
fn times(text: &str, tz: &str, from: &str, n: usize) -> Vec<String> {
    rule(text, tz)
        .next_n(ms(from), n)
        .into_iter()
        .map(rfc3339)
        .collect()
}

fn next(text: &str, tz: &str, from: &str) -> String {
    rfc3339(rule(text, tz).next(ms(from)).expect("a next time"))
}

fn err(text: &str, tz: &str) -> RuleError {
    Rule::parse(text, tz).expect_err(text)
}

// ---- Cron -------------------------------------------------------------------

#[test]
fn cron_in_utc_is_strictly_after() {
    assert_eq!(
        next("0 6 * * *", "UTC", "2026-12-07T05:59:59Z"),
        "2026-12-07T06:00:00Z"
    );
    assert_eq!(
        next("0 6 * * *", "UTC", "2026-12-07T06:00:00Z"),
        "2026-12-08T06:00:00Z"
    );
    assert_eq!(
        next("0 6 * * *", "UTC", "2026-12-07T05:59:59.999Z"),
        "2026-12-07T06:00:00Z"
    );
    assert_eq!(
        next("0 6 * * *", "UTC", "2026-12-07T06:00:00.001Z"),
        "2026-12-08T06:00:00Z"
    );
    assert_eq!(
        times("*/20 * * * *", "UTC", "2026-12-31T23:30:00Z", 3),
        [
            "2026-12-31T23:40:00Z",
            "2027-01-01T00:00:00Z",
            "2027-01-01T00:20:00Z"
        ]
    );
    // Day of month OR day of week, as Vixie cron: the 1st and Mondays.
    assert_eq!(
        times("0 0 1 * MON", "UTC", "2026-11-28T00:00:00Z", 3),
        [
            "2026-11-30T00:00:00Z",
            "2026-12-01T00:00:00Z",
            "2026-12-07T00:00:00Z"
        ]
    );
    // croner's nicknames.
    assert_eq!(
        next("@hourly", "UTC", "2026-12-07T05:59:59Z"),
        "2026-12-07T06:00:00Z"
    );
    assert_eq!(
        next("@daily", "UTC", "2026-12-07T05:59:59Z"),
        "2026-12-08T00:00:00Z"
    );
    let r = rule("0 6 * * *", "UTC");
    assert_eq!(r.base(), Base::Scheduled);
    assert_eq!(r.time_zone(), &TimeZone::UTC);
}

#[test]
fn cron_with_seconds() {
    assert_eq!(
        times("*/15 * * * * *", "UTC", "2026-12-07T12:00:00Z", 3),
        [
            "2026-12-07T12:00:15Z",
            "2026-12-07T12:00:30Z",
            "2026-12-07T12:00:45Z"
        ]
    );
    assert_eq!(
        next("30 0 6 * * *", "UTC", "2026-12-07T06:00:00Z"),
        "2026-12-07T06:00:30Z"
    );
}

#[test]
fn cron_in_a_zone() {
    // 06:00 in Berlin: CET (+1) in winter, CEST (+2) in summer.
    assert_eq!(
        next("0 6 * * *", "Europe/Berlin", "2026-12-07T00:00:00Z"),
        "2026-12-07T05:00:00Z"
    );
    assert_eq!(
        next("0 6 * * *", "Europe/Berlin", "2026-07-01T00:00:00Z"),
        "2026-07-01T04:00:00Z"
    );
    assert_eq!(
        next("0 6 * * *", "America/New_York", "2026-12-07T00:00:00Z"),
        "2026-12-07T11:00:00Z"
    );
    assert!(matches!(
        rule("0 6 * * *", "Europe/Berlin"),
        Rule::Cron { .. }
    ));
}

#[test]
fn cron_wall_time_in_a_gap_fires_at_the_gap_end() {
    // Berlin, 2026-03-29: 02:00 CET becomes 03:00 CEST (01:00Z).
    assert_eq!(
        times("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z", 2),
        ["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]
    );
    // New York, 2026-03-08: 02:00 EST becomes 03:00 EDT (07:00Z). Every
    // wall time of the gap is the gap's end, so it fires once there.
    assert_eq!(
        times(
            "*/30 * * * *",
            "America/New_York",
            "2026-03-08T06:15:00Z",
            3
        ),
        [
            "2026-03-08T06:30:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-08T07:30:00Z"
        ]
    );
    assert_eq!(
        times("30 * * * *", "America/New_York", "2026-03-08T06:45:00Z", 2),
        ["2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z"]
    );
    // From inside the gap's instant: the next one is after it.
    assert_eq!(
        next("30 2 * * *", "Europe/Berlin", "2026-03-29T01:00:00Z"),
        "2026-03-30T00:30:00Z"
    );
}

#[test]
fn cron_wall_time_that_occurs_twice_fires_once() {
    // Berlin, 2026-10-25: 03:00 CEST becomes 02:00 CET (01:00Z), so 02:30
    // is 00:30Z and again 01:30Z; it fires at the first only.
    assert_eq!(
        times("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", 2),
        ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]
    );
    // New York, 2026-11-01: 02:00 EDT becomes 01:00 EST (06:00Z). The
    // repeated hour's wall times fire in its first pass only.
    assert_eq!(
        times(
            "*/30 * * * *",
            "America/New_York",
            "2026-11-01T04:59:00Z",
            4
        ),
        [
            "2026-11-01T05:00:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-01T07:00:00Z",
            "2026-11-01T07:30:00Z"
        ]
    );
    // From the second pass, the next is after the repeated hour.
    assert_eq!(
        next("*/30 * * * *", "America/New_York", "2026-11-01T06:10:00Z"),
        "2026-11-01T07:00:00Z"
    );
    assert_eq!(
        next("*/30 * * * *", "America/New_York", "2026-11-01T05:40:00Z"),
        "2026-11-01T07:00:00Z"
    );
}

#[test]
fn cron_that_never_fires_is_refused_by_check() {
    let now = ms("2026-11-28T00:00:00Z");
    for text in ["0 0 30 2 *", "0 0 31 4 *"] {
        let e = Rule::parse_checked(text, "UTC", now).unwrap_err();
        assert_eq!(e.field(), "rule");
        assert!(matches!(e, RuleError::NeverFires { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            format!("rule: `{text}` has no occurrence within ten years after 2026-11-28T00:00:00Z")
        );
    }
    // The fifth Monday of February (a leap February starting on a Monday)
    // fires in 2044: more than ten years on, so refused too.
    assert_eq!(
        next("0 0 * 2 1#5", "UTC", "2026-11-28T00:00:00Z"),
        "2044-02-29T00:00:00Z"
    );
    let e = Rule::parse_checked("0 0 * 2 1#5", "UTC", now).unwrap_err();
    assert!(matches!(e, RuleError::NeverFires { .. }), "{e}");
    Rule::parse_checked("0 0 * 2 1#5", "UTC", ms("2034-03-01T00:00:00Z")).unwrap();
    // 29 February fires within ten years.
    Rule::parse_checked("0 0 29 2 *", "UTC", now).unwrap();
    assert!(Rule::parse_checked("0 6 * * *", "Europe/Berlin", now).is_ok());
}

// ---- Repeat -----------------------------------------------------------------

#[test]
fn repeat_next_monday_at_six() {
    let text = "FINISHED, +1 DAY, WEEKDAY 1, START OF DAY, +6 HOURS";
    let r = rule(text, "UTC");
    assert_eq!(r.base(), Base::Finished);
    // Wednesday, Sunday and Monday (2026-12-07 is a Monday).
    assert_eq!(
        next(text, "UTC", "2026-12-02T15:20:00Z"),
        "2026-12-07T06:00:00Z"
    );
    assert_eq!(
        next(text, "UTC", "2026-12-06T10:00:00Z"),
        "2026-12-07T06:00:00Z"
    );
    assert_eq!(
        next(text, "UTC", "2026-12-07T10:00:00Z"),
        "2026-12-14T06:00:00Z"
    );
    // Case-insensitive, spaces free.
    assert_eq!(
        next(
            "finished,+1 day ,weekday 1,  start of day,+6 hours",
            "UTC",
            "2026-12-02T15:20:00Z"
        ),
        "2026-12-07T06:00:00Z"
    );
}

#[test]
fn repeat_months_and_years_normalize_an_overflowing_day() {
    assert_eq!(
        next("SCHEDULED, +1 MONTH", "UTC", "2026-01-31T10:00:00Z"),
        "2026-03-03T10:00:00Z"
    );
    assert_eq!(
        next("SCHEDULED, +1 MONTH", "UTC", "2024-01-31T10:00:00Z"),
        "2024-03-02T10:00:00Z"
    );
    assert_eq!(
        next("SCHEDULED, +1 YEAR", "UTC", "2024-02-29T10:00:00Z"),
        "2025-03-01T10:00:00Z"
    );
    assert_eq!(
        next("SCHEDULED, -1 MONTH", "UTC", "2026-03-31T10:00:00Z"),
        "2026-03-03T10:00:00Z"
    );
    assert_eq!(
        next("SCHEDULED, +13 MONTHS", "UTC", "2026-12-15T00:00:00Z"),
        "2028-01-15T00:00:00Z"
    );
    assert_eq!(
        next("SCHEDULED, -12 MONTHS", "UTC", "2026-01-15T00:00:00Z"),
        "2025-01-15T00:00:00Z"
    );
    assert_eq!(
        next("SCHEDULED, -2 YEARS", "UTC", "2026-01-15T00:00:00Z"),
        "2024-01-15T00:00:00Z"
    );
    assert_eq!(
        next(
            "SCHEDULED, +90 MINUTES, -1 HOUR",
            "UTC",
            "2026-01-15T00:00:00Z"
        ),
        "2026-01-15T00:30:00Z"
    );
    assert_eq!(
        next("SCHEDULED, -1 DAYS", "UTC", "2026-01-01T00:00:00Z"),
        "2025-12-31T00:00:00Z"
    );
}

#[test]
fn repeat_start_of_and_weekday() {
    let t = "2026-05-17T13:14:15.678Z";
    assert_eq!(
        next("SCHEDULED, START OF DAY", "UTC", t),
        "2026-05-17T00:00:00Z"
    );
    assert_eq!(
        next("SCHEDULED, START OF MONTH", "UTC", t),
        "2026-05-01T00:00:00Z"
    );
    assert_eq!(
        next("SCHEDULED, START OF YEAR", "UTC", t),
        "2026-01-01T00:00:00Z"
    );
    // 2026-05-17 is a Sunday: WEEKDAY 0 changes nothing (milliseconds
    // kept), WEEKDAY 6 moves six days.
    assert_eq!(
        next("SCHEDULED, WEEKDAY 0", "UTC", t),
        "2026-05-17T13:14:15.678Z"
    );
    assert_eq!(
        next("SCHEDULED, WEEKDAY 1", "UTC", t),
        "2026-05-18T13:14:15.678Z"
    );
    assert_eq!(
        next("SCHEDULED, WEEKDAY 6", "UTC", t),
        "2026-05-23T13:14:15.678Z"
    );
    // Before 1970 too.
    assert_eq!(
        next("SCHEDULED, WEEKDAY 4", "UTC", "1969-12-31T12:00:00Z"),
        "1970-01-01T12:00:00Z"
    );
    assert_eq!(
        next("SCHEDULED, START OF MONTH", "UTC", "1969-12-31T12:00:00Z"),
        "1969-12-01T00:00:00Z"
    );
}

#[test]
fn repeat_canned_forms() {
    for (text, after) in [
        ("HOURLY", "2026-12-07T07:30:00Z"),
        ("DAILY", "2026-12-08T06:30:00Z"),
        ("WEEKLY", "2026-12-14T06:30:00Z"),
        ("daily", "2026-12-08T06:30:00Z"),
        (" Weekly ", "2026-12-14T06:30:00Z"),
    ] {
        let r = rule(text, "UTC");
        assert_eq!(r.base(), Base::Finished, "{text}");
        assert_eq!(next(text, "UTC", "2026-12-07T06:30:00Z"), after, "{text}");
    }
    assert_eq!(
        times("DAILY", "UTC", "2026-12-07T06:30:00Z", 3),
        [
            "2026-12-08T06:30:00Z",
            "2026-12-09T06:30:00Z",
            "2026-12-10T06:30:00Z"
        ]
    );
    assert_eq!(
        [Base::Scheduled, Base::Started, Base::Finished].map(|b| b.to_string()),
        ["SCHEDULED", "STARTED", "FINISHED"]
    );
    assert!(matches!(
        rule("STARTED, +5 MINUTES", "UTC").base(),
        Base::Started
    ));
    assert!(matches!(
        rule("SCHEDULED, +5 MINUTES", "UTC").base(),
        Base::Scheduled
    ));
    assert!(matches!(
        rule("HOURLY", "UTC"),
        Rule::Repeat { steps, .. } if steps == vec![Step::Add(1, Unit::Hours)]
    ));
}

#[test]
fn repeat_in_a_zone_applies_to_the_wall_time() {
    let text = "FINISHED, +1 DAY, START OF DAY, +6 HOURS";
    // Berlin's spring day: 06:00 CEST on 29 March, 06:00 CET the day before.
    assert_eq!(
        next(text, "Europe/Berlin", "2026-03-27T12:00:00Z"),
        "2026-03-28T05:00:00Z"
    );
    assert_eq!(
        next(text, "Europe/Berlin", "2026-03-28T12:00:00Z"),
        "2026-03-29T04:00:00Z"
    );
    // DAILY keeps the wall time across the change: 23 hours that day.
    assert_eq!(
        next("DAILY", "Europe/Berlin", "2026-03-28T12:00:00Z"),
        "2026-03-29T11:00:00Z"
    );
    // A wall time in the gap: its end. One in the repeated hour: its first
    // instant.
    let text = "FINISHED, START OF DAY, +1 DAY, +2 HOURS, +30 MINUTES";
    assert_eq!(
        next(text, "Europe/Berlin", "2026-03-28T12:00:00Z"),
        "2026-03-29T01:00:00Z"
    );
    assert_eq!(
        next(text, "Europe/Berlin", "2026-10-24T12:00:00Z"),
        "2026-10-25T00:30:00Z"
    );
    assert_eq!(
        next(text, "America/New_York", "2026-03-07T17:00:00Z"),
        "2026-03-08T07:00:00Z"
    );
    let text = "FINISHED, START OF DAY, +1 DAY, +1 HOURS, +30 MINUTES";
    assert_eq!(
        next(text, "America/New_York", "2026-10-31T17:00:00Z"),
        "2026-11-01T05:30:00Z"
    );
    // From the repeated hour's second pass (01:10 EST), 01:20 is the
    // second pass's: its first instant is before the base.
    assert_eq!(
        next(
            "STARTED, +10 MINUTES",
            "America/New_York",
            "2026-11-01T06:10:00Z"
        ),
        "2026-11-01T06:20:00Z"
    );
    // From its first pass (01:10 EDT), the first pass's.
    assert_eq!(
        next(
            "STARTED, +10 MINUTES",
            "America/New_York",
            "2026-11-01T05:10:00Z"
        ),
        "2026-11-01T05:20:00Z"
    );
    // HOURLY from 00:30 EDT: 01:30 EDT; from 01:30 EDT: 02:30 EST, two
    // hours on; from 01:30 EST: 02:30 EST.
    assert_eq!(
        times("HOURLY", "America/New_York", "2026-11-01T04:30:00Z", 3),
        [
            "2026-11-01T05:30:00Z",
            "2026-11-01T07:30:00Z",
            "2026-11-01T08:30:00Z"
        ]
    );
    assert_eq!(
        next("HOURLY", "America/New_York", "2026-11-01T06:30:00Z"),
        "2026-11-01T07:30:00Z"
    );
    // A result equal to the base is not after it either.
    assert_eq!(
        next(
            "STARTED, +0 MINUTES",
            "America/New_York",
            "2026-11-01T05:30:00Z"
        ),
        "2026-11-01T06:30:00Z"
    );
    // Neither instant after the base: the first.
    assert_eq!(
        next(
            "STARTED, +0 MINUTES",
            "America/New_York",
            "2026-11-01T06:30:00Z"
        ),
        "2026-11-01T05:30:00Z"
    );
    // Going back into a repeated hour from after it: the first pass.
    assert_eq!(
        next(
            "STARTED, -1 HOUR",
            "America/New_York",
            "2026-11-01T07:30:00Z"
        ),
        "2026-11-01T05:30:00Z"
    );
}

#[test]
fn repeat_that_does_not_move_forward_is_refused_by_check() {
    let now = ms("2026-11-28T10:00:00Z");
    let e = Rule::parse_checked("FINISHED, -1 DAY", "UTC", now).unwrap_err();
    assert_eq!(e.field(), "rule");
    assert_eq!(
        e.to_string(),
        "rule: `FINISHED, -1 DAY` does not move forward: from 2026-11-28T10:00:00Z it gives 2026-11-27T10:00:00Z"
    );
    // No modifier, or one that lands at or before the base sooner or later.
    for text in [
        "FINISHED",
        "STARTED, START OF DAY",
        "SCHEDULED, START OF MONTH, +20 DAYS",
        "SCHEDULED, +0 DAYS",
    ] {
        let e = Rule::parse_checked(text, "UTC", now).unwrap_err();
        assert!(matches!(e, RuleError::NotAfterBase { .. }), "{text}: {e}");
    }
    for text in [
        "HOURLY",
        "FINISHED, +1 DAY, WEEKDAY 1, START OF DAY, +6 HOURS",
        "SCHEDULED, +1 MONTH, START OF MONTH",
    ] {
        Rule::parse_checked(text, "Europe/Berlin", now).unwrap();
    }
}

// ---- Errors -----------------------------------------------------------------

#[test]
fn errors_name_the_field_and_the_token() {
    for (text, token) in [
        ("FINISHD, +1 DAY", "FINISHD"),
        ("FINISHED, +1 FORTNIGHT", "FORTNIGHT"),
        ("FINISHED, +1 SECOND", "SECOND"),
        ("FINISHED, +x DAYS", "+x"),
        ("FINISHED, +1.5 DAYS", "+1.5"),
        ("FINISHED, +10000000 DAYS", "+10000000"),
        ("FINISHED, WEEKDAY 7", "7"),
        ("FINISHED, WEEKDAY -1", "-1"),
        ("FINISHED, START OF WEEK", "WEEK"),
        ("FINISHED, jump ahead now", "jump ahead now"),
        ("FINISHED, every day", "every day"),
        ("FINISHED, ++5 DAYS", "++5"),
        ("FINISHED, + DAYS", "+"),
        (
            "FINISHED, +99999999999999999999 DAYS",
            "+99999999999999999999",
        ),
        ("FINISHED, +1 DAY,", ""),
        ("HOURLY, +1 DAY", "+1 DAY"),
        ("61 * * * *", "61"),
        ("0 25 * * *", "25"),
        ("0 0 * FOO *", "FOO"),
        ("* * * *", "* * * *"),
        ("0 0 0 1 1 * 2027", "0 0 0 1 1 * 2027"),
    ] {
        let e = err(text, "UTC");
        assert_eq!(e.field(), "rule", "{text}");
        assert!(
            matches!(&e, RuleError::Syntax { token: t, .. } if t == token),
            "{text}: {e:?}"
        );
        assert!(e.to_string().starts_with("rule: "), "{e}");
        assert!(e.to_string().contains(&format!("`{token}`")), "{e}");
    }

    let e = err("0 6 * * *", "Mars/Olympus_Mons");
    assert_eq!(e.field(), "time_zone");
    assert_eq!(
        e.to_string(),
        "time_zone: unknown time zone `Mars/Olympus_Mons`"
    );
    assert!(matches!(err("DAILY", "+02:00"), RuleError::UnknownZone(_)));

    let long = "x".repeat(257);
    for (text, tz, field) in [
        ("", "UTC", "rule"),
        (long.as_str(), "UTC", "rule"),
        ("0 6 * * *\n", "UTC", "rule"),
        ("0 6 * * *", "", "time_zone"),
        ("0 6 * * *", long.as_str(), "time_zone"),
        ("0 6 * * *", "Europe/\tBerlin", "time_zone"),
    ] {
        let e = err(text, tz);
        assert_eq!(e, RuleError::Text { field });
        assert_eq!(e.field(), field);
        assert_eq!(
            e.to_string(),
            format!("{field}: must be 1 to 256 bytes of printable text")
        );
    }
    assert_eq!(
        err("FINISHED, +1 DAY,", "UTC").to_string(),
        "rule: empty modifier at ``"
    );
    // 256 bytes is allowed (and then parsed).
    let e = err(&"Y".repeat(256), "UTC");
    assert!(matches!(e, RuleError::Syntax { .. }));
}

// ---- Slot ids and formatting ------------------------------------------------

#[test]
fn slot_ids() {
    assert_eq!(
        slot_id("acme-nightly", ms("2026-12-07T06:00:00Z")),
        "acme-nightly@2026-12-07T06:00:00Z"
    );
    assert_eq!(
        slot_id("acme-nightly", ms("2026-12-07T06:00:00.123Z")),
        "acme-nightly@2026-12-07T06:00:00.123Z"
    );
    assert_eq!(
        slot_id("x", ms("2026-12-07T06:00:00.004Z")),
        "x@2026-12-07T06:00:00.004Z"
    );
    assert_eq!(slot_id("x", -1), "x@1969-12-31T23:59:59.999Z");
    assert_eq!(rfc3339(i64::MAX), i64::MAX.to_string());
    // Year 0 is written; year -1 is not.
    assert_eq!(rfc3339(-62_167_219_200_000), "0000-01-01T00:00:00Z");
    assert_eq!(rfc3339(-62_167_219_200_001), "-62167219200001");
}

#[test]
fn next_n_stops_when_a_rule_stops_moving_forward() {
    let t = ms("2026-12-07T06:00:00Z");
    assert!(rule("FINISHED, -1 DAY", "UTC").next_n(t, 5).is_empty());
    assert!(rule("FINISHED", "UTC").next_n(t, 5).is_empty());
    assert_eq!(
        rule("SCHEDULED, START OF MONTH, +20 DAYS", "UTC").next_n(ms("2026-12-01T00:00:00Z"), 5),
        [ms("2026-12-21T00:00:00Z")]
    );
    assert_eq!(rule("DAILY", "UTC").next_n(t, 0), Vec::<Millis>::new());
}

#[test]
fn zoned_times() {
    let berlin = zone("Europe/Berlin").unwrap();
    let z = zoned(ms("2026-12-07T05:00:00.250Z"), &berlin).unwrap();
    assert_eq!(z.to_string(), "2026-12-07T06:00:00.25+01:00[Europe/Berlin]");
    assert!(zoned(i64::MAX, &berlin).is_none());
}

#[test]
fn out_of_range_gives_nothing() {
    assert_eq!(rule("DAILY", "UTC").next(i64::MAX), None);
    assert_eq!(rule("0 6 * * *", "UTC").next(i64::MAX), None);
    assert_eq!(rule("SCHEDULED, +1000000 YEARS", "UTC").next(0), None);
    assert!(rule("DAILY", "UTC").next_n(i64::MAX, 5).is_empty());
}

#[test]
fn civil_days_round_trip() {
    for days in [-800_000, -719_468, -1, 0, 1, 59, 365, 11_016, 2_932_896] {
        let (y, m, d) = civil_from_days(days);
        assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
    }
    assert_eq!(civil_from_days(0), (1970, 1, 1));
    assert_eq!(days_from_civil(2000, 3, 1), 11_017);
    assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    // Every day from 1669 to 2271, against jiff.
    let epoch = jiff::civil::date(1970, 1, 1);
    for days in -110_000..=110_000 {
        let date = epoch.checked_add(jiff::Span::new().days(days)).unwrap();
        let expected = (
            i64::from(date.year()),
            date.month() as u32,
            date.day() as u32,
        );
        assert_eq!(civil_from_days(days), expected, "{days}");
        assert_eq!(days_from_civil(expected.0, expected.1, expected.2), days);
    }
}
