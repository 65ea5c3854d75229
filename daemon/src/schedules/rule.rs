//! A schedule's rule: its parser and its firing times.
//!
//! Two syntaxes, told apart by the rule's first character (a letter starts
//! a repeat rule, anything else a cron pattern):
//!
//! - **Cron**, 5 or 6 fields (seconds optional), parsed by `croner` and
//!   evaluated in an IANA time zone from `jiff`'s bundled tz database, so
//!   every daemon of one version computes the same instants.
//! - **Repeat** (Bedrock's syntax): a base (`SCHEDULED`, `STARTED`,
//!   `FINISHED`) and comma-separated modifiers with the semantics of
//!   SQLite's `datetime()` modifiers, or one of the canned forms `HOURLY`,
//!   `DAILY` and `WEEKLY`.
//!
//! Both are evaluated on the wall clock of the rule's zone, and a wall time
//! becomes an instant in one way (see [`Rule::next`]):
//!
//! - a wall time that occurs twice (the hour repeated when clocks go back)
//!   is its first instant, so it fires once;
//! - a wall time that does not occur (the hour skipped when clocks go
//!   forward) is the first instant after the gap.

use std::fmt;

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::tz::{AmbiguousOffset, TimeZone, TimeZoneDatabase};
use jiff::{Timestamp, Zoned};
use jobstore_api::Millis;

/// Longest rule text and time zone name, in bytes.
pub const MAX_TEXT: usize = 256;

/// How many applications of a repeat rule [`Rule::check`] requires to move
/// forward.
pub const CHECK_APPLICATIONS: usize = 100;

/// How far ahead [`Rule::check`] looks for a cron rule's next occurrence:
/// ten years (of 365.25 days).
pub const CHECK_HORIZON_MS: Millis = 3_652_500 * 24 * 3_600;

/// Largest magnitude of a repeat rule's `+N`/`-N`.
pub const MAX_AMOUNT: i64 = 1_000_000;

const SECOND: Millis = 1_000;
const MINUTE: Millis = 60 * SECOND;
const HOUR: Millis = 60 * MINUTE;
const DAY: Millis = 24 * HOUR;

/// Most cron occurrences [`Rule::next`] passes over before giving up: the
/// ones of a repeated hour that are not after the given time (3,600 for a
/// per-second pattern), with room to spare.
const MAX_SKIPPED: usize = 10_000;

/// A rule that does not parse or does not fire. The message starts with the
/// field at fault (`rule` or `time_zone`) and quotes the offending token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuleError {
    /// Empty, longer than [`MAX_TEXT`] bytes, or not printable text.
    #[error("{field}: must be 1 to {MAX_TEXT} bytes of printable text")]
    Text {
        /// `rule` or `time_zone`.
        field: &'static str,
    },
    /// A token that does not parse.
    #[error("rule: {reason} at `{token}`")]
    Syntax {
        /// The offending token.
        token: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A time zone that is not in the tz database.
    #[error("time_zone: unknown time zone `{0}`")]
    UnknownZone(String),
    /// A cron rule with no occurrence within ten years.
    #[error("rule: `{rule}` has no occurrence within ten years after {from}")]
    NeverFires {
        /// The rule's text.
        rule: String,
        /// The time the search started from (RFC 3339, UTC).
        from: String,
    },
    /// A repeat rule whose result is not after its base.
    #[error("rule: `{rule}` does not move forward: from {base} it gives {result}")]
    NotAfterBase {
        /// The rule's text.
        rule: String,
        /// The base time (RFC 3339, UTC).
        base: String,
        /// What the rule gave (RFC 3339, UTC), or `nothing`.
        result: String,
    },
}

impl RuleError {
    /// The field at fault: `rule` or `time_zone`.
    pub fn field(&self) -> &'static str {
        match self {
            RuleError::Text { field } => field,
            RuleError::UnknownZone(_) => "time_zone",
            RuleError::Syntax { .. }
            | RuleError::NeverFires { .. }
            | RuleError::NotAfterBase { .. } => "rule",
        }
    }

    fn syntax(token: &str, reason: impl Into<String>) -> Self {
        RuleError::Syntax {
            token: token.to_owned(),
            reason: reason.into(),
        }
    }
}

/// The time a repeat rule counts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Base {
    /// The slot's own time (every cron rule).
    Scheduled,
    /// When the previous slot's job was claimed.
    Started,
    /// When the previous slot's job was archived.
    Finished,
}

impl fmt::Display for Base {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Base::Scheduled => "SCHEDULED",
            Base::Started => "STARTED",
            Base::Finished => "FINISHED",
        })
    }
}

