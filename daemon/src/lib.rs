#![doc = include_str!("../README.md")]

pub mod auth;
pub mod cli;
pub mod config;
mod daemon;
pub mod events;
pub mod executor;
pub mod factory;
pub mod http;
pub mod http_client;
pub mod ingest;
pub mod journal;
pub mod metrics;
pub mod runner;
pub mod schedules;
pub mod sysid;
pub mod tenant;
pub mod trace;

pub use config::Config;
pub use daemon::{Daemon, DaemonError, run};
