//! The scheduler: which jobtype the daemon claims next, and how many.
//!
//! [`Scheduler`] is a pure, synchronous state machine. It never reads a
//! clock (every call that needs the time takes `now`), does no I/O and never
//! panics, whatever it is fed. The daemon's claim loop drives it:
//!
//! ```text
//! on a wake-up:       scheduler.set_waiting(&store.waiting_jobtypes(now)?, now)
//!                     (or, for a notice about one jobtype, scheduler.hint(jobtype, now))
//! while let Some(grant) = scheduler.select(now) {
//!     let jobs = store.claim_jobs(&grant.jobtype, grant.count, owner, lease, now)?;
//!     scheduler.jobs_started(grant, jobs.len(), now);   // always settle a grant,
//!     start the jobs;                                   // also with 0 on an error
//! }
//! when jobs end:      scheduler.jobs_stopped(jobtype, n, now)
//! ```
//!
//! A remote worker that fetches jobs of a named jobtype goes through
//! [`Scheduler::admit`] instead of `select`, and settles the same way.
//!
//! # Accounting
//!
//! A *slot* is one job in flight. [`select`](Scheduler::select) and
//! [`admit`](Scheduler::admit) hand out a [`Grant`] and reserve its slots
//! at once; [`jobs_started`](Scheduler::jobs_started) turns the jobs the claim
//! got into running jobs and frees the rest;
//! [`jobs_stopped`](Scheduler::jobs_stopped) frees running slots. The *load*
//! of a jobtype or tenant is its running jobs plus its reserved slots; every
//! cap and every fairness comparison is on loads, so a grant that is still
//! being claimed already counts, and several grants may be outstanding at
//! once without breaking a cap.
//!
//! # Policy
//!
//! A jobtype is *eligible* when
//! - it has known waiting jobs that no outstanding grant already covers (the
//!   count from the last [`set_waiting`](Scheduler::set_waiting), less the
//!   jobs claimed since, or a [`hint`](Scheduler::hint)),
//! - it is not backing off after an empty claim, and
//! - its load is under its cap and its tenant's load is under the tenant's
//!   cap.
//!
//! A tenant is eligible when one of its jobtypes is. `select`, when a global
//! slot is free:
//! 1. picks, among the eligible tenants, the one with the lowest load; ties go
//!    to the one served least recently (round robin; a tenant the scheduler
//!    has just learnt about counts as the most recently served, i.e. it
//!    joins the end of the queue);
//! 2. picks, among that tenant's eligible jobtypes, the one with the lowest
//!    load, ties again by least recently served;
//! 3. grants `min(max_batch, free slots, tenant cap left, jobtype cap left,
//!    known waiting not yet granted, fair share)` jobs, at least 1.
//!
//! The *fair share* is what the tenant would get if the free slots were
//! dealt out one at a time by rule 1 to the eligible tenants (ignoring how
//! much the others could take, so it errs small): with equal loads that is
//! `ceil(free / eligible tenants)`; a tenant far below the others gets enough
//! to catch up in one claim instead of many. Within the tenant the same
//! dealing, of the tenant's share among its eligible jobtypes, bounds the
//! jobtype's grant, so one jobtype of a tenant does not take a batch that the
//! next select would have given to its sibling.
//!
//! Why this order: comparing loads rather than turns means a freed slot goes
//! to whoever holds fewest, so a tenant with a million waiting jobs cannot
//! starve one with ten (every slot that frees up goes to the smaller one
//! until it catches up), and a jobtype whose jobs run 100x longer cannot
//! crowd out a sibling with short jobs: the short jobs free their slots
//! quickly and get them back, since they hold fewer. The scheduler cannot
//! preempt, though, so if a jobtype of long jobs filled every slot while
//! nothing else was waiting, newcomers would wait for its jobs to end; that
//! is what the default per-jobtype cap is for (see [`SchedulerConfig`]).
//!
//! Grants never exceed the known waiting count, since reserving slots for
//! jobs that are not there would keep them from others while the claim runs.
//!
//! ## Hints
//!
//! A store notice says work may have arrived for a jobtype, without a count.
//! [`hint`](Scheduler::hint) ends the jobtype's backoff and lets it be granted
//! even with no known waiting count, until the next `set_waiting` or until a
//! claim comes back short (the store just said it is dry, which is newer than
//! the hint). The first grant on a hint alone is for 1 job; each claim that
//! comes back full doubles the next (up to `max_batch`), so a burst of N new
//! jobs takes about log2(N) claims rather than N, and a hint for one job
//! reserves one slot, not a batch. (So a hint vouches for at least one
//! job, and for more as full claims confirm them.)
//!
//! ## Backoff
//!
//! A claim that got 0 jobs means the waiting count was stale (another daemon
//! took them, or the store counts jobs that it cannot hand out yet). The
//! jobtype is then skipped for [`SchedulerConfig::empty_backoff_ms`] — even
//! if `set_waiting` reports it again, since that report may predate the
//! claim — unless a hint arrives. A clock that goes back before the start of
//! a backoff ends it, so a clock step cannot stall a jobtype.
//!
//! ## Memory
//!
//! Jobtypes with nothing running or reserved, nothing known waiting, no hint,
//! no backoff in force and no cap of their own are forgotten (at the latest
//! by the next `set_waiting`), and so are tenants without jobtypes or a cap
//! of their own. Memory is bounded by the jobtypes in the last `set_waiting`,
//! plus those with work in flight, hints, backoffs or caps. A forgotten
//! jobtype or tenant that comes back joins the end of the round robin.
//!
//! Each `select` scans every known jobtype once (O(jobtypes), no
//! allocation beyond two small vectors of loads); everything else is
//! O(log jobtypes), except `set_waiting` and `snapshot`, which are linear.
//!
//! ## Remote workers
//!
//! [`admit`](Scheduler::admit) serves a worker that asks for a named
//! jobtype: it honours every cap (and `max_batch`) but ignores waiting counts
//! and backoff, and it is first come, first served within the caps. Its
//! grants count toward loads like any other, so `select` favours the tenants
//! that remote workers have served least.
//!
//! # Guarantees (each checked by the tests in this module)
//!
//! - Caps: a grant never takes the global load over `max_running`, a tenant's
//!   load over its cap or a jobtype's load over its cap; nothing but a grant
//!   raises a load. So with caps that are not lowered below current loads,
//!   no load is ever over its cap, over any sequence of calls including bogus
//!   ones (stops of jobs never started, settlements of grants never made).
//! - Fairness: every grant goes to a tenant whose load is minimal among the
//!   eligible tenants, and to a jobtype whose load is minimal among that
//!   tenant's eligible jobtypes.
//! - Bounded wait: while slots are free and no job stops, an eligible tenant
//!   `T` with load `l_T` receives a grant within
//!   `1 + Σ_{U ≠ T} max(0, l_T - l_U + 1)` selects, the sum over the other
//!   eligible tenants; in particular within `N` selects, `N` the number of
//!   eligible tenants, when its load is minimal (e.g. all loads equal).
//! - Round robin: tenants whose loads stay level (each grant's jobs end
//!   before the next select) get one grant each in every `N` consecutive
//!   grants; a tenant's level jobtypes likewise take turns.
//! - Work conservation: `select` returns a grant whenever some jobtype is
//!   eligible and a global slot is free; it never grants a jobtype with
//!   nothing known waiting and no hint, nor more than is known waiting.

