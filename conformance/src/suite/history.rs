//! Behaviours of job histories and tags. A store that does not declare
//! [`Capabilities::history`] keeps no events (every history reads empty);
//! one that does not declare [`Capabilities::tags`] refuses tagged adds
//! with `Unsupported`.

use super::*;

fn kinds(job: &Job) -> Vec<EventKind> {
    job.history.iter().map(|e| e.what.clone()).collect()
}

/// Every change records one event, with its time, who, and the attempts
/// after it; renewals, payload updates and an add of an existing id record
/// nothing.
pub async fn history_records_every_change(c: Ctx) {
    let s = &*c.store;
    let keeps = s.capabilities().history;
    add(s, vec![NewJob::new("h", "hist", "x")], T0).await;
    // Nothing for an existing id.
    add(s, vec![NewJob::new("h", "hist", "again")], T0 + 1).await;
    claim(s, "hist", 1, OWNER, T0 + 2).await;
    s.renew_locks(&ids(&["h"]), OWNER, MIN, T0 + 3)
        .await
        .unwrap();
    s.update_data("h", OWNER, b"progress", T0 + 4)
        .await
        .unwrap();
    let retry = JobRelease::new(
        "h",
        Release::Retry {
            delay: Duration::from_secs(5),
        },
    )
    .status(503);
    s.release_jobs(&[retry], OWNER, T0 + 5).await.unwrap();
    claim(s, "hist", 1, OTHER, T0 + 5 + 5 * SEC).await;
    s.release_all(&ids(&["h"]), OTHER, &Release::Unget, T0 + 6 * SEC)
        .await
        .unwrap();
    claim(s, "hist", 1, OWNER, T0 + 7 * SEC).await;
    let fail = JobResult::from_status(404).with_output(b"gone".to_vec());
    s.release_all(&ids(&["h"]), OWNER, &Release::Archive(fail), T0 + 8 * SEC)
        .await
        .unwrap();
    let job = get(s, "h").await;
    if !keeps {
        assert!(job.history.is_empty(), "no history kept: {:?}", job.history);
        return;
    }
    let want = vec![
        JobEvent::new(T0, "", 0, EventKind::Added),
        JobEvent::new(T0 + 2, OWNER, 1, EventKind::Claimed),
        JobEvent::new(
            T0 + 5,
            OWNER,
            1,
            EventKind::Retried {
                delay_ms: 5_000,
                status: Some(503),
            },
        ),
        JobEvent::new(T0 + 5 + 5 * SEC, OTHER, 2, EventKind::Claimed),
        JobEvent::new(T0 + 6 * SEC, OTHER, 1, EventKind::HandedBack),
        JobEvent::new(T0 + 7 * SEC, OWNER, 2, EventKind::Claimed),
        JobEvent::new(
            T0 + 8 * SEC,
            OWNER,
            2,
            EventKind::Archived {
                code: ResultCode::Failed,
                status: 404,
            },
        ),
    ];
    assert_eq!(job.history, want);
    let caps = s.capabilities();
    if !(caps.edit_jobs && caps.cancel_running) {
        return;
    }
    // Run again, edit, claim, mark for cancelling, archive as cancelled;
    // a free job cancelled.
    let t = T0 + 10 * SEC;
    s.rerun_jobs(&ids(&["h"]), Duration::from_secs(1), t)
        .await
        .unwrap();
    s.edit_jobs(&[JobEdit::new("h").priority(3)], t + 1)
        .await
        .unwrap();
    claim(s, "hist", 1, OWNER, t + 2 * SEC).await;
    s.cancel_jobs(&ids(&["h"]), t + 3 * SEC).await.unwrap();
    let how = Release::Archive(JobResult::cancelled());
    s.release_all(&ids(&["h"]), OWNER, &how, t + 4 * SEC)
        .await
        .unwrap();
    let job = get(s, "h").await;
    assert_eq!(
        job.history[7..].to_vec(),
        vec![
            JobEvent::new(t, "", 0, EventKind::Rerun { delay_ms: 1_000 }),
            JobEvent::new(t + 1, "", 0, EventKind::Edited),
            JobEvent::new(t + 2 * SEC, OWNER, 1, EventKind::Claimed),
            JobEvent::new(t + 3 * SEC, "", 1, EventKind::CancelRequested),
            JobEvent::new(
                t + 4 * SEC,
                OWNER,
                1,
                EventKind::Archived {
                    code: ResultCode::Cancelled,
                    status: 0,
                },
            ),
        ]
    );
    add(s, vec![NewJob::new("free", "hist2", "")], t).await;
    s.cancel_jobs(&ids(&["free"]), t + 1).await.unwrap();
    assert_eq!(
        kinds(&get(s, "free").await),
        vec![EventKind::Added, EventKind::Cancelled]
    );
    // Listed jobs carry their history.
    if caps.list_jobs {
        let page = s
            .list_jobs(
                &JobQuery::new(JobState::Archived).jobtypes(["hist"]),
                t + 5 * SEC,
            )
            .await
            .unwrap();
        assert_eq!(page.jobs[0].history, job.history);
    }
}

