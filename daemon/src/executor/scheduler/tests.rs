//! Unit tests: one rule at a time.

use jobstore_api::WaitingJobtype;

use super::*;

pub(super) fn waiting(pairs: &[(&str, u64)]) -> Vec<WaitingJobtype> {
    pairs
        .iter()
        .map(|&(jobtype, count)| WaitingJobtype {
            jobtype: jobtype.to_owned(),
            count,
        })
        .collect()
}

pub(super) fn config(
    max_running: u32,
    per_tenant: Option<u32>,
    per_jobtype: Option<u32>,
    max_batch: u32,
    empty_backoff_ms: i64,
) -> SchedulerConfig {
    SchedulerConfig {
        max_running,
        max_running_per_tenant: per_tenant,
        max_running_per_jobtype: per_jobtype,
        max_batch,
        empty_backoff_ms,
    }
}

/// The aggregate counters agree with the per-jobtype ones.
pub(super) fn assert_consistent(s: &Scheduler) {
    let (mut started, mut reserved) = (0u32, 0u32);
    for (name, t) in &s.tenants {
        let ts: u32 = t.jobtypes.values().map(|j| j.started).sum();
        let tr: u32 = t.jobtypes.values().map(|j| j.reserved).sum();
        assert_eq!(t.started, ts, "tenant {name} started");
        assert_eq!(t.reserved, tr, "tenant {name} reserved");
        for jobtype in t.jobtypes.keys() {
            assert_eq!(tenant_of(jobtype), name, "{jobtype} filed under {name}");
        }
        started += ts;
        reserved += tr;
    }
    assert_eq!(s.started, started, "global started");
    assert_eq!(s.reserved, reserved, "global reserved");
}

fn grant(jobtype: &str, count: u32) -> Grant {
    Grant {
        jobtype: jobtype.to_owned(),
        count,
    }
}

/// Admits and starts `n` jobs of `jobtype` (in as many grants as it takes).
fn start(s: &mut Scheduler, jobtype: &str, n: u32) {
    let mut left = n;
    while left > 0 {
        let g = s.admit(jobtype, left, 0).expect("room to start");
        left -= g.count;
        let count = g.count;
        s.jobs_started(g, count, 0);
    }
}

/// Selects and settles in full until nothing is granted; returns the grants.
fn drain(s: &mut Scheduler, now: Millis) -> Vec<Grant> {
    let mut out = Vec::new();
    while let Some(g) = s.select(now) {
        s.jobs_started(g.clone(), g.count, now);
        out.push(g);
        assert!(out.len() < 10_000, "select does not stop");
    }
    assert_consistent(s);
    out
}

#[test]
fn default_config() {
    let c = SchedulerConfig::default();
    assert_eq!(c, SchedulerConfig::with_slots(64));
    assert_eq!(c.max_running, 64);
    assert_eq!(c.max_running_per_tenant, None);
    assert_eq!(c.max_running_per_jobtype, Some(48));
    assert_eq!(c.max_batch, 32);
    assert_eq!(c.empty_backoff_ms, 1000);
    let c = SchedulerConfig::with_slots(1);
    assert_eq!((c.max_running_per_jobtype, c.max_batch), (Some(1), 1));
    let c = SchedulerConfig::with_slots(4);
    assert_eq!((c.max_running_per_jobtype, c.max_batch), (Some(3), 4));
    let c = SchedulerConfig::with_slots(u32::MAX);
    assert_eq!(c.max_running_per_jobtype, Some(u32::MAX / 4 * 3 + 2));
    let s = Scheduler::new(SchedulerConfig::with_slots(0));
    assert_eq!(s.free(), 0);
}