/// A unit of a repeat rule's `+N`/`-N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// 60 seconds.
    Minutes,
    /// 3,600 seconds.
    Hours,
    /// 86,400 seconds of wall time.
    Days,
    /// Calendar months; an overflowing day carries into the next month.
    Months,
    /// Calendar years; 29 February carries into March.
    Years,
}

/// What `START OF` truncates to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Period {
    /// Midnight.
    Day,
    /// Midnight on the first of the month.
    Month,
    /// Midnight on the first of January.
    Year,
}

/// One modifier of a repeat rule, as SQLite's `datetime()` applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// `+N UNIT` or `-N UNIT`.
    Add(i64, Unit),
    /// `START OF DAY|MONTH|YEAR`.
    StartOf(Period),
    /// `WEEKDAY N`: 0 to 6 days forward to weekday N (0 is Sunday); no
    /// change on that weekday.
    Weekday(u8),
}

/// A parsed rule: see the [module docs](self).
#[derive(Debug, Clone)]
pub enum Rule {
    /// A cron pattern in a time zone.
    Cron {
        /// The pattern.
        cron: Box<Cron>,
        /// The zone its wall times are in.
        tz: TimeZone,
    },
    /// A base and the steps applied to it, in a time zone.
    Repeat {
        /// What the steps are applied to.
        base: Base,
        /// The modifiers, in order.
        steps: Vec<Step>,
        /// The zone whose wall time the steps change.
        tz: TimeZone,
    },
}

impl Rule {
    /// Parses a rule in an IANA time zone (such as `UTC` or
    /// `Europe/Berlin`).
    ///
    /// This checks the syntax and the zone. [`Rule::check`] also checks that
    /// the rule fires.
    pub fn parse(text: &str, time_zone: &str) -> Result<Rule, RuleError> {
        check_text("rule", text)?;
        check_text("time_zone", time_zone)?;
        let tz = zone(time_zone)?;
        let trimmed = text.trim();
        if trimmed.starts_with(|c: char| c.is_ascii_alphabetic()) {
            let (base, steps) = parse_repeat(trimmed)?;
            Ok(Rule::Repeat { base, steps, tz })
        } else {
            let cron = parse_cron(trimmed)?;
            Ok(Rule::Cron {
                cron: Box::new(cron),
                tz,
            })
        }
    }

    /// Parses a rule and checks that it fires, counting from `now`: the
    /// validation a stored schedule gets.
    pub fn parse_checked(text: &str, time_zone: &str, now: Millis) -> Result<Rule, RuleError> {
        let rule = Rule::parse(text, time_zone)?;
        rule.check(text, now)?;
        Ok(rule)
    }

    /// Checks that the rule fires, counting from `from`. A cron rule needs
    /// an occurrence within ten years; a repeat rule's result must be after
    /// its base for [`CHECK_APPLICATIONS`] successive applications. `text`
    /// is quoted in the error.
    pub fn check(&self, text: &str, from: Millis) -> Result<(), RuleError> {
        match self {
            Rule::Cron { .. } => match self.next(from) {
                Some(t) if t <= from.saturating_add(CHECK_HORIZON_MS) => Ok(()),
                _ => Err(RuleError::NeverFires {
                    rule: text.to_owned(),
                    from: rfc3339(from),
                }),
            },
            Rule::Repeat { .. } => {
                let mut base = from;
                for _ in 0..CHECK_APPLICATIONS {
                    match self.next(base) {
                        Some(t) if t > base => base = t,
                        other => {
                            return Err(RuleError::NotAfterBase {
                                rule: text.to_owned(),
                                base: rfc3339(base),
                                result: other.map_or_else(|| "nothing".to_owned(), rfc3339),
                            });
                        }
                    }
                }
                Ok(())
            }
        }
    }

    /// What the rule counts from: [`Base::Scheduled`] for every cron rule.
    pub fn base(&self) -> Base {
        match self {
            Rule::Cron { .. } => Base::Scheduled,
            Rule::Repeat { base, .. } => *base,
        }
    }

    /// The rule's time zone.
    pub fn time_zone(&self) -> &TimeZone {
        match self {
            Rule::Cron { tz, .. } | Rule::Repeat { tz, .. } => tz,
        }
    }