use std::collections::BTreeMap;

use jobstore_api::limits::MAX_CLAIM;
use jobstore_api::{Millis, WaitingJobtype};
use serde::Serialize;

use crate::tenant::tenant_of;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;

/// Limits for a [`Scheduler`].
///
/// The [`Default`] is [`SchedulerConfig::with_slots(64)`](Self::with_slots).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Global slots: jobs in flight, reserved grants included. 0 runs
    /// nothing.
    pub max_running: u32,
    /// Default cap on one tenant's load; a cap set with
    /// [`Scheduler::set_tenant_cap`] wins. `None`: no cap.
    pub max_running_per_tenant: Option<u32>,
    /// Default cap on one jobtype's load; a cap set with
    /// [`Scheduler::set_jobtype_cap`] wins. `None`: no cap.
    pub max_running_per_jobtype: Option<u32>,
    /// Most jobs one grant may claim. 0 is taken as 1, and anything above the
    /// store's [`MAX_CLAIM`] as `MAX_CLAIM`.
    pub max_batch: u32,
    /// After a grant's claim got 0 jobs (its waiting count was stale), skip
    /// that jobtype for this long, unless a hint arrives. 0 or less: no
    /// backoff.
    pub empty_backoff_ms: i64,
}

impl SchedulerConfig {
    /// Limits for `max_running` slots:
    ///
    /// - no per-tenant cap: a single-tenant daemon can use every slot, and
    ///   tenants are kept apart by the fewest-running rule (set a cap where a
    ///   tenant's backlog must never hold more than a fixed part);
    /// - per-jobtype cap 3/4 of the slots (at least 1): the scheduler cannot
    ///   preempt, so without a cap one jobtype of long jobs that happened to
    ///   be alone would take every slot and the next jobtype, of the same
    ///   tenant or another, would wait for those jobs to end; with it, a
    ///   quarter of the slots is always open to everything else at once,
    ///   while a lone jobtype still gets most of the daemon;
    /// - batch 32 (at most the slots, at least 1): few round trips to the
    ///   store, yet a single claim does not grab half of a 64-slot daemon;
    /// - backoff 1000 ms: about one store poll, so a stale count costs one
    ///   empty claim per second at most, and a real arrival waits at most a
    ///   second (none at all when the store sends notices, since a hint ends
    ///   the backoff).
    pub fn with_slots(max_running: u32) -> Self {
        SchedulerConfig {
            max_running,
            max_running_per_tenant: None,
            max_running_per_jobtype: Some(
                u32::try_from(u64::from(max_running) * 3 / 4)
                    .unwrap_or(u32::MAX)
                    .max(1),
            ),
            max_batch: max_running.clamp(1, 32),
            empty_backoff_ms: 1000,
        }
    }
}

