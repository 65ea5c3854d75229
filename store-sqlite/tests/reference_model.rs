//! The SQLite store against the reference store (`MemoryStore`), step by
//! step, on one long pseudo-random run of every operation that changes a
//! job: every answer, every job as read back (its history above all: the
//! store keeps a job's current claim in its row and shows it as events,
//! which must read exactly as the reference's stored events, at the limit
//! of 20 too) and the job counts (kept by grouped updates of `counts`)
//! must be the same after each step. Some jobs repeat: they are added
//! with a rule, and releases repeat jobs (with and without a new payload,
//! due in the past or the future). Some jobs wait for others: they are
//! added with dependencies (every policy, some with outputs, some due
//! later), and the targets end by every way out (archives of every code,
//! release deletes, cancels, deletes), cascades included, runs again
//! resolve held edges, and blocked jobs are unblocked by calls; every
//! job's waits (alone and through `waits_of`) and the blocked listing must
//! read the same too.
//!
//! Whether a job added again under the id of a deleted or purged one
//! resolves the edges held on the old one is unspecified (this store:
//! when the new job is marked a target again). The run keeps out of it:
//! a blocked job held on a job gone is unblocked on both stores at the
//! end of the step, and while another job is held on a job gone, no new
//! job names that id.

use std::time::Duration;

use std::collections::HashSet;

use jobstore_api::{
    DependencyFailure, EdgeState, EventKind, Job, JobEdit, JobQuery, JobRelease, JobResult,
    JobState, JobStore, LOCK_BLOCKED, LOCK_DONE, MemoryStore, Millis, NewJob, OnConflict, Release,
    Repeat, ResultCode, Unique,
};
use jobstore_sqlite::SqliteStore;

const T0: Millis = 1_700_000_000_000;
const LEASE: Duration = Duration::from_secs(60);
const IDS: [&str; 8] = ["a", "b", "c", "d", "e", "f", "g", "h"];
/// The ids plain adds use (the first two of them with a repeat rule in
/// one of the two batches that add them); the others are only ever added
/// with a key (some with a rule too).
const PLAIN: usize = 5;
const OWNERS: [&str; 2] = ["sys-a", "sys-b"];
/// Unique keys: few, so that keyed jobs meet holders (live, archived in a
/// window, earlier in the batch) and runs again meet taken keys.
const KEYS: [&str; 3] = ["k1", "k2", "k3"];

/// A small deterministic generator (an LCG; the high bits).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) % n as u64) as usize
    }
    fn pick<'a>(&mut self, of: &[&'a str]) -> &'a str {
        of[self.below(of.len())]
    }
    /// One to three ids, maybe repeated across calls.
    fn ids(&mut self) -> Vec<String> {
        let mut ids: Vec<String> = Vec::new();
        for _ in 0..=self.below(3) {
            let id = self.pick(&IDS).to_owned();
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        ids
    }
}

/// How often the run reached the cases where the SQLite store stores a
/// pending claim (or shows one), with the history full or nearly so.
#[derive(Debug, Default)]
struct Seen {
    /// A claim of an expired job whose claim is pending.
    expired: usize,
    /// A release for retry or unget, a cancel request or a run again
    /// that stores a pending claim (and an archive) with 18 or more events
    /// stored, so the oldest must make room for two or three.
    full: usize,
    /// Keyed jobs turned away as duplicates, those that replaced a free
    /// holder's payload, and those whose holder was archived (a window).
    duplicates: usize,
    replaced: usize,
    archived_holders: usize,
    /// Runs again of archived keyed jobs refused because the key was taken.
    rerun_refused: usize,
    /// Repeat releases that applied, those that stored a pending claim
    /// with 18 or more events stored, and claims of jobs carrying a
    /// repeated run's result.
    repeated: usize,
    repeated_full: usize,
    claimed_after_repeat: usize,
    /// Adds with dependencies: jobs stored blocked, refused (a dependency
    /// unknown), cancelled at the add; jobs unblocked and cancelled by a
    /// dependency's end later.
    blocked: usize,
    refused: usize,
    cancelled_at_add: usize,
    unblocked: usize,
    cancelled_by_dependency: usize,
    /// Steps ending with a held edge, held edges resolved done by a
    /// target's end, jobs unblocked by `unblock_jobs`, and held edges
    /// whose target is gone (the waiter unblocked by the run).
    held: usize,
    held_resolved: usize,
    unblocked_by_call: usize,
    held_on_gone: usize,
}