#[test]
fn nothing_waiting_nothing_granted() {
    let mut s = Scheduler::new(SchedulerConfig::default());
    assert_eq!(s.select(0), None);
    s.set_waiting(&waiting(&[("a-x", 0)]), 0);
    assert_eq!(s.select(0), None);
    assert_eq!(s.snapshot().tenants, vec![]);
    s.set_waiting(&waiting(&[("a-x", 3)]), 0);
    assert_eq!(s.select(0), Some(grant("a-x", 3)));
    assert_eq!(s.select(0), None, "all 3 known waiting are granted");
    assert_eq!(s.running(), 3);
    assert_eq!(s.running_of("a-x"), 3);
    assert_eq!(s.running_of_tenant("a"), 3);
    assert_eq!(s.free(), 61);
}

#[test]
fn no_slots_no_grant() {
    let mut s = Scheduler::new(config(0, None, None, 8, 0));
    s.set_waiting(&waiting(&[("a-x", 3)]), 0);
    assert_eq!(s.select(0), None);
    assert_eq!(s.admit("a-x", 1, 0), None);
}

#[test]
fn grant_is_min_of_batch_waiting_free_and_caps() {
    let mut s = Scheduler::new(config(10, None, None, 4, 0));
    s.set_waiting(&waiting(&[("a-x", 100)]), 0);
    assert_eq!(s.select(0), Some(grant("a-x", 4)), "batch");
    assert_eq!(s.select(0), Some(grant("a-x", 4)), "batch");
    assert_eq!(s.select(0), Some(grant("a-x", 2)), "free");
    assert_eq!(s.select(0), None);

    let mut s = Scheduler::new(config(10, Some(5), None, 8, 0));
    s.set_waiting(&waiting(&[("a-x", 100)]), 0);
    assert_eq!(s.select(0), Some(grant("a-x", 5)), "tenant cap");
    assert_eq!(s.select(0), None);

    let mut s = Scheduler::new(config(10, None, Some(3), 8, 0));
    s.set_waiting(&waiting(&[("a-x", 100)]), 0);
    assert_eq!(s.select(0), Some(grant("a-x", 3)), "jobtype cap");
    assert_eq!(s.select(0), None);
    s.set_jobtype_cap("a-x", Some(7));
    assert_eq!(s.select(0), Some(grant("a-x", 4)), "own cap wins");
    s.set_jobtype_cap("a-x", None);
    s.jobs_stopped("a-x", 5, 0); // nothing started yet: nothing stops
    assert_eq!(s.running_of("a-x"), 7);
}

#[test]
fn batch_zero_is_one_and_batch_is_at_most_max_claim() {
    let mut s = Scheduler::new(config(10, None, None, 0, 0));
    s.set_waiting(&waiting(&[("a-x", 100)]), 0);
    assert_eq!(s.select(0), Some(grant("a-x", 1)));
    let mut s = Scheduler::new(config(5000, None, None, u32::MAX, 0));
    s.set_waiting(&waiting(&[("a-x", 100_000)]), 0);
    assert_eq!(s.select(0), Some(grant("a-x", 1000)));
    assert_eq!(s.admit("a-x", 5000, 0), Some(grant("a-x", 1000)));
}

#[test]
fn outstanding_grants_never_exceed_known_waiting() {
    let mut s = Scheduler::new(config(100, None, None, 3, 0));
    s.set_waiting(&waiting(&[("a-x", 7)]), 0);
    let g1 = s.select(0).unwrap();
    let g2 = s.select(0).unwrap();
    let g3 = s.select(0).unwrap();
    assert_eq!((g1.count, g2.count, g3.count), (3, 3, 1));
    assert_eq!(s.select(0), None);
    s.jobs_started(g1, 3, 0);
    assert_eq!(s.select(0), None, "4 still waiting, 4 still reserved");
    assert_eq!(s.snapshot().tenants[0].jobtypes[0].waiting, 4);
}

