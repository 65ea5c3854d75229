//! Behaviours of the management operations: `list_jobs`, `rerun_jobs`,
//! `delete_jobs`, `edit_jobs`, cancelling locked jobs (`cancel_jobs` with
//! `renew_locks`' [`Renewal::cancelled`]), `pause_jobtype` and
//! `paused_jobtypes`. A store that does not declare an operation in its
//! [`Capabilities`] must answer it with `Unsupported`; each behaviour checks
//! that instead of its effects.

use std::collections::{BTreeSet, HashSet};

use super::*;

/// Checks the `Unsupported` answer of an operation a store does not
/// declare; returns whether the store declares it (the behaviour goes on).
async fn offered<T: std::fmt::Debug>(
    declared: bool,
    op: &str,
    call: impl std::future::Future<Output = Result<T>>,
) -> bool {
    if !declared {
        assert_kind(call.await, ErrorKind::Unsupported, op);
    }
    declared
}

/// Every page of `query` from the first, concatenated.
async fn all_pages(s: &dyn JobStore, query: &JobQuery, now: Millis) -> Vec<Job> {
    let mut out = Vec::new();
    let mut q = query.clone();
    for _ in 0..10_000 {
        let page = s.list_jobs(&q, now).await.expect("list_jobs");
        assert!(
            page.jobs.len() <= q.limit,
            "a page holds at most limit jobs"
        );
        out.extend(page.jobs);
        match page.next {
            Some(next) => q.cursor = Some(next),
            None => return out,
        }
    }
    panic!("list_jobs never reached its last page");
}

fn list_ids(jobs: &[Job]) -> Vec<String> {
    job_ids(jobs)
}

/// Jobs of every state over jobtypes `acme:mail`, `acme:sms`, `beta:mail`,
/// at [`LIST_NOW`]:
/// - waiting `w0..w5` (priorities 0, 2, 1, 0, 2, 1; dts spread, ties);
/// - scheduled `s0..s2`;
/// - running `r0`, `r1` (owner), expired `e0`;
/// - archived `a-ok-*`, `a-failed-*`, `a-error-0`, at distinct times.
async fn list_fixture(s: &dyn JobStore) {
    let mut jobs = Vec::new();
    let types = ["acme:mail", "acme:sms", "beta:mail"];
    for i in 0..6 {
        jobs.push(
            NewJob::new(format!("w{i}"), types[i % 3], format!("w{i} data"))
                .priority([0, 2, 1, 0, 2, 1][i])
                .run_at(T0 + [5, 1, 1, 0, 3, 2][i] * SEC),
        );
    }
    for (i, t) in types.iter().enumerate() {
        jobs.push(
            NewJob::new(format!("s{i}"), *t, "later").run_at(LIST_NOW + (30 - i as i64) * SEC),
        );
    }
    for (i, t) in ["r0", "r1", "e0"].iter().zip(types) {
        jobs.push(NewJob::new(*i, format!("{t}.run"), "").run_at(T0));
    }
    // Archived in this order; priorities make each the next claimed.
    for i in 0..4 {
        let p = 1_000 - 2 * i as i32;
        jobs.push(NewJob::new(format!("a-ok-{i}"), types[i % 3], "").priority(p));
        jobs.push(NewJob::new(format!("a-failed-{i}"), types[i % 3], "").priority(p - 1));
    }
    jobs.push(NewJob::new("a-error-0", "acme:mail", "").priority(1));
    add(s, jobs, T0).await;
    // Running and expired: r0 and r1 by OWNER for an hour, e0 for 10 s.
    for (id, t) in [("r0", "acme:mail.run"), ("r1", "acme:sms.run")] {
        let got = s
            .claim_jobs(t, 1, OWNER, Duration::from_secs(3600), T0 + 10 * SEC)
            .await
            .unwrap();
        assert_eq!(job_ids(&got), ids(&[id]));
    }
    let got = s
        .claim_jobs(
            "beta:mail.run",
            1,
            OWNER,
            Duration::from_secs(10),
            T0 + 10 * SEC,
        )
        .await
        .unwrap();
    assert_eq!(job_ids(&got), ids(&["e0"]));
    // Archived, one per second from T0 + 20 s, each claimed on its own.
    let mut t = T0 + 20 * SEC;
    for i in 0..4 {
        for (id, status) in [(format!("a-ok-{i}"), 200), (format!("a-failed-{i}"), 404)] {
            archive_one(s, &id, status, t).await;
            t += SEC;
        }
    }
    archive_one(s, "a-error-0", 500, t).await;
}

/// When [`list_fixture`]'s states hold.
const LIST_NOW: Millis = T0 + 60 * SEC;

/// Claims job `id` (the first of its jobtype in claim order: archived-to-be
/// jobs have the highest priorities, in archive order) and archives it with
/// `status` at `now`.
async fn archive_one(s: &dyn JobStore, id: &str, status: u16, now: Millis) {
    let job = get(s, id).await;
    let got = s
        .claim_jobs(&job.jobtype, 1, OWNER, MIN, now)
        .await
        .unwrap();
    assert_eq!(job_ids(&got), ids(&[id]), "claim of {id}");
    archive_as(s, &ids(&[id]), status, now).await;
}

