//! Schedules: recurring jobs kept in the store (see
//! [`JobStore::set_schedule`](crate::JobStore::set_schedule)).
//!
//! A store keeps each schedule's definition and its firing state, finds
//! the ones due, and moves their firing state forward with a
//! compare-and-set. It never reads the rule: rules are parsed, and slots
//! computed, by the daemon. Every firing is an ordinary add whose id is
//! derived from the schedule and the slot, so any number of firers add
//! one job per slot, and the watermark ([`ScheduleRecord::fired_through`])
//! makes a crash between the add and the advance harmless.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::types::Millis;

/// What a schedule does with the slots it missed (the daemons were down,
/// or the schedule was paused).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    /// Fire every missed slot inside the window.
    All,
    /// Fire the newest missed slot inside the window; skip the others.
    #[default]
    Last,
    /// Fire only slots that are on time; skip the missed ones.
    None,
}

impl CatchUp {
    /// Every policy.
    pub const ALL: [CatchUp; 3] = [CatchUp::All, CatchUp::Last, CatchUp::None];

    /// The policy's name: `all`, `last`, `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            CatchUp::All => "all",
            CatchUp::Last => "last",
            CatchUp::None => "none",
        }
    }

    /// The policy named `name`.
    pub fn parse(name: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|c| c.as_str() == name)
            .ok_or_else(|| Error::invalid(format!("catch_up {name:?} is not all, last or none")))
    }
}

/// What a schedule does with a slot while the job of its previous slot
/// has not ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Fire it: runs of one schedule may overlap.
    #[default]
    Allow,
    /// Skip it while the previous slot's job is not archived.
    Skip,
}

impl Overlap {
    /// Every policy.
    pub const ALL: [Overlap; 2] = [Overlap::Allow, Overlap::Skip];

    /// The policy's name: `allow`, `skip`.
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Allow => "allow",
            Overlap::Skip => "skip",
        }
    }

    /// The policy named `name`.
    pub fn parse(name: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|o| o.as_str() == name)
            .ok_or_else(|| Error::invalid(format!("overlap {name:?} is not allow or skip")))
    }
}

/// A schedule's definition: when it fires (its rule, opaque to stores) and
/// the job each firing adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// Its name, in the jobtype alphabet (the daemon names a client's
    /// schedules `{client}-{name}`, as it names handlers).
    pub name: String,
    /// Cron (5 or 6 fields) or the repeat syntax, as the daemon parses
    /// it: 1..=[`MAX_RULE_LEN`](crate::limits::MAX_RULE_LEN) bytes.
    pub rule: String,
    /// The IANA time zone the rule is read in (`UTC` by default).
    pub time_zone: String,
    /// The jobtype of the job each firing adds.
    pub jobtype: String,
    /// Its payload.
    pub data: Vec<u8>,
    /// Its priority.
    pub priority: i32,
    /// Its tags.
    pub tags: Vec<String>,
    /// What it does with missed slots.
    pub catch_up: CatchUp,
    /// Slots older than `now - catch_up_window` are skipped, whatever the
    /// catch-up policy.
    pub catch_up_window: Duration,
    /// What it does with a slot while the previous one's job runs.
    pub overlap: Overlap,
    /// No slot before this time.
    pub start_at: Option<Millis>,
    /// No slot at or after this time.
    pub end_at: Option<Millis>,
}

impl Schedule {
    /// A schedule with the defaults: time zone `UTC`, empty payload,
    /// priority 0, no tags, catch-up `last` within a day, overlap allowed,
    /// no start or end.
    pub fn new(
        name: impl Into<String>,
        rule: impl Into<String>,
        jobtype: impl Into<String>,
    ) -> Self {
        Schedule {
            name: name.into(),
            rule: rule.into(),
            time_zone: "UTC".to_owned(),
            jobtype: jobtype.into(),
            data: Vec::new(),
            priority: 0,
            tags: Vec::new(),
            catch_up: CatchUp::default(),
            catch_up_window: DEFAULT_CATCH_UP_WINDOW,
            overlap: Overlap::default(),
            start_at: None,
            end_at: None,
        }
    }