    /// Cron: the first occurrence strictly after `t`. Repeat: the steps
    /// applied to `t` (the base time the caller supplies), which may be at
    /// or before `t` for a rule [`Rule::check`] refuses.
    ///
    /// The steps change `t`'s wall time in the rule's zone, and the result
    /// becomes an instant as the [module docs](self) say, with one
    /// exception: a wall time that occurs twice and whose first instant is
    /// not after `t` is its second instant when that one is after `t`, so
    /// `STARTED, +10 MINUTES` from 01:10 in the second pass of a repeated
    /// hour gives 01:20 of the second pass, not of the first.
    ///
    /// `None` when there is none in the years the evaluator supports (up to
    /// the year 5000 for cron, 9999 for repeat).
    pub fn next(&self, t: Millis) -> Option<Millis> {
        match self {
            Rule::Cron { cron, tz } => cron_next(cron, tz, t),
            Rule::Repeat { steps, tz, .. } => {
                let wall = apply_steps(steps, to_wall(tz, t)?)?;
                let at = to_instant(tz, wall)?;
                if at > t {
                    return Some(at);
                }
                // A wall time that occurs twice whose first instant is not
                // after the base (`+10 MINUTES` from the second pass of a
                // repeated hour) is its second instant, when that one is.
                match later_instant(tz, wall) {
                    Some(later) if later > t => Some(later),
                    _ => Some(at),
                }
            }
        }
    }

    /// The next `n` times: successive occurrences after `from` for cron;
    /// for repeat, successive applications, each from the previous result.
    /// Shorter when the rule stops firing or stops moving forward.
    pub fn next_n(&self, from: Millis, n: usize) -> Vec<Millis> {
        let mut out = Vec::with_capacity(n.min(1_000));
        let mut t = from;
        while out.len() < n {
            match self.next(t) {
                Some(next) if next > t => {
                    out.push(next);
                    t = next;
                }
                _ => break,
            }
        }
        out
    }
}

/// The job id of a schedule's slot: `{name}@2026-12-07T06:00:00Z`, with
/// `.123` before the `Z` only when the slot has milliseconds.
pub fn slot_id(name: &str, slot: Millis) -> String {
    format!("{name}@{}", rfc3339(slot))
}

/// A time as RFC 3339 in UTC: `2026-12-07T06:00:00Z`, with `.123` only
/// when it has milliseconds. Outside the years 0 to 9999, the epoch
/// milliseconds.
pub fn rfc3339(t: Millis) -> String {
    match Timestamp::from_millisecond(t) {
        Ok(ts) if (0..=9999).contains(&ts.to_zoned(TimeZone::UTC).year()) => {
            let ms = t.rem_euclid(SECOND);
            let base = ts.strftime("%Y-%m-%dT%H:%M:%S");
            if ms == 0 {
                format!("{base}Z")
            } else {
                format!("{base}.{ms:03}Z")
            }
        }
        _ => t.to_string(),
    }
}

/// A time in a zone: `2026-12-07T07:00:00+01:00[Europe/Berlin]`.
pub fn zoned(t: Millis, tz: &TimeZone) -> Option<Zoned> {
    Some(Timestamp::from_millisecond(t).ok()?.to_zoned(tz.clone()))
}

/// A zone from the bundled tz database.
fn zone(name: &str) -> Result<TimeZone, RuleError> {
    if name == "UTC" {
        return Ok(TimeZone::UTC);
    }
    TimeZoneDatabase::bundled()
        .get(name)
        .map_err(|_| RuleError::UnknownZone(name.to_owned()))
}

fn check_text(field: &'static str, text: &str) -> Result<(), RuleError> {
    if text.is_empty() || text.len() > MAX_TEXT || text.chars().any(char::is_control) {
        return Err(RuleError::Text { field });
    }
    Ok(())
}

// ---- Cron -----------------------------------------------------------------

fn parse_cron(text: &str) -> Result<Cron, RuleError> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    if !text.starts_with('@') && !(5..=6).contains(&fields.len()) {
        return Err(RuleError::syntax(
            text,
            format!("a cron rule has 5 or 6 fields, not {}", fields.len()),
        ));
    }
    let parser = CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build();
    parser.parse(text).map_err(|e| {
        // Name the field: the first one that, replaced by `*`, makes the
        // pattern parse.
        let culprit = (0..fields.len()).find(|&i| {
            let mut f = fields.clone();
            f[i] = "*";
            parser.parse(&f.join(" ")).is_ok()
        });
        let token = culprit.map_or(text, |i| fields[i]);
        RuleError::syntax(token, format!("invalid cron pattern ({e})"))
    })
}

