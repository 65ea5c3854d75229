//! Behaviours of repeating jobs ([`Repeat`], [`Release::Repeat`]). A store
//! that does not declare [`Capabilities::repeat`] must refuse a job with a
//! rule and a repeat release as `Unsupported`, changing nothing; each
//! behaviour checks that instead of the repeats' effects.

use jobstore_api::limits::{MAX_RULE_LEN, MAX_TIME_ZONE_LEN};

use super::*;

const HOUR: Millis = 3_600 * SEC;

fn repeating(id: &str, jobtype: &str, rule: Repeat) -> NewJob {
    NewJob::new(id, jobtype, format!("data of {id}")).repeat(rule)
}

fn rule_of(job: &Job) -> Option<&Repeat> {
    job.flow.as_ref()?.repeat.as_ref()
}

fn run_result(status: u16, output: &str) -> JobResult {
    JobResult::from_status(status).with_output(output.as_bytes().to_vec())
}

fn repeat_at(id: &str, at: Millis, result: JobResult, data: Option<&str>) -> JobRelease {
    let data = data.map(|d| d.as_bytes().to_vec());
    JobRelease::new(id, Release::Repeat { at, result, data })
}

/// Checks the `Unsupported` answers of a store without repeating jobs;
/// returns whether the store offers them (the behaviour goes on).
async fn offers_repeat(s: &dyn JobStore) -> bool {
    if s.capabilities().repeat {
        return true;
    }
    let batch = [
        NewJob::new("plain", "rp", "x"),
        repeating("r", "rp", Repeat::new("HOURLY")),
    ];
    assert_kind(
        s.add_jobs(&batch, T0).await,
        ErrorKind::Unsupported,
        "an add with a rule to a store without repeating jobs",
    );
    assert_eq!(s.get_job("plain").await.unwrap(), None, "nothing stored");
    assert_eq!(s.get_job("r").await.unwrap(), None, "nothing stored");
    add(s, vec![NewJob::new("plain", "rp", "x")], T0).await;
    let before = claim(s, "rp", 1, OWNER, T0).await.remove(0);
    let release = [repeat_at("plain", T0 + HOUR, run_result(200, "o"), None)];
    assert_kind(
        s.release_jobs(&release, OWNER, T0).await,
        ErrorKind::Unsupported,
        "a repeat release on a store without repeating jobs",
    );
    let after = get(s, "plain").await;
    assert_eq!(
        (after.lock.as_str(), after.dt),
        (OWNER, before.dt),
        "unchanged"
    );
    false
}

