//! Behaviours of dependencies ([`NewJob::depends_on`], the blocked state,
//! [`JobStore::job_waits`]). A store that does not declare
//! [`Capabilities::dependencies`] must refuse a job with dependencies as
//! `Unsupported` and store nothing of its batch, and answer `job_waits`
//! with `Unsupported`; each behaviour checks that instead.

use jobstore_api::limits::MAX_DEPENDENCIES;

use super::*;

fn waiting_on(id: &str, jobtype: &str, deps: &[&str]) -> NewJob {
    NewJob::new(id, jobtype, format!("data of {id}")).depends_on(deps.iter().copied())
}

fn pending_of(job: &Job) -> u32 {
    job.flow.as_ref().map_or(0, |f| f.pending)
}

async fn absent(s: &dyn JobStore, id: &str) {
    assert_eq!(s.get_job(id).await.unwrap(), None, "{id} is not stored");
}

/// Checks the `Unsupported` answers of a store without dependencies;
/// returns whether the store offers them (the behaviour goes on).
async fn offers_deps(s: &dyn JobStore) -> bool {
    if s.capabilities().dependencies {
        return true;
    }
    add(s, vec![NewJob::new("target", "dp", "t")], T0).await;
    let batch = [
        NewJob::new("plain", "dp", "x"),
        waiting_on("w", "dp", &["target"]),
    ];
    assert_kind(
        s.add_jobs(&batch, T0).await,
        ErrorKind::Unsupported,
        "an add with dependencies to a store without them",
    );
    absent(s, "plain").await;
    absent(s, "w").await;
    assert_kind(
        s.job_waits("target", None, 10).await,
        ErrorKind::Unsupported,
        "job_waits on a store without dependencies",
    );
    assert_kind(
        s.waits_of(&ids(&["target"]), 10).await,
        ErrorKind::Unsupported,
        "waits_of on a store without dependencies",
    );
    assert_kind(
        s.unblock_jobs(&ids(&["target"]), T0).await,
        ErrorKind::Unsupported,
        "unblock_jobs on a store without dependencies",
    );
    false
}

fn held(code: ResultCode, status: u16) -> EdgeState {
    EdgeState::Held { code, status }
}

fn done(code: ResultCode, status: u16) -> EdgeState {
    EdgeState::Done { code, status }
}

/// The edges of `id`'s first page, as (target, state).
async fn edges_of(s: &dyn JobStore, id: &str) -> Vec<(String, EdgeState)> {
    let w = s.job_waits(id, None, 100).await.unwrap().expect("a job");
    w.edges.into_iter().map(|e| (e.target, e.state)).collect()
}

/// Claims job `id` of `jobtype` (it must be the only eligible one) and
/// archives it with `status` at `now`.
async fn run_one(s: &dyn JobStore, jobtype: &str, id: &str, status: u16, now: Millis) {
    assert_eq!(run_all(s, jobtype, status, now).await, [id], "{jobtype}");
}

/// Claims every eligible job of `jobtype` as [`OWNER`] and archives them
/// with `status`.
async fn run_all(s: &dyn JobStore, jobtype: &str, status: u16, now: Millis) -> Vec<String> {
    let got = job_ids(&claim(s, jobtype, 100, OWNER, now).await);
    archive_as(s, &got, status, now).await;
    got
}

/// A job with dependencies is blocked while any is live: never claimed,
/// counted and listed as blocked (`dt` its not-before time), its pending
/// count on every read; when the last ends ok it is waiting (or scheduled
/// until its not-before time), `Unblocked` in its history, and claimed.
pub async fn deps_blocked_until_every_dependency_ends(c: Ctx) {
    let s = &*c.store;
    if !offers_deps(s).await {
        return;
    }
    let (x, y, w) = ("dp-x", "dp-y", "dp-w");
    add(
        s,
        vec![
            NewJob::new("a", x, "a"),
            NewJob::new("b", x, "b").run_at(T0 + 3_600 * SEC),
            NewJob::new("c", y, "c"),
        ],
        T0,
    )
    .await;
    let out = add(
        s,
        vec![
            waiting_on("soon", w, &["a", "b", "c"]).run_at(T0 + 5 * SEC),
            waiting_on("late", w, &["a"]).run_at(T0 + 7_200 * SEC),
            NewJob::new("free", w, "f"),
        ],
        T0,
    )
    .await;
    assert_eq!(out.new, ids(&["soon", "late", "free"]));
    assert!(out.refused.is_empty());
    let soon = get(s, "soon").await;
    assert_eq!(
        (soon.lock.as_str(), soon.dt, soon.state(T0)),
        (LOCK_BLOCKED, T0 + 5 * SEC, JobState::Blocked)
    );
    let flow = soon.flow.as_ref().expect("a flow");
    assert_eq!(
        (flow.pending, flow.has_edges, flow.on_dependency_failure),
        (3, true, DependencyFailure::Cancel)
    );
    let counts = counts_of(s, w, T0).await;
    assert_eq!(
        (
            counts.waiting,
            counts.scheduled,
            counts.blocked,
            counts.total()
        ),
        (1, 0, 2, 3),
        "{counts:?}"
    );
    if s.capabilities().list_jobs {
        let page = s
            .list_jobs(&JobQuery::new(JobState::Blocked).jobtypes([w]), T0)
            .await
            .unwrap();
        assert_eq!(job_ids(&page.jobs), ["soon", "late"], "not-before order");
        let page = s
            .list_jobs(&JobQuery::new(JobState::Running).jobtypes([w]), T0)
            .await
            .unwrap();
        assert!(page.jobs.is_empty(), "blocked is not running: {page:?}");
    }
    // Never handed out, even far in the future.
    let got = claim(s, w, 10, OWNER, T0 + 365 * 24 * 3_600 * SEC).await;
    assert_eq!(job_ids(&got), ["free"]);
    assert!(
        s.waiting_jobtypes(T0 + 10 * SEC)
            .await
            .unwrap()
            .iter()
            .all(|t| t.jobtype != w)
    );

    let now = T0 + 10 * SEC;
    run_all(s, x, 200, now).await;
    let soon = get(s, "soon").await;
    assert_eq!((soon.lock.as_str(), pending_of(&soon)), (LOCK_BLOCKED, 2));
    // "late" waited for "a" only: scheduled until its own time.
    let late = get(s, "late").await;
    assert_eq!(
        (late.lock.as_str(), late.dt, late.state(now)),
        (LOCK_FREE, T0 + 7_200 * SEC, JobState::Scheduled)
    );
    run_all(s, y, 200, now + SEC).await;
    let soon = get(s, "soon").await;
    assert_eq!(
        (soon.lock.as_str(), soon.dt, pending_of(&soon)),
        (LOCK_BLOCKED, T0 + 5 * SEC, 1),
        "b is still scheduled"
    );
    let b_due = T0 + 3_600 * SEC;
    run_all(s, x, 200, b_due).await;
    let soon = get(s, "soon").await;
    assert_eq!(
        (soon.lock.as_str(), soon.dt, pending_of(&soon)),
        (LOCK_FREE, b_due, 0),
        "due when its last dependency ended"
    );
    if s.capabilities().history {
        let last = soon.history.last().unwrap();
        assert_eq!((last.at, &last.what), (b_due, &EventKind::Unblocked));
    }
    assert_eq!(counts_of(s, w, b_due).await.blocked, 0);
    assert_eq!(job_ids(&claim(s, w, 10, OWNER, b_due).await), ["soon"]);
}