/// Every state lists its jobs in its documented order (checked against the
/// order computed from the jobs as read one by one), across jobtypes,
/// without payloads unless asked for; and a page of exactly the matching
/// jobs has no next page.
pub async fn list_each_state_in_its_order(c: Ctx) {
    let s = &*c.store;
    let caps = s.capabilities();
    if !offered(
        caps.list_jobs,
        "list_jobs",
        s.list_jobs(&JobQuery::new(JobState::Waiting), T0),
    )
    .await
    {
        return;
    }
    list_fixture(s).await;
    let want: [(JobState, &[&str]); 5] = [
        // Priority high first, then dt, then id.
        (JobState::Waiting, &["w1", "w4", "w2", "w5", "w3", "w0"]),
        // dt first: s2 is due first.
        (JobState::Scheduled, &["s2", "s1", "s0"]),
        (JobState::Running, &["r0", "r1"]),
        (JobState::Expired, &["e0"]),
        // Newest archive first.
        (
            JobState::Archived,
            &[
                "a-error-0",
                "a-failed-3",
                "a-ok-3",
                "a-failed-2",
                "a-ok-2",
                "a-failed-1",
                "a-ok-1",
                "a-failed-0",
                "a-ok-0",
            ],
        ),
    ];
    for (state, expected) in want {
        let q = JobQuery::new(state);
        let page = s.list_jobs(&q, LIST_NOW).await.unwrap();
        assert_eq!(list_ids(&page.jobs), ids(expected), "{state} jobs in order");
        assert_eq!(page.next, None, "{state}: one page holds them all");
        for j in &page.jobs {
            assert!(j.data.is_empty(), "{state}: no payload unless asked");
            let stored = get(s, &j.id).await;
            assert_eq!(
                *j,
                Job {
                    data: Vec::new(),
                    ..stored.clone()
                },
                "a listed job is the stored job without its payload"
            );
            assert_eq!(stored.state(LIST_NOW), state);
        }
        // With payloads, and a limit equal to the count: still no next page.
        let q = JobQuery::new(state).with_data().limit(expected.len());
        let page = s.list_jobs(&q, LIST_NOW).await.unwrap();
        assert_eq!(page.next, None, "{state}: exactly limit jobs, last page");
        for j in &page.jobs {
            assert_eq!(j.data, get(s, &j.id).await.data, "payload of {}", j.id);
        }
    }
    // The states are read at the call's `now`: 28.5 s later s2 is due.
    let later = LIST_NOW + 28_500;
    let scheduled = s
        .list_jobs(&JobQuery::new(JobState::Scheduled), later)
        .await
        .unwrap();
    assert_eq!(list_ids(&scheduled.jobs), ids(&["s1", "s0"]));
    let waiting = s
        .list_jobs(&JobQuery::new(JobState::Waiting), later)
        .await
        .unwrap();
    assert_eq!(waiting.jobs.len(), 7, "s2 became waiting");
}

/// Pages of every size walk the whole selection exactly once, in order,
/// for every state, and the last page says so.
pub async fn list_pages_walk_everything_once(c: Ctx) {
    let s = &*c.store;
    let caps = s.capabilities();
    if !caps.list_jobs {
        return; // checked by list_each_state_in_its_order
    }
    list_fixture(s).await;
    // More archived jobs with equal archive times (ties broken by id).
    let more: Vec<NewJob> = (0..25)
        .map(|i| NewJob::new(format!("x{i:02}"), "acme:bulk", "").priority(i % 4))
        .collect();
    add(s, more, T0).await;
    let got = claim(s, "acme:bulk", 20, OWNER, T0 + 40 * SEC).await;
    let half: Vec<String> = job_ids(&got[..10]);
    let rest: Vec<String> = job_ids(&got[10..]);
    archive_as(s, &half, 500, T0 + 41 * SEC).await;
    archive_as(s, &rest, 404, T0 + 41 * SEC).await;
    for state in [
        JobState::Waiting,
        JobState::Scheduled,
        JobState::Running,
        JobState::Archived,
    ] {
        let whole = s
            .list_jobs(&JobQuery::new(state).limit(MAX_PAGE), LIST_NOW)
            .await
            .unwrap();
        assert_eq!(whole.next, None);
        for limit in [1, 2, 3, 7] {
            let paged = all_pages(s, &JobQuery::new(state).limit(limit), LIST_NOW).await;
            assert_eq!(
                list_ids(&paged),
                list_ids(&whole.jobs),
                "{state} in pages of {limit}"
            );
        }
    }
}

/// Filters: exact jobtypes, a prefix, result codes, created and archived
/// ranges; each narrows the selection and keeps its order.
pub async fn list_filters(c: Ctx) {
    let s = &*c.store;
    let caps = s.capabilities();
    if !caps.list_jobs {
        return;
    }
    list_fixture(s).await;
    // A job created later, to filter on creation.
    add(
        s,
        vec![NewJob::new("w-late", "acme:mail", "")],
        T0 + 50 * SEC,
    )
    .await;
    let page = |q: JobQuery| async move {
        let out = all_pages(s, &q.limit(3), LIST_NOW).await;
        list_ids(&out)
    };
    assert_eq!(
        page(JobQuery::new(JobState::Waiting).jobtypes(["acme:mail"])).await,
        ids(&["w3", "w0", "w-late"])
    );
    assert_eq!(
        page(JobQuery::new(JobState::Waiting).jobtypes(["beta:mail", "acme:mail"])).await,
        ids(&["w2", "w5", "w3", "w0", "w-late"])
    );
    assert_eq!(
        page(JobQuery::new(JobState::Waiting).prefix("acme:")).await,
        ids(&["w1", "w4", "w3", "w0", "w-late"])
    );
    // A prefix that is a whole jobtype also takes longer ones.
    assert_eq!(
        page(JobQuery::new(JobState::Running).prefix("acme:mail")).await,
        ids(&["r0"])
    );
    assert!(
        page(JobQuery::new(JobState::Waiting).prefix("acme:mail."))
            .await
            .is_empty()
    );
    assert!(
        page(JobQuery::new(JobState::Waiting).jobtypes(["nobody"]))
            .await
            .is_empty()
    );
    assert_eq!(
        page(JobQuery::new(JobState::Archived).codes([ResultCode::Failed])).await,
        ids(&["a-failed-3", "a-failed-2", "a-failed-1", "a-failed-0"])
    );
    assert_eq!(
        page(
            JobQuery::new(JobState::Archived)
                .codes([ResultCode::Error, ResultCode::Failed])
                .prefix("acme:")
        )
        .await,
        ids(&["a-error-0", "a-failed-3", "a-failed-1", "a-failed-0"])
    );
    assert_eq!(
        page(JobQuery::new(JobState::Archived).codes([ResultCode::Timeout])).await,
        Vec::<String>::new()
    );
    // Archived in [T0 + 21 s, T0 + 24 s): a-failed-0, a-ok-1, a-failed-1.
    assert_eq!(
        page(
            JobQuery::new(JobState::Archived)
                .archived(TimeRange::new(Some(T0 + 21 * SEC), Some(T0 + 24 * SEC)))
        )
        .await,
        ids(&["a-failed-1", "a-ok-1", "a-failed-0"])
    );
    assert_eq!(
        page(JobQuery::new(JobState::Archived).archived(TimeRange::new(Some(T0 + 27 * SEC), None)))
            .await,
        ids(&["a-error-0", "a-failed-3"])
    );
    assert_eq!(
        page(JobQuery::new(JobState::Waiting).created(TimeRange::new(Some(T0 + SEC), None))).await,
        ids(&["w-late"])
    );
    assert_eq!(
        page(JobQuery::new(JobState::Waiting).created(TimeRange::new(None, Some(T0 + SEC)))).await,
        ids(&["w1", "w4", "w2", "w5", "w3", "w0"])
    );
}