#[test]
fn jobs_started_frees_the_rest_and_tracks_waiting() {
    let mut s = Scheduler::new(config(100, None, None, 10, 1000));
    s.set_waiting(&waiting(&[("a-x", 25)]), 0);
    let g = s.select(0).unwrap();
    assert_eq!(g.count, 10);
    s.jobs_started(g, 10, 0);
    assert_eq!((s.running(), s.running_of("a-x")), (10, 10));
    let snap = s.snapshot();
    assert_eq!(snap.running, 10);
    assert_eq!(snap.reserved, 0);
    assert_eq!(snap.tenants[0].jobtypes[0].waiting, 15);

    // A short claim: the store had fewer, so nothing more is known waiting.
    let g = s.select(0).unwrap();
    assert_eq!(g.count, 10);
    s.jobs_started(g, 4, 0);
    assert_eq!(s.running(), 14);
    assert_eq!(s.snapshot().tenants[0].jobtypes[0].waiting, 0);
    assert_eq!(s.select(0), None);
    // ...and no backoff, since it got some.
    s.set_waiting(&waiting(&[("a-x", 2)]), 1);
    assert_eq!(s.select(1), Some(grant("a-x", 2)));
}

#[test]
fn empty_claim_backs_off_until_the_time_or_a_hint() {
    let mut s = Scheduler::new(config(100, None, None, 10, 1000));
    s.set_waiting(&waiting(&[("a-x", 5)]), 0);
    let g = s.select(100).unwrap();
    s.jobs_started(g, 0, 100);
    assert_eq!(s.running(), 0);
    let j = &s.snapshot().tenants[0].jobtypes[0];
    assert_eq!(j.backoff_until, Some(1100));
    // A report that may predate the claim does not end the backoff...
    s.set_waiting(&waiting(&[("a-x", 5)]), 500);
    assert_eq!(s.select(500), None);
    assert_eq!(s.select(1099), None);
    // ...time does.
    assert_eq!(s.select(1100), Some(grant("a-x", 5)));

    // A hint ends it at once.
    let mut s = Scheduler::new(config(100, None, None, 10, 1000));
    s.set_waiting(&waiting(&[("a-x", 5)]), 0);
    let g = s.select(0).unwrap();
    s.jobs_started(g, 0, 0);
    s.set_waiting(&waiting(&[("a-x", 5)]), 10);
    assert_eq!(s.select(10), None);
    s.hint("a-x", 20);
    assert_eq!(s.select(20), Some(grant("a-x", 5)));
}

#[test]
fn backoff_ends_if_the_clock_goes_back() {
    let mut s = Scheduler::new(config(100, None, None, 10, 1000));
    s.set_waiting(&waiting(&[("a-x", 5)]), 0);
    let g = s.select(5000).unwrap();
    s.jobs_started(g, 0, 5000);
    s.set_waiting(&waiting(&[("a-x", 5)]), 5000);
    assert_eq!(s.select(5500), None);
    assert_eq!(s.select(4999), Some(grant("a-x", 5)));
}

#[test]
fn no_backoff_when_disabled() {
    let mut s = Scheduler::new(config(100, None, None, 10, 0));
    s.set_waiting(&waiting(&[("a-x", 5)]), 0);
    let g = s.select(0).unwrap();
    s.jobs_started(g, 0, 0);
    assert_eq!(s.snapshot().tenants, vec![], "nothing left to remember");
    s.set_waiting(&waiting(&[("a-x", 5)]), 0);
    assert!(s.select(0).is_some());
}

#[test]
fn a_hint_counts_as_waiting_and_grows_with_full_claims() {
    let mut s = Scheduler::new(config(100, None, None, 10, 1000));
    s.hint("a-x", 0);
    let mut sizes = Vec::new();
    for _ in 0..6 {
        let g = s.select(0).unwrap();
        sizes.push(g.count);
        s.jobs_started(g.clone(), g.count, 0);
    }
    assert_eq!(sizes, vec![1, 2, 4, 8, 10, 10]);
    // A short claim ends it: the store is dry.
    let g = s.select(0).unwrap();
    s.jobs_started(g, 3, 0);
    assert_eq!(s.select(0), None);
    assert!(!s.snapshot().tenants[0].jobtypes[0].hinted);

    // set_waiting ends it too, and its count takes over.
    s.hint("a-y", 0);
    assert!(s.snapshot().tenants[0].jobtypes[1].hinted);
    s.set_waiting(&waiting(&[("a-x", 2)]), 0);
    assert_eq!(s.select(0), Some(grant("a-x", 2)));
    assert_eq!(s.select(0), None);

    // A hint does not lower a known count.
    s.set_waiting(&waiting(&[("a-z", 7)]), 0);
    s.hint("a-z", 0);
    assert_eq!(s.select(0), Some(grant("a-z", 7)));
}

