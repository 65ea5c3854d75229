//! What a job does beyond "run this": its flow. Today a flow is a unique
//! key ([`Unique`]); dependencies, children and batches extend
//! [`JobFlow`] and [`FlowState`] (see `docs/scheduling-design.md`).
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
}

impl JobFlow {
    /// Whether the flow asks for nothing (a job with it is a plain job).
    pub fn is_empty(&self) -> bool {
        self.unique.is_none()
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
}

impl FlowState {
    /// The stored flow of a job added with `key`.
    pub fn unique(key: impl Into<String>) -> Self {
        FlowState {
            unique_key: Some(key.into()),
        }
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