/// Queries the contract forbids are `InvalidInput`, each naming its
/// field, and change nothing.
pub async fn list_bad_queries_rejected(c: Ctx) {
    let s = &*c.store;
    if !s.capabilities().list_jobs {
        return;
    }
    add_n(s, "t", 3, T0).await;
    let first = s
        .list_jobs(&JobQuery::new(JobState::Waiting).limit(1), T0)
        .await
        .unwrap();
    let cursor = first.next.clone().expect("three jobs, pages of one");
    let archived_cursor = Some(cursor.clone());
    let cases: Vec<(&str, JobQuery)> = vec![
        ("limit", JobQuery::new(JobState::Waiting).limit(0)),
        (
            "limit",
            JobQuery::new(JobState::Waiting).limit(MAX_PAGE + 1),
        ),
        (
            "codes",
            JobQuery::new(JobState::Waiting).codes([ResultCode::Failed]),
        ),
        (
            "archived",
            JobQuery::new(JobState::Running).archived(TimeRange::new(Some(T0), None)),
        ),
        (
            "created",
            JobQuery::new(JobState::Waiting).created(TimeRange::new(Some(T0), Some(T0))),
        ),
        (
            "archived",
            JobQuery::new(JobState::Archived).archived(TimeRange::new(Some(T0 + 5), Some(T0))),
        ),
        (
            "created.from",
            JobQuery::new(JobState::Waiting).created(TimeRange::new(Some(-1), None)),
        ),
        (
            "cursor",
            JobQuery::new(JobState::Archived).after(archived_cursor),
        ),
        (
            "cursor",
            JobQuery::new(JobState::Waiting)
                .jobtypes(["t"])
                .after(Some(cursor.clone())),
        ),
        ("prefix", JobQuery::new(JobState::Waiting).prefix("")),
        ("prefix", JobQuery::new(JobState::Waiting).prefix("a b")),
        (
            "jobtype",
            JobQuery::new(JobState::Waiting).jobtypes(["a/b"]),
        ),
        (
            "jobtypes",
            JobQuery::new(JobState::Waiting).jobtypes(Vec::<String>::new()),
        ),
        (
            "jobtypes",
            JobQuery::new(JobState::Waiting).jobtypes(["t", "t"]),
        ),
        (
            "jobtypes",
            JobQuery::new(JobState::Waiting)
                .jobtypes((0..=jobstore_api::limits::MAX_QUERY_JOBTYPES).map(|i| format!("t{i}"))),
        ),
    ];
    for (field, q) in cases {
        match s.list_jobs(&q, T0).await {
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::InvalidInput, "{field}: {e}");
                assert!(e.to_string().contains(field), "{e} names {field}");
            }
            Ok(p) => panic!("{field}: expected InvalidInput, got {p:?}"),
        }
    }
    assert_kind(
        s.list_jobs(&JobQuery::new(JobState::Waiting), -5).await,
        ErrorKind::InvalidInput,
        "now",
    );
    // Cursors are text and come back through it; garbage is refused.
    assert_eq!(cursor.to_string().parse::<Cursor>().unwrap(), cursor);
    assert!("not a cursor".parse::<Cursor>().is_err());
    // The good cursor resumes where the first page stopped.
    let second = s
        .list_jobs(
            &JobQuery::new(JobState::Waiting)
                .limit(1)
                .after(Some(cursor)),
            T0,
        )
        .await
        .unwrap();
    assert_eq!(list_ids(&second.jobs), ids(&["t-000001"]));
    assert_eq!(counts_of(s, "t", T0).await.waiting, 3, "nothing changed");
}