    /// The definition but its name and payload, as the JSON text stores
    /// keep in one field ([`Schedule::from_definition`] reads it back).
    /// Stores keep the name and payload apart: the name is the key, the
    /// payload bytes.
    pub fn definition(&self) -> String {
        let d = Definition {
            rule: self.rule.clone(),
            time_zone: self.time_zone.clone(),
            jobtype: self.jobtype.clone(),
            priority: self.priority,
            tags: self.tags.clone(),
            catch_up: self.catch_up,
            catch_up_window_ms: u64::try_from(self.catch_up_window.as_millis()).unwrap_or(u64::MAX),
            overlap: self.overlap,
            start_at: self.start_at,
            end_at: self.end_at,
        };
        serde_json::to_string(&d).expect("a schedule definition encodes as JSON")
    }

    /// The schedule stored as `name`, [`Schedule::definition`] and `data`.
    /// A definition that does not parse is a backend error (the store's
    /// contents were changed by something else).
    pub fn from_definition(name: String, definition: &str, data: Vec<u8>) -> Result<Self> {
        let d: Definition = serde_json::from_str(definition)
            .map_err(|e| Error::backend(format!("reading schedule {name:?}"), e))?;
        Ok(Schedule {
            name,
            rule: d.rule,
            time_zone: d.time_zone,
            jobtype: d.jobtype,
            data,
            priority: d.priority,
            tags: d.tags,
            catch_up: d.catch_up,
            catch_up_window: Duration::from_millis(d.catch_up_window_ms),
            overlap: d.overlap,
            start_at: d.start_at,
            end_at: d.end_at,
        })
    }
}

/// How far back a schedule catches up by default: one day.
pub const DEFAULT_CATCH_UP_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// [`Schedule::definition`]'s JSON.
#[derive(Serialize, Deserialize)]
struct Definition {
    rule: String,
    time_zone: String,
    jobtype: String,
    priority: i32,
    #[serde(default)]
    tags: Vec<String>,
    catch_up: CatchUp,
    catch_up_window_ms: u64,
    overlap: Overlap,
    #[serde(default)]
    start_at: Option<Millis>,
    #[serde(default)]
    end_at: Option<Millis>,
}

/// A schedule as stored: its definition and its firing state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleRecord {
    /// The definition, as last set.
    pub schedule: Schedule,
    /// 1 when created, one more at every [`set_schedule`](crate::JobStore::set_schedule).
    pub version: u64,
    /// Paused: never due until resumed.
    pub paused: bool,
    /// When it was created.
    pub created_dt: Millis,
    /// The last `set_schedule` or pause.
    pub updated_dt: Millis,
    /// The watermark: every slot at or before it was fired or skipped.
    /// Never goes back; kept across `set_schedule`.
    pub fired_through: Option<Millis>,
    /// The id of the job of the newest slot fired.
    pub last_job: Option<String>,
    /// When a firer should look at it again; `None`: never (it ended).
    pub next_due: Option<Millis>,
    /// Slots fired since it was created.
    pub fired: u64,
    /// Slots skipped since it was created.
    pub skipped: u64,
}

/// What a firer moves a schedule to ([`JobStore::advance_schedule`](crate::JobStore::advance_schedule)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleAdvance {
    /// The new watermark: every slot at or before it was fired or skipped.
    pub fired_through: Millis,
    /// The job of the newest slot fired now; `None` keeps the stored one.
    pub last_job: Option<String>,
    /// When a firer should look at it again; `None`: never.
    pub next_due: Option<Millis>,
    /// Slots fired by this advance, added to the counter.
    pub fired: u64,
    /// Slots skipped by this advance, added to the counter.
    pub skipped: u64,
}

impl ScheduleAdvance {
    /// Whether this advance fires or skips anything (if not, it only sets
    /// `next_due`, and may leave the watermark where it is).
    pub fn moves(&self) -> bool {
        self.fired > 0 || self.skipped > 0
    }

    /// Whether it applies to a schedule whose watermark is `stored`: a
    /// later watermark, or the same one when it moves nothing. The one rule
    /// every backend's compare-and-set implements (beside the version).
    pub fn applies_after(&self, stored: Option<Millis>) -> bool {
        match stored {
            None => true,
            Some(s) if self.moves() => s < self.fired_through,
            Some(s) => s <= self.fired_through,
        }
    }

    /// The record after this advance.
    pub fn apply(&self, rec: &mut ScheduleRecord) {
        rec.fired_through = Some(self.fired_through);
        if let Some(job) = &self.last_job {
            rec.last_job = Some(job.clone());
        }
        rec.next_due = self.next_due;
        rec.fired += self.fired;
        rec.skipped += self.skipped;
    }
}