impl Default for SchedulerConfig {
    /// 64 slots, see [`SchedulerConfig::with_slots`].
    fn default() -> Self {
        SchedulerConfig::with_slots(64)
    }
}

/// Permission to claim up to `count` jobs of `jobtype`. Its slots are
/// reserved from [`Scheduler::select`] or [`Scheduler::admit`] until
/// [`Scheduler::jobs_started`] settles it; every grant must be settled
/// exactly once (with 0 if the claim failed), or its slots stay taken.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Grant {
    /// The store jobtype to claim.
    pub jobtype: String,
    /// How many jobs to claim, at least 1.
    pub count: u32,
}

/// The scheduler's state at one moment, for metrics and stats.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SchedulerSnapshot {
    /// Global slots ([`SchedulerConfig::max_running`]).
    pub max_running: u32,
    /// Jobs started and not yet stopped.
    pub running: u32,
    /// Slots reserved by grants not yet settled.
    pub reserved: u32,
    /// The tenants the scheduler knows of, by name.
    pub tenants: Vec<TenantSnapshot>,
}

/// One tenant in a [`SchedulerSnapshot`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TenantSnapshot {
    /// The tenant.
    pub tenant: String,
    /// Jobs started and not yet stopped.
    pub running: u32,
    /// Slots reserved by grants not yet settled.
    pub reserved: u32,
    /// The cap in force (its own or the default); `None`: no cap.
    pub cap: Option<u32>,
    /// The tenant's jobtypes the scheduler knows of, by name.
    pub jobtypes: Vec<JobtypeSnapshot>,
}

/// One jobtype in a [`SchedulerSnapshot`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct JobtypeSnapshot {
    /// The store jobtype.
    pub jobtype: String,
    /// Jobs started and not yet stopped.
    pub running: u32,
    /// Slots reserved by grants not yet settled.
    pub reserved: u32,
    /// Jobs known to be waiting: the last `set_waiting` count less the jobs
    /// claimed since, or more while a hint is in force.
    pub waiting: u64,
    /// Whether a hint is in force.
    pub hinted: bool,
    /// While backing off after an empty claim: when the backoff ends. It is
    /// in force while `now` is before this (and not before its start).
    pub backoff_until: Option<Millis>,
    /// The cap in force (its own or the default); `None`: no cap.
    pub cap: Option<u32>,
}