/// Keyset pages stay stable while jobs move: paging through waiting jobs
/// while other tasks add jobs, claim them and archive them, every job that
/// stayed waiting the whole time is listed exactly once, no job twice, and
/// the pages stay in order.
pub async fn list_pages_stable_while_jobs_move(c: Ctx) {
    let s = &*c.store;
    if !s.capabilities().list_jobs {
        return;
    }
    // 300 jobs that stay, of priority 0..3, and 300 that move.
    let stay: Vec<NewJob> = (0..300)
        .map(|i| NewJob::new(format!("stay-{i:03}"), "move", "").priority(i % 3))
        .collect();
    add(s, stay, T0).await;
    let movers: Vec<NewJob> = (0..300)
        .map(|i| NewJob::new(format!("mover-{i:03}"), "move", "").priority(5 + i % 3))
        .collect();
    add(s, movers, T0).await;
    let now = T0 + SEC;
    let peer = c.peer.clone();
    let churn = tokio::spawn(async move {
        let peer = &*peer;
        let mut n = 0;
        // Movers have the higher priorities: claims take only them.
        for round in 0..30 {
            let got = peer
                .claim_jobs("move", 10, OTHER, MIN, now)
                .await
                .expect("claim");
            let got_ids = job_ids(&got);
            assert!(
                got_ids.iter().all(|i| i.starts_with("mover-")),
                "{got_ids:?}"
            );
            if round % 2 == 0 {
                archive_as_owner(peer, &got_ids, OTHER, now).await;
            }
            let extra: Vec<NewJob> = (0..5)
                .map(|_| {
                    n += 1;
                    NewJob::new(format!("late-{n:03}"), "move", "").priority(1)
                })
                .collect();
            peer.add_jobs(&extra, now).await.expect("add");
            tokio::task::yield_now().await;
        }
    });
    let mut q = JobQuery::new(JobState::Waiting)
        .jobtypes(["move"])
        .limit(17);
    let mut seen: Vec<Job> = Vec::new();
    loop {
        let page = s.list_jobs(&q, now).await.expect("list_jobs");
        seen.extend(page.jobs);
        match page.next {
            Some(next) => q.cursor = Some(next),
            None => break,
        }
        tokio::task::yield_now().await;
    }
    churn.await.expect("churn task");
    let mut unique = HashSet::new();
    for j in &seen {
        assert!(unique.insert(j.id.clone()), "{} listed twice", j.id);
    }
    for w in seen.windows(2) {
        let (a, b) = (q.key_of(&w[0]), q.key_of(&w[1]));
        assert!(
            q.before(&a, &b),
            "pages in order: {} then {}",
            w[0].id,
            w[1].id
        );
    }
    for i in 0..300 {
        let id = format!("stay-{i:03}");
        assert!(unique.contains(&id), "{id} stayed waiting and was listed");
    }
}

async fn archive_as_owner(s: &dyn JobStore, ids: &[String], owner: &str, now: Millis) {
    let how = Release::Archive(JobResult::from_status(200));
    s.release_all(ids, owner, &how, now).await.expect("archive");
}

/// Run again: archived jobs of every code become free, due after the
/// delay, with attempts back at 0 and no archive time, keeping their last
/// result; jobs in other states are untouched; counts follow.
pub async fn rerun_archived_jobs(c: Ctx) {
    let s = &*c.store;
    let caps = s.capabilities();
    let t = &ids(&["x"]);
    if !offered(
        caps.edit_jobs,
        "rerun_jobs",
        s.rerun_jobs(t, Duration::ZERO, T0),
    )
    .await
    {
        return;
    }
    let names = ["f", "e", "o", "w", "r"];
    let jobs = names.iter().map(|n| NewJob::new(*n, "re", *n)).collect();
    add(s, jobs, T0).await;
    let got = claim(s, "re", 4, OWNER, T0).await;
    assert_eq!(got.len(), 4);
    let result = JobResult::from_status(404).with_output(b"not there\nmore".to_vec());
    let list = [
        JobRelease::new("f", Release::Archive(result.clone())),
        JobRelease::new("e", Release::Archive(JobResult::from_status(500))),
        JobRelease::new("o", Release::Archive(JobResult::from_status(200))),
    ];
    assert_eq!(
        s.release_jobs(&list, OWNER, T0 + SEC).await.unwrap().len(),
        3
    );
    // "w" is running, "r" waiting.
    let before_w = get(s, "w").await;
    let before_r = get(s, "r").await;
    let now = T0 + 10 * SEC;
    let all = ids(&["f", "e", "o", "w", "r", "missing"]);
    let got = s.rerun_jobs(&all, Duration::ZERO, now).await.unwrap();
    assert_eq!(sorted(got), ids(&["e", "f", "o"]));
    let f = get(s, "f").await;
    assert_eq!(f.state(now), JobState::Waiting);
    assert_eq!((f.lock.as_str(), f.dt, f.attempts), (LOCK_FREE, now, 0));
    assert_eq!(f.done_dt, None);
    assert_eq!(f.result, Some(result), "the last result stays visible");
    assert_eq!(f.data, b"f");
    assert_eq!(get(s, "w").await, before_w);
    assert_eq!(get(s, "r").await, before_r);
    let counts = counts_of(s, "re", now).await;
    assert_eq!((counts.waiting, counts.running), (4, 1));
    assert!(counts.archived.is_empty(), "{counts:?}");
    // Claimed again, it counts its attempts from 1.
    let again = claim(s, "re", 10, OWNER, now).await;
    assert_eq!(again.len(), 4);
    assert!(again.iter().all(|j| j.attempts == 1), "{again:?}");
    archive_as(s, &ids(&["f"]), 200, now + SEC).await;
    let f = get(s, "f").await;
    assert_eq!(f.result, Some(JobResult::from_status(200)));
    assert_eq!(f.done_dt, Some(now + SEC));
    // With a delay: scheduled.
    let got = s
        .rerun_jobs(&ids(&["f"]), Duration::from_secs(30), now + 2 * SEC)
        .await
        .unwrap();
    assert_eq!(got, ids(&["f"]));
    let f = get(s, "f").await;
    assert_eq!(f.state(now + 2 * SEC), JobState::Scheduled);
    assert_eq!(f.dt, now + 32 * SEC);
    // Bad input.
    assert_kind(
        s.rerun_jobs(&ids(&["f"]), MAX_DELAY + Duration::from_secs(1), now)
            .await,
        ErrorKind::InvalidInput,
        "delay",
    );
    assert_kind(
        s.rerun_jobs(&ids(&["f", "f"]), Duration::ZERO, now).await,
        ErrorKind::InvalidInput,
        "ids twice",
    );
}

