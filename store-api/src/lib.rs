#![doc = include_str!("../README.md")]

pub mod batch;
pub mod error;
pub mod flow;
pub mod history;
pub mod layer;
pub mod limits;
mod manage;
mod memory;
pub mod schedule;
pub mod stats;
mod store;
mod trace;
pub mod types;
pub mod validate;
mod watch;

pub use error::{BoxError, Error, ErrorKind, Result};
pub use flow::{
    DependencyFailure, Duplicate, EdgeState, FlowState, JobFlow, OnConflict, Refusal, Repeat,
    StoredDeps, Unique, WaitEdge, Waits,
};
pub use history::{EventKind, JobEvent, PendingClaim};
pub use manage::*;
pub use memory::MemoryStore;
pub use schedule::{CatchUp, Overlap, Schedule, ScheduleAdvance, ScheduleRecord};
pub use stats::{Durations, StatsBucket, StatsDelta, StatsQuery, StatsResolution};
pub use store::{JobStore, JobStoreExt};
pub use trace::TraceContext;
pub use types::*;
pub use watch::{Wakeup, WorkNotice, WorkWatcher};

/// A new random secret (sysid lease tokens), 32 hex digits.
pub fn new_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
