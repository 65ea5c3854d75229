#![doc = include_str!("../README.md")]

mod conn;
mod error;
mod keys;
mod options;
mod scripts;
mod store;
mod watch;

pub use options::{DEFAULT_PREFIX, RedisOptions};
pub use store::RedisStore;