/// A repeat release frees the job, due at `at`, attempts back to 0, the
/// run's result stored as its last result (no `done_dt`), the payload
/// replaced by the release's data (kept when it has none), tags, priority
/// and rule kept, and `Repeated` in its history. It counts and lists as
/// scheduled, then waiting, never archived; a claim at `at` hands it out
/// with that payload; a failed run archives it, rule kept.
pub async fn repeat_release_frees_with_next_time_result_data(c: Ctx) {
    let s = &*c.store;
    if !offers_repeat(s).await {
        return;
    }
    let jt = "rp-cycle";
    let rule = Repeat::new("0 6 * * *").time_zone("Europe/Paris");
    let job = repeating("daily", jt, rule.clone()).priority(7);
    let job = if s.capabilities().tags {
        job.tags(["nightly"])
    } else {
        job
    };
    add(s, vec![job, NewJob::new("plain", jt, "p")], T0).await;
    let got = claim(s, jt, 1, OWNER, T0).await;
    assert_eq!(job_ids(&got), ["daily"]);
    assert_eq!(rule_of(&got[0]), Some(&rule), "a claim carries the rule");
    let claimed = got.into_iter().next().unwrap();

    let now = T0 + 5 * SEC;
    let next = T0 + HOUR;
    let first = run_result(200, "run 1");
    let rel = [repeat_at("daily", next, first.clone(), Some("state 2"))];
    assert_eq!(s.release_jobs(&rel, OWNER, now).await.unwrap(), ["daily"]);
    let mut want = claimed.clone();
    want.lock = LOCK_FREE.to_owned();
    want.dt = next;
    want.attempts = 0;
    want.result = Some(first.clone());
    want.data = b"state 2".to_vec();
    want.claimed_due = None;
    let want = with_event(
        s,
        want,
        JobEvent::new(
            now,
            OWNER,
            1,
            EventKind::Repeated {
                code: ResultCode::Ok,
                status: 200,
                next_ms: next,
            },
        ),
    );
    let job = get(s, "daily").await;
    assert_eq!(job, want);
    assert_eq!(job.done_dt, None);
    assert_eq!(job.state(now), JobState::Scheduled);

    let counts = counts_of(s, jt, now).await;
    assert_eq!(
        (counts.waiting, counts.scheduled, counts.running),
        (1, 1, 0),
        "{counts:?}"
    );
    assert!(counts.archived.is_empty(), "never archived: {counts:?}");
    if s.capabilities().list_jobs {
        let page = s
            .list_jobs(&JobQuery::new(JobState::Scheduled).jobtypes([jt]), now)
            .await
            .unwrap();
        assert_eq!(job_ids(&page.jobs), ["daily"]);
        assert_eq!(rule_of(&page.jobs[0]), Some(&rule));
        let page = s
            .list_jobs(&JobQuery::new(JobState::Archived).jobtypes([jt]), now)
            .await
            .unwrap();
        assert!(page.jobs.is_empty(), "{page:?}");
    }

    // Not before its time; then handed out with the payload it was left.
    assert_eq!(job_ids(&claim(s, jt, 5, OWNER, next - 1).await), ["plain"]);
    let got = claim(s, jt, 5, OTHER, next).await;
    assert_eq!(job_ids(&got), ["daily"]);
    assert_eq!(
        (got[0].attempts, got[0].claimed_due, got[0].data.as_slice()),
        (1, Some(next), b"state 2".as_slice())
    );
    assert_eq!(
        got[0].result,
        Some(first),
        "the last run's result while running"
    );

    // A repeat without data keeps the payload; a time already past makes
    // it waiting at once.
    let later = next + 10 * SEC;
    let second = run_result(202, "run 2");
    let rel = [repeat_at("daily", later - SEC, second.clone(), None)];
    assert_eq!(s.release_jobs(&rel, OTHER, later).await.unwrap(), ["daily"]);
    let job = get(s, "daily").await;
    assert_eq!(
        (
            job.data.as_slice(),
            job.result.as_ref(),
            job.dt,
            job.attempts
        ),
        (b"state 2".as_slice(), Some(&second), later - SEC, 0)
    );
    assert_eq!(job.state(later), JobState::Waiting);
    assert_eq!(counts_of(s, jt, later).await.waiting, 1);

    // A failed run archives it as any job; the rule stays on the record.
    claim(s, jt, 1, OWNER, later).await;
    archive_as(s, &ids(&["daily"]), 500, later).await;
    let job = get(s, "daily").await;
    assert_eq!(job.lock, LOCK_DONE);
    assert_eq!(job.result.as_ref().map(|r| r.status), Some(500));
    assert_eq!(rule_of(&job), Some(&rule), "an archived job keeps its rule");
    if s.capabilities().history {
        let repeats = job
            .history
            .iter()
            .filter(|e| matches!(e.what, EventKind::Repeated { .. }))
            .count();
        assert_eq!(repeats, 2, "one Repeated per run: {:?}", job.history);
    }
}

