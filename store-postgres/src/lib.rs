#![doc = include_str!("../README.md")]

mod error;
mod options;
mod queries;
mod stats;
mod store;
mod vacuum;
mod watch;

pub use options::{DEFAULT_SCHEMA, MAX_SCHEMA_LEN, PgStoreOptions};
pub use store::PgStore;
