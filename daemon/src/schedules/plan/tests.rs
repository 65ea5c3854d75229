use std::collections::BTreeSet;
use std::time::Duration;

use jobstore_api::{CatchUp, Overlap, Schedule, ScheduleAdvance, ScheduleRecord};
use proptest::prelude::*;

use super::*;

const SEC: Millis = 1_000;
const MIN: Millis = 60 * SEC;
/// 2026-12-07T06:00:00Z, a Monday.
const T0: Millis = 1_796_623_200_000;

fn record(rule: &str, catch_up: CatchUp, overlap: Overlap) -> ScheduleRecord {
    ScheduleRecord {
        schedule: Schedule {
            catch_up,
            overlap,
            catch_up_window: Duration::from_secs(3_600),
            ..Schedule::new("acme-s", rule, "acme-t")
        },
        version: 1,
        paused: false,
        created_dt: T0,
        updated_dt: T0,
        fired_through: None,
        last_job: None,
        next_due: None,
        fired: 0,
        skipped: 0,
    }
}

fn rule(text: &str) -> Rule {
    Rule::parse(text, "UTC").unwrap()
}

fn at(rec: &ScheduleRecord, through: Millis) -> ScheduleRecord {
    ScheduleRecord {
        fired_through: Some(through),
        last_job: Some("acme-s@x".into()),
        ..rec.clone()
    }
}

#[test]
fn a_new_schedule_fires_its_first_slot_after_creation() {
    let rec = record("* * * * *", CatchUp::Last, Overlap::Allow);
    let r = rule("* * * * *");
    assert_eq!(first_due(&r, &rec, T0), Some(T0 + MIN));
    // Nothing due yet: the watermark stays at the origin, next due kept.
    let p = plan(&r, &rec, T0 + 30 * SEC, Previous::None);
    assert_eq!(
        p,
        Plan {
            fire: vec![],
            skipped: 0,
            fired_through: T0,
            next_due: Some(T0 + MIN)
        }
    );
    let p = plan(&r, &rec, T0 + MIN, Previous::None);
    assert_eq!(p.fire, vec![T0 + MIN]);
    assert_eq!(
        (p.fired_through, p.next_due),
        (T0 + MIN, Some(T0 + 2 * MIN))
    );
}

#[test]
fn catch_up_all_fires_every_missed_slot_inside_the_window() {
    let rec = at(&record("* * * * *", CatchUp::All, Overlap::Allow), T0);
    let r = rule("* * * * *");
    // 90 minutes down: the window is an hour, so the 30 slots before
    // now - 1 h are skipped.
    let now = T0 + 90 * MIN + 5 * SEC;
    let p = plan(&r, &rec, now, Previous::Gone);
    assert_eq!(p.fire.len(), 60);
    assert_eq!(p.fire[0], T0 + 31 * MIN, "the oldest inside the window");
    assert_eq!(*p.fire.last().unwrap(), T0 + 90 * MIN);
    assert_eq!(p.skipped, 30);
    assert_eq!(p.fired_through, T0 + 90 * MIN);
    assert_eq!(p.next_due, Some(T0 + 91 * MIN));
}

#[test]
fn catch_up_all_fires_at_most_max_fire_per_plan_and_goes_on_next_tick() {
    let mut rec = at(&record("* * * * * *", CatchUp::All, Overlap::Allow), T0);
    let r = rule("* * * * * *");
    let now = T0 + 250 * SEC;
    let p = plan(&r, &rec, now, Previous::Gone);
    assert_eq!(p.fire.len(), MAX_FIRE);
    assert_eq!(p.fired_through, T0 + MAX_FIRE as Millis * SEC);
    assert_eq!((p.skipped, p.next_due), (0, Some(now)));
    rec.fired_through = Some(p.fired_through);
    let p = plan(&r, &rec, now, Previous::Gone);
    assert_eq!(p.fire[0], T0 + 101 * SEC);
    assert_eq!(p.fired_through, T0 + 200 * SEC);
    rec.fired_through = Some(p.fired_through);
    let p = plan(&r, &rec, now, Previous::Gone);
    assert_eq!(p.fire.len(), 50);
    assert_eq!(p.next_due, Some(now + SEC));
}