/// Dependencies already archived resolve at the add: all ok gives a free
/// job; a failed one gives a job archived `cancelled` under `Cancel`
/// (output naming it) and a free one under `Run`; a mix with a live one
/// is blocked with one pending.
pub async fn deps_on_archived_jobs_resolve_at_the_add(c: Ctx) {
    let s = &*c.store;
    if !offers_deps(s).await {
        return;
    }
    let t = "dp-done";
    add(
        s,
        vec![
            NewJob::new("ok1", t, "").priority(3),
            NewJob::new("bad", t, "").priority(2),
            NewJob::new("live", t, "").run_at(T0 + 3_600 * SEC),
        ],
        T0,
    )
    .await;
    let got = job_ids(&claim(s, t, 2, OWNER, T0).await);
    assert_eq!(got, ["ok1", "bad"]);
    archive_as(s, &ids(&["ok1"]), 200, T0).await;
    archive_as(s, &ids(&["bad"]), 404, T0).await;
    let now = T0 + SEC;
    let w = "dp-done-w";
    let out = add(
        s,
        vec![
            waiting_on("all-ok", w, &["ok1"]),
            waiting_on("cancelled", w, &["ok1", "bad"]),
            waiting_on("runs", w, &["bad"]).on_dependency_failure(DependencyFailure::Run),
            waiting_on("mixed", w, &["ok1", "live"]),
        ],
        now,
    )
    .await;
    assert_eq!(out.new.len(), 4, "{out:?}");
    let all_ok = get(s, "all-ok").await;
    assert_eq!(
        (all_ok.lock.as_str(), all_ok.dt, pending_of(&all_ok)),
        (LOCK_FREE, now, 0)
    );
    let cancelled = get(s, "cancelled").await;
    assert_eq!(cancelled.lock, LOCK_DONE);
    let result = cancelled.result.expect("a result");
    assert_eq!((result.code, result.status), (ResultCode::Cancelled, 0));
    assert_eq!(
        String::from_utf8_lossy(&result.output),
        "[jobstore] dependency bad ended failed\n"
    );
    assert_eq!(get(s, "runs").await.lock, LOCK_FREE);
    let mixed = get(s, "mixed").await;
    assert_eq!((mixed.lock.as_str(), pending_of(&mixed)), (LOCK_BLOCKED, 1));
    let counts = counts_of(s, w, now).await;
    assert_eq!(
        (
            counts.waiting,
            counts.blocked,
            counts.archived.get(&ResultCode::Cancelled)
        ),
        (2, 1, Some(&1)),
        "{counts:?}"
    );
}

/// A dependency that is not a job of the store (never added, deleted,
/// purged, or only in the same batch) refuses its job, naming the field;
/// the rest of the batch is added. The id is checked first.
pub async fn deps_on_unknown_jobs_are_refused(c: Ctx) {
    let s = &*c.store;
    if !offers_deps(s).await {
        return;
    }
    let t = "dp-unknown";
    add(
        s,
        vec![NewJob::new("here", t, ""), NewJob::new("gone", t, "")],
        T0,
    )
    .await;
    s.delete_jobs(&ids(&["gone"]), T0).await.unwrap();
    let out = add(
        s,
        vec![
            NewJob::new("first", t, ""),
            waiting_on("r1", t, &["here", "nowhere"]),
            waiting_on("r2", t, &["gone"]),
            waiting_on("r3", t, &["first"]),
            waiting_on("here", t, &["nowhere"]),
            waiting_on("ok", t, &["here"]),
        ],
        T0,
    )
    .await;
    assert_eq!(out.new, ids(&["first", "ok"]));
    assert_eq!(out.existing, ids(&["here"]), "the id first");
    let refused: Vec<(&str, &str)> = out
        .refused
        .iter()
        .map(|r| (r.id.as_str(), r.field.as_str()))
        .collect();
    assert_eq!(
        refused,
        [
            ("r1", "depends_on[1]"),
            ("r2", "depends_on[0]"),
            ("r3", "depends_on[0]")
        ]
    );
    assert!(
        out.refused[0].reason.contains("nowhere"),
        "{:?}",
        out.refused
    );
    for id in ["r1", "r2", "r3"] {
        absent(s, id).await;
    }
    assert_eq!(get(s, "ok").await.lock, LOCK_BLOCKED);
}

