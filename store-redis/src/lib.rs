#![doc = include_str!("../README.md")]

mod add;
mod conn;
mod decode;
mod error;
mod flow;
mod index;
mod keys;
mod manage;
mod options;
mod schedule;
mod scripts;
mod stats;
mod store;
mod watch;

pub use options::{DEFAULT_PREFIX, RedisOptions};
pub use store::RedisStore;