#[test]
fn catch_up_last_fires_the_newest_and_skips_the_rest() {
    let rec = at(&record("*/5 * * * *", CatchUp::Last, Overlap::Allow), T0);
    let r = rule("*/5 * * * *");
    let p = plan(&r, &rec, T0 + 22 * MIN, Previous::Gone);
    assert_eq!(p.fire, vec![T0 + 20 * MIN]);
    assert_eq!(p.skipped, 3);
    assert_eq!(
        (p.fired_through, p.next_due),
        (T0 + 20 * MIN, Some(T0 + 25 * MIN))
    );
}

#[test]
fn catch_up_none_fires_only_slots_on_time() {
    let rec = at(&record("*/5 * * * *", CatchUp::None, Overlap::Allow), T0);
    let r = rule("*/5 * * * *");
    let late = plan(&r, &rec, T0 + 22 * MIN, Previous::Gone);
    assert!(late.fire.is_empty());
    assert_eq!((late.skipped, late.fired_through), (4, T0 + 20 * MIN));
    let on_time = plan(&r, &rec, T0 + 20 * MIN + ON_TIME_MS, Previous::Gone);
    assert_eq!(on_time.fire, vec![T0 + 20 * MIN]);
    assert_eq!(on_time.skipped, 3);
}

#[test]
fn overlap_skip_skips_while_the_previous_job_runs() {
    let rec = at(&record("* * * * *", CatchUp::All, Overlap::Skip), T0);
    let r = rule("* * * * *");
    assert!(needs_previous(&r, &rec));
    let p = plan(&r, &rec, T0 + 3 * MIN, Previous::Live);
    assert!(p.fire.is_empty());
    assert_eq!((p.skipped, p.fired_through), (3, T0 + 3 * MIN));
    // Once it ended: one run, the newest slot, even with catch-up all.
    let p = plan(
        &r,
        &rec,
        T0 + 3 * MIN,
        Previous::Ended {
            started: T0,
            finished: T0 + SEC,
        },
    );
    assert_eq!(p.fire, vec![T0 + 3 * MIN]);
    assert_eq!(p.skipped, 2);
    assert!(!needs_previous(
        &r,
        &record("* * * * *", CatchUp::All, Overlap::Allow)
    ));
}

#[test]
fn start_and_end_bound_the_slots() {
    let mut rec = record("*/10 * * * *", CatchUp::All, Overlap::Allow);
    rec.schedule.start_at = Some(T0 + 20 * MIN);
    rec.schedule.end_at = Some(T0 + 40 * MIN);
    let r = rule("*/10 * * * *");
    assert_eq!(
        first_due(&r, &rec, T0),
        Some(T0 + 20 * MIN),
        "the start is a slot"
    );
    assert_eq!(
        upcoming(&r, &rec, T0, 5),
        vec![T0 + 20 * MIN, T0 + 30 * MIN]
    );
    let p = plan(&r, &rec, T0 + 45 * MIN, Previous::None);
    assert_eq!(p.fire, vec![T0 + 20 * MIN, T0 + 30 * MIN]);
    assert_eq!(p.next_due, None, "the end is not a slot: ended");
    // Past the window, the slots are skipped, and the schedule ends too.
    let p = plan(&r, &rec, T0 + 2 * 3_600 * SEC, Previous::None);
    assert_eq!((p.fire.len(), p.skipped, p.next_due), (0, 2, None));
}

#[test]
fn finished_rules_count_from_the_previous_runs_archive() {
    let text = "FINISHED, +10 MINUTES";
    let rec = record(text, CatchUp::Last, Overlap::Allow);
    let r = rule(text);
    // Never fired: from creation.
    assert_eq!(first_due(&r, &rec, T0), Some(T0 + 10 * MIN));
    let p = plan(&r, &rec, T0 + 10 * MIN, Previous::None);
    assert_eq!(p.fire, vec![T0 + 10 * MIN]);
    assert_eq!(p.next_due, Some(T0 + 10 * MIN + WAIT_POLL_MS));
    let rec = at(&rec, T0 + 10 * MIN);
    // Running: look again later.
    let p = plan(&r, &rec, T0 + 11 * MIN, Previous::Live);
    assert!(p.fire.is_empty());
    assert_eq!(
        (p.fired_through, p.next_due),
        (T0 + 10 * MIN, Some(T0 + 11 * MIN + WAIT_POLL_MS))
    );
    // Finished at +13: the next slot is +23, not due yet, then due.
    let ended = Previous::Ended {
        started: T0 + 12 * MIN,
        finished: T0 + 13 * MIN,
    };
    let p = plan(&r, &rec, T0 + 14 * MIN, ended);
    assert_eq!((p.fire.len(), p.next_due), (0, Some(T0 + 23 * MIN)));
    let p = plan(&r, &rec, T0 + 40 * MIN, ended);
    assert_eq!(p.fire, vec![T0 + 23 * MIN], "late: fires once, at its slot");
    // STARTED counts from the claim.
    let r = rule("STARTED, +10 MINUTES");
    let p = plan(&r, &rec, T0 + 40 * MIN, ended);
    assert_eq!(p.fire, vec![T0 + 22 * MIN]);
}