#[derive(Debug, Clone)]
struct JobtypeState {
    started: u32,
    reserved: u32,
    /// From the last `set_waiting`, less the jobs claimed since.
    waiting: u64,
    /// 0: no hint in force; otherwise how many jobs the hint alone vouches
    /// for (doubling with each full claim).
    hint: u32,
    /// When the last empty claim was settled, if a backoff may be in force.
    backoff_since: Option<Millis>,
    /// Its own cap.
    cap: Option<u32>,
    /// Run by remote workers only: `select` never grants it (`admit` does).
    remote_only: bool,
    /// Round-robin position: the tick of its last grant or its creation.
    last_served: u64,
}

impl JobtypeState {
    fn new(tick: u64) -> Self {
        JobtypeState {
            started: 0,
            reserved: 0,
            waiting: 0,
            hint: 0,
            backoff_since: None,
            cap: None,
            remote_only: false,
            last_served: tick,
        }
    }

    fn load(&self) -> u32 {
        self.started.saturating_add(self.reserved)
    }

    fn known_waiting(&self) -> u64 {
        self.waiting.max(u64::from(self.hint))
    }

    /// Known waiting jobs that no outstanding grant covers.
    fn unclaimed(&self) -> u64 {
        self.known_waiting()
            .saturating_sub(u64::from(self.reserved))
    }

    fn backing_off(&self, now: Millis, backoff_ms: i64) -> bool {
        self.backoff_since
            .is_some_and(|since| since <= now && now.saturating_sub(since) < backoff_ms)
    }

    fn idle(&self, now: Millis, backoff_ms: i64) -> bool {
        self.started == 0
            && self.reserved == 0
            && self.waiting == 0
            && self.hint == 0
            && self.cap.is_none()
            && !self.remote_only
            && !self.backing_off(now, backoff_ms)
    }
}

#[derive(Debug, Clone)]
struct TenantState {
    started: u32,
    reserved: u32,
    cap: Option<u32>,
    last_served: u64,
    jobtypes: BTreeMap<String, JobtypeState>,
}

impl TenantState {
    fn new(tick: u64) -> Self {
        TenantState {
            started: 0,
            reserved: 0,
            cap: None,
            last_served: tick,
            jobtypes: BTreeMap::new(),
        }
    }

    fn load(&self) -> u32 {
        self.started.saturating_add(self.reserved)
    }
}

/// How much of `cap` a load leaves; no cap leaves everything.
fn cap_left(cap: Option<u32>, load: u32) -> u32 {
    cap.map_or(u32::MAX, |c| c.saturating_sub(load))
}

/// How many of `free` slots a party with load `chosen` gets when they are
/// dealt one at a time to whichever of it and `others` has the lowest load,
/// the chosen party winning ties; at most `limit`. `chosen` must be at most
/// every load in `others`; the result is then at least 1 if `free` and
/// `limit` are.
///
/// The chosen party's `k`-th slot is dealt once every other party is at
/// `chosen + k - 1` or above, so it gets the largest `k` with
/// `k + Σ max(0, chosen + k - 1 - other) <= free`.
fn dealt_share(free: u32, chosen: u32, others: &[u32], limit: u32) -> u32 {
    let fits = |k: u32| -> bool {
        let level = u64::from(chosen) + u64::from(k) - 1;
        let needed: u64 = others
            .iter()
            .map(|&o| level.saturating_sub(u64::from(o)))
            .sum::<u64>()
            + u64::from(k);
        needed <= u64::from(free)
    };
    let mut hi = free.min(limit);
    if hi == 0 {
        return 0;
    }
    // Invariant: fits(lo); the answer is in lo..=hi.
    let mut lo = 1;
    if !fits(lo) {
        return 1;
    }
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

fn tenant_entry<'a>(
    tenants: &'a mut BTreeMap<String, TenantState>,
    tick: &mut u64,
    tenant: &str,
) -> &'a mut TenantState {
    tenants.entry(tenant.to_owned()).or_insert_with(|| {
        *tick += 1;
        TenantState::new(*tick)
    })
}

fn jobtype_entry<'a>(
    jobtypes: &'a mut BTreeMap<String, JobtypeState>,
    tick: &mut u64,
    jobtype: &str,
) -> &'a mut JobtypeState {
    jobtypes.entry(jobtype.to_owned()).or_insert_with(|| {
        *tick += 1;
        JobtypeState::new(*tick)
    })
}