#[test]
fn empty_hint_is_ignored() {
    let mut s = Scheduler::new(SchedulerConfig::default());
    s.hint("", 0);
    assert_eq!(s.select(0), None);
    assert_eq!(s.snapshot().tenants, vec![]);
}

#[test]
fn hint_for_a_jobtype_without_work_backs_off_after_an_empty_claim() {
    let mut s = Scheduler::new(config(100, None, None, 10, 1000));
    s.hint("a-x", 0);
    let g = s.select(0).unwrap();
    assert_eq!(g.count, 1);
    s.jobs_started(g, 0, 0);
    assert_eq!(s.select(1), None);
    assert_eq!(
        s.snapshot().tenants[0].jobtypes[0].backoff_until,
        Some(1000)
    );
}

#[test]
fn caps_per_tenant_and_overrides() {
    let mut s = Scheduler::new(config(100, Some(4), None, 10, 0));
    s.set_tenant_cap("b", Some(6));
    s.set_waiting(&waiting(&[("a-x", 50), ("a-y", 50), ("b-x", 50)]), 0);
    drain(&mut s, 0);
    assert_eq!(s.running_of_tenant("a"), 4);
    assert_eq!(s.running_of_tenant("b"), 6);
    s.set_tenant_cap("b", None);
    assert_eq!(s.select(0), None, "b is at the default cap");
    s.set_tenant_cap("a", Some(5));
    assert_eq!(s.select(0).map(|g| g.count), Some(1));
    let snap = s.snapshot();
    assert_eq!(snap.tenants[0].cap, Some(5));
    assert_eq!(snap.tenants[1].cap, Some(4));
}

#[test]
fn a_lowered_cap_stops_nothing_but_blocks_grants() {
    let mut s = Scheduler::new(config(100, None, None, 10, 0));
    s.set_waiting(&waiting(&[("a-x", 50)]), 0);
    drain(&mut s, 0);
    assert_eq!(s.running_of("a-x"), 50);
    s.set_jobtype_cap("a-x", Some(10));
    s.set_waiting(&waiting(&[("a-x", 50)]), 0);
    s.jobs_stopped("a-x", 30, 0);
    assert_eq!(s.running_of("a-x"), 20);
    assert_eq!(s.select(0), None);
    s.jobs_stopped("a-x", 15, 0);
    assert_eq!(s.select(0), Some(grant("a-x", 5)));
}

#[test]
fn a_zero_cap_pauses() {
    let mut s = Scheduler::new(config(100, None, None, 10, 0));
    s.set_jobtype_cap("a-x", Some(0));
    s.set_tenant_cap("b", Some(0));
    s.set_waiting(&waiting(&[("a-x", 5), ("b-x", 5)]), 0);
    assert_eq!(s.select(0), None);
    assert_eq!(s.admit("a-x", 5, 0), None);
    assert_eq!(s.admit("b-y", 5, 0), None);
}

