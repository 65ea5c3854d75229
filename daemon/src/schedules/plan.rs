//! The planner: which slots of a stored schedule fire now, which are
//! skipped, and where its watermark and next due time move.
//!
//! Pure: no I/O and no clock reads, like the executor's scheduler. Every
//! decision is made from the stored record ([`ScheduleRecord`]), the
//! rule, `now` and what the firer read of the previous slot's job, never
//! from a daemon's memory, so any number of daemons planning one schedule
//! agree on the slots (and their job ids), and a restart, a crash between
//! the add and the advance, or a clock step neither skips nor doubles one:
//!
//! - slots are the rule's occurrences after the watermark
//!   ([`ScheduleRecord::fired_through`]), or for a new schedule after its
//!   start (or its creation), inside `[start_at, end_at)`, up to `now`;
//! - the watermark only moves forward (the store refuses an advance that
//!   would not), and a slot's job id is derived from the slot, so two
//!   firers that fire one slot add one job.

use jobstore_api::{CatchUp, Millis, Overlap, ScheduleRecord, duration_ms};

use super::rule::{Base, Rule};

/// Most slots one plan looks at: a per-second rule after a day of downtime
/// is planned over nine ticks, each bounded.
pub const MAX_SCAN: usize = 10_000;

/// Most slots one plan fires (catch-up `all` after downtime): the rest
/// fire on the next ticks.
pub const MAX_FIRE: usize = 100;

/// How late a slot may be and still count as on time (catch-up `none`),
/// and the shortest catch-up window: two of the longest firer tick
/// (`--schedule-tick` is at most 5 s).
pub const ON_TIME_MS: Millis = 10_000;

/// How often a schedule whose next slot waits for the previous job
/// (`STARTED`/`FINISHED` rules) looks at that job again.
pub const WAIT_POLL_MS: Millis = 5_000;

/// What the firer read of the job of the schedule's newest fired slot
/// ([`ScheduleRecord::last_job`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Previous {
    /// The schedule has fired nothing yet.
    None,
    /// The job is gone (deleted, or purged after it was archived).
    Gone,
    /// The job is not archived yet.
    Live,
    /// The job was archived at `finished`, after a run that started
    /// (was last claimed) at `started`.
    Ended {
        /// Its last claim.
        started: Millis,
        /// Its archive time.
        finished: Millis,
    },
}

/// What one tick does to one schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The slots to add jobs for, oldest first.
    pub fire: Vec<Millis>,
    /// How many slots are passed over without a job.
    pub skipped: u64,
    /// The new watermark: every slot at or before it is fired or skipped.
    pub fired_through: Millis,
    /// When to look at the schedule again; `None`: it has ended.
    pub next_due: Option<Millis>,
}

/// Whether planning `rec` needs the previous slot's job: for overlap
/// `skip`, and for rules that count from its start or finish.
pub fn needs_previous(rule: &Rule, rec: &ScheduleRecord) -> bool {
    rec.last_job.is_some()
        && (rec.schedule.overlap == Overlap::Skip || rule.base() != Base::Scheduled)
}

/// Plans `rec` (whose rule is `rule`) at `now`. See the module docs.
pub fn plan(rule: &Rule, rec: &ScheduleRecord, now: Millis, prev: Previous) -> Plan {
    match rule.base() {
        Base::Scheduled => plan_scheduled(rule, rec, now, prev),
        Base::Started | Base::Finished => plan_chained(rule, rec, now, prev),
    }
}

/// Where slots are counted from: after the watermark, or for a schedule
/// that never fired, from its start (a cron rule's start is a slot when it
/// is an occurrence: cron gives occurrences strictly after a time; a repeat
/// rule applies its steps to the start) or its creation.
fn origin(rule: &Rule, rec: &ScheduleRecord) -> Millis {
    let start = rec.schedule.start_at.map(|s| match rule {
        Rule::Cron { .. } => (s - 1).max(0),
        Rule::Repeat { .. } => s,
    });
    match (rec.fired_through, start) {
        (Some(w), Some(s)) => w.max(s),
        (Some(w), None) => w,
        (None, Some(s)) => s,
        (None, None) => rec.created_dt,
    }
}

/// The rule's next slot after `t` inside the schedule's end, if any.
fn next_slot(rule: &Rule, rec: &ScheduleRecord, t: Millis) -> Option<Millis> {
    let next = rule.next(t).filter(|&n| n > t)?;
    match rec.schedule.end_at {
        Some(end) if next >= end => None,
        _ => Some(next),
    }
}

