#![doc = include_str!("../README.md")]

mod error;
mod options;
mod queries;
mod schedules;
mod stats;
mod store;

pub use options::{Durability, Location, SqliteOptions};
pub use store::SqliteStore;