/// The daemon's scheduler; see the [module documentation](self) for the
/// policy and its guarantees.
#[derive(Debug, Clone)]
pub struct Scheduler {
    config: SchedulerConfig,
    tenants: BTreeMap<String, TenantState>,
    started: u32,
    reserved: u32,
    /// Source of round-robin positions: bumped by every grant and every new
    /// tenant or jobtype.
    tick: u64,
}

/// The jobtype and figures `select` settled on.
struct Choice<'a> {
    tenant: &'a str,
    jobtype: &'a str,
    tenant_left: u32,
    jobtype_left: u32,
    unclaimed: u64,
}

impl Scheduler {
    /// A scheduler with nothing running, waiting or capped.
    pub fn new(config: SchedulerConfig) -> Self {
        Scheduler {
            config,
            tenants: BTreeMap::new(),
            started: 0,
            reserved: 0,
            tick: 0,
        }
    }

    /// The configuration it was made with.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// Sets `jobtype`'s own cap (a handler's concurrency limit), or with
    /// `None` goes back to [`SchedulerConfig::max_running_per_jobtype`].
    /// Lowering a cap below the jobtype's load stops nothing: it only keeps
    /// new grants away until the load is under it.
    pub fn set_jobtype_cap(&mut self, jobtype: &str, cap: Option<u32>) {
        if cap.is_some() {
            let t = tenant_entry(&mut self.tenants, &mut self.tick, tenant_of(jobtype));
            jobtype_entry(&mut t.jobtypes, &mut self.tick, jobtype).cap = cap;
        } else if let Some(j) = self
            .tenants
            .get_mut(tenant_of(jobtype))
            .and_then(|t| t.jobtypes.get_mut(jobtype))
        {
            // Forgotten, if now idle, by the next `set_waiting`.
            j.cap = None;
        }
    }

    /// Marks `jobtype` as not run by this daemon's own runners (its handler
    /// is remote, or a process where process handlers are not allowed):
    /// [`select`](Self::select) never grants it, while
    /// [`admit`](Self::admit) (remote workers) still does, within the caps.
    pub fn set_remote_only(&mut self, jobtype: &str, remote_only: bool) {
        if remote_only {
            let t = tenant_entry(&mut self.tenants, &mut self.tick, tenant_of(jobtype));
            jobtype_entry(&mut t.jobtypes, &mut self.tick, jobtype).remote_only = true;
        } else if let Some(j) = self
            .tenants
            .get_mut(tenant_of(jobtype))
            .and_then(|t| t.jobtypes.get_mut(jobtype))
        {
            j.remote_only = false;
        }
    }

    /// Sets `tenant`'s own cap, or with `None` goes back to
    /// [`SchedulerConfig::max_running_per_tenant`]. Like a jobtype cap, a
    /// lowered cap stops nothing.
    pub fn set_tenant_cap(&mut self, tenant: &str, cap: Option<u32>) {
        if cap.is_some() {
            tenant_entry(&mut self.tenants, &mut self.tick, tenant).cap = cap;
        } else if let Some(t) = self.tenants.get_mut(tenant) {
            t.cap = None;
            if t.jobtypes.is_empty() {
                self.tenants.remove(tenant);
            }
        }
    }

    /// The store's view of waiting work, replacing the previous one
    /// entirely: every jobtype not listed has nothing waiting, and every hint
    /// is dropped. Counts of a jobtype listed twice are added. Backoffs stay
    /// in force (the report may predate the empty claim that started them).
    /// Idle jobtypes and tenants are forgotten.
    pub fn set_waiting(&mut self, waiting: &[WaitingJobtype], now: Millis) {
        for t in self.tenants.values_mut() {
            for j in t.jobtypes.values_mut() {
                j.waiting = 0;
                j.hint = 0;
            }
        }
        for w in waiting {
            if w.count == 0 {
                continue;
            }
            let t = tenant_entry(&mut self.tenants, &mut self.tick, tenant_of(&w.jobtype));
            let j = jobtype_entry(&mut t.jobtypes, &mut self.tick, &w.jobtype);
            j.waiting = j.waiting.saturating_add(w.count);
        }
        let backoff_ms = self.config.empty_backoff_ms;
        self.tenants.retain(|_, t| {
            t.jobtypes.retain(|_, j| !j.idle(now, backoff_ms));
            !t.jobtypes.is_empty() || t.cap.is_some()
        });
    }