fn plan_scheduled(rule: &Rule, rec: &ScheduleRecord, now: Millis, prev: Previous) -> Plan {
    let s = &rec.schedule;
    let from = origin(rule, rec);
    // The due slots, oldest first, at most MAX_SCAN of them.
    let mut due = Vec::new();
    let mut t = from;
    while due.len() < MAX_SCAN {
        match next_slot(rule, rec, t) {
            Some(next) if next <= now => {
                due.push(next);
                t = next;
            }
            _ => break,
        }
    }
    let scanned_all = due.len() < MAX_SCAN;
    // A window shorter than the on-time margin would skip slots that are
    // merely a tick late.
    let window = duration_ms(s.catch_up_window).max(ON_TIME_MS);
    let cutoff = now.saturating_sub(window);
    let live: Vec<Millis> = due.iter().copied().filter(|&d| d >= cutoff).collect();
    let mut fire: Vec<Millis> = match s.catch_up {
        CatchUp::All => live,
        CatchUp::Last => live.last().copied().into_iter().collect(),
        CatchUp::None => live
            .into_iter()
            .filter(|&d| d >= now.saturating_sub(ON_TIME_MS))
            .collect(),
    };
    if !scanned_all && (s.catch_up != CatchUp::All || s.overlap == Overlap::Skip) {
        // Newer due slots follow this chunk: it holds neither the newest
        // slot nor one on time.
        fire.clear();
    }
    if s.overlap == Overlap::Skip {
        // One run at a time: none while the previous runs, else the newest.
        if prev == Previous::Live {
            fire.clear();
        } else if fire.len() > 1 {
            fire.drain(..fire.len() - 1);
        }
    }
    // Catch-up `all` fires at most MAX_FIRE now; the watermark stops at
    // the last of them and the rest come next tick.
    let (fire, through, more) = if fire.len() > MAX_FIRE {
        let fire: Vec<Millis> = fire[..MAX_FIRE].to_vec();
        let through = *fire.last().expect("MAX_FIRE > 0");
        (fire, through, true)
    } else {
        (fire, due.last().copied().unwrap_or(from), !scanned_all)
    };
    let considered = due.iter().filter(|&&d| d <= through).count();
    let next_due = if more {
        Some(now)
    } else {
        next_slot(rule, rec, through)
    };
    Plan {
        skipped: (considered - fire.len()) as u64,
        fire,
        fired_through: through,
        next_due,
    }
}

/// `STARTED`/`FINISHED` rules: one slot outstanding at a time, counted
/// from the previous job's claim or archive time (stored, so every firer
/// derives the same slot). Catch-up does not apply: a late slot fires
/// once, late.
fn plan_chained(rule: &Rule, rec: &ScheduleRecord, now: Millis, prev: Previous) -> Plan {
    let through = origin(rule, rec);
    let wait = |next_due| Plan {
        fire: Vec::new(),
        skipped: 0,
        fired_through: through,
        next_due,
    };
    let base = match prev {
        Previous::Live => return wait(Some(now.saturating_add(WAIT_POLL_MS))),
        Previous::None => through,
        // The previous run's times are lost (deleted, or purged by the
        // retention): count from its slot.
        Previous::Gone => through,
        Previous::Ended { started, finished } => match rule.base() {
            Base::Started => started,
            _ => finished,
        },
    };
    // The slot must come after the watermark (a run that ended before its
    // own slot, by an edit, cannot bring the next one back).
    let mut slot = next_slot(rule, rec, base);
    for _ in 0..MAX_SCAN {
        match slot {
            Some(t) if t <= through => slot = next_slot(rule, rec, t),
            _ => break,
        }
    }
    match slot {
        None => wait(None),
        Some(t) if t <= through => wait(None),
        Some(t) if t > now => wait(Some(t)),
        Some(t) => Plan {
            fire: vec![t],
            skipped: 0,
            fired_through: t,
            next_due: Some(now.saturating_add(WAIT_POLL_MS)),
        },
    }
}

/// The first `n` slots of a schedule from `now` on, for showing: a cron
/// or `SCHEDULED` rule's next occurrences (inside the start and end), or
/// for `STARTED`/`FINISHED` rules the slots if every run took no time.
pub fn upcoming(rule: &Rule, rec: &ScheduleRecord, now: Millis, n: usize) -> Vec<Millis> {
    let mut out = Vec::with_capacity(n);
    let mut t = origin(rule, rec).max(now);
    while out.len() < n {
        match next_slot(rule, rec, t) {
            Some(next) => {
                out.push(next);
                t = next;
            }
            None => break,
        }
    }
    out
}

/// When a schedule set at `now` is first due: its first slot after its
/// origin, or now for a `STARTED`/`FINISHED` rule that has a job to wait
/// for; `None` if it never fires.
pub fn first_due(rule: &Rule, rec: &ScheduleRecord, now: Millis) -> Option<Millis> {
    if rule.base() != Base::Scheduled && rec.last_job.is_some() {
        return Some(now);
    }
    let from = origin(rule, rec);
    next_slot(rule, rec, from).map(|t| t.max(from))
}

#[cfg(test)]
mod tests;