/// Under `Cancel`, a dependency that fails cancels its waiter, and that
/// cancel runs down a chain, across jobtypes; under `Run` the waiter runs.
pub async fn deps_failure_cancels_down_a_chain(c: Ctx) {
    let s = &*c.store;
    if !offers_deps(s).await {
        return;
    }
    add(s, vec![NewJob::new("root", "dp-c0", "")], T0).await;
    add(s, vec![waiting_on("mid", "dp-c1", &["root"])], T0).await;
    add(
        s,
        vec![
            waiting_on("leaf", "dp-c2", &["mid"]),
            waiting_on("runner", "dp-c2", &["root"]).on_dependency_failure(DependencyFailure::Run),
        ],
        T0,
    )
    .await;
    let now = T0 + SEC;
    run_all(s, "dp-c0", 500, now).await;
    let mid = get(s, "mid").await;
    let leaf = get(s, "leaf").await;
    for (job, dep, code) in [(&mid, "root", "error"), (&leaf, "mid", "cancelled")] {
        assert_eq!(
            (job.lock.as_str(), job.done_dt),
            (LOCK_DONE, Some(now)),
            "{}",
            job.id
        );
        let r = job.result.as_ref().unwrap();
        assert_eq!(r.code, ResultCode::Cancelled);
        assert_eq!(
            String::from_utf8_lossy(&r.output),
            format!("[jobstore] dependency {dep} ended {code}\n")
        );
        if s.capabilities().history {
            assert_eq!(job.history.last().unwrap().what, EventKind::Cancelled);
        }
    }
    let runner = get(s, "runner").await;
    assert_eq!((runner.lock.as_str(), runner.dt), (LOCK_FREE, now));
    for (t, n) in [("dp-c1", 1), ("dp-c2", 1)] {
        let counts = counts_of(s, t, now).await;
        assert_eq!(counts.archived.get(&ResultCode::Cancelled), Some(&n), "{t}");
        assert_eq!(counts.blocked, 0, "{t}");
    }
}

/// Every way out of the live states ends the edges: a cancel (a free
/// target's, and a blocked waiter's own, with its waiters seeing
/// `cancelled`), a delete (`cancelled` too), a release `Delete`, an
/// archive by the claimer that took a job whose lease ran out. A retry or
/// a repeat leaves the dependency live.
pub async fn deps_end_by_every_way_out(c: Ctx) {
    let s = &*c.store;
    if !offers_deps(s).await {
        return;
    }
    let t = "dp-out";
    let w = "dp-out-w";
    add(
        s,
        (0..6)
            .map(|i| NewJob::new(format!("t{i}"), t, "").priority(-i))
            .collect(),
        T0,
    )
    .await;
    let run = DependencyFailure::Run;
    add(
        s,
        vec![
            waiting_on("w-cancel", w, &["t0"]).on_dependency_failure(run),
            waiting_on("w-delete", w, &["t1"]).on_dependency_failure(run),
            waiting_on("w-release-delete", w, &["t2"]).on_dependency_failure(run),
            waiting_on("w-expired", w, &["t3"]),
            waiting_on("w-retry", w, &["t4"]),
            waiting_on("blocked-mid", w, &["t5"]),
        ],
        T0,
    )
    .await;
    add(
        s,
        vec![waiting_on("below", "dp-out-2", &["blocked-mid"])],
        T0,
    )
    .await;
    let now = T0 + SEC;
    let out = s
        .cancel_jobs(&ids(&["t0", "blocked-mid"]), now)
        .await
        .unwrap();
    assert_eq!(sorted(out.cancelled), ids(&["blocked-mid", "t0"]));
    assert_eq!(get(s, "w-cancel").await.lock, LOCK_FREE, "run: unblocked");
    let below = get(s, "below").await;
    assert_eq!(
        below.result.map(|r| r.output),
        Some(b"[jobstore] dependency blocked-mid ended cancelled\n".to_vec())
    );
    if s.capabilities().edit_jobs {
        let out = s.delete_jobs(&ids(&["t1"]), now).await.unwrap();
        assert_eq!(out.deleted, ids(&["t1"]));
        let job = get(s, "w-delete").await;
        assert_eq!((job.lock.as_str(), job.dt), (LOCK_FREE, now));
        if let Some(waits) = s.job_waits("w-delete", None, 10).await.unwrap() {
            assert_eq!(
                waits.edges[0].state,
                EdgeState::Done {
                    code: ResultCode::Cancelled,
                    status: 0
                }
            );
        }
    } else {
        s.cancel_jobs(&ids(&["t1"]), now).await.unwrap();
    }
    // t2 to t5 are claimed; t3 on a short lease.
    let got = claim(s, t, 2, OWNER, now).await;
    assert_eq!(job_ids(&got), ["t2", "t3"]);
    s.release_all(&ids(&["t2"]), OWNER, &Release::Delete, now)
        .await
        .unwrap();
    assert_eq!(get(s, "w-release-delete").await.lock, LOCK_FREE);
    s.release_all(
        &ids(&["t3"]),
        OWNER,
        &Release::Retry {
            delay: Duration::ZERO,
        },
        now,
    )
    .await
    .unwrap();
    assert_eq!(
        get(s, "w-expired").await.lock,
        LOCK_BLOCKED,
        "a retry is live"
    );
    let taken = s
        .claim_jobs(t, 1, OWNER, Duration::from_secs(1), now)
        .await
        .unwrap();
    assert_eq!(job_ids(&taken), ["t3"]);
    let later = now + 5 * SEC;
    let again = claim(s, t, 1, OTHER, later).await;
    assert_eq!(job_ids(&again), ["t3"], "its lease ran out");
    s.release_all(
        &ids(&["t3"]),
        OTHER,
        &Release::Archive(JobResult::from_status(200)),
        later,
    )
    .await
    .unwrap();
    let job = get(s, "w-expired").await;
    assert_eq!((job.lock.as_str(), job.dt), (LOCK_FREE, later));
    if s.capabilities().repeat {
        let got = claim(s, t, 1, OWNER, later).await;
        assert_eq!(job_ids(&got), ["t4"]);
        let rel = JobRelease::new(
            "t4",
            Release::Repeat {
                at: later + 3_600 * SEC,
                result: JobResult::from_status(200),
                data: None,
            },
        );
        s.release_jobs(&[rel], OWNER, later).await.unwrap();
        assert_eq!(
            get(s, "w-retry").await.lock,
            LOCK_BLOCKED,
            "a repeat is live"
        );
    }
}