/// A run-again racing a purge of the same archived jobs: each job ends
/// either purged (gone) or run again (waiting, attempts 0), never between,
/// and the counts agree with the jobs.
pub async fn rerun_racing_purge(c: Ctx) {
    let s = &*c.store;
    if !s.capabilities().edit_jobs {
        return;
    }
    let n = 200;
    let all = add_n(s, "race", n, T0).await;
    let got = claim(s, "race", n, OWNER, T0).await;
    assert_eq!(got.len(), n);
    archive_as(s, &all, 500, T0 + SEC).await;
    let now = T0 + 2 * SEC;
    let (a, b) = (c.store.clone(), c.peer.clone());
    let list = all.clone();
    let rerun = tokio::spawn(async move {
        let mut done = Vec::new();
        for chunk in list.chunks(20) {
            done.extend(a.rerun_jobs(chunk, Duration::ZERO, now).await.unwrap());
            tokio::task::yield_now().await;
        }
        done
    });
    let purge = tokio::spawn(async move {
        let mut n = 0;
        for _ in 0..5 {
            n += b.purge_archived(now, &[ResultCode::Error]).await.unwrap();
            tokio::task::yield_now().await;
        }
        n
    });
    let rerun = rerun.await.unwrap();
    let purged = purge.await.unwrap();
    let mut waiting = 0;
    for id in &all {
        match s.get_job(id).await.unwrap() {
            None => assert!(!rerun.contains(id), "{id} was run again, then vanished"),
            Some(j) => {
                assert!(
                    rerun.contains(id),
                    "{id} neither purged nor run again: {j:?}"
                );
                assert_eq!(
                    (j.state(now), j.attempts, j.done_dt),
                    (JobState::Waiting, 0, None),
                    "{id} run again"
                );
                waiting += 1;
            }
        }
    }
    assert_eq!(waiting + purged as usize, n, "every job one or the other");
    let counts = counts_of(s, "race", now).await;
    assert_eq!(counts.waiting, waiting as u64);
    assert!(counts.archived.is_empty(), "{counts:?}");
}

/// Delete by ids: waiting, scheduled and archived jobs go (and their ids
/// are free again); running and expired jobs are refused, listed, and
/// untouched; unknown ids are in neither list.
pub async fn delete_jobs_refuses_locked(c: Ctx) {
    let s = &*c.store;
    if !offered(
        s.capabilities().edit_jobs,
        "delete_jobs",
        s.delete_jobs(&ids(&["x"]), T0),
    )
    .await
    {
        return;
    }
    let jobs = vec![
        NewJob::new("run", "d", ""),
        NewJob::new("exp", "d2", ""),
        NewJob::new("done", "d3", ""),
        NewJob::new("wait", "d4", ""),
        NewJob::new("later", "d4", "").run_at(T0 + 3600 * SEC),
    ];
    add(s, jobs, T0).await;
    claim(s, "d", 1, OWNER, T0).await;
    s.claim_jobs("d2", 1, OWNER, Duration::from_secs(1), T0)
        .await
        .unwrap();
    claim(s, "d3", 1, OWNER, T0).await;
    archive_as(s, &ids(&["done"]), 200, T0).await;
    let now = T0 + 5 * SEC;
    let before_run = get(s, "run").await;
    let before_exp = get(s, "exp").await;
    let out = s
        .delete_jobs(
            &ids(&["run", "exp", "done", "wait", "later", "missing"]),
            T0,
        )
        .await
        .unwrap();
    assert_eq!(sorted(out.deleted), ids(&["done", "later", "wait"]));
    assert_eq!(sorted(out.running), ids(&["exp", "run"]));
    for gone in ["done", "later", "wait"] {
        assert_eq!(s.get_job(gone).await.unwrap(), None, "{gone} deleted");
    }
    assert_eq!(get(s, "run").await, before_run);
    assert_eq!(get(s, "exp").await, before_exp);
    assert_eq!(counts_of(s, "d4", now).await.total(), 0);
    assert_eq!(counts_of(s, "d3", now).await.total(), 0);
    // The owner still holds its jobs; deleted ids are new again.
    let renewed = s
        .renew_locks(&ids(&["run", "exp"]), OWNER, MIN, now)
        .await
        .unwrap();
    assert_eq!(sorted(renewed.renewed), ids(&["exp", "run"]));
    let out = add(s, vec![NewJob::new("done", "d5", "again")], now).await;
    assert_eq!(out.new, ids(&["done"]));
    assert_eq!(get(s, "done").await.attempts, 0);
    assert_kind(
        s.delete_jobs(&ids(&["a", "a"]), T0).await,
        ErrorKind::InvalidInput,
        "ids twice",
    );
}

