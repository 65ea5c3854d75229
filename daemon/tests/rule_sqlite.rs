//! The repeat rules' evaluator in UTC against SQLite's own `datetime()`
//! (Bedrock evaluates these rules with it): random times and random lists
//! of the modifiers that are SQLite modifiers word for word, compared at
//! second precision.

use jobstore_daemon::schedules::Rule;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use sqlx::{AssertSqlSafe, Connection, Row, SqliteConnection};

/// One modifier, written the same way for both.
fn modifier() -> impl Strategy<Value = String> {
    prop_oneof![
        (-100_000i64..=100_000).prop_map(|n| format!("{n:+} minutes")),
        (-5_000i64..=5_000).prop_map(|n| format!("{n:+} hours")),
        (-1_000i64..=1_000).prop_map(|n| format!("{n:+} days")),
        (1i64..=1_000).prop_map(|n| format!("{n} days")),
        (-120i64..=120).prop_map(|n| format!("{n:+} months")),
        (-50i64..=50).prop_map(|n| format!("{n:+} years")),
        (-3i64..=3).prop_map(|n| format!("{n:+} month")),
        Just("+1 year".to_owned()),
        Just("start of day".to_owned()),
        Just("start of month".to_owned()),
        Just("start of year".to_owned()),
        (0u8..=6).prop_map(|n| format!("weekday {n}")),
    ]
}

/// 1900 to 2200, with milliseconds; month ends and leap days often.
fn time() -> impl Strategy<Value = i64> {
    prop_oneof![
        -2_208_988_800_000i64..7_258_118_400_000,
        (
            1900i64..2200,
            prop::sample::select(vec![1u32, 2, 3, 12]),
            28u32..=31,
            0i64..86_400_000
        )
            .prop_filter_map("a real date", |(y, m, d, t)| {
                let date = jiff::civil::Date::new(y as i16, m as i8, d as i8).ok()?;
                let z = date.to_zoned(jiff::tz::TimeZone::UTC).ok()?;
                Some(z.timestamp().as_millisecond() + t)
            }),
    ]
}

/// `t` as SQLite reads it: `YYYY-MM-DD HH:MM:SS.SSS`.
fn sqlite_time(t: i64) -> String {
    let ts = jiff::Timestamp::from_millisecond(t).unwrap();
    ts.strftime("%Y-%m-%d %H:%M:%S%.3f").to_string()
}

#[test]
fn repeat_rules_match_sqlite_datetime() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    // The runner's closure is `Fn`: the connection is borrowed per case.
    let conn = std::cell::RefCell::new(
        rt.block_on(SqliteConnection::connect("sqlite::memory:"))
            .unwrap(),
    );
    let mut runner = TestRunner::new(Config {
        cases: 2_000,
        ..Config::default()
    });
    let strategy = (time(), prop::collection::vec(modifier(), 1..6));
    runner
        .run(&strategy, |(t, mods)| {
            let text = format!("SCHEDULED, {}", mods.join(", "));
            let rule = Rule::parse(&text, "UTC").map_err(|e| TestCaseError::fail(e.to_string()))?;
            let ours = rule
                .next(t)
                .map(|r| sqlite_time(r.div_euclid(1000) * 1000)[..19].to_owned());

            let placeholders: Vec<String> = (1..=mods.len() + 1).map(|i| format!("?{i}")).collect();
            let sql = format!("SELECT datetime({})", placeholders.join(", "));
            let mut query = sqlx::query(AssertSqlSafe(sql.clone())).bind(sqlite_time(t));
            for m in &mods {
                query = query.bind(m.as_str());
            }
            let row = rt
                .block_on(query.fetch_one(&mut *conn.borrow_mut()))
                .unwrap();
            let theirs: Option<String> = row.get(0);
            prop_assert_eq!(ours, theirs, "{} from {}", text, sqlite_time(t));
            Ok(())
        })
        .unwrap();
}

/// A few by hand, so a change in SQLite's rules shows up by name.
#[test]
fn known_cases_match_sqlite() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut conn = rt
        .block_on(SqliteConnection::connect("sqlite::memory:"))
        .unwrap();
    for (from, mods, expected) in [
        (
            "2026-01-31 10:00:00",
            vec!["+1 months"],
            "2026-03-03 10:00:00",
        ),
        (
            "2024-02-29 10:00:00",
            vec!["+1 years"],
            "2025-03-01 10:00:00",
        ),
        (
            "2026-12-02 15:20:00",
            vec!["+1 days", "weekday 1", "start of day", "+6 hours"],
            "2026-12-07 06:00:00",
        ),
        (
            "2026-12-07 15:20:00",
            vec!["weekday 1"],
            "2026-12-07 15:20:00",
        ),
    ] {
        let placeholders: Vec<String> = (1..=mods.len() + 1).map(|i| format!("?{i}")).collect();
        let sql = format!("SELECT datetime({})", placeholders.join(", "));
        let mut query = sqlx::query(AssertSqlSafe(sql.clone())).bind(from);
        for m in &mods {
            query = query.bind(*m);
        }
        let theirs: String = rt.block_on(query.fetch_one(&mut conn)).unwrap().get(0);
        assert_eq!(theirs, expected);
        let t = format!("{}Z", from.replace(' ', "T"))
            .parse::<jiff::Timestamp>()
            .unwrap();
        let rule = Rule::parse(&format!("SCHEDULED, {}", mods.join(", ")), "UTC").unwrap();
        let ours = rule.next(t.as_millisecond()).unwrap();
        assert_eq!(sqlite_time(ours)[..19], *expected);
    }
}