/// A blocked job is edited (priority, payload, not-before) and stays
/// blocked; deleted, it is gone and its own waiters see `cancelled`.
pub async fn deps_blocked_jobs_edit_and_delete(c: Ctx) {
    let s = &*c.store;
    if !offers_deps(s).await || !s.capabilities().edit_jobs {
        return;
    }
    let t = "dp-edit";
    add(s, vec![NewJob::new("dep", t, "")], T0).await;
    add(
        s,
        vec![
            waiting_on("w", "dp-edit-w", &["dep"]),
            waiting_on("doomed", "dp-edit-w", &["dep"]),
        ],
        T0,
    )
    .await;
    add(s, vec![waiting_on("below", "dp-edit-2", &["doomed"])], T0).await;
    let later = T0 + 600 * SEC;
    let edit = JobEdit::new("w")
        .priority(9)
        .run_at(later)
        .data(b"new".to_vec());
    assert_eq!(s.edit_jobs(&[edit], T0).await.unwrap(), ["w"]);
    let job = get(s, "w").await;
    assert_eq!(
        (job.lock.as_str(), job.priority, job.dt, job.data.as_slice()),
        (LOCK_BLOCKED, 9, later, b"new".as_slice())
    );
    let out = s.delete_jobs(&ids(&["doomed"]), T0 + SEC).await.unwrap();
    assert_eq!(out.deleted, ids(&["doomed"]));
    absent(s, "doomed").await;
    assert_eq!(
        get(s, "below").await.result.map(|r| r.code),
        Some(ResultCode::Cancelled)
    );
    run_all(s, t, 200, T0 + 2 * SEC).await;
    let job = get(s, "w").await;
    assert_eq!(
        (job.lock.as_str(), job.dt, job.state(T0 + 2 * SEC)),
        (LOCK_FREE, later, JobState::Scheduled),
        "its edited not-before time"
    );
}

/// `job_waits` lists a job's dependencies by id, a page at a time, with
/// their state and the counts over all of them; `None` for an unknown
/// job; nothing for a job without dependencies.
pub async fn deps_job_waits_pages(c: Ctx) {
    let s = &*c.store;
    if !offers_deps(s).await {
        return;
    }
    let t = "dp-waits";
    let targets: Vec<String> = (0..25).map(|i| format!("t{i:02}")).collect();
    add(
        s,
        targets
            .iter()
            .map(|id| NewJob::new(id.clone(), t, ""))
            .collect(),
        T0,
    )
    .await;
    let deps: Vec<&str> = targets.iter().rev().map(String::as_str).collect();
    add(
        s,
        vec![waiting_on("w", "dp-waits-w", &deps).on_dependency_failure(DependencyFailure::Run)],
        T0,
    )
    .await;
    let got = claim(s, t, 10, OWNER, T0).await;
    let (ok, bad) = got.split_at(6);
    archive_as(s, &job_ids(ok), 200, T0).await;
    archive_as(s, &job_ids(bad), 503, T0).await;
    let mut all = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = s
            .job_waits("w", after.as_deref(), 10)
            .await
            .unwrap()
            .expect("w exists");
        assert_eq!(page.id, "w");
        assert_eq!(page.pending, 15);
        assert_eq!(
            page.done,
            [(ResultCode::Ok, 6), (ResultCode::Error, 4)]
                .into_iter()
                .collect()
        );
        all.extend(page.edges.clone());
        match page.next {
            Some(n) => {
                assert_eq!(page.edges.len(), 10);
                after = Some(n)
            }
            None => break,
        }
    }
    let names: Vec<&str> = all.iter().map(|e| e.target.as_str()).collect();
    assert_eq!(
        names,
        targets.iter().map(String::as_str).collect::<Vec<_>>()
    );
    let states: Vec<EdgeState> = all.iter().map(|e| e.state).collect();
    let mut want = vec![
        EdgeState::Done {
            code: ResultCode::Ok,
            status: 200
        };
        6
    ];
    want.extend(vec![
        EdgeState::Done {
            code: ResultCode::Error,
            status: 503
        };
        4
    ]);
    want.extend(vec![EdgeState::Pending; 15]);
    assert_eq!(states, want);
    assert_eq!(s.job_waits("nobody", None, 10).await.unwrap(), None);
    let plain = s.job_waits("t00", None, 10).await.unwrap().unwrap();
    assert_eq!((plain.pending, plain.edges.len()), (0, 0));
    assert_kind(
        s.job_waits("w", None, 0).await,
        ErrorKind::InvalidInput,
        "limit 0",
    );
    assert_kind(
        s.job_waits("w", None, jobstore_api::limits::MAX_PAGE + 1)
            .await,
        ErrorKind::InvalidInput,
        "limit over MAX_PAGE",
    );
}

