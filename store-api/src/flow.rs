//! What a job does beyond "run this": its flow. Today a flow is a unique
//! key ([`Unique`]) and a repeat rule ([`Repeat`]); dependencies, children
//! and batches extend [`JobFlow`] and [`FlowState`] (see
//! `docs/scheduling-design.md`).
//!
//! A plain job has no flow (`NewJob::flow` and `Job::flow` are `None`),
//! and stores keep nothing for it: the flow is a nullable marker beside the
//! job, so plain jobs pay no statement, script call or round trip for it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What a new job does beyond "run this" ([`NewJob::flow`](crate::NewJob::flow)).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct JobFlow {
    /// Add nothing when a live job of the same jobtype holds this key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique: Option<Unique>,
    /// Run again by this rule each time a run ends ok
    /// ([`Release::Repeat`](crate::Release::Repeat)) instead of being
    /// archived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<Repeat>,
}

impl JobFlow {
    /// Whether the flow asks for nothing (a job with it is a plain job).
    pub fn is_empty(&self) -> bool {
        self.unique.is_none() && self.repeat.is_none()
    }
}

/// The rule of a repeating job: when a run ends ok, the daemon computes
/// the next time from it and releases the job with
/// [`Release::Repeat`](crate::Release::Repeat), so the job is free again,
/// due then, instead of archived. Stores keep it as opaque text
/// ([`Repeat::to_text`]) and never read the rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Repeat {
    /// Cron (5 or 6 fields) or the repeat syntax, as schedules take it:
    /// 1..=[`MAX_RULE_LEN`](crate::limits::MAX_RULE_LEN) printable bytes.
    pub rule: String,
    /// The IANA time zone the rule counts in: 1..=
    /// [`MAX_TIME_ZONE_LEN`](crate::limits::MAX_TIME_ZONE_LEN) bytes
    /// without spaces, `UTC` by default.
    #[serde(default = "utc")]
    pub time_zone: String,
}

fn utc() -> String {
    "UTC".to_owned()
}

impl Repeat {
    /// A rule counted in UTC.
    pub fn new(rule: impl Into<String>) -> Self {
        Repeat {
            rule: rule.into(),
            time_zone: utc(),
        }
    }

    /// Counts the rule in `time_zone`.
    pub fn time_zone(mut self, time_zone: impl Into<String>) -> Self {
        self.time_zone = time_zone.into();
        self
    }

    /// The text a store keeps: the rule alone in UTC, else
    /// `TZ=<zone> <rule>` (as cron's `CRON_TZ=` lines).
    pub fn to_text(&self) -> String {
        if self.time_zone == "UTC" {
            self.rule.clone()
        } else {
            format!("TZ={} {}", self.time_zone, self.rule)
        }
    }

    /// The rule of [`to_text`](Self::to_text)'s text.
    pub fn from_text(text: &str) -> Self {
        match text
            .strip_prefix("TZ=")
            .and_then(|rest| rest.split_once(' '))
        {
            Some((zone, rule)) => Repeat::new(rule).time_zone(zone),
            None => Repeat::new(text),
        }
    }
}

/// A unique key: at most one live job of a jobtype holds it
/// ([`JobStore::add_jobs`](crate::JobStore::add_jobs)).
///
/// The key is held from the add while the job is waiting, scheduled,
/// running or expired, and freed in the same atomic change that archives
/// or deletes the job, whichever way (a release, a cancel, a delete), also
/// when the daemon that ran it crashed: another claims it after the lease
/// and archives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Unique {
    /// 1..=[`MAX_UNIQUE_KEY_LEN`](crate::limits::MAX_UNIQUE_KEY_LEN)
    /// bytes, no control characters. Scoped by the jobtype.
    pub key: String,
    /// Also a duplicate while a job with this key was archived less than
    /// `window` ago (any result code), at most
    /// [`MAX_DELAY`](crate::limits::MAX_DELAY).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Duration>,
    /// What a duplicate add does to the job holding the key.
    #[serde(default)]
    pub on_conflict: OnConflict,
}

impl Unique {
    /// A key held while the job is live, kept on conflict.
    pub fn new(key: impl Into<String>) -> Self {
        Unique {
            key: key.into(),
            window: None,
            on_conflict: OnConflict::Keep,
        }
    }

    /// Also holds the key for `window` after the job is archived.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = Some(window);
        self
    }

    /// Sets what a duplicate does to the holder.
    pub fn on_conflict(mut self, on_conflict: OnConflict) -> Self {
        self.on_conflict = on_conflict;
        self
    }
}

/// What a duplicate add does to the job holding its key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnConflict {
    /// Leave the holder as it is.
    #[default]
    Keep,
    /// Give the holder the duplicate's payload if it is free (waiting or
    /// scheduled), recorded as `Edited`. A running, expired or archived
    /// holder is left as it is.
    ReplaceData,
}

impl OnConflict {
    /// The name used on the wire (`keep`, `replace_data`).
    pub fn name(self) -> &'static str {
        match self {
            OnConflict::Keep => "keep",
            OnConflict::ReplaceData => "replace_data",
        }
    }
}

impl std::str::FromStr for OnConflict {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        match s {
            "keep" => Ok(OnConflict::Keep),
            "replace_data" => Ok(OnConflict::ReplaceData),
            _ => Err(crate::Error::invalid(format!(
                "on_conflict: {s:?} is not keep or replace_data"
            ))),
        }
    }
}

/// A job's flow as stored, on every read ([`Job::flow`](crate::Job::flow)).
/// `None` on a plain job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FlowState {
    /// The unique key it was added with. An archived job keeps it (the
    /// key is free again), so a run again takes it back if nobody holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique_key: Option<String>,
    /// The repeat rule it was added with; kept when it is archived, so a
    /// run again repeats again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<Repeat>,
}

impl FlowState {
    /// The stored flow of a job added with `key`.
    pub fn unique(key: impl Into<String>) -> Self {
        FlowState {
            unique_key: Some(key.into()),
            repeat: None,
        }
    }

    /// The stored flow of a job added with `flow` (`None` for a plain job).
    pub fn of(flow: &JobFlow) -> Option<Box<FlowState>> {
        let state = FlowState {
            unique_key: flow.unique.as_ref().map(|u| u.key.clone()),
            repeat: flow.repeat.clone(),
        };
        (state != FlowState::default()).then(|| Box::new(state))
    }

    /// The stored flow from its columns or fields (`None` when both are
    /// absent): what every backend's read builds.
    pub fn from_parts(unique_key: Option<String>, repeat: Option<&str>) -> Option<Box<FlowState>> {
        let state = FlowState {
            unique_key,
            repeat: repeat.map(Repeat::from_text),
        };
        (state != FlowState::default()).then(|| Box::new(state))
    }
}

/// A job of an add that was not stored because another job holds its key
/// ([`AddOutcome::duplicates`](crate::AddOutcome::duplicates)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Duplicate {
    /// The id asked for (nothing is stored under it).
    pub id: String,
    /// The job holding the key: live, or archived inside the window.
    pub existing: String,
    /// Whether the holder got the new payload ([`OnConflict::ReplaceData`]).
    pub replaced: bool,
}
