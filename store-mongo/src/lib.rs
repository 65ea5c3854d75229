#![doc = include_str!("../README.md")]

mod conn;
mod convert;
mod deps;
mod error;
mod manage;
mod options;
mod schedules;
mod stats;
mod store;
mod unique;

pub use options::{
    DEFAULT_DATABASE, DEFAULT_TIMEOUT, DEFAULT_WTIMEOUT, MAX_PAYLOAD_PARAM, MongoOptions,
    PREFIX_PARAM, TIMEOUT_PARAM, WTIMEOUT_PARAM,
};
pub use store::{MongoStore, RoundTripHook};