    /// A notice said work may have arrived for `jobtype`: until the next
    /// [`set_waiting`](Self::set_waiting) or a claim that comes back short,
    /// it counts as having at least one waiting job (more after full claims,
    /// see the [module documentation](self#hints)), and its backoff ends. An
    /// empty jobtype (a store's "anything may have changed") is ignored: call
    /// `set_waiting` for that.
    pub fn hint(&mut self, jobtype: &str, _now: Millis) {
        if jobtype.is_empty() {
            tracing::debug!("scheduler: ignoring a hint without a jobtype");
            return;
        }
        let t = tenant_entry(&mut self.tenants, &mut self.tick, tenant_of(jobtype));
        let j = jobtype_entry(&mut t.jobtypes, &mut self.tick, jobtype);
        j.hint = j.hint.max(1);
        j.backoff_since = None;
    }

    fn batch(&self) -> u32 {
        let max_claim = u32::try_from(MAX_CLAIM).unwrap_or(u32::MAX);
        self.config.max_batch.clamp(1, max_claim)
    }

    /// If `j` is eligible, its cap left and unclaimed waiting count.
    fn eligible(&self, j: &JobtypeState, now: Millis) -> Option<(u32, u64)> {
        if j.remote_only {
            return None;
        }
        let unclaimed = j.unclaimed();
        if unclaimed == 0 || j.backing_off(now, self.config.empty_backoff_ms) {
            return None;
        }
        let left = cap_left(j.cap.or(self.config.max_running_per_jobtype), j.load());
        (left > 0).then_some((left, unclaimed))
    }

