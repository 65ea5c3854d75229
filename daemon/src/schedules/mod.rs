//! Schedules (recurring jobs): their rules.
//!
//! [`rule`] parses a schedule's rule (a cron pattern or a repeat rule) in a
//! time zone and computes its firing times. It is pure: no I/O and no clock
//! reads; callers pass the time. [`plan`] decides, as purely, which slots
//! of a stored schedule fire, and [`firer`] is the task that fires them.

pub mod firer;
pub mod plan;
pub mod rule;

pub use rule::{Base, Period, Rule, RuleError, Step, Unit, slot_id};
