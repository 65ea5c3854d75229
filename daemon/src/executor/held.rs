//! The jobs this daemon's runners hold: claimed and not yet released,
//! shared by the claim loop, the lease renewer and the completer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio_util::sync::CancellationToken;

use super::Limits;
use crate::events::RunStart;

/// A held job: claimed and not yet released.
pub(super) struct Held {
    pub lost: CancellationToken,
    /// Killed by the shutdown deadline rather than a lost lease: released
    /// as retry.
    pub aborted: bool,
    /// Finished and queued for release: the completer forgets it.
    pub releasing: bool,
    /// Cancelled while it ran (the store marked it): its run is stopped
    /// and it is archived as `cancelled`, whatever the run answered.
    pub cancelled: bool,
    pub created: i64,
    /// When this daemon claimed it (a run's length is counted from it).
    pub claimed: i64,
    pub limits: Limits,
    /// The run as handed out, while job events are on.
    pub run: Option<Box<RunStart>>,
    /// Its rule and times, when it repeats.
    pub repeat: Option<Box<super::policy::Repeating>>,
}

/// This daemon's held jobs, by id.
pub(super) type HeldMap = Arc<Mutex<HashMap<String, Held>>>;

/// The held jobs, locked (a panic while locked poisons nothing).
pub(super) fn lock(held: &HeldMap) -> MutexGuard<'_, HashMap<String, Held>> {
    held.lock().unwrap_or_else(|e| e.into_inner())
}