#[test]
fn admit_honours_caps_and_ignores_waiting_and_backoff() {
    let mut s = Scheduler::new(config(10, Some(6), Some(4), 3, 1000));
    assert_eq!(s.admit("a-x", 0, 0), None);
    assert_eq!(s.admit("a-x", 100, 0), Some(grant("a-x", 3)), "batch");
    assert_eq!(s.admit("a-x", 100, 0), Some(grant("a-x", 1)), "jobtype cap");
    assert_eq!(s.admit("a-x", 100, 0), None);
    assert_eq!(s.admit("a-y", 100, 0), Some(grant("a-y", 2)), "tenant cap");
    assert_eq!(s.admit("b-x", 100, 0), Some(grant("b-x", 3)));
    assert_eq!(s.admit("b-x", 100, 0), Some(grant("b-x", 1)), "global");
    assert_eq!(s.admit("c-x", 100, 0), None);
    assert_eq!(s.running(), 10);
    // An empty fetch starts a backoff for select, not for admit.
    s.jobs_started(grant("b-x", 3), 0, 0);
    s.set_waiting(&waiting(&[("b-x", 5)]), 0);
    assert_eq!(s.select(0), None);
    assert_eq!(s.admit("b-x", 2, 0), Some(grant("b-x", 2)));
}

#[test]
fn bogus_stops_saturate() {
    let mut s = Scheduler::new(config(10, None, None, 10, 0));
    s.jobs_stopped("nobody-x", 5, 0);
    s.jobs_stopped("", u32::MAX, 0);
    s.set_waiting(&waiting(&[("a-x", 3)]), 0);
    let g = s.select(0).unwrap();
    s.jobs_stopped("a-x", 3, 0); // reserved, not started: nothing stops
    assert_eq!(s.running(), 3);
    s.jobs_started(g, 3, 0);
    s.jobs_stopped("a-x", 100, 0);
    assert_eq!(s.running(), 0);
    assert_eq!(s.running_of("a-x"), 0);
    assert_eq!(s.running_of_tenant("a"), 0);
    assert_eq!(s.free(), 10);
    assert_consistent(&s);
}

#[test]
fn bogus_settlements_change_nothing_they_should_not() {
    let mut s = Scheduler::new(config(10, None, None, 10, 1000));
    s.jobs_started(grant("nobody-x", 5), 5, 0);
    s.jobs_started(grant("", 0), 0, 0);
    assert_eq!(s.running(), 0);
    s.set_waiting(&waiting(&[("a-x", 8)]), 0);
    let g = s.select(0).unwrap();
    assert_eq!(g.count, 8);
    // More than granted counts as the grant.
    s.jobs_started(g.clone(), 50, 0);
    assert_eq!(s.running(), 8);
    // Settled twice: nothing is reserved any more, so nothing changes (no
    // backoff either).
    s.jobs_started(g, 0, 0);
    assert_eq!(s.running(), 8);
    assert_eq!(s.snapshot().tenants[0].jobtypes[0].backoff_until, None);
    // A grant larger than what is reserved settles only what is.
    s.set_waiting(&waiting(&[("a-x", 1)]), 0);
    let g = s.select(0).unwrap();
    assert_eq!(g.count, 1);
    s.jobs_started(grant("a-x", 2), 2, 0);
    assert_eq!(s.running(), 9);
    s.jobs_started(grant("a-x", 0), 0, 0);
    assert_eq!(s.running(), 9);
    assert_consistent(&s);
}