/// A job keeps only its newest events, oldest first.
pub async fn history_keeps_the_newest_events(c: Ctx) {
    let s = &*c.store;
    if !s.capabilities().history {
        return;
    }
    add(s, vec![NewJob::new("long", "hl", "")], T0).await;
    let rounds = 15;
    for i in 0..rounds {
        let t = T0 + 1 + 2 * i;
        claim(s, "hl", 1, OWNER, t).await;
        s.release_all(&ids(&["long"]), OWNER, &Release::Unget, t + 1)
            .await
            .unwrap();
    }
    let job = get(s, "long").await;
    let max = jobstore_api::limits::MAX_HISTORY;
    assert_eq!(
        job.history.len(),
        max,
        "1 + {} events, {max} kept",
        2 * rounds
    );
    let last = job.history.last().unwrap();
    assert_eq!(
        (last.at, &last.what),
        (T0 + 2 * rounds, &EventKind::HandedBack)
    );
    let first = &job.history[0];
    // 31 events in all: the 11 oldest are gone, the first kept is a claim.
    assert_eq!((first.at, &first.what), (T0 + 11, &EventKind::Claimed));
    assert!(
        job.history.windows(2).all(|w| w[0].at <= w[1].at),
        "oldest first"
    );
}

/// Tags read back as given and filter lists ("every failed job tagged
/// customer-42"), page by page; bad tags are refused before anything is
/// stored. A store without tags refuses tagged adds with `Unsupported`.
pub async fn tags_round_trip_and_filter_lists(c: Ctx) {
    let s = &*c.store;
    let caps = s.capabilities();
    let tagged = NewJob::new("t0", "tg", "").tags(["customer-42", "eu"]);
    if !caps.tags {
        assert_kind(
            s.add_jobs(std::slice::from_ref(&tagged), T0).await,
            ErrorKind::Unsupported,
            "tagged add",
        );
        assert_eq!(s.get_job("t0").await.unwrap(), None, "nothing stored");
        return;
    }
    let mut jobs = vec![tagged];
    for i in 1..10 {
        let tags: Vec<String> = if i % 2 == 0 {
            vec!["customer-42".into()]
        } else {
            vec!["customer-7".into(), "x:y.z_w".into()]
        };
        jobs.push(NewJob::new(format!("t{i}"), "tg", "").tags(tags));
    }
    jobs.push(NewJob::new("plain", "tg", ""));
    add(s, jobs, T0).await;
    assert_eq!(get(s, "t0").await.tags, ids(&["customer-42", "eu"]));
    assert_eq!(get(s, "t1").await.tags, ids(&["customer-7", "x:y.z_w"]));
    assert!(get(s, "plain").await.tags.is_empty());
    // Fail half of them, one at a time so archive times differ.
    let got = claim(s, "tg", 11, OWNER, T0 + SEC).await;
    assert_eq!(got.len(), 11);
    let t0 = got.iter().find(|j| j.id == "t0").expect("t0 claimed");
    assert_eq!(
        t0.tags,
        ids(&["customer-42", "eu"]),
        "a claimed job carries its tags"
    );
    let plain = got.iter().find(|j| j.id == "plain");
    assert!(
        plain.is_none_or(|j| j.tags.is_empty()),
        "an untagged job claims untagged"
    );
    // Failed: t0, t1, t2, t4, t6 (four of them tagged customer-42).
    let fails = ["t0", "t1", "t2", "t4", "t6"];
    for (i, j) in got.iter().enumerate() {
        let status = if fails.contains(&j.id.as_str()) {
            404
        } else {
            200
        };
        archive_as(
            s,
            std::slice::from_ref(&j.id),
            status,
            T0 + 2 * SEC + i as Millis,
        )
        .await;
    }
    if !caps.list_jobs {
        return;
    }
    let failed_42 = JobQuery::new(JobState::Archived)
        .codes([ResultCode::Failed])
        .tag("customer-42")
        .limit(2);
    let mut want: Vec<(Millis, String)> = Vec::new();
    for id in (0..10).map(|i| format!("t{i}")) {
        let j = get(s, &id).await;
        let failed = j.result.as_ref().map(|r| r.code) == Some(ResultCode::Failed);
        if failed && j.tags.iter().any(|t| t == "customer-42") {
            want.push((j.done_dt.unwrap(), id));
        }
    }
    want.sort_by(|a, b| b.cmp(a));
    let want: Vec<String> = want.into_iter().map(|(_, id)| id).collect();
    assert_eq!(want.len(), 4, "{want:?}");
    let mut q = failed_42.clone();
    let mut listed = Vec::new();
    loop {
        let page = s.list_jobs(&q, T0 + 60 * SEC).await.unwrap();
        assert!(page.jobs.len() <= 2);
        listed.extend(job_ids(&page.jobs));
        match page.next {
            Some(n) => q.cursor = Some(n),
            None => break,
        }
    }
    assert_eq!(listed, want, "failed jobs tagged customer-42, newest first");
    let none = s
        .list_jobs(
            &JobQuery::new(JobState::Archived).tag("nobody"),
            T0 + 60 * SEC,
        )
        .await
        .unwrap();
    assert!(none.jobs.is_empty());
    // A cursor of one tag does not resume another.
    if let Some(c) = s.list_jobs(&failed_42, T0 + 60 * SEC).await.unwrap().next {
        let other = JobQuery::new(JobState::Archived)
            .codes([ResultCode::Failed])
            .tag("customer-7")
            .after(Some(c));
        assert_kind(
            s.list_jobs(&other, T0 + 60 * SEC).await,
            ErrorKind::InvalidInput,
            "cursor",
        );
    }
    // Bad tags: nothing stored.
    let kind = ErrorKind::InvalidInput;
    let nine: Vec<String> = (0..9).map(|i| format!("t{i}")).collect();
    for (what, tags) in [
        ("nine tags", nine),
        ("empty tag", vec![String::new()]),
        ("long tag", vec!["t".repeat(65)]),
        ("space", vec!["a b".into()]),
        ("pipe", vec!["a|b".into()]),
        ("twice", vec!["a".into(), "a".into()]),
    ] {
        let job = NewJob::new("bad", "tg", "").tags(tags);
        assert_kind(s.add_jobs(&[job], T0).await, kind, what);
    }
    assert_eq!(s.get_job("bad").await.unwrap(), None);
    let eight: Vec<String> = (0..8).map(|i| format!("{i}").repeat(64)).collect();
    add(
        s,
        vec![NewJob::new("max", "tg", "").tags(eight.clone())],
        T0,
    )
    .await;
    assert_eq!(get(s, "max").await.tags, eight, "the limits exactly");
    assert_kind(
        s.list_jobs(&JobQuery::new(JobState::Waiting).tag("a b"), T0)
            .await,
        kind,
        "bad tag in a query",
    );
}