/// Bad dependencies (its own id, an id twice, a bad id, too many) reject
/// the whole batch before anything is stored.
pub async fn deps_validation(c: Ctx) {
    let s = &*c.store;
    if !offers_deps(s).await {
        return;
    }
    let t = "dp-bad";
    add(s, vec![NewJob::new("d", t, "")], T0).await;
    let many: Vec<String> = (0..=MAX_DEPENDENCIES).map(|i| format!("m{i}")).collect();
    let bad = [
        (waiting_on("self", t, &["self"]), ErrorKind::InvalidInput),
        (waiting_on("twice", t, &["d", "d"]), ErrorKind::InvalidInput),
        (waiting_on("badid", t, &["a|b"]), ErrorKind::InvalidInput),
        (waiting_on("empty", t, &[""]), ErrorKind::InvalidInput),
        (
            NewJob::new("many", t, "").depends_on(many.clone()),
            ErrorKind::TooLarge,
        ),
    ];
    for (job, kind) in bad {
        let id = job.id.clone();
        assert_kind(
            s.add_jobs(&[NewJob::new("fine", t, ""), job], T0).await,
            kind,
            &id,
        );
        absent(s, "fine").await;
        absent(s, &id).await;
    }
}

/// Concurrent fan-in: waiters on 120 dependencies spread over 6 jobtypes
/// whose last ones are archived at the same instant by 12 tasks on two
/// store handles: each waiter is unblocked exactly once, and a waiter
/// under `Cancel` whose one failing dependency ends among them is
/// cancelled once.
pub async fn deps_fan_in_is_exact(c: Ctx) {
    if !offers_deps(&*c.store).await {
        return;
    }
    for round in 0..3 {
        let now = T0 + round * 100 * SEC;
        let types: Vec<String> = (0..6).map(|k| format!("dp-fan{round}-{k}")).collect();
        let targets: Vec<(String, String)> = (0..120)
            .map(|i| (format!("r{round}-t{i:03}"), types[i % 6].clone()))
            .collect();
        add(
            &*c.store,
            targets
                .iter()
                .map(|(id, jt)| NewJob::new(id.clone(), jt.clone(), ""))
                .collect(),
            now,
        )
        .await;
        let deps: Vec<&str> = targets.iter().map(|(id, _)| id.as_str()).collect();
        let w = format!("dp-fan{round}-w");
        add(
            &*c.store,
            (0..4)
                .map(|k| {
                    NewJob::new(format!("r{round}-w{k}"), w.clone(), "")
                        .depends_on(deps.iter().copied())
                })
                .collect(),
            now,
        )
        .await;
        // Every target claimed, then archived by 12 tasks at one instant;
        // one target fails in the last round.
        let mut held = Vec::new();
        for jt in &types {
            held.extend(job_ids(&claim(&*c.store, jt, 100, OWNER, now).await));
        }
        assert_eq!(held.len(), 120);
        let fail = (round == 2).then(|| held[77].clone());
        let mut set = tokio::task::JoinSet::new();
        for (k, chunk) in held.chunks(10).enumerate() {
            let store = if k % 2 == 0 {
                c.store.clone()
            } else {
                c.peer.clone()
            };
            let list: Vec<JobRelease> = chunk
                .iter()
                .map(|id| {
                    let status = if Some(id) == fail.as_ref() { 500 } else { 200 };
                    JobRelease::new(id.clone(), Release::Archive(JobResult::from_status(status)))
                })
                .collect();
            set.spawn(async move { store.release_jobs(&list, OWNER, now + SEC).await.unwrap() });
        }
        let released: usize = set.join_all().await.iter().map(Vec::len).sum();
        assert_eq!(released, 120);
        let counts = counts_of(&*c.store, &w, now + SEC).await;
        for k in 0..4 {
            let job = get(&*c.store, &format!("r{round}-w{k}")).await;
            if fail.is_some() {
                assert_eq!(job.lock, LOCK_DONE, "round {round}");
                assert_eq!(job.result.map(|r| r.code), Some(ResultCode::Cancelled));
            } else {
                assert_eq!(
                    (job.lock.as_str(), pending_of(&job)),
                    (LOCK_FREE, 0),
                    "round {round}"
                );
                if c.store.capabilities().history {
                    let n = job
                        .history
                        .iter()
                        .filter(|e| e.what == EventKind::Unblocked)
                        .count();
                    assert_eq!(n, 1, "unblocked once: {:?}", job.history);
                }
            }
        }
        if fail.is_some() {
            assert_eq!(
                counts.archived.get(&ResultCode::Cancelled),
                Some(&4),
                "{counts:?}"
            );
        } else {
            assert_eq!((counts.waiting, counts.blocked), (4, 0), "{counts:?}");
            assert_eq!(claim(&*c.store, &w, 10, OWNER, now + SEC).await.len(), 4);
        }
    }
}