/// Rules round-trip through every read, with and without a time zone,
/// beside a unique key; a plain job has no flow; a run again of an
/// archived repeating job keeps its rule.
pub async fn repeat_rule_round_trips(c: Ctx) {
    let s = &*c.store;
    if !offers_repeat(s).await {
        return;
    }
    let jt = "rp-rules";
    let long = "7".repeat(MAX_RULE_LEN);
    let zone = "America/Argentina/ComodRivadavia";
    let rules = [
        Repeat::new("* * * * * *"),
        Repeat::new("FINISHED, +1 DAY, WEEKDAY 1, START OF DAY, +6 HOURS").time_zone(zone),
        Repeat::new(long.clone()).time_zone("x".repeat(MAX_TIME_ZONE_LEN)),
        Repeat::new("@daily"),
        Repeat::new("SCHEDULED, +1 HOUR | odd % \" ' \\ ünïcode").time_zone("Etc/GMT+5"),
    ];
    let mut jobs: Vec<NewJob> = rules
        .iter()
        .enumerate()
        .map(|(i, r)| repeating(&format!("r{i}"), jt, r.clone()).priority(-(i as i32)))
        .collect();
    let both = jobs.len();
    let mut keyed = repeating("both", jt, rules[1].clone()).priority(-10);
    if s.capabilities().unique_jobs {
        keyed = keyed.unique(Unique::new("k"));
    }
    jobs.push(keyed);
    jobs.push(NewJob::new("plain", jt, "p").priority(-11));
    assert_eq!(add(s, jobs, T0).await.new.len(), both + 2);
    for (i, r) in rules.iter().enumerate() {
        assert_eq!(rule_of(&get(s, &format!("r{i}")).await), Some(r), "r{i}");
    }
    let flow = get(s, "both").await.flow.expect("a flow");
    assert_eq!(flow.repeat.as_ref(), Some(&rules[1]));
    if s.capabilities().unique_jobs {
        assert_eq!(flow.unique_key.as_deref(), Some("k"));
    }
    assert_eq!(get(s, "plain").await.flow, None, "a plain job has no flow");
    if s.capabilities().list_jobs {
        let page = s
            .list_jobs(&JobQuery::new(JobState::Waiting).jobtypes([jt]), T0)
            .await
            .unwrap();
        let got: Vec<_> = page.jobs.iter().map(rule_of).collect();
        let mut want: Vec<_> = rules.iter().map(Some).collect();
        want.extend([Some(&rules[1]), None]);
        assert_eq!(got, want);
    }
    let got = claim(s, jt, 10, OWNER, T0).await;
    let got: Vec<_> = got.iter().map(|j| rule_of(j).cloned()).collect();
    let mut want: Vec<_> = rules.iter().cloned().map(Some).collect();
    want.extend([Some(rules[1].clone()), None]);
    assert_eq!(got, want, "claims carry the rules");
    let all: Vec<String> = (0..both)
        .map(|i| format!("r{i}"))
        .chain(["both".to_owned()])
        .collect();
    archive_as(s, &all, 200, T0 + SEC).await;
    for (i, r) in rules.iter().enumerate() {
        assert_eq!(
            rule_of(&get(s, &format!("r{i}")).await),
            Some(r),
            "archived r{i}"
        );
    }
    if s.capabilities().edit_jobs {
        let rerun = s
            .rerun_jobs(&ids(&["r1"]), Duration::ZERO, T0 + 2 * SEC)
            .await
            .unwrap();
        assert_eq!(rerun, ["r1"]);
        let got = claim(s, jt, 1, OWNER, T0 + 2 * SEC).await;
        assert_eq!(job_ids(&got), ["r1"]);
        assert_eq!(
            rule_of(&got[0]),
            Some(&rules[1]),
            "a run again keeps the rule"
        );
    }
}

/// A repeat entry applies only to a job its owner holds: one held by
/// another, a free, an archived or an unknown job is not touched, in the
/// same list as one that applies.
pub async fn repeat_by_non_owner_changes_nothing(c: Ctx) {
    let s = &*c.store;
    if !offers_repeat(s).await {
        return;
    }
    let jt = "rp-fence";
    let rule = Repeat::new("HOURLY");
    add(
        s,
        vec![
            repeating("mine", jt, rule.clone()).priority(4),
            repeating("theirs", jt, rule.clone()).priority(3),
            repeating("done", jt, rule.clone()).priority(2),
            repeating("free", jt, rule.clone()).priority(1),
        ],
        T0,
    )
    .await;
    claim(s, jt, 1, OWNER, T0).await;
    claim(s, jt, 1, OTHER, T0).await;
    claim(s, jt, 1, OWNER, T0).await;
    archive_as(s, &ids(&["done"]), 200, T0).await;
    let before: Vec<Job> = futures_join(s, &["theirs", "done", "free"]).await;
    let at = T0 + HOUR;
    let rel: Vec<JobRelease> = ["theirs", "done", "free", "missing", "mine"]
        .iter()
        .map(|id| repeat_at(id, at, run_result(200, "x"), Some("new")))
        .collect();
    let released = s.release_jobs(&rel, OWNER, T0 + SEC).await.unwrap();
    assert_eq!(released, ["mine"]);
    assert_eq!(futures_join(s, &["theirs", "done", "free"]).await, before);
    assert_eq!(s.get_job("missing").await.unwrap(), None);
    let mine = get(s, "mine").await;
    assert_eq!(
        (mine.lock.as_str(), mine.dt, mine.data.as_slice()),
        (LOCK_FREE, at, b"new".as_slice())
    );
    // A repeat by the owner whose lease ran out and whose job another
    // claimed is fenced off too.
    let taken = s
        .claim_jobs(jt, 1, OWNER, Duration::from_secs(1), at)
        .await
        .unwrap();
    assert_eq!(job_ids(&taken), ["mine"]);
    let late = at + 2 * SEC;
    assert_eq!(job_ids(&claim(s, jt, 1, OTHER, late).await), ["mine"]);
    let rel = [repeat_at(
        "mine",
        late + HOUR,
        run_result(200, "late"),
        None,
    )];
    assert!(s.release_jobs(&rel, OWNER, late).await.unwrap().is_empty());
    let mine = get(s, "mine").await;
    assert_eq!((mine.lock.as_str(), mine.attempts), (OTHER, 2));
}

