#![doc = include_str!("../README.md")]

pub mod journal;
pub mod scheduler;
pub mod tenant;