/// The same history as the MemoryStore's, in every path a store may take
/// to keep it: a claim of an expired lease, archives with the claim just
/// made and with it already recorded (a cancel requested meanwhile),
/// retries and hand-backs, runs again of jobs archived either way, edits,
/// cancels, and the newest 20 kept when the claim and the archival are the
/// events that push the oldest out. Read by `get_job`, by `list_jobs` of
/// every state, and as `claim_jobs` returns them. (Stores that keep a job's
/// current claim in its fields, see `jobstore_api::history::PendingClaim`,
/// take every one of these paths.) Needs history and the management
/// operations; without history, `history_records_every_change` checks that
/// every history reads empty, and without the others their own behaviours
/// check that they answer `Unsupported`.
pub async fn history_reads_as_the_memory_store_in_every_path(c: Ctx) {
    let store = &*c.store;
    let caps = store.capabilities();
    if !(caps.history && caps.list_jobs && caps.edit_jobs && caps.cancel_running) {
        return;
    }
    let mem = MemoryStore::new();
    let stores: [&dyn JobStore; 2] = [&mem, store];
    let lease = Duration::from_secs(60);
    let ids = |v: &[&str]| -> Vec<String> { v.iter().map(|s| s.to_string()).collect() };
    let mut t = T0;
    let jobs: Vec<NewJob> = ["e", "f", "g", "h"]
        .iter()
        .map(|id| NewJob::new(*id, format!("t-{id}"), "x"))
        .collect();
    for s in stores {
        s.add_jobs(&jobs, t).await.unwrap();
    }
    // Compares what both stores read of every job, at `now`.
    let check = |what: String, now: i64| async move {
        let mut read = Vec::new();
        for s in stores {
            let mut jobs = Vec::new();
            for id in ["e", "f", "g", "h"] {
                jobs.push(s.get_job(id).await.unwrap().map(|j| (j.id, j.history)));
            }
            for state in [
                JobState::Waiting,
                JobState::Scheduled,
                JobState::Running,
                JobState::Expired,
                JobState::Archived,
            ] {
                let page = s.list_jobs(&JobQuery::new(state), now).await.unwrap();
                for j in page.jobs {
                    jobs.push(Some((j.id, j.history)));
                }
            }
            read.push(jobs);
        }
        assert_eq!(read[0], read[1], "after {what}");
    };
    let claim = |jobtype: &'static str, owner: &'static str, now: i64| async move {
        let mut got = Vec::new();
        for s in stores {
            let jobs = s.claim_jobs(jobtype, 10, owner, lease, now).await.unwrap();
            got.push(
                jobs.into_iter()
                    .map(|j| (j.id, j.history))
                    .collect::<Vec<_>>(),
            );
        }
        assert_eq!(got[0], got[1], "claimed by {owner} at {now}");
        assert_eq!(got[0].len(), 1, "claimed by {owner} at {now}");
    };
    let minute = 61_000;

    // e: claimed, its lease expires, claimed by another (the first
    // claim is stored then), archived, run again, claimed, marked for
    // cancelling (claim stored), expired, claimed, archived.
    t += 1;
    claim("t-e", "sys-a", t).await;
    check("e claimed".into(), t).await;
    t += minute;
    check("e expired".into(), t).await;
    claim("t-e", "sys-b", t).await;
    check("e claimed again".into(), t).await;
    t += 1;
    for s in stores {
        let how = Release::Archive(JobResult::from_status(500));
        s.release_all(&ids(&["e"]), "sys-b", &how, t).await.unwrap();
    }
    check("e archived".into(), t).await;
    t += 1;
    for s in stores {
        s.rerun_jobs(&ids(&["e"]), Duration::ZERO, t).await.unwrap();
    }
    check("e run again".into(), t).await;
    t += 1;
    claim("t-e", "sys-c", t).await;
    for _ in 0..2 {
        t += 1;
        for s in stores {
            s.cancel_jobs(&ids(&["e"]), t).await.unwrap();
        }
        check("e marked".into(), t).await;
    }
    t += minute;
    claim("t-e", "sys-d", t).await;
    check("e claimed after the mark".into(), t).await;
    t += 1;
    for s in stores {
        s.release_all(
            &ids(&["e"]),
            "sys-d",
            &Release::Archive(JobResult::cancelled()),
            t,
        )
        .await
        .unwrap();
    }
    check("e archived after the mark".into(), t).await;
    t += 1;
    for s in stores {
        s.rerun_jobs(&ids(&["e"]), Duration::ZERO, t).await.unwrap();
    }
    check("e run again after the mark".into(), t).await;

    // f: 19 events stored (added and 9 claims with their retries or
    // hand-backs), then a claim and an archive push the oldest out;
    // run again pushes two more (claimed and archived stored, then
    // rerun); an edit; claimed, its lease expires, claimed again.
    for i in 0..9 {
        t += 1;
        claim("t-f", "sys-a", t).await;
        t += 1;
        for s in stores {
            let how = if i % 2 == 0 {
                Release::Unget
            } else {
                Release::Retry {
                    delay: Duration::ZERO,
                }
            };
            s.release_all(&ids(&["f"]), "sys-a", &how, t).await.unwrap();
        }
    }
    check("f with 19 events".into(), t).await;
    t += 1;
    claim("t-f", "sys-b", t).await;
    check("f claimed with 19 events".into(), t).await;
    t += 1;
    for s in stores {
        let how = Release::Archive(JobResult::from_status(200));
        s.release_all(&ids(&["f"]), "sys-b", &how, t).await.unwrap();
    }
    check("f archived past 20 events".into(), t).await;
    t += 1;
    for s in stores {
        s.rerun_jobs(&ids(&["f"]), Duration::from_secs(1), t)
            .await
            .unwrap();
    }
    check("f run again past 20 events".into(), t).await;
    t += 1;
    for s in stores {
        s.edit_jobs(&[JobEdit::new("f").priority(2)], t)
            .await
            .unwrap();
    }
    t += 1000;
    claim("t-f", "sys-a", t).await;
    t += minute;
    claim("t-f", "sys-b", t).await;
    check("f claimed from an expired lease at 20 events".into(), t).await;

    // g: claimed, retried, claimed, handed back, cancelled while free.
    t += 1;
    claim("t-g", "sys-a", t).await;
    t += 1;
    for s in stores {
        let how = Release::Retry {
            delay: Duration::ZERO,
        };
        s.release_all(&ids(&["g"]), "sys-a", &how, t).await.unwrap();
    }
    t += 1;
    claim("t-g", "sys-a", t).await;
    t += 1;
    for s in stores {
        s.release_all(&ids(&["g"]), "sys-a", &Release::Unget, t)
            .await
            .unwrap();
    }
    check("g handed back".into(), t).await;
    t += 1;
    for s in stores {
        s.cancel_jobs(&ids(&["g"]), t).await.unwrap();
    }
    check("g cancelled".into(), t).await;

    // h: claimed, then deleted by its holder: nothing left.
    t += 1;
    claim("t-h", "sys-a", t).await;
    t += 1;
    for s in stores {
        s.release_all(&ids(&["h"]), "sys-a", &Release::Delete, t)
            .await
            .unwrap();
    }
    check("h deleted".into(), t).await;
}