async fn futures_join(s: &dyn JobStore, ids: &[&str]) -> Vec<Job> {
    let mut jobs = Vec::new();
    for id in ids {
        jobs.push(get(s, id).await);
    }
    jobs
}

/// A repeating job keeps its unique key across repeats: a keyed add while
/// it waits for its next run is a duplicate of it; once archived, the key
/// is free.
pub async fn repeat_keeps_unique_key(c: Ctx) {
    let s = &*c.store;
    if !offers_repeat(s).await || !s.capabilities().unique_jobs {
        return;
    }
    let jt = "rp-key";
    let job = repeating("holder", jt, Repeat::new("HOURLY")).unique(Unique::new("sync"));
    add(s, vec![job], T0).await;
    for round in 0..3 {
        let now = T0 + round * HOUR;
        assert_eq!(job_ids(&claim(s, jt, 1, OWNER, now).await), ["holder"]);
        let rel = [repeat_at("holder", now + HOUR, run_result(200, "r"), None)];
        assert_eq!(s.release_jobs(&rel, OWNER, now).await.unwrap(), ["holder"]);
        let dup = NewJob::new(format!("dup{round}"), jt, "d").unique(Unique::new("sync"));
        let out = add(s, vec![dup], now + SEC).await;
        assert_eq!(out.new, Vec::<String>::new(), "round {round}");
        assert_eq!(
            out.duplicates,
            [Duplicate {
                id: format!("dup{round}"),
                existing: "holder".to_owned(),
                replaced: false,
            }]
        );
    }
    let now = T0 + 3 * HOUR;
    claim(s, jt, 1, OWNER, now).await;
    archive_as(s, &ids(&["holder"]), 500, now).await;
    let next = NewJob::new("next", jt, "n").unique(Unique::new("sync"));
    assert_eq!(add(s, vec![next], now).await.new, ["next"]);
}