/// A dependency is named within one namespace: an id of another
/// namespace's job is unknown.
pub async fn deps_isolated_between_namespaces(a: Ctx, b: Ctx) {
    let (a, b) = (&*a.store, &*b.store);
    if !offers_deps(a).await {
        return;
    }
    add(a, vec![NewJob::new("only-in-a", "dp-iso", "")], T0).await;
    let out = add(b, vec![waiting_on("w", "dp-iso", &["only-in-a"])], T0).await;
    assert_eq!(out.refused.len(), 1, "{out:?}");
    absent(b, "w").await;
    let out = add(a, vec![waiting_on("w", "dp-iso", &["only-in-a"])], T0).await;
    assert_eq!(out.new, ids(&["w"]));
    assert_eq!(b.job_waits("w", None, 10).await.unwrap(), None);
    assert!(b.waits_of(&ids(&["w"]), 10).await.unwrap().is_empty());
    assert!(b.unblock_jobs(&ids(&["w"]), T0).await.unwrap().is_empty());
    assert_eq!(get(a, "w").await.lock, LOCK_BLOCKED);
}

/// Under `Hold`, a dependency that ends other than `ok` holds its edge:
/// the waiter stays blocked whatever the others do, and nothing runs
/// down to its own waiters. The dependency run again and failing again
/// holds the edge with its new result; ending `ok` resolves it and
/// unblocks the waiter. A dependency already failed at the add is held
/// at once. `with_outputs` reads back on the waiter's flow.
pub async fn deps_hold_keeps_the_waiter_blocked(c: Ctx) {
    let s = &*c.store;
    if !offers_deps(s).await {
        return;
    }
    let (t, w, v) = ("dp-h-t", "dp-h-w", "dp-h-v");
    add(
        s,
        vec![
            NewJob::new("a", t, "a"),
            NewJob::new("b", t, "b").priority(-1),
        ],
        T0,
    )
    .await;
    add(
        s,
        vec![
            waiting_on("held", w, &["a", "b"])
                .on_dependency_failure(DependencyFailure::Hold)
                .with_outputs(),
        ],
        T0,
    )
    .await;
    add(s, vec![waiting_on("below", v, &["held"])], T0).await;
    let flow = get(s, "held").await.flow.expect("a flow");
    assert_eq!(
        (flow.on_dependency_failure, flow.with_outputs, flow.pending),
        (DependencyFailure::Hold, true, 2)
    );
    assert!(!get(s, "below").await.flow.expect("a flow").with_outputs);

    let now = T0 + SEC;
    let got = job_ids(&claim(s, t, 1, OWNER, now).await);
    assert_eq!(got, ["a"]);
    archive_as(s, &got, 503, now).await;
    let job = get(s, "held").await;
    assert_eq!((job.lock.as_str(), pending_of(&job)), (LOCK_BLOCKED, 2));
    assert_eq!(
        edges_of(s, "held").await,
        [
            ("a".to_owned(), held(ResultCode::Error, 503)),
            ("b".to_owned(), EdgeState::Pending)
        ]
    );
    let waits = s.job_waits("held", None, 10).await.unwrap().unwrap();
    assert_eq!((waits.pending, waits.held, waits.skipped), (1, 1, 0));
    assert!(waits.done.is_empty(), "{waits:?}");

    let now = now + SEC;
    run_one(s, t, "b", 200, now).await;
    let job = get(s, "held").await;
    assert_eq!(
        (job.lock.as_str(), pending_of(&job)),
        (LOCK_BLOCKED, 1),
        "held by a"
    );
    assert_eq!(counts_of(s, w, now).await.blocked, 1);
    let below = get(s, "below").await;
    assert_eq!((below.lock.as_str(), pending_of(&below)), (LOCK_BLOCKED, 1));

    // The operator runs `a` again: it fails again, then ends ok.
    let now = now + SEC;
    assert_eq!(
        s.rerun_jobs(&ids(&["a"]), Duration::ZERO, now)
            .await
            .unwrap(),
        ["a"]
    );
    let job = get(s, "held").await;
    assert_eq!((job.lock.as_str(), pending_of(&job)), (LOCK_BLOCKED, 1));
    run_one(s, t, "a", 404, now).await;
    assert_eq!(
        edges_of(s, "held").await[0],
        ("a".to_owned(), held(ResultCode::Failed, 404))
    );
    assert_eq!(get(s, "held").await.lock, LOCK_BLOCKED);
    let now = now + SEC;
    s.rerun_jobs(&ids(&["a"]), Duration::ZERO, now)
        .await
        .unwrap();
    run_one(s, t, "a", 200, now).await;
    let job = get(s, "held").await;
    assert_eq!(
        (job.lock.as_str(), job.dt, pending_of(&job)),
        (LOCK_FREE, now, 0)
    );
    if s.capabilities().history {
        let n = job
            .history
            .iter()
            .filter(|e| e.what == EventKind::Unblocked)
            .count();
        assert_eq!(n, 1, "{:?}", job.history);
        assert_eq!(job.history.last().unwrap().what, EventKind::Unblocked);
    }
    assert_eq!(
        edges_of(s, "held").await,
        [
            ("a".to_owned(), done(ResultCode::Ok, 200)),
            ("b".to_owned(), done(ResultCode::Ok, 200))
        ]
    );
    let waits = s.job_waits("held", None, 10).await.unwrap().unwrap();
    assert_eq!(
        (waits.pending, waits.held, waits.done.get(&ResultCode::Ok)),
        (0, 0, Some(&2))
    );

    // Held at the add: a dependency that already failed.
    let now = now + SEC;
    add(s, vec![NewJob::new("c", t, "c")], now).await;
    run_one(s, t, "c", 500, now).await;
    add(
        s,
        vec![waiting_on("at-add", w, &["c", "b"]).on_dependency_failure(DependencyFailure::Hold)],
        now,
    )
    .await;
    let job = get(s, "at-add").await;
    assert_eq!((job.lock.as_str(), pending_of(&job)), (LOCK_BLOCKED, 1));
    assert_eq!(
        edges_of(s, "at-add").await,
        [
            ("b".to_owned(), done(ResultCode::Ok, 200)),
            ("c".to_owned(), held(ResultCode::Error, 500))
        ]
    );
    let now = now + SEC;
    s.rerun_jobs(&ids(&["c"]), Duration::ZERO, now)
        .await
        .unwrap();
    run_one(s, t, "c", 200, now).await;
    let job = get(s, "at-add").await;
    assert_eq!((job.lock.as_str(), pending_of(&job)), (LOCK_FREE, 0));
}