#[test]
fn a_chained_slot_never_goes_back_behind_the_watermark() {
    let text = "FINISHED, START OF DAY, +1 DAY";
    let rec = at(
        &record(text, CatchUp::Last, Overlap::Allow),
        T0 + 86_400 * SEC,
    );
    let r = rule(text);
    // A run that ended before the watermark's day (an edit made it run
    // early): the next slot is still after the watermark.
    let ended = Previous::Ended {
        started: T0 - 3_600 * SEC,
        finished: T0 - 3_000 * SEC,
    };
    let p = plan(&r, &rec, T0 + 3 * 86_400 * SEC, ended);
    assert_eq!(p.fire.len(), 1);
    assert!(p.fire[0] > T0 + 86_400 * SEC);
}

#[test]
fn a_long_outage_of_a_per_second_rule_is_planned_in_bounded_chunks() {
    let r = rule("* * * * * *");
    for catch_up in CatchUp::ALL {
        let mut rec = at(&record("* * * * * *", catch_up, Overlap::Allow), T0);
        rec.schedule.catch_up_window = Duration::from_secs(86_400);
        let now = T0 + 25_000 * SEC;
        let mut fired = Vec::new();
        let mut rounds = 0;
        loop {
            let p = plan(&r, &rec, now, Previous::Gone);
            assert!(p.fire.len() <= MAX_FIRE);
            fired.extend(p.fire.iter().copied());
            rec.fired_through = Some(p.fired_through);
            rounds += 1;
            if p.next_due != Some(now) {
                break;
            }
        }
        match catch_up {
            CatchUp::All => assert_eq!(fired.len(), 25_000),
            CatchUp::Last => assert_eq!(fired, vec![now]),
            CatchUp::None => assert_eq!(fired.len(), 11, "the last ten seconds and now"),
        }
        assert!(rounds <= 250 + 3, "{catch_up:?}: {rounds} rounds");
    }
}

// ------------------------------------------------- many firers, one store

/// A simulated store: the schedule's record and the slots that have a job.
struct Sim {
    rec: ScheduleRecord,
    jobs: BTreeSet<Millis>,
    /// Every watermark the record held, in order.
    watermarks: Vec<Millis>,
}