    /// Which jobtype to claim next and how many (at least 1), reserving
    /// those slots until [`jobs_started`](Self::jobs_started); `None` when no
    /// jobtype is eligible or no slot is free. See the
    /// [module documentation](self#policy) for the rules.
    pub fn select(&mut self, now: Millis) -> Option<Grant> {
        let free = self.free();
        if free == 0 {
            return None;
        }
        let mut eligible_loads: Vec<u32> = Vec::new();
        let mut best: Option<((u32, u64), Choice<'_>)> = None;
        for (tname, t) in &self.tenants {
            let tenant_left = cap_left(t.cap.or(self.config.max_running_per_tenant), t.load());
            if tenant_left == 0 {
                continue;
            }
            let mut best_j: Option<((u32, u64), &str, u32, u64)> = None;
            for (jname, j) in &t.jobtypes {
                let Some((left, unclaimed)) = self.eligible(j, now) else {
                    continue;
                };
                let key = (j.load(), j.last_served);
                if best_j.as_ref().is_none_or(|b| key < b.0) {
                    best_j = Some((key, jname, left, unclaimed));
                }
            }
            let Some((_, jobtype, jobtype_left, unclaimed)) = best_j else {
                continue;
            };
            eligible_loads.push(t.load());
            let key = (t.load(), t.last_served);
            if best.as_ref().is_none_or(|b| key < b.0) {
                best = Some((
                    key,
                    Choice {
                        tenant: tname,
                        jobtype,
                        tenant_left,
                        jobtype_left,
                        unclaimed,
                    },
                ));
            }
        }
        let ((tenant_load, _), choice) = best?;

        // Its own load is in the list once: drop it.
        if let Some(i) = eligible_loads.iter().position(|&l| l == tenant_load) {
            eligible_loads.swap_remove(i);
        }
        // The tenant's share of the free slots, dealt against the other
        // eligible tenants, within its cap...
        let tenant_share = dealt_share(free, tenant_load, &eligible_loads, choice.tenant_left);
        // ...and the jobtype's share of that, dealt against its eligible
        // siblings.
        let t = self.tenants.get(choice.tenant)?;
        let jobtype_load = t.jobtypes.get(choice.jobtype).map_or(0, JobtypeState::load);
        let siblings: Vec<u32> = t
            .jobtypes
            .iter()
            .filter(|&(name, j)| name != choice.jobtype && self.eligible(j, now).is_some())
            .map(|(_, j)| j.load())
            .collect();
        let limit = self
            .batch()
            .min(choice.jobtype_left)
            .min(u32::try_from(choice.unclaimed).unwrap_or(u32::MAX));
        let count = dealt_share(tenant_share, jobtype_load, &siblings, limit).max(1);
        let jobtype = choice.jobtype.to_owned();
        self.reserve(&jobtype, count, true);
        Some(Grant { jobtype, count })
    }

    /// A remote worker asks for up to `want` jobs of `jobtype`: how many
    /// every cap (global, tenant, jobtype) and `max_batch` allow now,
    /// reserved as a [`Grant`] to settle with
    /// [`jobs_started`](Self::jobs_started); `None` if that is 0. Waiting
    /// counts and backoff are ignored (the worker's claim just gets fewer).
    pub fn admit(&mut self, jobtype: &str, want: u32, _now: Millis) -> Option<Grant> {
        let t = self.tenants.get(tenant_of(jobtype));
        let j = t.and_then(|t| t.jobtypes.get(jobtype));
        let tenant_cap = t.and_then(|t| t.cap).or(self.config.max_running_per_tenant);
        let jobtype_cap = j
            .and_then(|j| j.cap)
            .or(self.config.max_running_per_jobtype);
        let count = want
            .min(self.batch())
            .min(self.free())
            .min(cap_left(tenant_cap, t.map_or(0, TenantState::load)))
            .min(cap_left(jobtype_cap, j.map_or(0, JobtypeState::load)));
        if count == 0 {
            return None;
        }
        let t = tenant_entry(&mut self.tenants, &mut self.tick, tenant_of(jobtype));
        jobtype_entry(&mut t.jobtypes, &mut self.tick, jobtype);
        self.reserve(jobtype, count, false);
        Some(Grant {
            jobtype: jobtype.to_owned(),
            count,
        })
    }

    /// Reserves `count` slots for `jobtype` (which must exist), and with
    /// `serve` moves it and its tenant to the end of the round robin.
    fn reserve(&mut self, jobtype: &str, count: u32, serve: bool) {
        self.tick += 1;
        let tick = self.tick;
        let Some(t) = self.tenants.get_mut(tenant_of(jobtype)) else {
            return;
        };
        let Some(j) = t.jobtypes.get_mut(jobtype) else {
            return;
        };
        j.reserved = j.reserved.saturating_add(count);
        t.reserved = t.reserved.saturating_add(count);
        self.reserved = self.reserved.saturating_add(count);
        if serve {
            j.last_served = tick;
            t.last_served = tick;
        }
    }

    /// The claim for `grant` returned `got` jobs (at most `grant.count`):
    /// they now run and the rest of the grant is freed. The jobtype's known
    /// waiting count drops by `got`, and to 0 if the claim came back short
    /// (the store had fewer), which also ends a hint; `got == 0` starts the
    /// backoff. A grant that was never made or is settled twice changes
    /// nothing beyond the slots still reserved for its jobtype, and `got`
    /// above the count counts as the count.
    pub fn jobs_started(&mut self, grant: Grant, got: u32, now: Millis) {
        let batch = self.batch();
        let Some(t) = self.tenants.get_mut(tenant_of(&grant.jobtype)) else {
            tracing::debug!(jobtype = %grant.jobtype, "scheduler: settling a grant for an unknown jobtype");
            return;
        };
        let Some(j) = t.jobtypes.get_mut(&grant.jobtype) else {
            tracing::debug!(jobtype = %grant.jobtype, "scheduler: settling a grant for an unknown jobtype");
            return;
        };
        let released = grant.count.min(j.reserved);
        if released < grant.count || released == 0 {
            tracing::debug!(
                jobtype = %grant.jobtype,
                count = grant.count,
                reserved = j.reserved,
                "scheduler: settling a grant larger than the slots reserved"
            );
            if released == 0 {
                return;
            }
        }
        if got > released {
            tracing::debug!(
                jobtype = %grant.jobtype,
                count = released,
                got,
                "scheduler: a claim got more jobs than granted"
            );
        }
        let got = got.min(released);
        j.reserved -= released;
        t.reserved = t.reserved.saturating_sub(released);
        self.reserved = self.reserved.saturating_sub(released);
        j.started = j.started.saturating_add(got);
        t.started = t.started.saturating_add(got);
        self.started = self.started.saturating_add(got);
        j.waiting = j.waiting.saturating_sub(u64::from(got));
        if got < released {
            j.waiting = 0;
            j.hint = 0;
            if got == 0 {
                j.backoff_since = Some(now);
            }
        } else if j.hint > 0 {
            j.hint = j.hint.saturating_mul(2).min(batch).max(1);
        }
        self.forget_if_idle(&grant.jobtype, now);
    }

    /// `n` jobs of `jobtype` stopped (finished, failed, lost or released).
    /// More than are running, or an unknown jobtype, stop only what runs.
    pub fn jobs_stopped(&mut self, jobtype: &str, n: u32, now: Millis) {
        let Some((t, j)) = self
            .tenants
            .get_mut(tenant_of(jobtype))
            .and_then(|t| t.jobtypes.get_mut(jobtype).map(|j| (&mut t.started, j)))
        else {
            tracing::debug!(
                jobtype,
                n,
                "scheduler: jobs stopped for a jobtype with none running"
            );
            return;
        };
        let stopped = n.min(j.started);
        if stopped < n {
            tracing::debug!(
                jobtype,
                n,
                running = j.started,
                "scheduler: more jobs stopped than were running"
            );
        }
        j.started -= stopped;
        *t = t.saturating_sub(stopped);
        self.started = self.started.saturating_sub(stopped);
        self.forget_if_idle(jobtype, now);
    }

    fn forget_if_idle(&mut self, jobtype: &str, now: Millis) {
        let tenant = tenant_of(jobtype);
        let Some(t) = self.tenants.get_mut(tenant) else {
            return;
        };
        if t.jobtypes
            .get(jobtype)
            .is_some_and(|j| j.idle(now, self.config.empty_backoff_ms))
        {
            t.jobtypes.remove(jobtype);
            if t.jobtypes.is_empty() && t.cap.is_none() {
                self.tenants.remove(tenant);
            }
        }
    }

    /// Slots in use: jobs running plus slots reserved by unsettled grants.
    pub fn running(&self) -> u32 {
        self.started.saturating_add(self.reserved)
    }

    /// Slots free: `max_running` less [`running`](Self::running) (0 if the
    /// configuration allows fewer than are in use).
    pub fn free(&self) -> u32 {
        self.config.max_running.saturating_sub(self.running())
    }

    /// `jobtype`'s load: its jobs running plus its reserved slots.
    pub fn running_of(&self, jobtype: &str) -> u32 {
        self.tenants
            .get(tenant_of(jobtype))
            .and_then(|t| t.jobtypes.get(jobtype))
            .map_or(0, JobtypeState::load)
    }

    /// `tenant`'s load: its jobs running plus its reserved slots.
    pub fn running_of_tenant(&self, tenant: &str) -> u32 {
        self.tenants.get(tenant).map_or(0, TenantState::load)
    }

    /// Per tenant and per jobtype: running, reserved, known waiting, hint,
    /// backoff and caps.
    pub fn snapshot(&self) -> SchedulerSnapshot {
        let backoff_ms = self.config.empty_backoff_ms;
        SchedulerSnapshot {
            max_running: self.config.max_running,
            running: self.started,
            reserved: self.reserved,
            tenants: self
                .tenants
                .iter()
                .map(|(tenant, t)| TenantSnapshot {
                    tenant: tenant.clone(),
                    running: t.started,
                    reserved: t.reserved,
                    cap: t.cap.or(self.config.max_running_per_tenant),
                    jobtypes: t
                        .jobtypes
                        .iter()
                        .map(|(jobtype, j)| JobtypeSnapshot {
                            jobtype: jobtype.clone(),
                            running: j.started,
                            reserved: j.reserved,
                            waiting: j.known_waiting(),
                            hinted: j.hint > 0,
                            backoff_until: j
                                .backoff_since
                                .filter(|_| backoff_ms > 0)
                                .map(|since| since.saturating_add(backoff_ms)),
                            cap: j.cap.or(self.config.max_running_per_jobtype),
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}