/// `unblock_jobs` frees blocked jobs whatever they wait for: pending and
/// held edges become skipped, the job is free at `max(not_before, now)`
/// with `Unblocked`, and a skipped dependency's later end changes nothing
/// (not even under `Cancel`). Jobs in other states and unknown ids are
/// left as they are and not returned; a second call returns nothing.
/// `waits_of` answers for several jobs at once.
pub async fn deps_unblock_jobs_skips_what_is_left(c: Ctx) {
    let s = &*c.store;
    if !offers_deps(s).await {
        return;
    }
    let (t, w) = ("dp-u-t", "dp-u-w");
    add(
        s,
        vec![
            NewJob::new("live", t, "").priority(1),
            NewJob::new("bad", t, ""),
            NewJob::new("free", w, ""),
        ],
        T0,
    )
    .await;
    let now = T0 + SEC;
    let got = job_ids(&claim(s, t, 2, OWNER, now).await);
    assert_eq!(got, ["live", "bad"]);
    archive_as(s, &ids(&["bad"]), 404, now).await;
    add(
        s,
        vec![
            waiting_on("h", w, &["live", "bad"]).on_dependency_failure(DependencyFailure::Hold),
            waiting_on("c", w, &["live"]),
            waiting_on("later", w, &["live"]).run_at(T0 + 3_600 * SEC),
            waiting_on("stays", w, &["live"]),
        ],
        now,
    )
    .await;
    add(s, vec![NewJob::new("old", w, "")], now).await;
    // "old" runs and is archived; "free" stays free.
    let now = now + SEC;
    assert_eq!(job_ids(&claim(s, w, 10, OWNER, now).await), ["free", "old"]);
    archive_as(s, &ids(&["old"]), 200, now).await;
    s.release_all(&ids(&["free"]), OWNER, &Release::Unget, now)
        .await
        .unwrap();
    assert_eq!(counts_of(s, w, now).await.blocked, 4);

    let now = now + SEC;
    let asked = ids(&["h", "c", "later", "free", "old", "nope"]);
    let got = sorted(s.unblock_jobs(&asked, now).await.unwrap());
    assert_eq!(got, ["c", "h", "later"]);
    let h = get(s, "h").await;
    assert_eq!((h.lock.as_str(), h.dt, pending_of(&h)), (LOCK_FREE, now, 0));
    if s.capabilities().history {
        assert_eq!(h.history.last().unwrap().what, EventKind::Unblocked);
        assert_eq!(h.history.last().unwrap().at, now);
    }
    let later = get(s, "later").await;
    assert_eq!(
        (later.lock.as_str(), later.dt, later.state(now)),
        (LOCK_FREE, T0 + 3_600 * SEC, JobState::Scheduled)
    );
    assert_eq!(
        edges_of(s, "h").await,
        [
            ("bad".to_owned(), EdgeState::Skipped),
            ("live".to_owned(), EdgeState::Skipped)
        ]
    );
    let waits = s.job_waits("h", None, 10).await.unwrap().unwrap();
    assert_eq!((waits.pending, waits.held, waits.skipped), (0, 0, 2));
    assert_eq!(get(s, "free").await.lock, LOCK_FREE);
    assert_eq!(get(s, "old").await.lock, LOCK_DONE);
    assert_eq!(get(s, "stays").await.lock, LOCK_BLOCKED);
    let counts = counts_of(s, w, now).await;
    assert_eq!(
        (counts.blocked, counts.waiting, counts.scheduled),
        (1, 3, 1)
    );
    assert!(s.unblock_jobs(&asked, now).await.unwrap().is_empty());

    // The skipped dependency fails: "c" (under Cancel) is not cancelled,
    // "stays" (still blocked) is.
    let now = now + SEC;
    archive_as(s, &ids(&["live"]), 500, now).await;
    let c_job = get(s, "c").await;
    assert_eq!((c_job.lock.as_str(), pending_of(&c_job)), (LOCK_FREE, 0));
    assert_eq!(
        edges_of(s, "c").await,
        [("live".to_owned(), EdgeState::Skipped)]
    );
    let stays = get(s, "stays").await;
    assert_eq!(stays.result.map(|r| r.code), Some(ResultCode::Cancelled));

    // waits_of: jobs with edges only, each its first page.
    let mut many = s
        .waits_of(&ids(&["h", "c", "stays", "free", "nope"]), 1)
        .await
        .unwrap();
    many.sort_by(|a, b| a.id.cmp(&b.id));
    let got: Vec<(&str, usize, Option<&str>)> = many
        .iter()
        .map(|w| (w.id.as_str(), w.edges.len(), w.next.as_deref()))
        .collect();
    assert_eq!(
        got,
        [("c", 1, None), ("h", 1, Some("bad")), ("stays", 1, None)]
    );
    assert_eq!(many[1].skipped, 2, "counts over every edge");
    assert_eq!(
        many[2].edges[0].state,
        done(ResultCode::Error, 500),
        "{:?}",
        many[2]
    );
    assert!(s.waits_of(&[], 10).await.unwrap().is_empty());
    assert_kind(
        s.waits_of(&ids(&["h"]), 0).await,
        ErrorKind::InvalidInput,
        "waits_of with limit 0",
    );
    assert_kind(
        s.unblock_jobs(&ids(&["h", "h"]), now).await,
        ErrorKind::InvalidInput,
        "unblock_jobs with an id twice",
    );
    assert_kind(
        s.add_jobs(&[NewJob::new("o", w, "").with_outputs()], now)
            .await,
        ErrorKind::InvalidInput,
        "with_outputs without dependencies",
    );
    absent(s, "o").await;
}