/// Edits change free jobs only: the fields given, nothing else; a new due
/// time and priority take effect in claims; locked and archived jobs and
/// unknown ids are untouched.
pub async fn edit_free_jobs(c: Ctx) {
    let s = &*c.store;
    let caps = s.capabilities();
    if !offered(
        caps.edit_jobs,
        "edit_jobs",
        s.edit_jobs(&[JobEdit::new("x").priority(1)], T0),
    )
    .await
    {
        return;
    }
    let jobs = vec![
        NewJob::new("a", "ed", "a data"),
        NewJob::new("b", "ed", "b data").priority(5),
        NewJob::new("c", "ed", "c data").run_at(T0 + 3600 * SEC),
        NewJob::new("run", "ed-run", "run data"),
        NewJob::new("done", "ed-done", ""),
    ];
    add(s, jobs, T0).await;
    claim(s, "ed-run", 1, OWNER, T0).await;
    claim(s, "ed-done", 1, OWNER, T0).await;
    archive_as(s, &ids(&["done"]), 200, T0).await;
    let (run, done) = (get(s, "run").await, get(s, "done").await);
    let before_b = get(s, "b").await;
    let now = T0 + SEC;
    let edits = [
        JobEdit::new("a").priority(9),
        JobEdit::new("c").run_at(T0).data("c edited"),
        JobEdit::new("run").priority(9),
        JobEdit::new("done").data("x"),
        JobEdit::new("missing").priority(1),
    ];
    let got = s.edit_jobs(&edits, now).await.unwrap();
    assert_eq!(sorted(got), ids(&["a", "c"]));
    let a = get(s, "a").await;
    assert_eq!(
        (a.priority, a.data.as_slice(), a.dt),
        (9, &b"a data"[..], T0)
    );
    let cj = get(s, "c").await;
    assert_eq!(
        (cj.priority, cj.data.as_slice(), cj.dt),
        (0, &b"c edited"[..], T0)
    );
    assert_eq!(get(s, "b").await, before_b);
    assert_eq!(get(s, "run").await, run);
    assert_eq!(get(s, "done").await, done);
    // Claims follow the edits: a (9), b (5), then c (now due, same dt as... 0).
    let order = claim(s, "ed", 10, OWNER, now).await;
    assert_eq!(job_ids(&order), ids(&["a", "b", "c"]));
    // A due time in the future schedules a waiting job.
    add(s, vec![NewJob::new("d", "ed2", "")], now).await;
    s.edit_jobs(&[JobEdit::new("d").run_at(now + 60 * SEC)], now)
        .await
        .unwrap();
    assert!(claim(s, "ed2", 1, OWNER, now).await.is_empty());
    assert_eq!(counts_of(s, "ed2", now).await.scheduled, 1);
    // Bad edits are refused whole.
    let kind = ErrorKind::InvalidInput;
    assert_kind(
        s.edit_jobs(&[JobEdit::new("d")], now).await,
        kind,
        "empty edit",
    );
    assert_kind(
        s.edit_jobs(
            &[JobEdit::new("d").priority(1), JobEdit::new("d").priority(2)],
            now,
        )
        .await,
        kind,
        "twice",
    );
    assert_kind(
        s.edit_jobs(
            &[JobEdit::new("ok").priority(1), JobEdit::new("d").run_at(-1)],
            now,
        )
        .await,
        kind,
        "time",
    );
    let big = vec![0u8; caps.max_payload + 1];
    assert_kind(
        s.edit_jobs(&[JobEdit::new("d").data(big)], now).await,
        ErrorKind::TooLarge,
        "payload",
    );
    assert_eq!(get(s, "d").await.dt, now + 60 * SEC, "nothing changed");
}

/// An edit racing a claim of the same jobs: each job is either edited
/// whole before it was claimed (the claim returns the edited job) or
/// claimed before and left unedited; never half edited, never edited while
/// locked.
pub async fn edit_racing_claim(c: Ctx) {
    let s = &*c.store;
    if !s.capabilities().edit_jobs {
        return;
    }
    let n = 300;
    let all = add_n(s, "er", n, T0).await;
    let now = T0 + SEC;
    let (a, b) = (c.store.clone(), c.peer.clone());
    let list = all.clone();
    let editor = tokio::spawn(async move {
        let mut edited = Vec::new();
        for chunk in list.chunks(25) {
            let edits: Vec<JobEdit> = chunk
                .iter()
                .map(|id| JobEdit::new(id.clone()).priority(-1).data("edited"))
                .collect();
            edited.extend(a.edit_jobs(&edits, now).await.unwrap());
            tokio::task::yield_now().await;
        }
        edited
    });
    let claimer = tokio::spawn(async move {
        let mut claimed = Vec::new();
        for _ in 0..(n / 10 + 5) {
            claimed.extend(b.claim_jobs("er", 10, OWNER, MIN, now).await.unwrap());
            tokio::task::yield_now().await;
        }
        claimed
    });
    let edited: HashSet<String> = editor.await.unwrap().into_iter().collect();
    let claimed = claimer.await.unwrap();
    for j in &claimed {
        let whole = j.priority == -1 && j.data == b"edited";
        let none = j.priority == 0 && j.data.starts_with(b"payload");
        assert!(whole || none, "{} claimed half edited: {j:?}", j.id);
        if whole {
            assert!(edited.contains(&j.id), "{} edited but not reported", j.id);
        }
    }
    for id in &all {
        let j = get(s, id).await;
        let is_edited = j.priority == -1 && j.data == b"edited";
        assert_eq!(is_edited, edited.contains(id), "{id}: {j:?}");
        if !is_edited {
            assert_eq!(
                (j.priority, j.lock.as_str()),
                (0, OWNER),
                "{id} unedited was claimed first"
            );
        }
    }
}