/// The first occurrence after `t`: croner finds the pattern's wall times
/// (on a zone without transitions), and each becomes an instant as the
/// module docs say.
fn cron_next(cron: &Cron, tz: &TimeZone, t: Millis) -> Option<Millis> {
    // Every wall time before `t`'s own is an instant at or before `t`, so
    // the search starts there, at a whole second.
    let mut wall = to_wall(tz, t)?.div_euclid(SECOND) * SECOND;
    for _ in 0..MAX_SKIPPED {
        let start = Timestamp::from_millisecond(wall)
            .ok()?
            .to_zoned(TimeZone::UTC);
        let found = cron.find_next_occurrence(&start, false).ok()?;
        wall = found.timestamp().as_millisecond();
        let at = to_instant(tz, wall)?;
        if at > t {
            return Some(at);
        }
    }
    None
}

// ---- Wall time --------------------------------------------------------------

/// `t`'s wall time in `tz`, as milliseconds since 1970-01-01T00:00 of the
/// wall clock.
fn to_wall(tz: &TimeZone, t: Millis) -> Option<Millis> {
    let ts = Timestamp::from_millisecond(t).ok()?;
    let offset = tz.to_offset(ts);
    t.checked_add(i64::from(offset.seconds()) * SECOND)
}

/// The instant of a wall time: its first instant when it occurs twice, the
/// first instant after the gap when it does not occur.
fn to_instant(tz: &TimeZone, wall: Millis) -> Option<Millis> {
    let civil = Timestamp::from_millisecond(wall)
        .ok()?
        .to_zoned(TimeZone::UTC)
        .datetime();
    let at = |offset: jiff::tz::Offset| wall.checked_sub(i64::from(offset.seconds()) * SECOND);
    match tz.to_ambiguous_timestamp(civil).offset() {
        AmbiguousOffset::Unambiguous { offset } => at(offset),
        // `before` is the offset in force first, so it gives the earlier
        // instant.
        AmbiguousOffset::Fold { before, .. } => at(before),
        AmbiguousOffset::Gap { after, .. } => {
            // Read with the offset after the gap, the wall time names an
            // instant before the transition; the transition is the first
            // instant after the gap.
            let early = Timestamp::from_millisecond(at(after)?).ok()?;
            let transition = tz.following(early).next()?;
            Some(transition.timestamp().as_millisecond())
        }
    }
}

/// The second instant of a wall time that occurs twice.
fn later_instant(tz: &TimeZone, wall: Millis) -> Option<Millis> {
    let civil = Timestamp::from_millisecond(wall)
        .ok()?
        .to_zoned(TimeZone::UTC)
        .datetime();
    match tz.to_ambiguous_timestamp(civil).offset() {
        AmbiguousOffset::Fold { after, .. } => {
            wall.checked_sub(i64::from(after.seconds()) * SECOND)
        }
        _ => None,
    }
}

// ---- Repeat -----------------------------------------------------------------

fn parse_repeat(text: &str) -> Result<(Base, Vec<Step>), RuleError> {
    let mut parts = text.split(',').map(str::trim);
    let first = parts.next().unwrap_or_default();
    let canned = match first.to_ascii_uppercase().as_str() {
        "SCHEDULED" => Err(Base::Scheduled),
        "STARTED" => Err(Base::Started),
        "FINISHED" => Err(Base::Finished),
        "HOURLY" => Ok(Step::Add(1, Unit::Hours)),
        "DAILY" => Ok(Step::Add(1, Unit::Days)),
        "WEEKLY" => Ok(Step::Add(7, Unit::Days)),
        _ => {
            return Err(RuleError::syntax(
                first,
                "expected SCHEDULED, STARTED, FINISHED, HOURLY, DAILY or WEEKLY",
            ));
        }
    };
    match canned {
        Ok(step) => match parts.next() {
            None => Ok((Base::Finished, vec![step])),
            Some(extra) => Err(RuleError::syntax(
                extra,
                format!("{first} takes no modifiers"),
            )),
        },
        Err(base) => {
            let steps = parts.map(parse_step).collect::<Result<Vec<_>, _>>()?;
            Ok((base, steps))
        }
    }
}