/// `unblock_jobs` racing the end of the last dependency, on two handles:
/// every waiter ends free exactly once (one `Unblocked`), returned by the
/// unblock exactly when its edge reads skipped; a waiter under `Cancel`
/// whose dependency fails is either cancelled (and not returned) or
/// unblocked with the edge skipped, never both.
pub async fn deps_unblock_racing_the_last_dependency(c: Ctx) {
    if !offers_deps(&*c.store).await {
        return;
    }
    for round in 0..3 {
        let now = T0 + round * 100 * SEC;
        let t = format!("dp-ur{round}-t");
        let w = format!("dp-ur{round}-w");
        let targets: Vec<String> = (0..40).map(|i| format!("ur{round}-t{i:02}")).collect();
        let waiters: Vec<String> = (0..40).map(|i| format!("ur{round}-w{i:02}")).collect();
        add(
            &*c.store,
            targets
                .iter()
                .map(|id| NewJob::new(id.clone(), t.clone(), ""))
                .collect(),
            now,
        )
        .await;
        add(
            &*c.store,
            targets
                .iter()
                .zip(&waiters)
                .map(|(dep, id)| NewJob::new(id.clone(), w.clone(), "").depends_on([dep.clone()]))
                .collect(),
            now,
        )
        .await;
        let held_ids = job_ids(&claim(&*c.store, &t, 100, OWNER, now).await);
        assert_eq!(held_ids.len(), 40);
        // Round 1 fails every target.
        let status = if round == 1 { 500 } else { 200 };
        let at = now + SEC;
        let mut set = tokio::task::JoinSet::new();
        for (k, chunk) in held_ids.chunks(10).enumerate() {
            let store = if k % 2 == 0 {
                c.store.clone()
            } else {
                c.peer.clone()
            };
            let list: Vec<JobRelease> = chunk
                .iter()
                .map(|id| {
                    JobRelease::new(id.clone(), Release::Archive(JobResult::from_status(status)))
                })
                .collect();
            set.spawn(async move {
                store.release_jobs(&list, OWNER, at).await.unwrap();
                Vec::new()
            });
        }
        for (k, chunk) in waiters.chunks(10).enumerate() {
            let store = if k % 2 == 0 {
                c.peer.clone()
            } else {
                c.store.clone()
            };
            let list = chunk.to_vec();
            set.spawn(async move { store.unblock_jobs(&list, at).await.unwrap() });
        }
        let unblocked: std::collections::HashSet<String> =
            set.join_all().await.into_iter().flatten().collect();
        for (id, dep) in waiters.iter().zip(&targets) {
            let job = get(&*c.store, id).await;
            let edge = edges_of(&*c.store, id).await;
            let skipped = edge == [(dep.clone(), EdgeState::Skipped)];
            assert_eq!(
                unblocked.contains(id),
                skipped,
                "round {round} {id}: {edge:?}"
            );
            if !skipped {
                assert_eq!(
                    edge,
                    [(dep.clone(), done(ResultCode::from_status(status), status))]
                );
            }
            if round == 1 && !skipped {
                assert_eq!(
                    job.result.map(|r| r.code),
                    Some(ResultCode::Cancelled),
                    "{id}"
                );
                continue;
            }
            assert_eq!(
                (job.lock.as_str(), pending_of(&job)),
                (LOCK_FREE, 0),
                "{id}"
            );
            if c.store.capabilities().history {
                let n = job
                    .history
                    .iter()
                    .filter(|e| e.what == EventKind::Unblocked)
                    .count();
                assert_eq!(n, 1, "unblocked once: {:?}", job.history);
            }
        }
        let counts = counts_of(&*c.store, &w, at).await;
        assert_eq!(counts.blocked, 0, "{counts:?}");
        let cancelled = counts
            .archived
            .get(&ResultCode::Cancelled)
            .copied()
            .unwrap_or(0);
        assert_eq!(counts.waiting + cancelled, 40, "{counts:?}");
    }
}