/// Cancelling locked jobs marks them: the holder's renewal lists them in
/// `cancelled` (and renews them), the mark shows on the job, a claimer
/// that takes an expired marked job sees it, and any release clears it.
pub async fn cancel_marks_locked_jobs(c: Ctx) {
    let s = &*c.store;
    let caps = s.capabilities();
    let jobs = vec![
        NewJob::new("run", "cm", ""),
        NewJob::new("exp", "cm2", ""),
        NewJob::new("free", "cm3", ""),
    ];
    add(s, jobs, T0).await;
    claim(s, "cm", 1, OWNER, T0).await;
    s.claim_jobs("cm2", 1, OWNER, Duration::from_secs(1), T0)
        .await
        .unwrap();
    let now = T0 + 5 * SEC;
    let before_run = get(s, "run").await;
    let out = s
        .cancel_jobs(&ids(&["run", "exp", "free", "missing"]), now)
        .await
        .unwrap();
    assert_eq!(out.cancelled, ids(&["free"]));
    if !caps.cancel_running {
        assert!(out.marked.is_empty(), "no marks without cancel_running");
        assert_eq!(get(s, "run").await, before_run);
        return;
    }
    assert_eq!(sorted(out.marked.clone()), ids(&["exp", "run"]));
    let run = get(s, "run").await;
    let ev = JobEvent::new(now, "", 1, EventKind::CancelRequested);
    let marked = Job {
        cancel_requested: true,
        ..before_run.clone()
    };
    assert_eq!(run, with_event(s, marked, ev), "only the mark changes");
    assert!(!before_run.cancel_requested);
    // Marking again lists it again.
    let again = s.cancel_jobs(&ids(&["run"]), now).await.unwrap();
    assert_eq!(again.marked, ids(&["run"]));
    // The holder learns at its renewal; its lease is renewed meanwhile.
    let renewal = s
        .renew_locks(&ids(&["run"]), OWNER, MIN, now + SEC)
        .await
        .unwrap();
    assert_eq!(renewal.renewed, ids(&["run"]));
    assert_eq!(renewal.cancelled, ids(&["run"]));
    assert_eq!(get(s, "run").await.dt, now + SEC + 60 * SEC);
    // A renewal by anyone else learns nothing.
    let other = s
        .renew_locks(&ids(&["run"]), OTHER, MIN, now + SEC)
        .await
        .unwrap();
    assert_eq!(other, Renewal::default());
    // The holder archives it as cancelled: the mark is gone.
    let how = Release::Archive(JobResult::cancelled());
    s.release_all(&ids(&["run"]), OWNER, &how, now + 2 * SEC)
        .await
        .unwrap();
    let run = get(s, "run").await;
    assert_eq!(run.result, Some(JobResult::cancelled()));
    assert!(!run.cancel_requested);
    // The expired marked job, claimed by another, comes marked.
    let taken = claim(s, "cm2", 1, OTHER, now).await;
    assert_eq!(job_ids(&taken), ids(&["exp"]));
    assert!(taken[0].cancel_requested, "the claimer sees the mark");
    // A retry lets go of it: free and unmarked.
    s.release_all(&ids(&["exp"]), OTHER, &Release::Retry { delay: MIN }, now)
        .await
        .unwrap();
    assert!(!get(s, "exp").await.cancel_requested);
    // Renewals of unmarked jobs list nothing cancelled.
    let j = claim(s, "cm2", 1, OTHER, now + 61 * SEC).await;
    assert_eq!(job_ids(&j), ids(&["exp"]));
    let r = s
        .renew_locks(&ids(&["exp"]), OTHER, MIN, now + 62 * SEC)
        .await
        .unwrap();
    assert_eq!((r.renewed, r.cancelled), (ids(&["exp"]), vec![]));
}

/// A cancel racing the holder's release of the same jobs: every job ends
/// archived with the holder's result and no mark; the cancel marked only
/// jobs that were locked, and archived none (they were never free).
pub async fn cancel_racing_release(c: Ctx) {
    let s = &*c.store;
    if !s.capabilities().cancel_running {
        return;
    }
    let n = 200;
    let all = add_n(s, "cr", n, T0).await;
    assert_eq!(claim(s, "cr", n, OWNER, T0).await.len(), n);
    let now = T0 + SEC;
    let (a, b) = (c.store.clone(), c.peer.clone());
    let list = all.clone();
    let canceller = tokio::spawn(async move {
        let mut marked = Vec::new();
        for chunk in list.chunks(20).rev() {
            let out = a.cancel_jobs(chunk, now).await.unwrap();
            assert!(
                out.cancelled.is_empty(),
                "locked jobs are never cancelled at once"
            );
            marked.extend(out.marked);
            tokio::task::yield_now().await;
        }
        marked
    });
    let list = all.clone();
    let releaser = tokio::spawn(async move {
        for chunk in list.chunks(20) {
            let how = Release::Archive(JobResult::from_status(200));
            let done = b.release_all(chunk, OWNER, &how, now).await.unwrap();
            assert_eq!(done.len(), chunk.len(), "the holder releases all it holds");
            tokio::task::yield_now().await;
        }
    });
    canceller.await.unwrap();
    releaser.await.unwrap();
    for id in &all {
        let j = get(s, id).await;
        assert_eq!(j.result, Some(JobResult::from_status(200)), "{id}");
        assert!(!j.cancel_requested, "{id} keeps no mark once released");
    }
    assert_eq!(
        counts_of(s, "cr", now).await.archived,
        archived(&[(ResultCode::Ok, n as u64)])
    );
}