/// Bad repeat releases (a time that is not one, data over the payload
/// limit, output over `MAX_OUTPUT`) and bad rules (empty, too long, a
/// control character, a zone with a space or too long, a rule naming its
/// zone) are refused before anything changes.
pub async fn repeat_validation(c: Ctx) {
    let s = &*c.store;
    if !offers_repeat(s).await {
        return;
    }
    let jt = "rp-bad";
    add(s, vec![repeating("j", jt, Repeat::new("HOURLY"))], T0).await;
    claim(s, jt, 1, OWNER, T0).await;
    let held = get(s, "j").await;
    let max = s.capabilities().max_payload;
    let good = repeat_at("ok", T0 + HOUR, run_result(200, ""), None);
    let bad = [
        (
            repeat_at("j", -1, run_result(200, ""), None),
            ErrorKind::InvalidInput,
        ),
        (
            repeat_at("j", MAX_TIME + 1, run_result(200, ""), None),
            ErrorKind::InvalidInput,
        ),
        (
            JobRelease::new(
                "j",
                Release::Repeat {
                    at: T0 + HOUR,
                    result: run_result(200, ""),
                    data: Some(vec![b'd'; max + 1]),
                },
            ),
            ErrorKind::TooLarge,
        ),
        (
            JobRelease::new(
                "j",
                Release::Repeat {
                    at: T0 + HOUR,
                    result: JobResult {
                        output: vec![b'o'; MAX_OUTPUT + 1],
                        ..JobResult::from_status(200)
                    },
                    data: None,
                },
            ),
            ErrorKind::TooLarge,
        ),
    ];
    for (entry, kind) in bad {
        let list = [good.clone(), entry.clone()];
        assert_kind(
            s.release_jobs(&list, OWNER, T0 + SEC).await,
            kind,
            &format!("{:?}", entry.how.output_len()),
        );
        assert_eq!(get(s, "j").await, held, "nothing changed");
    }
    // The largest payload and output are accepted.
    let big = JobRelease::new(
        "j",
        Release::Repeat {
            at: T0 + HOUR,
            result: JobResult::from_status(200).with_output(vec![b'o'; MAX_OUTPUT]),
            data: Some(vec![b'd'; max]),
        },
    );
    assert_eq!(
        s.release_jobs(&[big], OWNER, T0 + SEC).await.unwrap(),
        ["j"]
    );
    let j = get(s, "j").await;
    assert_eq!(
        (j.data.len(), j.result.map(|r| r.output.len())),
        (max, Some(MAX_OUTPUT))
    );

    let bad_rules = [
        Repeat::new(""),
        Repeat::new("x".repeat(MAX_RULE_LEN + 1)),
        Repeat::new("0 6 * * *\n"),
        Repeat::new("TZ=Europe/Paris 0 6 * * *"),
        Repeat::new("HOURLY").time_zone(""),
        Repeat::new("HOURLY").time_zone("Europe Paris"),
        Repeat::new("HOURLY").time_zone("x".repeat(MAX_TIME_ZONE_LEN + 1)),
    ];
    for rule in bad_rules {
        let batch = [
            NewJob::new("fine", jt, "f"),
            repeating("bad", jt, rule.clone()),
        ];
        assert_kind(
            s.add_jobs(&batch, T0).await,
            ErrorKind::InvalidInput,
            &format!("rule {rule:?}"),
        );
        assert_eq!(s.get_job("fine").await.unwrap(), None, "{rule:?}");
        assert_eq!(s.get_job("bad").await.unwrap(), None, "{rule:?}");
    }
}

/// Concurrent: the owner repeats 40 jobs whose leases ran out while
/// another claimer takes them on the other handle. Each job ends either
/// repeated (free, due at the repeat time, attempts 0) or claimed by the
/// other (its second attempt), never both, never neither.
pub async fn repeat_races_a_takeover(c: Ctx) {
    if !offers_repeat(&*c.store).await {
        return;
    }
    let jt = "rp-race";
    let n = 40;
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| repeating(&format!("j{i:02}"), jt, Repeat::new("HOURLY")))
        .collect();
    add(&*c.store, jobs, T0).await;
    let got = c
        .store
        .claim_jobs(jt, n, OWNER, Duration::from_secs(1), T0)
        .await
        .unwrap();
    assert_eq!(got.len(), n);
    let now = T0 + 5 * SEC;
    let at = T0 + HOUR;
    let mut set = tokio::task::JoinSet::new();
    for half in 0..2 {
        let store = c.store.clone();
        let rel: Vec<JobRelease> = (0..n)
            .filter(|i| i % 2 == half)
            .map(|i| repeat_at(&format!("j{i:02}"), at, run_result(200, "r"), None))
            .collect();
        set.spawn(async move { (true, store.release_jobs(&rel, OWNER, now).await.unwrap()) });
        let peer = c.peer.clone();
        set.spawn(async move {
            let got = peer.claim_jobs(jt, n / 2, OTHER, MIN, now).await.unwrap();
            (false, job_ids(&got))
        });
    }
    let mut repeated = Vec::new();
    let mut taken = Vec::new();
    for (is_repeat, ids) in set.join_all().await {
        if is_repeat {
            repeated.extend(ids);
        } else {
            taken.extend(ids);
        }
    }
    let mut all = repeated.clone();
    all.extend(taken.clone());
    all.sort();
    let want: Vec<String> = (0..n).map(|i| format!("j{i:02}")).collect();
    assert_eq!(
        all, want,
        "each job once: repeated {repeated:?}, taken {taken:?}"
    );
    for id in &repeated {
        let j = get(&*c.store, id).await;
        assert_eq!(
            (j.lock.as_str(), j.dt, j.attempts),
            (LOCK_FREE, at, 0),
            "{id}"
        );
    }
    for id in &taken {
        let j = get(&*c.store, id).await;
        assert_eq!((j.lock.as_str(), j.attempts), (OTHER, 2), "{id}");
    }
    let counts = counts_of(&*c.store, jt, now).await;
    assert_eq!(
        (counts.scheduled, counts.running),
        (repeated.len() as u64, taken.len() as u64)
    );
}