/// The rules jobs repeat by: one in UTC, one in a time zone.
fn rules() -> [Repeat; 2] {
    [
        Repeat::new("HOURLY"),
        Repeat::new("0 6 * * *").time_zone("Europe/Paris"),
    ]
}

/// Whether `job`'s last claim is pending in the SQLite store: its newest
/// event (before the archive that ended it, if so) is that claim.
fn pending(job: &Job) -> bool {
    let h = &job.history;
    let claimed =
        |e: Option<&jobstore_api::JobEvent>| e.is_some_and(|e| e.what == EventKind::Claimed);
    if job.lock == LOCK_DONE {
        h.len() >= 2
            && claimed(h.get(h.len() - 2))
            && matches!(h.last().map(|e| &e.what), Some(EventKind::Archived { .. }))
    } else {
        claimed(h.last())
    }
}

async fn count(memory: &MemoryStore, ids: &[String], now: Millis, seen: &mut Seen, claim: bool) {
    for id in ids {
        let Some(job) = memory.get_job(id).await.unwrap() else {
            continue;
        };
        if !pending(&job) {
            continue;
        }
        if claim && job.lock != LOCK_DONE && !job.lock.is_empty() && job.dt <= now {
            seen.expired += 1;
        }
        if !claim && job.history.len() >= 18 {
            seen.full += 1;
        }
    }
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// The same call on both stores; the answers, normalized by `$norm`, must
/// be equal.
macro_rules! both {
    ($step:expr, $sqlite:expr, $memory:expr, |$s:ident| $call:expr, $norm:expr) => {{
        let got = {
            let $s = $sqlite;
            $call.await.map($norm)
        };
        let want = {
            let $s = $memory;
            $call.await.map($norm)
        };
        assert_eq!(
            got.as_ref().map_err(|e| e.kind()),
            want.as_ref().map_err(|e| e.kind()),
            "step {}: {}",
            $step,
            stringify!($call)
        );
    }};
}

async fn run(sqlite: &SqliteStore, seed: u64, steps: usize) -> Seen {
    let mut seen = Seen::default();
    let all: Vec<String> = IDS.iter().map(|id| (*id).to_owned()).collect();
    let memory = &MemoryStore::new();
    let mut rng = Rng(seed);
    let mut now = T0;
    let jobs: Vec<NewJob> = IDS[..PLAIN]
        .iter()
        .map(|id| NewJob::new(*id, "t", *id))
        .collect();
    // The same ids, the first two repeating (a batch with a flow, the
    // keyed jobs' insert, beside plain jobs).
    let repeating: Vec<NewJob> = jobs
        .iter()
        .cloned()
        .zip(rules().into_iter().map(Some).chain(std::iter::repeat(None)))
        .map(|(job, rule)| match rule {
            Some(rule) => job.repeat(rule),
            None => job,
        })
        .collect();
    both!(0, sqlite, memory, |s| s.add_jobs(&repeating, now), |o| o);
    // (waiter, target) edges held on a job that is gone, the waiter not
    // blocked: no new job names such a target (see the module docs).
    let mut gone_held: HashSet<(String, String)> = HashSet::new();
    // Per job, its held edges after the previous step.
    let mut held_before: HashSet<(String, String)> = HashSet::new();
    for step in 1..=steps {
        // Up to 80 s a step: leases of 60 s run out now and then.
        now += (rng.below(80) as Millis) * 1_000 + 1;
        let owner = rng.pick(&OWNERS);
        let choice = rng.below(50);
        match choice {
            0..=11 => {
                let limit = 1 + rng.below(3);
                count(memory, &all, now, &mut seen, true).await;
                both!(
                    step,
                    sqlite,
                    memory,
                    |s| s.claim_jobs("t", limit, owner, LEASE, now),
                    |jobs| jobs
                );
                for id in &all {
                    let Some(job) = memory.get_job(id).await.unwrap() else {
                        continue;
                    };
                    let h = &job.history;
                    let repeated_then_claimed = h.len() >= 2
                        && h[h.len() - 1].at == now
                        && h[h.len() - 1].what == EventKind::Claimed
                        && matches!(h[h.len() - 2].what, EventKind::Repeated { .. });
                    seen.claimed_after_repeat += usize::from(repeated_then_claimed);
                }
            }
            12..=21 => {
                let releases: Vec<JobRelease> = rng
                    .ids()
                    .into_iter()
                    .map(|id| {
                        let how = match rng.below(10) {
                            0 => Release::Retry {
                                delay: Duration::from_secs(rng.below(30) as u64),
                            },
                            1 => Release::Unget,
                            2 => Release::Delete,
                            3 => Release::Archive(JobResult::cancelled()),
                            4 => Release::Archive(JobResult::from_status(404)),
                            5 => Release::Archive(JobResult::from_status(500)),
                            // Due again up to 30 s ago or 90 s ahead.
                            6 | 7 => Release::Repeat {
                                at: now - 30_000 + (rng.below(120) as Millis) * 1_000,
                                result: JobResult::from_status(200 + rng.below(3) as u16)
                                    .with_output(format!("run at {now}").into_bytes()),
                                data: (rng.below(2) == 0)
                                    .then(|| format!("state at step {step}").into_bytes()),
                            },
                            _ => Release::Archive(
                                JobResult::from_status(200).with_output(b"done".to_vec()),
                            ),
                        };
                        JobRelease::new(id, how)
                    })
                    .collect();
                let freed: Vec<String> = releases
                    .iter()
                    .filter(|r| {
                        matches!(
                            r.how,
                            Release::Retry { .. } | Release::Unget | Release::Repeat { .. }
                        )
                    })
                    .map(|r| r.id.clone())
                    .collect();
                count(memory, &freed, now, &mut seen, false).await;
                let mut repeats = Vec::new();
                for r in &releases {
                    if let Release::Repeat { .. } = r.how {
                        let job = memory.get_job(&r.id).await.unwrap();
                        if let Some(job) = job.filter(|j| j.lock == owner) {
                            repeats.push(pending(&job) && job.history.len() >= 18);
                        }
                    }
                }
                seen.repeated += repeats.len();
                seen.repeated_full += repeats.iter().filter(|full| **full).count();
                both!(
                    step,
                    sqlite,
                    memory,
                    |s| s.release_jobs(&releases, owner, now),
                    sorted
                );
            }
            22..=25 => {
                let ids = rng.ids();
                count(memory, &ids, now, &mut seen, false).await;
                both!(
                    step,
                    sqlite,
                    memory,
                    |s| s.cancel_jobs(&ids, now),
                    |mut o| {
                        o.cancelled.sort();
                        o.marked.sort();
                        o
                    }
                );
            }
            26..=31 => {
                let ids = rng.ids();
                count(memory, &ids, now, &mut seen, false).await;
                let delay = Duration::from_secs(rng.below(20) as u64);
                let mut keyed_archived = Vec::new();
                for id in &ids {
                    let job = memory.get_job(id).await.unwrap();
                    let keyed = |j: &Job| j.flow.as_ref().is_some_and(|f| f.unique_key.is_some());
                    if job.is_some_and(|j| j.lock == LOCK_DONE && keyed(&j)) {
                        keyed_archived.push(id.clone());
                    }
                }
                both!(
                    step,
                    sqlite,
                    memory,
                    |s| s.rerun_jobs(&ids, delay, now),
                    sorted
                );
                for id in &keyed_archived {
                    let job = memory.get_job(id).await.unwrap();
                    seen.rerun_refused += usize::from(job.is_some_and(|j| j.lock == LOCK_DONE));
                }
            }
            32 | 33 => {
                let edits: Vec<JobEdit> =
                    rng.ids()
                        .into_iter()
                        .map(|id| match rng.below(2) {
                            0 => JobEdit::new(id).priority(rng.below(3) as i32),
                            // Blocked jobs' not-before time too.
                            _ => JobEdit::new(id)
                                .run_at(now - 20_000 + rng.below(60) as Millis * 1_000),
                        })
                        .collect();
                both!(step, sqlite, memory, |s| s.edit_jobs(&edits, now), sorted);
            }
            34 | 35 => {
                let ids = rng.ids();
                both!(
                    step,
                    sqlite,
                    memory,
                    |s| s.renew_locks(&ids, owner, LEASE, now),
                    |mut r| {
                        r.renewed.sort();
                        r.cancelled.sort();
                        r
                    }
                );
                let id = rng.pick(&IDS);
                both!(
                    step,
                    sqlite,
                    memory,
                    |s| s.update_data(id, owner, b"progress", now),
                    |b| b
                );
            }
            36 => {
                let ids = rng.ids();
                both!(
                    step,
                    sqlite,
                    memory,
                    |s| s.delete_jobs(&ids, now),
                    |mut o| {
                        o.deleted.sort();
                        o.running.sort();
                        o
                    }
                );
            }
            37 => {
                let codes = if rng.below(2) == 0 {
                    vec![ResultCode::Ok, ResultCode::Cancelled]
                } else {
                    ResultCode::ALL.to_vec()
                };
                let before = now - (rng.below(300) as Millis) * 1_000;
                both!(
                    step,
                    sqlite,
                    memory,
                    |s| s.purge_archived(before, &codes),
                    |n| n
                );
            }
            38..=41 => {
                // Keyed adds: ids that may exist, keys that may be held,
                // windows that may cover an archived holder, payloads that
                // may replace a free holder's.
                let batch: Vec<NewJob> = rng
                    .ids()
                    .into_iter()
                    .map(|id| {
                        let mut u = Unique::new(rng.pick(&KEYS));
                        if rng.below(2) == 0 {
                            u = u.window(Duration::from_secs(rng.below(1_800) as u64));
                        }
                        if rng.below(2) == 0 {
                            u = u.on_conflict(OnConflict::ReplaceData);
                        }
                        let data = format!("{id} at step {step}");
                        let job = NewJob::new(id, "t", data).unique(u);
                        match rng.below(3) {
                            0 => job.repeat(rules()[rng.below(2)].clone()),
                            _ => job,
                        }
                    })
                    .collect();
                let got = sqlite.add_jobs(&batch, now).await.unwrap();
                let want = memory.add_jobs(&batch, now).await.unwrap();
                assert_eq!(got, want, "step {step}: keyed add of {batch:?}");
                for d in &want.duplicates {
                    seen.duplicates += 1;
                    seen.replaced += usize::from(d.replaced);
                    let holder = memory.get_job(&d.existing).await.unwrap();
                    seen.archived_holders +=
                        usize::from(holder.is_some_and(|h| h.lock == LOCK_DONE));
                }
            }
            44..=47 => {
                // Adds with dependencies: ids that may exist, dependencies
                // that may be unknown, live (blocked), archived (resolved
                // at the add, failed ones cancelling), of either policy,
                // some not before a later time.
                let batch: Vec<NewJob> = rng
                    .ids()
                    .into_iter()
                    .map(|id| {
                        let mut deps: Vec<&str> = Vec::new();
                        for _ in 0..=rng.below(3) {
                            let d = rng.pick(&IDS);
                            if d != id && !deps.contains(&d) {
                                deps.push(d);
                            }
                        }
                        if deps.is_empty() {
                            deps.push(if id == "a" { "b" } else { "a" });
                        }
                        let policy = match rng.below(3) {
                            0 => DependencyFailure::Cancel,
                            1 => DependencyFailure::Run,
                            _ => DependencyFailure::Hold,
                        };
                        let outputs = rng.below(4) == 0;
                        // Keeps out of the unspecified (module docs).
                        deps.retain(|d| !gone_held.iter().any(|(_, t)| t == d));
                        if deps.is_empty() {
                            let data = format!("{id} alone at step {step}");
                            return NewJob::new(id, "t", data);
                        }
                        let data = format!("{id} waits at step {step}");
                        let mut job = NewJob::new(id, "t", data)
                            .depends_on(deps)
                            .on_dependency_failure(policy);
                        if outputs {
                            job = job.with_outputs();
                        }
                        if rng.below(3) == 0 {
                            job = job.run_at(now + rng.below(120) as Millis * 1_000);
                        }
                        job
                    })
                    .collect();
                let got = sqlite.add_jobs(&batch, now).await.unwrap();
                let want = memory.add_jobs(&batch, now).await.unwrap();
                assert_eq!(got, want, "step {step}: add with dependencies {batch:?}");
                seen.refused += want.refused.len();
                for id in &want.new {
                    let job = memory.get_job(id).await.unwrap().unwrap();
                    seen.blocked += usize::from(job.lock == LOCK_BLOCKED);
                    seen.cancelled_at_add += usize::from(job.lock == LOCK_DONE);
                }
            }
            42 | 43 => {
                let ids = rng.ids();
                let got = sorted(sqlite.unblock_jobs(&ids, now).await.unwrap());
                let want = sorted(memory.unblock_jobs(&ids, now).await.unwrap());
                assert_eq!(got, want, "step {step}: unblock_jobs({ids:?})");
                seen.unblocked_by_call += want.len();
            }
            _ => {
                // Deleted or purged jobs come back (as new jobs), plain or
                // the first two repeating.
                let batch = if rng.below(2) == 0 { &jobs } else { &repeating };
                both!(step, sqlite, memory, |s| s.add_jobs(batch, now), |o| o);
            }
        }
        for id in IDS {
            both!(step, sqlite, memory, |s| s.get_job(id), |j| j);
            let after = (step % 2 == 0).then_some("c");
            both!(step, sqlite, memory, |s| s.job_waits(id, after, 2), |w| w);
            if let Some(job) = memory.get_job(id).await.unwrap() {
                let last = job.history.last().filter(|e| e.at == now);
                seen.unblocked += usize::from(last.is_some_and(|e| e.what == EventKind::Unblocked));
                let by_dep = job.result.as_ref().is_some_and(|r| {
                    r.output.starts_with(b"[jobstore] dependency") && job.done_dt == Some(now)
                });
                // A dependency's end cancelled it (not an add's).
                seen.cancelled_by_dependency += usize::from(by_dep && !(44..=47).contains(&choice));
            }
        }
        // Edges held on a job gone: a blocked waiter is unblocked on
        // both; the others' targets are named by no new job.
        let mut held_now = HashSet::new();
        let mut to_unblock = Vec::new();
        for id in IDS {
            let Some(waits) = memory.job_waits(id, None, 100).await.unwrap() else {
                continue;
            };
            for e in &waits.edges {
                if !matches!(e.state, EdgeState::Held { .. }) {
                    continue;
                }
                held_now.insert((id.to_owned(), e.target.clone()));
                let pair = (id.to_owned(), e.target.clone());
                if gone_held.contains(&pair) {
                    continue;
                }
                if memory.get_job(&e.target).await.unwrap().is_none() {
                    seen.held_on_gone += 1;
                    let job = memory.get_job(id).await.unwrap().unwrap();
                    if job.lock == LOCK_BLOCKED {
                        to_unblock.push(id.to_owned());
                    } else {
                        gone_held.insert(pair);
                    }
                }
            }
        }
        to_unblock.dedup();
        if !to_unblock.is_empty() {
            let got = sorted(sqlite.unblock_jobs(&to_unblock, now).await.unwrap());
            let want = sorted(memory.unblock_jobs(&to_unblock, now).await.unwrap());
            assert_eq!(got, want, "step {step}: unblock of {to_unblock:?}");
        }
        gone_held.retain(|pair| held_now.contains(pair));
        seen.held += usize::from(!held_now.is_empty());
        for (w, t) in held_before.difference(&held_now) {
            if let Some(waits) = memory.job_waits(w, None, 100).await.unwrap() {
                seen.held_resolved += usize::from(
                    waits
                        .edges
                        .iter()
                        .any(|e| &e.target == t && matches!(e.state, EdgeState::Done { .. })),
                );
            }
        }
        held_before = held_now;
        both!(step, sqlite, memory, |s| s.waits_of(&all, 2), |mut w| {
            w.sort_by(|a, b| a.id.cmp(&b.id));
            w
        });
        both!(step, sqlite, memory, |s| s.job_counts(now), |c| c);
        let blocked = JobQuery::new(JobState::Blocked).limit(3);
        both!(step, sqlite, memory, |s| s.list_jobs(&blocked, now), |p| p
            .jobs);
    }
    seen
}

#[tokio::test]
async fn every_step_reads_as_the_reference_store() {
    let mut seen = Seen::default();
    for seed in 1..=4 {
        let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
        let s = run(&store, seed, 600).await;
        seen.expired += s.expired;
        seen.full += s.full;
        seen.duplicates += s.duplicates;
        seen.replaced += s.replaced;
        seen.archived_holders += s.archived_holders;
        seen.rerun_refused += s.rerun_refused;
        seen.repeated += s.repeated;
        seen.repeated_full += s.repeated_full;
        seen.claimed_after_repeat += s.claimed_after_repeat;
        seen.blocked += s.blocked;
        seen.refused += s.refused;
        seen.cancelled_at_add += s.cancelled_at_add;
        seen.unblocked += s.unblocked;
        seen.cancelled_by_dependency += s.cancelled_by_dependency;
        seen.held += s.held;
        seen.held_resolved += s.held_resolved;
        seen.unblocked_by_call += s.unblocked_by_call;
        seen.held_on_gone += s.held_on_gone;
        store.close().await;
    }
    println!("{seen:?}");
    assert!(seen.expired > 0 && seen.full > 0, "{seen:?}");
    assert!(
        seen.duplicates > 0
            && seen.replaced > 0
            && seen.archived_holders > 0
            && seen.rerun_refused > 0,
        "{seen:?}"
    );
    assert!(
        seen.repeated > 0 && seen.repeated_full > 0 && seen.claimed_after_repeat > 0,
        "{seen:?}"
    );
    assert!(
        seen.blocked > 0
            && seen.refused > 0
            && seen.cancelled_at_add > 0
            && seen.unblocked > 0
            && seen.cancelled_by_dependency > 0,
        "{seen:?}"
    );
    assert!(
        seen.held > 0 && seen.held_resolved > 0 && seen.unblocked_by_call > 0,
        "{seen:?}"
    );
}