/// Pausing a jobtype: claims of it return nothing and it leaves the
/// waiting jobtypes, for every handle on the store; adds still land and
/// count; other jobtypes go on, their expired leases too; resuming brings
/// it back. Pause and resume
/// report whether they changed anything.
pub async fn pause_and_resume_jobtype(c: Ctx) {
    let s = &*c.store;
    let caps = s.capabilities();
    if !offered(caps.pause, "pause_jobtype", s.pause_jobtype("p", true, T0)).await {
        assert_kind(
            s.paused_jobtypes().await,
            ErrorKind::Unsupported,
            "paused_jobtypes",
        );
        return;
    }
    add_n(s, "p", 3, T0).await;
    add_n(s, "q", 2, T0).await;
    assert!(s.paused_jobtypes().await.unwrap().is_empty());
    assert!(s.pause_jobtype("p", true, T0).await.unwrap());
    assert!(
        !s.pause_jobtype("p", true, T0).await.unwrap(),
        "already paused"
    );
    // A jobtype with no jobs yet can be paused.
    assert!(s.pause_jobtype("empty", true, T0).await.unwrap());
    assert_eq!(s.paused_jobtypes().await.unwrap(), ids(&["empty", "p"]));
    assert_eq!(
        c.peer.paused_jobtypes().await.unwrap(),
        ids(&["empty", "p"])
    );
    let now = T0 + SEC;
    assert!(claim(s, "p", 10, OWNER, now).await.is_empty());
    assert!(claim(&*c.peer, "p", 10, OWNER, now).await.is_empty());
    let waiting: BTreeSet<String> = s
        .waiting_jobtypes(now)
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.jobtype)
        .collect();
    assert_eq!(waiting, ["q".to_owned()].into_iter().collect());
    add(s, vec![NewJob::new("p-late", "p", "")], now).await;
    assert_eq!(counts_of(s, "p", now).await.waiting, 4, "adds land");
    assert_eq!(claim(s, "q", 10, OWNER, now).await.len(), 2);
    // Leases of another jobtype that run out are claimed again while p
    // is paused.
    let lapsed = now + 60 * SEC + 1;
    assert_eq!(
        claim(&*c.peer, "q", 10, OTHER, lapsed).await.len(),
        2,
        "q's expired leases"
    );
    // Resume.
    assert!(s.pause_jobtype("p", false, now).await.unwrap());
    assert!(
        !s.pause_jobtype("p", false, now).await.unwrap(),
        "not paused"
    );
    assert!(!s.pause_jobtype("never", false, now).await.unwrap());
    assert_eq!(s.paused_jobtypes().await.unwrap(), ids(&["empty"]));
    assert_eq!(claim(&*c.peer, "p", 10, OWNER, now).await.len(), 4);
    assert_kind(
        s.pause_jobtype("a b", true, now).await,
        ErrorKind::InvalidInput,
        "jobtype",
    );
    assert_kind(
        s.pause_jobtype("p", true, -1).await,
        ErrorKind::InvalidInput,
        "now",
    );
}

/// A resumed jobtype wakes watchers, as new work does (a store that
/// declares notifications names it).
pub async fn watch_wakes_on_resume(c: Ctx) {
    let s = &*c.store;
    if !s.capabilities().pause {
        return;
    }
    add_n(s, "wr", 1, T0).await;
    s.pause_jobtype("wr", true, T0).await.unwrap();
    let mut w = s.watch().await.unwrap();
    let peer = c.peer.clone();
    let resumer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        peer.pause_jobtype("wr", false, T0 + 1).await.unwrap();
    });
    let wake = wait_for(&mut w, "wr", s.capabilities().notifications).await;
    resumer.await.unwrap();
    assert_ne!(wake, Wakeup::TimedOut);
}

/// The management operations on one namespace leave another namespace,
/// holding jobs of the same ids in every state and a paused jobtype,
/// untouched: list, run again, delete, edit, cancel, pause; and stats
/// added to one are not read in the other.
pub async fn namespace_isolation_of_management(a: Ctx, b: Ctx) {
    let (a, b) = (&*a.store, &*b.store);
    let caps = a.capabilities();
    if !(caps.list_jobs && caps.edit_jobs && caps.pause && caps.cancel_running) {
        return;
    }
    let before = matrix_jobs(a).await;
    a.pause_jobtype("m-paused", true, T0).await.unwrap();
    let counts = a.job_counts(M_NOW).await.unwrap();
    // Nothing of a's shows in b.
    for state in [
        JobState::Waiting,
        JobState::Scheduled,
        JobState::Running,
        JobState::Expired,
        JobState::Archived,
    ] {
        let page = b.list_jobs(&JobQuery::new(state), M_NOW).await.unwrap();
        assert!(
            page.jobs.is_empty(),
            "{state} of the other namespace: {page:?}"
        );
    }
    assert!(b.paused_jobtypes().await.unwrap().is_empty());
    // Every operation by id on b, with a's ids.
    let all = ids(&MATRIX_STATES);
    assert!(
        b.rerun_jobs(&all, Duration::ZERO, M_NOW)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        b.delete_jobs(&all, T0).await.unwrap(),
        DeleteOutcome::default()
    );
    let edits: Vec<JobEdit> = all
        .iter()
        .map(|i| JobEdit::new(i.clone()).priority(7))
        .collect();
    assert!(b.edit_jobs(&edits, M_NOW).await.unwrap().is_empty());
    assert_eq!(
        b.cancel_jobs(&all, M_NOW).await.unwrap(),
        CancelOutcome::default()
    );
    assert!(b.pause_jobtype("m-waiting", true, M_NOW).await.unwrap());
    assert!(!b.pause_jobtype("m-paused", false, M_NOW).await.unwrap());
    assert_untouched(
        a,
        &before,
        &MATRIX_STATES,
        "management on another namespace",
    )
    .await;
    assert_eq!(a.job_counts(M_NOW).await.unwrap().len(), counts.len());
    assert_eq!(a.paused_jobtypes().await.unwrap(), ids(&["m-paused"]));
    assert_eq!(
        claim(a, "m-waiting", 1, THIRD, M_NOW).await.len(),
        1,
        "not paused in a"
    );
    if caps.stats {
        // Stats added in b stay in b.
        let mut delta = StatsDelta::new("m-waiting", M_NOW);
        delta.run.record(5);
        b.add_stats(&[delta], M_NOW).await.unwrap();
        for res in [StatsResolution::Minute, StatsResolution::Day] {
            let q = StatsQuery::new(res);
            assert!(a.job_stats(&q, M_NOW).await.unwrap().is_empty(), "{res:?}");
            assert_eq!(b.job_stats(&q, M_NOW).await.unwrap().len(), 1, "{res:?}");
        }
    }
}