fn parse_step(part: &str) -> Result<Step, RuleError> {
    let words: Vec<String> = part
        .split_whitespace()
        .map(str::to_ascii_uppercase)
        .collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    match words.as_slice() {
        [] => Err(RuleError::syntax(part, "empty modifier")),
        ["START", "OF", period] => Ok(Step::StartOf(match *period {
            "DAY" => Period::Day,
            "MONTH" => Period::Month,
            "YEAR" => Period::Year,
            _ => {
                return Err(RuleError::syntax(
                    last_word(part),
                    "expected DAY, MONTH or YEAR",
                ));
            }
        })),
        ["WEEKDAY", n] => match n.as_bytes() {
            [digit @ b'0'..=b'6'] => Ok(Step::Weekday(digit - b'0')),
            _ => Err(RuleError::syntax(
                last_word(part),
                "expected a weekday 0 (Sunday) to 6",
            )),
        },
        [amount, unit]
            if amount.starts_with(['+', '-'])
                || amount.starts_with(|c: char| c.is_ascii_digit()) =>
        {
            let original = part.split_whitespace().next().unwrap_or_default();
            let n = parse_amount(amount).ok_or_else(|| {
                RuleError::syntax(
                    original,
                    format!("expected a whole number from -{MAX_AMOUNT} to +{MAX_AMOUNT}"),
                )
            })?;
            let unit = match unit.strip_suffix('S').unwrap_or(unit) {
                "MINUTE" => Unit::Minutes,
                "HOUR" => Unit::Hours,
                "DAY" => Unit::Days,
                "MONTH" => Unit::Months,
                "YEAR" => Unit::Years,
                _ => {
                    return Err(RuleError::syntax(
                        last_word(part),
                        "expected MINUTES, HOURS, DAYS, MONTHS or YEARS",
                    ));
                }
            };
            Ok(Step::Add(n, unit))
        }
        _ => Err(RuleError::syntax(
            part,
            "expected +N or -N MINUTES|HOURS|DAYS|MONTHS|YEARS, START OF DAY|MONTH|YEAR or WEEKDAY N",
        )),
    }
}

fn last_word(part: &str) -> &str {
    part.split_whitespace().last().unwrap_or(part)
}

fn parse_amount(s: &str) -> Option<i64> {
    let (negative, digits) = match s.as_bytes().first()? {
        b'+' => (false, &s[1..]),
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 7 {
        return None;
    }
    let n: i64 = digits.parse().ok()?;
    (n <= MAX_AMOUNT).then_some(if negative { -n } else { n })
}

/// Applies the steps to a wall time, as SQLite's `datetime()` modifiers do.
fn apply_steps(steps: &[Step], mut wall: Millis) -> Option<Millis> {
    for step in steps {
        wall = apply(*step, wall)?;
    }
    Some(wall)
}

fn apply(step: Step, wall: Millis) -> Option<Millis> {
    match step {
        Step::Add(n, Unit::Minutes) => wall.checked_add(n.checked_mul(MINUTE)?),
        Step::Add(n, Unit::Hours) => wall.checked_add(n.checked_mul(HOUR)?),
        Step::Add(n, Unit::Days) => wall.checked_add(n.checked_mul(DAY)?),
        Step::Add(n, Unit::Months) => {
            let (y, m, d, time) = split(wall);
            let m0 = i64::from(m) - 1 + n;
            from_parts(
                y.checked_add(m0.div_euclid(12))?,
                (m0.rem_euclid(12) + 1) as u32,
                d,
                time,
            )
        }
        Step::Add(n, Unit::Years) => {
            let (y, m, d, time) = split(wall);
            from_parts(y.checked_add(n)?, m, d, time)
        }
        Step::StartOf(Period::Day) => Some(wall.div_euclid(DAY) * DAY),
        Step::StartOf(Period::Month) => {
            let (y, m, _, _) = split(wall);
            from_parts(y, m, 1, 0)
        }
        Step::StartOf(Period::Year) => {
            let (y, _, _, _) = split(wall);
            from_parts(y, 1, 1, 0)
        }
        Step::Weekday(n) => {
            let days = wall.div_euclid(DAY);
            // 1970-01-01 was a Thursday (4).
            let weekday = (days + 4).rem_euclid(7);
            wall.checked_add((i64::from(n) - weekday).rem_euclid(7) * DAY)
        }
    }
}

/// Year, month, day and the milliseconds into the day of a wall time.
fn split(wall: Millis) -> (i64, u32, u32, Millis) {
    let days = wall.div_euclid(DAY);
    let (y, m, d) = civil_from_days(days);
    (y, m, d, wall.rem_euclid(DAY))
}

/// A wall time from its parts; a day past the month's end carries into the
/// next month, as SQLite's does.
fn from_parts(y: i64, m: u32, d: u32, time: Millis) -> Option<Millis> {
    // Far outside any year a timestamp can hold.
    if !(-100_000..=100_000).contains(&y) {
        return None;
    }
    let days = days_from_civil(y, m, 1) + i64::from(d) - 1;
    days.checked_mul(DAY)?.checked_add(time)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date of a day since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests;