impl Sim {
    /// One firer's round at its own clock `now`: read, plan, add, and
    /// advance unless it crashes between the add and the advance. Returns
    /// the slots it added that already existed.
    fn round(&mut self, r: &Rule, now: Millis, read: &ScheduleRecord, crash: bool) {
        let p = plan(r, read, now, Previous::Gone);
        for slot in &p.fire {
            self.jobs.insert(*slot);
        }
        if crash {
            return;
        }
        let adv = ScheduleAdvance {
            fired_through: p.fired_through,
            last_job: p.fire.last().map(|t| t.to_string()),
            next_due: p.next_due,
            fired: p.fire.len() as u64,
            skipped: p.skipped,
        };
        if read.version == self.rec.version && adv.applies_after(self.rec.fired_through) {
            adv.apply(&mut self.rec);
            self.watermarks.push(p.fired_through);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Three firers with skewed clocks, reading the record at random
    /// moments (so with stale copies), crashing between add and advance at
    /// random: with catch-up `all`, every slot of a per-second rule up to
    /// the end gets a job, no other time does, and the watermark never
    /// goes back.
    #[test]
    fn firers_with_skewed_clocks_and_crashes_fire_every_slot_once(
        offsets in proptest::collection::vec(-2_000i64..2_000, 3),
        steps in proptest::collection::vec((0usize..3, 1i64..1_500, any::<bool>(), 0u8..10), 20..200),
    ) {
        let r = rule("* * * * * *");
        let mut sim = Sim {
            rec: at(&record("* * * * * *", CatchUp::All, Overlap::Allow), T0),
            jobs: BTreeSet::new(),
            watermarks: Vec::new(),
        };
        let mut stale: Vec<ScheduleRecord> = vec![sim.rec.clone(); 3];
        let mut t = T0;
        for (who, dt, reread, crash) in steps {
            t += dt;
            if reread {
                stale[who] = sim.rec.clone();
            }
            let read = stale[who].clone();
            sim.round(&r, t + offsets[who], &read, crash == 0);
            stale[who] = sim.rec.clone();
        }
        // Then every firer catches up, without crashes, until nothing moves.
        let end = t + 2_000;
        for _ in 0..100 {
            let read = sim.rec.clone();
            sim.round(&r, end, &read, false);
            if sim.rec.next_due > Some(end) {
                break;
            }
        }
        let through = sim.rec.fired_through.unwrap();
        prop_assert!(through >= t - 2_000, "caught up: {through} vs {t}");
        let want: BTreeSet<Millis> = (1..).map(|i| T0 + i * SEC).take_while(|&s| s <= through).collect();
        let fired_to: BTreeSet<Millis> = sim.jobs.iter().copied().filter(|&s| s <= through).collect();
        prop_assert_eq!(&fired_to, &want);
        // Slots after the watermark were added by a firer ahead or one that
        // crashed; each is a slot of the rule.
        prop_assert!(sim.jobs.iter().all(|s| (s - T0) % SEC == 0 && *s > T0));
        prop_assert!(sim.watermarks.windows(2).all(|w| w[0] <= w[1]));
    }
}

#[test]
fn a_repeat_rule_counts_from_its_start_itself() {
    let text = "SCHEDULED, +1 DAY";
    let mut rec = record(text, CatchUp::All, Overlap::Allow);
    rec.schedule.start_at = Some(T0 + 3_600 * SEC);
    let r = rule(text);
    assert_eq!(first_due(&r, &rec, T0), Some(T0 + 25 * 3_600 * SEC));
    assert_eq!(
        upcoming(&r, &rec, T0, 2),
        vec![T0 + 25 * 3_600 * SEC, T0 + 49 * 3_600 * SEC]
    );
}

#[test]
fn only_schedules_that_fired_and_wait_on_their_job_need_the_previous_one() {
    let cron = rule("* * * * *");
    let finished = rule("FINISHED, +10 MINUTES");
    let started = rule("STARTED, +10 MINUTES");
    let fresh_skip = record("* * * * *", CatchUp::Last, Overlap::Skip);
    let fresh_allow = record("* * * * *", CatchUp::Last, Overlap::Allow);
    // Nothing fired yet: no job to read, whatever the policy or the base.
    assert!(!needs_previous(&cron, &fresh_skip));
    assert!(!needs_previous(&finished, &fresh_allow));
    assert!(!needs_previous(&started, &fresh_skip));
    // Fired: overlap `skip`, or a rule counted from the job.
    assert!(needs_previous(&cron, &at(&fresh_skip, T0)));
    assert!(!needs_previous(&cron, &at(&fresh_allow, T0)));
    assert!(needs_previous(&finished, &at(&fresh_allow, T0)));
    assert!(needs_previous(&started, &at(&fresh_allow, T0)));
}

#[test]
fn a_rule_that_does_not_move_forward_fires_nothing() {
    // A repeat rule `Rule::check` refuses: from midnight it gives midnight
    // itself, so there is no slot after the watermark.
    let text = "SCHEDULED, START OF DAY";
    let r = rule(text);
    let midnight = T0 - 6 * 3_600 * SEC;
    assert_eq!(r.next(midnight), Some(midnight));
    let rec = at(&record(text, CatchUp::All, Overlap::Allow), midnight);
    let p = plan(&r, &rec, midnight + 3 * 86_400 * SEC, Previous::Gone);
    assert_eq!(
        p,
        Plan {
            fire: vec![],
            skipped: 0,
            fired_through: midnight,
            next_due: None
        }
    );
    assert_eq!(upcoming(&r, &rec, midnight, 3), Vec::<Millis>::new());
}

#[test]
fn a_plan_looks_at_most_at_max_scan_slots() {
    // A per-second rule down for twice MAX_SCAN seconds, with a window of
    // a minute: the first plan passes over exactly MAX_SCAN slots, all
    // outside the window, and comes back at once.
    let r = rule("* * * * * *");
    let mut rec = at(&record("* * * * * *", CatchUp::All, Overlap::Allow), T0);
    rec.schedule.catch_up_window = Duration::from_secs(60);
    let now = T0 + 2 * MAX_SCAN as Millis * SEC;
    let p = plan(&r, &rec, now, Previous::Gone);
    assert_eq!(
        p,
        Plan {
            fire: vec![],
            skipped: MAX_SCAN as u64,
            fired_through: T0 + MAX_SCAN as Millis * SEC,
            next_due: Some(now)
        }
    );
}

#[test]
fn a_finished_rule_whose_last_job_is_gone_counts_from_its_slot() {
    let text = "FINISHED, +10 MINUTES";
    let rec = at(&record(text, CatchUp::Last, Overlap::Allow), T0);
    let r = rule(text);
    // Purged by the retention long ago: the next slot is late, and fires.
    let p = plan(&r, &rec, T0 + 3_600 * SEC, Previous::Gone);
    assert_eq!(p.fire, vec![T0 + 10 * MIN]);
    // Gone just now: its next slot is ahead.
    let p = plan(&r, &rec, T0 + MIN, Previous::Gone);
    assert_eq!((p.fire.len(), p.next_due), (0, Some(T0 + 10 * MIN)));
}

#[test]
fn a_window_shorter_than_a_tick_still_fires_slots_a_tick_late() {
    let mut rec = at(&record("* * * * *", CatchUp::All, Overlap::Allow), T0);
    rec.schedule.catch_up_window = Duration::ZERO;
    let r = rule("* * * * *");
    let p = plan(&r, &rec, T0 + MIN + 900, Previous::Gone);
    assert_eq!(p.fire, vec![T0 + MIN]);
    let p = plan(&r, &rec, T0 + MIN + ON_TIME_MS + 1, Previous::Gone);
    assert_eq!((p.fire.len(), p.skipped), (0, 1));
}

#[test]
fn exactly_max_fire_slots_fire_in_one_plan_that_looks_ahead() {
    let r = rule("* * * * * *");
    let rec = at(&record("* * * * * *", CatchUp::All, Overlap::Allow), T0);
    let now = T0 + MAX_FIRE as Millis * SEC;
    let p = plan(&r, &rec, now, Previous::Gone);
    assert_eq!(p.fire.len(), MAX_FIRE);
    assert_eq!(
        (p.skipped, p.fired_through, p.next_due),
        (0, now, Some(now + SEC)),
        "nothing is left for the next tick"
    );
}

#[test]
fn a_chained_slot_still_behind_the_watermark_after_max_scan_steps_fires_nothing() {
    // The previous run finished more than MAX_SCAN steps of the rule
    // before the watermark: the search gives up rather than fire a slot
    // the watermark has passed.
    let text = "FINISHED, +1 MINUTES";
    let r = rule(text);
    let through = T0 + 2 * MAX_SCAN as Millis * MIN;
    let rec = at(&record(text, CatchUp::Last, Overlap::Allow), through);
    let ended = Previous::Ended {
        started: T0 - SEC,
        finished: T0,
    };
    let p = plan(&r, &rec, through + 60 * MIN, ended);
    assert!(p.fire.is_empty(), "{p:?}");
    assert_eq!((p.skipped, p.fired_through), (0, through));
}

#[test]
fn upcoming_shows_the_next_n_slots() {
    let r = rule("*/5 * * * *");
    let rec = at(&record("*/5 * * * *", CatchUp::Last, Overlap::Allow), T0);
    assert_eq!(
        upcoming(&r, &rec, T0 + MIN, 3),
        vec![T0 + 5 * MIN, T0 + 10 * MIN, T0 + 15 * MIN]
    );
    assert_eq!(upcoming(&r, &rec, T0, 0), Vec::<Millis>::new());
}

#[test]
fn only_chained_rules_with_a_job_to_wait_for_are_due_at_once() {
    let cron = rule("* * * * *");
    let fired = at(&record("* * * * *", CatchUp::Last, Overlap::Allow), T0);
    assert_eq!(first_due(&cron, &fired, T0 + SEC), Some(T0 + MIN));
    let finished = rule("FINISHED, +10 MINUTES");
    assert_eq!(first_due(&finished, &fired, T0 + SEC), Some(T0 + SEC));
}