#[test]
fn idle_jobtypes_and_tenants_are_forgotten() {
    let mut s = Scheduler::new(config(10, None, None, 10, 1000));
    s.set_waiting(&waiting(&[("a-x", 2), ("b-x", 1)]), 0);
    let g = s.select(0).unwrap();
    s.jobs_started(g.clone(), g.count, 0);
    let g = s.select(0).unwrap();
    s.jobs_started(g.clone(), g.count, 0);
    assert_eq!(s.snapshot().tenants.len(), 2);
    s.jobs_stopped("a-x", 2, 0);
    s.jobs_stopped("b-x", 1, 0);
    assert_eq!(s.snapshot().tenants, vec![], "forgotten on their last stop");

    // Backoff, caps and hints keep them; set_waiting forgets the rest.
    s.set_waiting(&waiting(&[("a-x", 2), ("b-x", 1), ("c-x", 1)]), 0);
    s.set_jobtype_cap("a-x", Some(3));
    s.set_tenant_cap("d", Some(3));
    s.hint("e-x", 0);
    let g = s.admit("b-x", 1, 0).unwrap();
    s.jobs_started(g, 0, 0); // b-x backs off until 1000
    s.set_waiting(&[], 500);
    let names = |s: &Scheduler| {
        s.snapshot()
            .tenants
            .iter()
            .map(|t| {
                let mut names = vec![t.tenant.clone()];
                names.extend(t.jobtypes.iter().map(|j| j.jobtype.clone()));
                names.join(" ")
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&s), vec!["a a-x", "b b-x", "d"]);
    s.set_waiting(&[], 1000);
    assert_eq!(names(&s), vec!["a a-x", "d"]);
    s.set_jobtype_cap("a-x", None);
    s.set_tenant_cap("d", None);
    assert_eq!(names(&s), vec!["a a-x"], "a tenant goes with its cap");
    s.set_waiting(&[], 1000);
    assert_eq!(s.snapshot().tenants, vec![]);
}

#[test]
fn any_stop_forgets_a_jobtype_whose_backoff_ended() {
    let mut s = Scheduler::new(config(10, None, None, 4, 1));
    s.hint("z-q", 0);
    let g = s.select(0).unwrap();
    s.jobs_started(g, 0, 0);
    assert_eq!(s.snapshot().tenants.len(), 1, "backing off");
    s.jobs_stopped("z-q", 0, 1);
    assert_eq!(s.snapshot().tenants, vec![]);
}

#[test]
fn fewest_running_tenant_first() {
    let mut s = Scheduler::new(config(100, None, None, 1, 0));
    // a has 5 running, b 2, c none.
    start(&mut s, "a-x", 5);
    start(&mut s, "b-x", 2);
    s.set_waiting(&waiting(&[("a-x", 100), ("b-x", 100), ("c-x", 100)]), 0);
    let order: Vec<String> = (0..9)
        .map(|_| tenant_of(&s.select(0).unwrap().jobtype).to_owned())
        .collect();
    // c catches up with b, then both with a (taking turns), then a joins.
    assert_eq!(order, ["c", "c", "b", "c", "b", "c", "b", "c", "a"]);
}

#[test]
fn ties_go_round_robin_and_newcomers_join_the_end() {
    let mut s = Scheduler::new(config(100, None, None, 1, 0));
    s.set_waiting(&waiting(&[("a-x", 100), ("b-x", 100), ("c-x", 100)]), 0);
    let mut order = Vec::new();
    for _ in 0..3 {
        let g = s.select(0).unwrap();
        order.push(tenant_of(&g.jobtype).to_owned());
        s.jobs_started(g.clone(), 1, 0);
        s.jobs_stopped(&g.jobtype, 1, 0); // loads stay equal
    }
    assert_eq!(order, ["a", "b", "c"]);
    s.set_waiting(
        &waiting(&[("a-x", 100), ("b-x", 100), ("c-x", 100), ("0-x", 100)]),
        0,
    );
    for _ in 0..8 {
        let g = s.select(0).unwrap();
        order.push(tenant_of(&g.jobtype).to_owned());
        s.jobs_started(g.clone(), 1, 0);
        s.jobs_stopped(&g.jobtype, 1, 0);
    }
    assert_eq!(order[3..], ["a", "b", "c", "0", "a", "b", "c", "0"]);
}

#[test]
fn config_is_the_one_it_was_made_with() {
    let c = config(7, Some(5), Some(3), 2, 250);
    assert_ne!(c, SchedulerConfig::default());
    assert_eq!(Scheduler::new(c.clone()).config(), &c);
}

/// Within a tenant, as among tenants: a jobtype the scheduler has just
/// learnt about joins the end of the round robin, even when its name sorts
/// first and the jobtype ahead of it was served last.
#[test]
fn a_new_jobtype_joins_the_end_of_its_tenants_round_robin() {
    let mut s = Scheduler::new(config(100, None, None, 1, 0));
    s.set_waiting(&waiting(&[("a-y", 100)]), 0);
    let g = s.select(0).unwrap();
    s.jobs_started(g.clone(), 1, 0);
    s.jobs_stopped(&g.jobtype, 1, 0); // loads stay equal
    s.set_waiting(&waiting(&[("a-y", 100), ("a-x", 100)]), 0);
    let mut order = Vec::new();
    for _ in 0..4 {
        let g = s.select(0).unwrap();
        order.push(g.jobtype.clone());
        s.jobs_started(g.clone(), 1, 0);
        s.jobs_stopped(&g.jobtype, 1, 0);
    }
    assert_eq!(order, ["a-y", "a-x", "a-y", "a-x"]);
}

#[test]
fn within_a_tenant_fewest_running_jobtype_first() {
    let mut s = Scheduler::new(config(100, None, None, 1, 0));
    start(&mut s, "a-x", 3);
    s.set_waiting(&waiting(&[("a-x", 100), ("a-y", 100), ("a-z", 100)]), 0);
    let picks: Vec<String> = (0..8).map(|_| s.select(0).unwrap().jobtype).collect();
    assert_eq!(
        picks,
        ["a-y", "a-z", "a-y", "a-z", "a-y", "a-z", "a-x", "a-y"]
    );
}

#[test]
fn fair_share_of_the_free_slots() {
    // Equal loads: ceil(free / eligible tenants).
    let mut s = Scheduler::new(config(64, None, None, 64, 0));
    s.set_waiting(&waiting(&[("a-x", 1000), ("b-x", 1000), ("c-x", 1000)]), 0);
    let counts: Vec<u32> = drain(&mut s, 0).iter().map(|g| g.count).collect();
    assert_eq!(counts, [22, 21, 21]);

    // Unequal loads: a tenant far behind catches up in one grant.
    let mut s = Scheduler::new(config(64, None, None, 64, 0));
    let g = s.admit("a-x", 40, 0).unwrap();
    s.jobs_started(g, 40, 0);
    s.set_waiting(&waiting(&[("a-x", 1000), ("b-x", 1000)]), 0);
    // 24 free: b gets to 24 if it takes them all, a would then be at 40.
    assert_eq!(s.select(0), Some(grant("b-x", 24)));
    s.jobs_stopped("a-x", 30, 0); // a at 10, b at 24, 30 free
    // Dealing 30: a first up to 24 (14 slots), then alternately: 8 more.
    assert_eq!(s.select(0), Some(grant("a-x", 22)));

    // Within a tenant, the same between its jobtypes.
    let mut s = Scheduler::new(config(64, None, None, 64, 0));
    s.set_waiting(&waiting(&[("a-x", 1000), ("a-y", 1000)]), 0);
    let counts: Vec<u32> = drain(&mut s, 0).iter().map(|g| g.count).collect();
    assert_eq!(counts, [32, 32]);
}

#[test]
fn dealt_share_examples() {
    assert_eq!(dealt_share(10, 0, &[], 100), 10);
    assert_eq!(dealt_share(10, 0, &[0], 100), 5);
    assert_eq!(dealt_share(11, 0, &[0], 100), 6);
    assert_eq!(dealt_share(10, 0, &[0, 0, 0], 100), 3);
    assert_eq!(dealt_share(10, 0, &[20], 100), 10);
    assert_eq!(dealt_share(10, 0, &[4], 100), 7);
    assert_eq!(dealt_share(10, 0, &[4], 3), 3);
    assert_eq!(dealt_share(0, 0, &[4], 3), 0);
    assert_eq!(
        dealt_share(u32::MAX, u32::MAX - 1, &[u32::MAX; 3], u32::MAX),
        u32::MAX / 4 + 2
    );
}

#[test]
fn work_conserving_across_caps() {
    // b is capped, a's jobtype is capped, c is the only one left with room:
    // it gets the free slots rather than none.
    let mut s = Scheduler::new(config(10, None, Some(2), 10, 0));
    s.set_tenant_cap("b", Some(1));
    s.set_waiting(&waiting(&[("a-x", 100), ("b-x", 100), ("c-x", 100)]), 0);
    let grants = drain(&mut s, 0);
    assert_eq!(s.running_of("a-x"), 2);
    assert_eq!(s.running_of("b-x"), 1);
    assert_eq!(s.running_of("c-x"), 2);
    assert_eq!(grants.len(), 3);
    s.set_jobtype_cap("c-x", Some(100));
    drain(&mut s, 0);
    assert_eq!(s.running_of("c-x"), 7);
    assert_eq!(s.free(), 0);
}

#[test]
fn jobtypes_without_a_dash_are_their_own_tenant() {
    let mut s = Scheduler::new(config(10, None, None, 10, 0));
    s.set_waiting(&waiting(&[("solo", 2), ("a-x-y", 2)]), 0);
    drain(&mut s, 0);
    assert_eq!(s.running_of_tenant("solo"), 2);
    assert_eq!(s.running_of_tenant("a"), 2);
    assert_eq!(s.running_of("a-x-y"), 2);
}

#[test]
fn duplicate_waiting_entries_add_up() {
    let mut s = Scheduler::new(config(100, None, None, 100, 0));
    s.set_waiting(
        &waiting(&[("a-x", 2), ("a-x", 3), ("b-x", u64::MAX), ("b-x", 1)]),
        0,
    );
    let snap = s.snapshot();
    assert_eq!(snap.tenants[0].jobtypes[0].waiting, 5);
    assert_eq!(snap.tenants[1].jobtypes[0].waiting, u64::MAX);
}

#[test]
fn snapshot_reports_everything() {
    let mut s = Scheduler::new(config(10, Some(8), Some(6), 2, 100));
    s.set_jobtype_cap("a-y", Some(1));
    s.set_waiting(&waiting(&[("a-x", 5)]), 0);
    let g = s.select(0).unwrap();
    s.jobs_started(g, 2, 0);
    s.select(0).unwrap();
    s.hint("a-y", 0);
    let snap = s.snapshot();
    assert_eq!(
        snap,
        SchedulerSnapshot {
            max_running: 10,
            running: 2,
            reserved: 2,
            tenants: vec![TenantSnapshot {
                tenant: "a".into(),
                running: 2,
                reserved: 2,
                cap: Some(8),
                jobtypes: vec![
                    JobtypeSnapshot {
                        jobtype: "a-x".into(),
                        running: 2,
                        reserved: 2,
                        waiting: 3,
                        hinted: false,
                        backoff_until: None,
                        cap: Some(6),
                    },
                    JobtypeSnapshot {
                        jobtype: "a-y".into(),
                        running: 0,
                        reserved: 0,
                        waiting: 1,
                        hinted: true,
                        backoff_until: None,
                        cap: Some(1),
                    },
                ],
            }],
        }
    );
    // Serializable for the stats endpoint.
    let json = serde_json::to_value(&snap).unwrap();
    assert_eq!(json["tenants"][0]["jobtypes"][1]["hinted"], true);
}

#[test]
fn remote_only_jobtypes_are_admitted_but_never_selected() {
    let mut s = Scheduler::new(SchedulerConfig::with_slots(8));
    s.set_remote_only("acme-pull", true);
    s.set_waiting(
        &[jobstore_api::WaitingJobtype {
            jobtype: "acme-pull".into(),
            count: 5,
        }],
        0,
    );
    assert_eq!(s.select(0), None, "left to remote workers");
    let g = s.admit("acme-pull", 3, 0).expect("admitted");
    assert_eq!(g.count, 3);
    s.jobs_started(g, 3, 0);
    assert_eq!(s.running_of("acme-pull"), 3);
    s.set_remote_only("acme-pull", false);
    assert!(s.select(0).is_some(), "selectable again");
}
