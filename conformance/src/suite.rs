//! The contract as tests: one `pub async fn` per behaviour, each taking a
//! [`Ctx`] on a fresh namespace. [`conformance_tests!`](crate::conformance_tests)
//! turns every one of them into a `#[test]`.
//!
//! Time never passes by sleeping here: each test picks a `now` and moves it.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use jobstore_api::limits::{
    MAX_BATCH, MAX_CLAIM, MAX_DELAY, MAX_HANDLER_ATTEMPTS, MAX_HANDLER_CONCURRENCY,
    MAX_HANDLER_FIELD, MAX_ID_LEN, MAX_LEASE, MAX_OUTPUT, MAX_PAGE, MAX_TIME, MIN_PAYLOAD_SUPPORT,
};
use jobstore_api::*;

use crate::Ctx;

mod deps;
mod history;
mod manage;
mod repeat;
mod schedules;
mod stats;
mod trace;
mod unique;
pub use deps::*;
pub use history::*;
pub use manage::*;
pub use repeat::*;
pub use schedules::*;
pub use stats::*;
pub use trace::*;
pub use unique::*;

/// The `now` every test starts from: 2023-11-14T22:13:20Z.
pub const T0: Millis = 1_700_000_000_000;
const MIN: Duration = Duration::from_secs(60);
const SEC: Millis = 1_000;
const OWNER: &str = "sys-a";
const OTHER: &str = "sys-b";

fn ids(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn job_ids(jobs: &[Job]) -> Vec<String> {
    jobs.iter().map(|j| j.id.clone()).collect()
}

async fn add(store: &dyn JobStore, jobs: Vec<NewJob>, now: Millis) -> AddOutcome {
    store.add_jobs(&jobs, now).await.expect("add_jobs")
}

async fn add_n(store: &dyn JobStore, jobtype: &str, n: usize, now: Millis) -> Vec<String> {
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| NewJob::new(format!("{jobtype}-{i:06}"), jobtype, format!("payload {i}")))
        .collect();
    let out = add(store, jobs, now).await;
    assert_eq!(out.new.len(), n, "all {n} jobs are new");
    out.new
}

async fn get(store: &dyn JobStore, id: &str) -> Job {
    store
        .get_job(id)
        .await
        .expect("get_job")
        .unwrap_or_else(|| panic!("job {id} exists"))
}

async fn claim(
    store: &dyn JobStore,
    jobtype: &str,
    limit: usize,
    owner: &str,
    now: Millis,
) -> Vec<Job> {
    store
        .claim_jobs(jobtype, limit, owner, MIN, now)
        .await
        .expect("claim_jobs")
}

/// The history of a job just added at `at`: one `Added` event in a store
/// that keeps history, nothing in one that does not.
fn added_at(s: &dyn JobStore, at: Millis) -> Vec<JobEvent> {
    if s.capabilities().history {
        vec![JobEvent::new(at, "", 0, EventKind::Added)]
    } else {
        vec![]
    }
}

/// `job` with `event` appended to its history, in a store that keeps
/// history (unchanged in one that does not).
fn with_event(s: &dyn JobStore, mut job: Job, event: JobEvent) -> Job {
    if s.capabilities().history {
        jobstore_api::history::push_event(&mut job.history, event);
    }
    job
}

fn assert_kind<T: std::fmt::Debug>(result: Result<T>, kind: ErrorKind, what: &str) {
    match result {
        Err(e) => assert_eq!(e.kind(), kind, "{what}: wrong error kind for {e}"),
        Ok(v) => panic!("{what}: expected a {kind} error, got Ok({v:?})"),
    }
}

async fn counts_of(store: &dyn JobStore, jobtype: &str, now: Millis) -> JobCounts {
    store
        .job_counts(now)
        .await
        .expect("job_counts")
        .into_iter()
        .find(|c| c.jobtype == jobtype)
        .unwrap_or_else(|| JobCounts {
            jobtype: jobtype.to_owned(),
            ..JobCounts::default()
        })
}

fn archived(pairs: &[(ResultCode, u64)]) -> std::collections::BTreeMap<ResultCode, u64> {
    pairs.iter().copied().collect()
}

/// Archives `ids` (held by [`OWNER`]) with a result of `status`.
async fn archive_as(store: &dyn JobStore, ids: &[String], status: u16, now: Millis) {
    let how = Release::Archive(JobResult::from_status(status));
    store.release_all(ids, OWNER, &how, now).await.unwrap();
}

// ---------------------------------------------------------------- add / get

/// Every field of a new job reads back as the contract says.
pub async fn add_get_round_trip(c: Ctx) {
    let s = &*c.store;
    let data = b"\x00binary\npayload\xff".to_vec();
    let out = add(
        s,
        vec![NewJob::new("j1", "acme-mail", data.clone()).priority(7)],
        T0,
    )
    .await;
    assert_eq!(
        out,
        AddOutcome {
            new: ids(&["j1"]),
            existing: vec![],
            duplicates: vec![],
            refused: vec![],
        }
    );
    let job = get(s, "j1").await;
    assert_eq!(
        job,
        Job {
            id: "j1".into(),
            jobtype: "acme-mail".into(),
            data,
            priority: 7,
            dt: T0,
            lock: LOCK_FREE.into(),
            attempts: 0,
            create_dt: T0,
            done_dt: None,
            result: None,
            cancel_requested: false,
            tags: vec![],
            history: added_at(s, T0),
            claimed_due: None,
            trace: None,
            flow: None,
        }
    );
    assert_eq!(job.state(T0), JobState::Waiting);
}

/// `run_at` sets `dt`; `create_dt` stays `now`.
pub async fn add_with_run_at_schedules(c: Ctx) {
    let s = &*c.store;
    add(
        s,
        vec![NewJob::new("later", "acme-mail", "x").run_at(T0 + 5 * SEC)],
        T0,
    )
    .await;
    let job = get(s, "later").await;
    assert_eq!((job.dt, job.create_dt), (T0 + 5 * SEC, T0));
    assert_eq!(job.state(T0), JobState::Scheduled);
}

/// A batch reports which ids were new and which existed, in batch order.
pub async fn add_reports_new_and_existing(c: Ctx) {
    let s = &*c.store;
    add(
        s,
        vec![NewJob::new("a", "t", "1"), NewJob::new("c", "t", "3")],
        T0,
    )
    .await;
    let out = add(
        s,
        vec![
            NewJob::new("c", "t", "x"),
            NewJob::new("b", "t", "2"),
            NewJob::new("a", "t", "x"),
        ],
        T0 + 1,
    )
    .await;
    assert_eq!(out.new, ids(&["b"]));
    assert_eq!(out.existing, ids(&["c", "a"]));
}

/// Adding an existing id leaves the stored job untouched, whatever its state.
pub async fn add_existing_leaves_job_untouched(c: Ctx) {
    let s = &*c.store;
    add(
        s,
        vec![
            NewJob::new("run", "t", "orig"),
            NewJob::new("done", "t", "orig"),
        ],
        T0,
    )
    .await;
    let claimed = claim(s, "t", 2, OWNER, T0).await;
    assert_eq!(claimed.len(), 2);
    s.release_all(
        &ids(&["done"]),
        OWNER,
        &Release::Archive(JobResult::from_status(200)),
        T0,
    )
    .await
    .unwrap();
    let before_run = get(s, "run").await;
    let before_done = get(s, "done").await;
    let again = vec![
        NewJob::new("run", "t2", "new").priority(9),
        NewJob::new("done", "t", "new").run_at(T0),
    ];
    let out = add(s, again, T0 + SEC).await;
    assert_eq!(out.new, Vec::<String>::new());
    assert_eq!(out.existing, ids(&["run", "done"]));
    assert_eq!(get(s, "run").await, before_run);
    assert_eq!(get(s, "done").await, before_done);
}

/// An empty batch is fine and adds nothing.
pub async fn add_empty_batch(c: Ctx) {
    let out = c.store.add_jobs(&[], T0).await.unwrap();
    assert_eq!(out, AddOutcome::default());
    assert!(c.store.job_counts(T0).await.unwrap().is_empty());
}

/// An id twice in one batch is invalid input, and nothing is stored.
pub async fn add_duplicate_id_in_batch_rejected(c: Ctx) {
    let s = &*c.store;
    let r = s
        .add_jobs(
            &[
                NewJob::new("x", "t", "1"),
                NewJob::new("y", "t", "1"),
                NewJob::new("x", "t", "2"),
            ],
            T0,
        )
        .await;
    assert_kind(r, ErrorKind::InvalidInput, "duplicate id in batch");
    assert_eq!(s.get_job("x").await.unwrap(), None);
    assert_eq!(s.get_job("y").await.unwrap(), None);
}

/// One invalid job rejects the whole batch before anything is stored.
pub async fn add_invalid_job_rejects_whole_batch(c: Ctx) {
    let s = &*c.store;
    let r = s
        .add_jobs(
            &[NewJob::new("ok", "t", "1"), NewJob::new("bad|id", "t", "1")],
            T0,
        )
        .await;
    assert_kind(r, ErrorKind::InvalidInput, "invalid id in batch");
    assert_eq!(s.get_job("ok").await.unwrap(), None);
}

/// `get_job` of an unknown id is `None`, not an error.
pub async fn get_missing_job_is_none(c: Ctx) {
    assert_eq!(c.store.get_job("nope").await.unwrap(), None);
}

/// `get_jobs` reads many jobs in one call, in any state, each as
/// `get_job` reads it; unknown ids are left out; bad lists are refused.
pub async fn get_jobs_reads_many(c: Ctx) {
    let s = &*c.store;
    add(
        s,
        vec![
            NewJob::new("g-free", "gj", "f").priority(2),
            NewJob::new("g-run", "gj", "r").priority(1),
            NewJob::new("g-done", "gj", "d"),
            NewJob::new("g-later", "gj-b", "l").run_at(T0 + 3_600 * SEC),
        ],
        T0,
    )
    .await;
    let got = claim(s, "gj", 2, OWNER, T0).await;
    assert_eq!(job_ids(&got), ["g-free", "g-run"]);
    s.release_all(&ids(&["g-free"]), OWNER, &Release::Unget, T0)
        .await
        .unwrap();
    let got = claim(s, "gj", 1, OWNER, T0).await;
    assert_eq!(job_ids(&got), ["g-free"]);
    archive_as(s, &ids(&["g-free"]), 404, T0).await;
    let asked = ids(&["g-later", "nope", "g-free", "g-run", "g-done"]);
    let mut many = s.get_jobs(&asked).await.unwrap();
    many.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(job_ids(&many), ["g-done", "g-free", "g-later", "g-run"]);
    for job in &many {
        assert_eq!(Some(job), s.get_job(&job.id).await.unwrap().as_ref());
    }
    assert_eq!(
        many[1].result.as_ref().map(|r| (r.code, r.status)),
        Some((ResultCode::Failed, 404))
    );
    assert!(s.get_jobs(&[]).await.unwrap().is_empty());
    assert_kind(
        s.get_jobs(&ids(&["g-run", "g-run"])).await,
        ErrorKind::InvalidInput,
        "get_jobs with an id twice",
    );
    let too_many: Vec<String> = (0..=MAX_BATCH).map(|i| format!("x{i}")).collect();
    assert_kind(
        s.get_jobs(&too_many).await,
        ErrorKind::TooLarge,
        "get_jobs over MAX_BATCH",
    );
}

/// `get_jobs` reads within one namespace.
pub async fn get_jobs_isolated_between_namespaces(a: Ctx, b: Ctx) {
    add(&*a.store, vec![NewJob::new("only-a", "gj", "")], T0).await;
    assert!(
        b.store
            .get_jobs(&ids(&["only-a"]))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(a.store.get_jobs(&ids(&["only-a"])).await.unwrap().len(), 1);
}

/// Ids and jobtypes at the edges of the rules are accepted and read back.
pub async fn edge_ids_and_jobtypes_round_trip(c: Ctx) {
    let s = &*c.store;
    let long_id = "é".repeat(100); // 200 bytes
    let odd_id = "id with spaces/slashes:colons\u{1F600}";
    let long_type = format!("a{}", "b.c:d-e_".repeat(25))
        .chars()
        .take(200)
        .collect::<String>();
    assert_eq!(long_type.len(), 200);
    let out = add(
        s,
        vec![
            NewJob::new(long_id.clone(), long_type.clone(), "1"),
            NewJob::new(odd_id, "0digit", "2"),
        ],
        T0,
    )
    .await;
    assert_eq!(out.new.len(), 2);
    assert_eq!(get(s, &long_id).await.jobtype, long_type);
    assert_eq!(get(s, odd_id).await.jobtype, "0digit");
    let claimed = claim(s, &long_type, 1, OWNER, T0).await;
    assert_eq!(job_ids(&claimed), vec![long_id]);
}

// ------------------------------------------------------------------ payloads

/// Payloads of any bytes read back exactly: `case` names the shape.
pub async fn payload_round_trip(c: Ctx, case: &str) {
    let data: Vec<u8> = match case {
        "empty" => vec![],
        "nul" => b"a\x00b\x00\x00".to_vec(),
        "newlines" => b"line1\nline2\r\n\n".to_vec(),
        "invalid-utf8" => vec![0xff, 0xfe, 0xc3, 0x28, 0x80],
        "all-bytes" => (0..=255u8).collect(),
        "one-mib" => (0..MIN_PAYLOAD_SUPPORT).map(|i| (i % 251) as u8).collect(),
        other => panic!("unknown payload case {other}"),
    };
    let s = &*c.store;
    add(s, vec![NewJob::new("p", "t", data.clone())], T0).await;
    assert_eq!(get(s, "p").await.data, data, "stored payload");
    let claimed = claim(s, "t", 1, OWNER, T0).await;
    assert_eq!(claimed[0].data, data, "claimed payload");
}

/// The store declares a payload limit of at least 1 MiB and rejects larger
/// payloads as `TooLarge`, on add and on update.
pub async fn payload_too_large_rejected(c: Ctx) {
    let s = &*c.store;
    let max = s.capabilities().max_payload;
    assert!(max >= MIN_PAYLOAD_SUPPORT, "max_payload {max} below 1 MiB");
    let big = vec![7u8; max + 1];
    assert_kind(
        s.add_jobs(&[NewJob::new("big", "t", big.clone())], T0)
            .await,
        ErrorKind::TooLarge,
        "payload over the limit",
    );
    assert_eq!(s.get_job("big").await.unwrap(), None);
    add(s, vec![NewJob::new("small", "t", "x")], T0).await;
    claim(s, "t", 1, OWNER, T0).await;
    assert_kind(
        s.update_data("small", OWNER, &big, T0).await,
        ErrorKind::TooLarge,
        "update over the limit",
    );
    assert_eq!(get(s, "small").await.data, b"x");
}

/// Every limit holds at its exact bound: a payload of exactly the store's
/// `max_payload` is stored, read back and accepted by an update (one byte
/// more is refused: `payload_too_large_rejected`); leases and sysid ttls of
/// exactly 1 ms and `MAX_LEASE`; a sysid of exactly `MAX_SYSID_LEN` bytes;
/// times 0 and `MAX_TIME`.
pub async fn limits_at_exact_bounds(c: Ctx) {
    let s = &*c.store;
    let max = s.capabilities().max_payload;
    let big: Vec<u8> = (0..max).map(|i| (i % 253) as u8).collect();
    add(s, vec![NewJob::new("max", "big", big.clone())], T0).await;
    let job = get(s, "max").await;
    assert!(job.data == big, "payload of exactly {max} bytes read back");
    let got = claim(s, "big", 1, OWNER, T0).await;
    assert_eq!(got.len(), 1);
    let mut other = big;
    other.reverse();
    assert!(s.update_data("max", OWNER, &other, T0).await.unwrap());
    assert!(
        get(s, "max").await.data == other,
        "update of exactly {max} bytes"
    );
    drop(other);

    add_n(s, "lease", 3, T0).await;
    let one_ms = Duration::from_millis(1);
    let got = s.claim_jobs("lease", 1, OWNER, one_ms, T0).await.unwrap();
    assert_eq!(got[0].dt, T0 + 1, "1 ms lease");
    let got = s
        .claim_jobs("lease", 1, OWNER, MAX_LEASE, T0)
        .await
        .unwrap();
    let max_ms = duration_ms(MAX_LEASE);
    assert_eq!(got[0].dt, T0 + max_ms, "MAX_LEASE lease");
    let id = got[0].id.clone();
    let renewed = s
        .renew_locks(std::slice::from_ref(&id), OWNER, MAX_LEASE, T0 + 5)
        .await
        .unwrap()
        .renewed;
    assert_eq!(renewed, vec![id.clone()]);
    assert_eq!(
        get(s, &id).await.dt,
        T0 + 5 + max_ms,
        "renewed for MAX_LEASE"
    );
    let renewed = s
        .renew_locks(std::slice::from_ref(&id), OWNER, one_ms, T0 + 6)
        .await
        .unwrap()
        .renewed;
    assert_eq!(renewed, vec![id.clone()]);
    assert_eq!(get(s, &id).await.dt, T0 + 7, "renewed for 1 ms");

    let long_sysid = "s".repeat(jobstore_api::limits::MAX_SYSID_LEN);
    let lease = s.reserve_sysid(&long_sysid, MAX_LEASE, T0).await.unwrap();
    assert_eq!(lease.expires, T0 + max_ms);
    let lease = s.renew_sysid(&lease, one_ms, T0 + 1).await.unwrap();
    assert_eq!(lease.expires, T0 + 2);
    let got = s
        .claim_jobs("lease", 1, &long_sysid, MIN, T0)
        .await
        .unwrap();
    assert_eq!(got[0].lock, long_sysid, "owner of MAX_SYSID_LEN bytes");

    add(s, vec![NewJob::new("at-zero", "zero", "z")], 0).await;
    let j = get(s, "at-zero").await;
    assert_eq!((j.dt, j.create_dt), (0, 0));
    let got = claim(s, "zero", 1, OWNER, 0).await;
    assert_eq!(job_ids(&got), ids(&["at-zero"]));
    add(
        s,
        vec![NewJob::new("at-max", "late", "m").run_at(MAX_TIME)],
        T0,
    )
    .await;
    assert!(claim(s, "late", 1, OWNER, MAX_TIME - 1).await.is_empty());
    assert_eq!(
        job_ids(&claim(s, "late", 1, OWNER, MAX_TIME).await),
        ids(&["at-max"])
    );
}

// ------------------------------------------------------------------- claims

/// Claims hand out jobs by priority (high first), then `dt`, then `id`.
pub async fn claim_order_priority_dt_id(c: Ctx) {
    let s = &*c.store;
    add(
        s,
        vec![
            NewJob::new("e", "t", "").priority(0).run_at(T0 - 10),
            NewJob::new("d", "t", "").priority(0).run_at(T0 - 20),
            NewJob::new("c", "t", "").priority(5).run_at(T0),
            NewJob::new("b", "t", "").priority(5).run_at(T0),
            NewJob::new("a", "t", "").priority(-3).run_at(T0 - 1000),
            NewJob::new("f", "t", "").priority(5).run_at(T0 - 1),
            NewJob::new("g", "t", "").priority(i32::MAX),
            NewJob::new("h", "t", "").priority(i32::MIN),
        ],
        T0,
    )
    .await;
    let first = claim(s, "t", 3, OWNER, T0).await;
    assert_eq!(job_ids(&first), ids(&["g", "f", "b"]));
    let rest = claim(s, "t", 10, OWNER, T0).await;
    assert_eq!(job_ids(&rest), ids(&["c", "d", "e", "a", "h"]));
}

/// A claim returns at most `limit` jobs, and never the same job twice.
pub async fn claim_respects_limit(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 10, T0).await;
    let mut seen = BTreeSet::new();
    for expected in [3, 3, 3, 1, 0] {
        let got = claim(s, "t", 3, OWNER, T0).await;
        assert_eq!(got.len(), expected);
        for j in got {
            assert!(seen.insert(j.id.clone()), "{} handed out twice", j.id);
        }
    }
    assert_eq!(seen.len(), 10);
}

/// `limit == 0` returns nothing and changes nothing.
pub async fn claim_limit_zero_returns_nothing(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 2, T0).await;
    assert!(claim(s, "t", 0, OWNER, T0).await.is_empty());
    assert_eq!(counts_of(s, "t", T0).await.waiting, 2);
}

/// A limit above the documented maximum is invalid input; the maximum is fine.
pub async fn claim_limit_above_max_rejected(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 2, T0).await;
    assert_kind(
        s.claim_jobs("t", MAX_CLAIM + 1, OWNER, MIN, T0).await,
        ErrorKind::InvalidInput,
        "limit above MAX_CLAIM",
    );
    assert_eq!(counts_of(s, "t", T0).await.waiting, 2);
    assert_eq!(
        s.claim_jobs("t", MAX_CLAIM, OWNER, MIN, T0)
            .await
            .unwrap()
            .len(),
        2
    );
}

/// A claim only hands out jobs of the jobtype asked for.
pub async fn claim_only_that_jobtype(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t1", 3, T0).await;
    add_n(s, "t2", 2, T0).await;
    let got = claim(s, "t2", 10, OWNER, T0).await;
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|j| j.jobtype == "t2"));
    assert!(claim(s, "nothing-here", 10, OWNER, T0).await.is_empty());
    assert_eq!(counts_of(s, "t1", T0).await.waiting, 3);
}

/// A claim sets `lock`, `dt = now + lease`, `attempts += 1` and returns the
/// jobs exactly as stored after the change.
pub async fn claim_sets_lock_lease_attempts(c: Ctx) {
    let s = &*c.store;
    add(s, vec![NewJob::new("j", "t", "data").priority(2)], T0).await;
    let got = s
        .claim_jobs("t", 5, OWNER, Duration::from_millis(1500), T0 + 7)
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    let j = &got[0];
    assert_eq!(
        (j.lock.as_str(), j.dt, j.attempts),
        (OWNER, T0 + 7 + 1500, 1)
    );
    assert_eq!(
        (j.create_dt, j.priority, j.data.as_slice()),
        (T0, 2, &b"data"[..])
    );
    assert_eq!(j.state(T0 + 7), JobState::Running);
    assert_eq!(j.claimed_due, Some(T0));
    let stored = Job {
        claimed_due: Some(T0),
        ..get(s, "j").await
    };
    assert_eq!(&stored, j);
}

/// Jobs scheduled for later are invisible to claims and counts until due,
/// and eligible exactly at `dt`.
pub async fn scheduled_job_invisible_until_due(c: Ctx) {
    let s = &*c.store;
    add(
        s,
        vec![NewJob::new("later", "t", "").run_at(T0 + 10 * SEC)],
        T0,
    )
    .await;
    assert!(claim(s, "t", 1, OWNER, T0).await.is_empty());
    assert!(claim(s, "t", 1, OWNER, T0 + 10 * SEC - 1).await.is_empty());
    assert!(
        s.waiting_jobtypes(T0 + 10 * SEC - 1)
            .await
            .unwrap()
            .is_empty()
    );
    let got = claim(s, "t", 1, OWNER, T0 + 10 * SEC).await;
    assert_eq!(job_ids(&got), ids(&["later"]));
    // Once claimed it is held like any job: not scheduled, not eligible.
    let counts = counts_of(s, "t", T0 + 10 * SEC + 1).await;
    assert_eq!(
        (counts.waiting, counts.scheduled, counts.running),
        (0, 0, 1),
        "{counts:?}"
    );
    assert!(claim(s, "t", 1, OTHER, T0 + 10 * SEC + 1).await.is_empty());
    assert!(claim(s, "t", 1, OTHER, T0 + 20 * SEC).await.is_empty());
}

/// Eligibility is decided by each call's own `now`: jobs that a claimer
/// whose clock is ahead saw as due, but left (past its limit), are not
/// handed to a claimer whose clock is behind; for it they are still
/// scheduled or leased, and become eligible at their own time.
pub async fn claims_with_a_clock_behind_keep_to_their_own_time(c: Ctx) {
    let s = &*c.store;
    // Two scheduled jobs, due at T0 + 10 s.
    add(
        s,
        vec![
            NewJob::new("s1", "sched", "").run_at(T0 + 10 * SEC),
            NewJob::new("s2", "sched", "").run_at(T0 + 10 * SEC),
        ],
        T0,
    )
    .await;
    // Two leased jobs, whose leases run out at T0 + 10 s.
    add(
        s,
        vec![
            NewJob::new("l1", "leased", ""),
            NewJob::new("l2", "leased", ""),
        ],
        T0,
    )
    .await;
    let ten = Duration::from_secs(10);
    let got = s.claim_jobs("leased", 2, OWNER, ten, T0).await.unwrap();
    assert_eq!(job_ids(&got), ids(&["l1", "l2"]));
    // A claimer 20 s ahead takes one of each.
    let ahead = T0 + 20 * SEC;
    assert_eq!(
        job_ids(&claim(s, "sched", 1, OTHER, ahead).await),
        ids(&["s1"])
    );
    assert_eq!(
        job_ids(&claim(s, "leased", 1, OTHER, ahead).await),
        ids(&["l1"])
    );
    // A claimer at T0 + 5 s gets neither of the others, for either jobtype,
    // however often it asks.
    let behind = T0 + 5 * SEC;
    for _ in 0..2 {
        for jobtype in ["sched", "leased"] {
            let got = claim(s, jobtype, 5, THIRD, behind).await;
            assert!(got.is_empty(), "{jobtype} at {behind}: {got:?}");
        }
    }
    let sched = counts_of(s, "sched", behind).await;
    assert_eq!(
        (sched.waiting, sched.scheduled),
        (0, 1),
        "sched at {behind}: {sched:?}"
    );
    let leased = counts_of(s, "leased", behind).await;
    assert_eq!(leased.waiting, 0, "leased at {behind}: {leased:?}");
    // The lease of l2 is still OWNER's, and at their own time both are due.
    assert_eq!(
        s.renew_locks(&ids(&["l2"]), OWNER, ten, behind)
            .await
            .unwrap()
            .renewed,
        ids(&["l2"])
    );
    let due = T0 + 10 * SEC;
    assert_eq!(
        job_ids(&claim(s, "sched", 5, THIRD, due).await),
        ids(&["s2"])
    );
    assert!(claim(s, "leased", 5, THIRD, due).await.is_empty());
    let later = behind + 10 * SEC;
    assert_eq!(
        job_ids(&claim(s, "leased", 5, THIRD, later).await),
        ids(&["l2"])
    );
}

/// A claimer whose clock is behind passes over the jobs that a claimer
/// ahead made eligible, takes exactly its limit of the jobs that are
/// eligible at its own time, and leaves the passed-over jobs to be claimed
/// when they fall due: scheduled jobs, and expired leases nobody renews.
pub async fn claims_behind_pass_over_jobs_made_eligible_ahead(c: Ctx) {
    let s = &*c.store;
    let mut jobs = vec![
        NewJob::new("s1", "t", "").run_at(T0 + 10 * SEC).priority(5),
        NewJob::new("s2", "t", "").run_at(T0 + 10 * SEC).priority(5),
    ];
    jobs.extend(["a", "b", "c"].map(|id| NewJob::new(id, "t", "")));
    jobs.extend(["l1", "l2"].map(|id| NewJob::new(id, "leased", "")));
    add(s, jobs, T0).await;
    let ten = Duration::from_secs(10);
    let leased = s.claim_jobs("leased", 2, OWNER, ten, T0).await.unwrap();
    assert_eq!(job_ids(&leased), ids(&["l1", "l2"])); // both run out at T0 + 10 s
    // A claimer 20 s ahead takes one of each kind.
    let ahead = T0 + 20 * SEC;
    assert_eq!(job_ids(&claim(s, "t", 1, OTHER, ahead).await), ids(&["s1"]));
    assert_eq!(
        job_ids(&claim(s, "leased", 1, OTHER, ahead).await),
        ids(&["l1"])
    );
    // At T0 + 5 s, s2 is not due and l2's lease runs: two of the three
    // waiting jobs, in claim order, and nothing of "leased".
    let behind = T0 + 5 * SEC;
    assert_eq!(
        job_ids(&claim(s, "t", 2, THIRD, behind).await),
        ids(&["a", "b"])
    );
    assert!(claim(s, "leased", 5, THIRD, behind).await.is_empty());
    // At T0 + 10 s both fall due.
    let due = T0 + 10 * SEC;
    assert_eq!(
        job_ids(&claim(s, "t", 5, THIRD, due).await),
        ids(&["s2", "c"])
    );
    assert_eq!(
        job_ids(&claim(s, "leased", 5, THIRD, due).await),
        ids(&["l2"])
    );
}

/// While a lease is valid nobody else gets the job, not even its owner.
pub async fn running_job_not_claimable(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 1, T0).await;
    assert_eq!(claim(s, "t", 1, OWNER, T0).await.len(), 1);
    assert!(claim(s, "t", 1, OTHER, T0 + 60 * SEC - 1).await.is_empty());
    assert!(
        claim(&*c.peer, "t", 1, OWNER, T0 + 30 * SEC)
            .await
            .is_empty()
    );
}

/// When a lease runs out the job is eligible again, and the next claim
/// counts another attempt.
pub async fn expired_lease_makes_job_eligible(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 1, T0).await;
    claim(s, "t", 1, OWNER, T0).await;
    let expiry = T0 + 60 * SEC;
    assert_eq!(get(s, "t-000000").await.state(expiry), JobState::Expired);
    assert_eq!(counts_of(s, "t", expiry).await.waiting, 1);
    let again = claim(s, "t", 1, OTHER, expiry).await;
    assert_eq!(job_ids(&again), ids(&["t-000000"]));
    assert_eq!((again[0].lock.as_str(), again[0].attempts), (OTHER, 2));
    let third = claim(s, "t", 1, OWNER, expiry + 60 * SEC).await;
    assert_eq!(third[0].attempts, 3);
}

/// Expired jobs that a claim passed over (its limit was reached first) are
/// still their owner's: each kind of release, and a renewal, has its usual
/// effect on them, one job per call.
pub async fn expired_jobs_passed_over_by_a_claim_stay_their_owners(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 6, T0).await;
    let ten = Duration::from_secs(10);
    let hour = Duration::from_secs(3_600);
    let all = s.claim_jobs("t", 6, OWNER, ten, T0).await.unwrap();
    assert_eq!(all.len(), 6);
    let id = |i: usize| all[i].id.clone();
    // 20 s on, all six have expired; another claimer takes one of them.
    let now = T0 + 20 * SEC;
    let took = s.claim_jobs("t", 1, OTHER, hour, now).await.unwrap();
    assert_eq!(job_ids(&took), vec![id(0)]);
    let minute = Duration::from_secs(60);
    let kinds = [
        (1, Release::Retry { delay: minute }),
        (2, Release::Unget),
        (3, Release::Archive(JobResult::from_status(200))),
        (4, Release::Delete),
    ];
    for (i, how) in kinds {
        let done = s
            .release_jobs(&[JobRelease::new(id(i), how)], OWNER, now)
            .await
            .unwrap();
        assert_eq!(done, vec![id(i)], "release of job {i}");
    }
    assert_eq!(
        s.renew_locks(&[id(5)], OWNER, minute, now)
            .await
            .unwrap()
            .renewed,
        vec![id(5)]
    );
    let counts = counts_of(s, "t", now).await;
    assert_eq!(
        (counts.waiting, counts.scheduled, counts.running),
        (1, 1, 2),
        "{counts:?}"
    );
    assert_eq!(counts.archived, archived(&[(ResultCode::Ok, 1)]));
    // Only the ungot job is eligible now; the retried one at its time.
    let got = s.claim_jobs("t", 6, THIRD, hour, now).await.unwrap();
    assert_eq!(job_ids(&got), vec![id(2)]);
    assert!(
        s.claim_jobs("t", 6, THIRD, hour, now + 59 * SEC)
            .await
            .unwrap()
            .is_empty()
    );
    let got = s
        .claim_jobs("t", 6, THIRD, hour, now + 60 * SEC)
        .await
        .unwrap();
    assert_eq!(sorted(job_ids(&got)), sorted(vec![id(1), id(5)]));
    assert_eq!(s.get_job(&id(4)).await.unwrap(), None);
}

/// Expired jobs sort by their `dt` (the lease expiry) among waiting ones.
pub async fn expired_jobs_ordered_by_dt(c: Ctx) {
    let s = &*c.store;
    add(s, vec![NewJob::new("early", "t", "").run_at(T0)], T0).await;
    claim(s, "t", 1, OWNER, T0).await; // lease runs out at T0 + 60 s
    add(
        s,
        vec![NewJob::new("mid", "t", "").run_at(T0 + 30 * SEC)],
        T0,
    )
    .await;
    add(
        s,
        vec![NewJob::new("late", "t", "").run_at(T0 + 90 * SEC)],
        T0,
    )
    .await;
    let got = claim(s, "t", 10, OTHER, T0 + 100 * SEC).await;
    assert_eq!(job_ids(&got), ids(&["mid", "early", "late"]));
}

/// Claim order holds across expired and waiting jobs together: a claim
/// smaller than the number eligible takes the highest priorities first,
/// whichever kind each job is and whatever the order of the ids.
pub async fn expired_and_waiting_jobs_claimed_by_priority(c: Ctx) {
    let s = &*c.store;
    let jobs: Vec<NewJob> = ["a", "b", "c", "d"]
        .iter()
        .zip([0, 2, 4, 6])
        .map(|(id, p)| NewJob::new(*id, "t", "").run_at(T0).priority(p))
        .collect();
    add(s, jobs, T0).await;
    // All four leases run out together, at T0 + 60 s.
    assert_eq!(claim(s, "t", 4, OWNER, T0).await.len(), 4);
    let waiting = vec![
        NewJob::new("w1", "t", "").priority(1),
        NewJob::new("w5", "t", "").priority(5),
    ];
    add(s, waiting, T0 + SEC).await;
    let now = T0 + 60 * SEC;
    let got = claim(s, "t", 3, OTHER, now).await;
    assert_eq!(job_ids(&got), ids(&["d", "w5", "c"]));
    let rest = claim(s, "t", 3, THIRD, now).await;
    assert_eq!(job_ids(&rest), ids(&["b", "w1", "a"]));
}

/// 10,000 jobs in one add (the batch maximum), claims of the maximum size,
/// and renew and release of a whole claim, each in one call.
pub async fn max_batches_work(c: Ctx) {
    let s = &*c.store;
    let jobs: Vec<NewJob> = (0..MAX_BATCH)
        .map(|i| NewJob::new(format!("j{i:05}"), "bulk", vec![b'x'; 16]).priority((i % 7) as i32))
        .collect();
    let out = s.add_jobs(&jobs, T0).await.unwrap();
    assert_eq!((out.new.len(), out.existing.len()), (MAX_BATCH, 0));
    let again = s.add_jobs(&jobs, T0).await.unwrap();
    assert_eq!((again.new.len(), again.existing.len()), (0, MAX_BATCH));
    let got = claim(s, "bulk", MAX_CLAIM, OWNER, T0).await;
    assert_eq!(got.len(), MAX_CLAIM);
    assert!(
        got.windows(2)
            .all(|w| (-w[0].priority, &w[0].id) < (-w[1].priority, &w[1].id))
    );
    let got_ids = job_ids(&got);
    let renewed = s
        .renew_locks(&got_ids, OWNER, MIN, T0 + SEC)
        .await
        .unwrap()
        .renewed;
    assert_eq!(renewed.len(), MAX_CLAIM);
    // Every lease now runs to T0 + 61 s, none to the first expiry.
    let counts = counts_of(s, "bulk", T0 + 60 * SEC + SEC / 2).await;
    assert_eq!(
        (counts.running, counts.waiting),
        (MAX_CLAIM as u64, (MAX_BATCH - MAX_CLAIM) as u64)
    );
    let released = s
        .release_all(
            &got_ids,
            OWNER,
            &Release::Archive(JobResult::from_status(200)),
            T0 + SEC,
        )
        .await
        .unwrap();
    assert_eq!(released.len(), MAX_CLAIM);
    let counts = counts_of(s, "bulk", T0 + SEC).await;
    assert_eq!(counts.waiting, (MAX_BATCH - MAX_CLAIM) as u64);
    assert_eq!(
        counts.archived,
        archived(&[(ResultCode::Ok, MAX_CLAIM as u64)])
    );
}

// ------------------------------------------------------------------- renew

/// The owner's renewal moves `dt` to `now + lease`.
pub async fn renew_extends_owner_lease(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 2, T0).await;
    let got = job_ids(&claim(s, "t", 2, OWNER, T0).await);
    let renewed = s
        .renew_locks(&got, OWNER, Duration::from_secs(120), T0 + 50 * SEC)
        .await
        .unwrap()
        .renewed;
    assert_eq!(sorted(renewed), sorted(got.clone()));
    assert_eq!(get(s, &got[0]).await.dt, T0 + 170 * SEC);
    assert!(claim(s, "t", 2, OTHER, T0 + 169 * SEC).await.is_empty());
    assert_eq!(claim(s, "t", 2, OTHER, T0 + 170 * SEC).await.len(), 2);
}

/// A renewal by anyone but the owner changes nothing.
pub async fn renew_by_non_owner_changes_nothing(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 1, T0).await;
    let got = job_ids(&claim(s, "t", 1, OWNER, T0).await);
    let before = get(s, &got[0]).await;
    assert!(
        s.renew_locks(&got, OTHER, MIN, T0 + SEC)
            .await
            .unwrap()
            .renewed
            .is_empty()
    );
    assert_eq!(get(s, &got[0]).await, before);
}

/// After expiry and takeover, the old owner's renewal fails and the new
/// owner's lease stands (fencing).
pub async fn renew_after_takeover_fails(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 1, T0).await;
    let got = job_ids(&claim(s, "t", 1, OWNER, T0).await);
    claim(&*c.peer, "t", 1, OTHER, T0 + 61 * SEC).await;
    let taken = get(s, &got[0]).await;
    assert!(
        s.renew_locks(&got, OWNER, MIN, T0 + 62 * SEC)
            .await
            .unwrap()
            .renewed
            .is_empty()
    );
    assert_eq!(get(s, &got[0]).await, taken);
}

/// An expired lease not yet taken by another is still its owner's to renew.
pub async fn renew_expired_but_untaken(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 1, T0).await;
    let got = job_ids(&claim(s, "t", 1, OWNER, T0).await);
    let renewed = s
        .renew_locks(&got, OWNER, MIN, T0 + 90 * SEC)
        .await
        .unwrap()
        .renewed;
    assert_eq!(renewed, got);
    assert!(claim(s, "t", 1, OTHER, T0 + 100 * SEC).await.is_empty());
}

/// Free, archived and unknown jobs are not renewed; the rest of the batch is.
pub async fn renew_mixed_batch(c: Ctx) {
    let s = &*c.store;
    add(
        s,
        vec![NewJob::new("run", "t", ""), NewJob::new("done", "t", "")],
        T0,
    )
    .await;
    claim(s, "t", 2, OWNER, T0).await;
    s.release_all(
        &ids(&["done"]),
        OWNER,
        &Release::Archive(JobResult::from_status(200)),
        T0,
    )
    .await
    .unwrap();
    add(s, vec![NewJob::new("free", "t", "")], T0).await;
    let renewed = s
        .renew_locks(
            &ids(&["run", "done", "free", "missing"]),
            OWNER,
            MIN,
            T0 + SEC,
        )
        .await
        .unwrap()
        .renewed;
    assert_eq!(renewed, ids(&["run"]));
    assert_eq!(get(s, "free").await.lock, LOCK_FREE);
    assert_eq!(get(s, "done").await.lock, LOCK_DONE);
}

// ------------------------------------------------------------------ release

/// `Retry` frees the job with `dt = now + delay`; the attempt stays counted.
pub async fn release_retry(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 1, T0).await;
    let got = job_ids(&claim(s, "t", 1, OWNER, T0).await);
    let rel = s
        .release_all(
            &got,
            OWNER,
            &Release::Retry {
                delay: Duration::from_secs(30),
            },
            T0 + SEC,
        )
        .await
        .unwrap();
    assert_eq!(rel, got);
    let j = get(s, &got[0]).await;
    assert_eq!(
        (j.lock.as_str(), j.dt, j.attempts),
        (LOCK_FREE, T0 + 31 * SEC, 1)
    );
    assert!(claim(s, "t", 1, OTHER, T0 + 31 * SEC - 1).await.is_empty());
    let again = claim(s, "t", 1, OTHER, T0 + 31 * SEC).await;
    assert_eq!(again[0].attempts, 2);
}

/// `Retry` with no delay makes the job eligible at once.
pub async fn release_retry_without_delay(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 1, T0).await;
    let got = job_ids(&claim(s, "t", 1, OWNER, T0).await);
    s.release_all(
        &got,
        OWNER,
        &Release::Retry {
            delay: Duration::ZERO,
        },
        T0 + 5,
    )
    .await
    .unwrap();
    assert_eq!(get(s, &got[0]).await.dt, T0 + 5);
    assert_eq!(claim(s, "t", 1, OTHER, T0 + 5).await.len(), 1);
}

/// `Unget` frees the job with `dt = now` and takes back the one attempt its
/// claim counted.
pub async fn release_unget(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 1, T0).await;
    let got = job_ids(&claim(s, "t", 1, OWNER, T0).await);
    s.release_all(&got, OWNER, &Release::Unget, T0 + 3)
        .await
        .unwrap();
    let j = get(s, &got[0]).await;
    assert_eq!((j.lock.as_str(), j.dt, j.attempts), (LOCK_FREE, T0 + 3, 0));
    assert_eq!(claim(s, "t", 1, OTHER, T0 + 3).await[0].attempts, 1);
    // A job on its second attempt goes back to one, not to none.
    let later = T0 + 3 + 60 * SEC; // the lease of OTHER's claim has run out
    assert_eq!(claim(s, "t", 1, THIRD, later).await[0].attempts, 2);
    s.release_all(&got, THIRD, &Release::Unget, later)
        .await
        .unwrap();
    assert_eq!(get(s, &got[0]).await.attempts, 1);
}

/// `Archive` stores the result, `done_dt = now`, `lock = "__done"` and pushes
/// `dt` 1000 years ahead.
pub async fn release_archive(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 1, T0).await;
    let got = job_ids(&claim(s, "t", 1, OWNER, T0).await);
    let result = JobResult::from_status(404).with_output(b"not found\n\x00\xff".to_vec());
    s.release_all(&got, OWNER, &Release::Archive(result.clone()), T0 + 9)
        .await
        .unwrap();
    let j = get(s, &got[0]).await;
    assert_eq!(j.lock, LOCK_DONE);
    assert_eq!(j.done_dt, Some(T0 + 9));
    assert_eq!(j.dt, T0 + 9 + ARCHIVE_HORIZON_MS);
    assert_eq!(j.result, Some(result));
    assert_eq!(j.result.as_ref().unwrap().code, ResultCode::Failed);
    assert_eq!((j.attempts, j.state(T0 + 9)), (1, JobState::Archived));
}

/// Every result code survives archiving.
pub async fn release_archive_every_code(c: Ctx) {
    let s = &*c.store;
    let n = ResultCode::ALL.len();
    add_n(s, "t", n, T0).await;
    let got = claim(s, "t", n, OWNER, T0).await;
    for (job, code) in got.iter().zip(ResultCode::ALL) {
        let result = JobResult::new(code, 299);
        s.release_all(
            std::slice::from_ref(&job.id),
            OWNER,
            &Release::Archive(result.clone()),
            T0,
        )
        .await
        .unwrap();
        assert_eq!(get(s, &job.id).await.result, Some(result));
    }
    let counts = counts_of(s, "t", T0).await;
    assert_eq!(
        counts.archived,
        ResultCode::ALL.iter().map(|c| (*c, 1)).collect()
    );
}

/// Result output up to the limit is kept; above it is `TooLarge`.
pub async fn release_archive_output_limit(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 1, T0).await;
    let got = job_ids(&claim(s, "t", 1, OWNER, T0).await);
    let mut too_big = JobResult::from_status(200);
    too_big.output = vec![b'o'; MAX_OUTPUT + 1];
    assert_kind(
        s.release_all(&got, OWNER, &Release::Archive(too_big), T0)
            .await,
        ErrorKind::TooLarge,
        "output above MAX_OUTPUT",
    );
    assert_eq!(get(s, &got[0]).await.lock, OWNER);
    let fits = JobResult::from_status(200).with_output(vec![b'o'; MAX_OUTPUT + 10]);
    assert_eq!(fits.output.len(), MAX_OUTPUT);
    s.release_all(&got, OWNER, &Release::Archive(fits.clone()), T0)
        .await
        .unwrap();
    assert_eq!(get(s, &got[0]).await.result, Some(fits));
}

/// Archived jobs are never eligible again, however far time moves.
pub async fn archived_job_never_eligible(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 1, T0).await;
    let got = job_ids(&claim(s, "t", 1, OWNER, T0).await);
    s.release_all(
        &got,
        OWNER,
        &Release::Archive(JobResult::from_status(200)),
        T0,
    )
    .await
    .unwrap();
    // Past the archive horizon too: only the lock keeps it out of claims.
    for far in [T0 + 500 * 365 * 24 * 3600 * SEC, MAX_TIME] {
        assert!(
            claim(s, "t", 1, OTHER, far).await.is_empty(),
            "eligible at {far}"
        );
    }
    let far = MAX_TIME;
    assert!(s.waiting_jobtypes(far).await.unwrap().is_empty());
}

/// `Delete` removes the job.
pub async fn release_delete(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 2, T0).await;
    let got = job_ids(&claim(s, "t", 1, OWNER, T0).await);
    assert_eq!(
        s.release_all(&got, OWNER, &Release::Delete, T0)
            .await
            .unwrap(),
        got
    );
    assert_eq!(s.get_job(&got[0]).await.unwrap(), None);
    assert_eq!(counts_of(s, "t", T0).await.total(), 1);
}

/// A release by anyone but the owner changes nothing, whatever `how`.
pub async fn release_by_non_owner_changes_nothing(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 1, T0).await;
    let got = job_ids(&claim(s, "t", 1, OWNER, T0).await);
    let before = get(s, &got[0]).await;
    for how in [
        Release::Retry {
            delay: Duration::ZERO,
        },
        Release::Unget,
        Release::Archive(JobResult::from_status(200)),
        Release::Delete,
    ] {
        assert!(
            s.release_all(&got, OTHER, &how, T0 + 1)
                .await
                .unwrap()
                .is_empty(),
            "{how:?}"
        );
        assert_eq!(get(s, &got[0]).await, before, "{how:?}");
    }
}

/// After expiry and takeover, the old owner cannot release the job:
/// the new owner's lock, lease and attempt stand.
pub async fn release_after_takeover_fails(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 1, T0).await;
    let got = job_ids(&claim(s, "t", 1, OWNER, T0).await);
    claim(&*c.peer, "t", 1, OTHER, T0 + 61 * SEC).await;
    let taken = get(s, &got[0]).await;
    for how in [
        Release::Retry {
            delay: Duration::ZERO,
        },
        Release::Unget,
        Release::Archive(JobResult::from_status(500)),
        Release::Delete,
    ] {
        assert!(
            s.release_all(&got, OWNER, &how, T0 + 62 * SEC)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(get(s, &got[0]).await, taken);
    }
}

/// Free jobs cannot be released by anybody (they have no owner).
pub async fn release_free_job_changes_nothing(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 1, T0).await;
    let before = get(s, "t-000000").await;
    let r = s
        .release_all(&ids(&["t-000000"]), OWNER, &Release::Delete, T0)
        .await
        .unwrap();
    assert!(r.is_empty());
    assert_eq!(get(s, "t-000000").await, before);
}

/// A batch release touches exactly the jobs the caller owns.
pub async fn release_mixed_batch(c: Ctx) {
    let s = &*c.store;
    add(
        s,
        vec![
            NewJob::new("mine1", "t", "").priority(9),
            NewJob::new("mine2", "t", "").priority(9),
        ],
        T0,
    )
    .await;
    claim(s, "t", 2, OWNER, T0).await;
    add(s, vec![NewJob::new("theirs", "t", "")], T0).await;
    claim(s, "t", 1, OTHER, T0).await;
    let rel = s
        .release_all(
            &ids(&["mine1", "theirs", "missing", "mine2"]),
            OWNER,
            &Release::Unget,
            T0 + 1,
        )
        .await
        .unwrap();
    assert_eq!(sorted(rel), ids(&["mine1", "mine2"]));
    assert_eq!(get(s, "theirs").await.lock, OTHER);
}

// -------------------------------------------------------- per-job release

/// One call releases each job as its own entry says, over several
/// jobtypes: archives with different results and outputs, retries with
/// different delays, an unget and a delete. Every job ends exactly as its
/// entry says, the counts follow, and the deleted id can be added again
/// (under another jobtype too).
pub async fn release_per_job_mixed_batch(c: Ctx) {
    let s = &*c.store;
    add(
        s,
        vec![
            NewJob::new("ok", "mail", "1"),
            NewJob::new("fail", "mail", "2"),
            NewJob::new("soon", "mail", "3"),
            NewJob::new("err", "sms", "4"),
            NewJob::new("quiet", "sms", "5"),
            NewJob::new("back", "sms", "6"),
            NewJob::new("now", "push", "7"),
            NewJob::new("later", "push", "8"),
            NewJob::new("gone", "push", "9"),
        ],
        T0,
    )
    .await;
    for t in ["mail", "sms", "push"] {
        assert_eq!(claim(s, t, 10, OWNER, T0).await.len(), 3, "{t}");
    }
    let now = T0 + 5 * SEC;
    let ok = JobResult::from_status(200).with_output(b"sent\n".to_vec());
    let fail = JobResult::from_status(404).with_output(b"no such user\x00\xff".to_vec());
    let err = JobResult::from_status(503).with_output(vec![b'e'; MAX_OUTPUT]);
    let quiet = JobResult::new(ResultCode::Timeout, 0);
    let releases = vec![
        JobRelease::new("ok", Release::Archive(ok.clone())),
        JobRelease::new(
            "soon",
            Release::Retry {
                delay: Duration::from_secs(30),
            },
        ),
        JobRelease::new("err", Release::Archive(err.clone())),
        JobRelease::new("back", Release::Unget),
        JobRelease::new(
            "now",
            Release::Retry {
                delay: Duration::ZERO,
            },
        ),
        JobRelease::new("fail", Release::Archive(fail.clone())),
        JobRelease::new("gone", Release::Delete),
        JobRelease::new("quiet", Release::Archive(quiet.clone())),
        JobRelease::new("later", Release::Retry { delay: 60 * MIN }),
    ];
    assert_eq!(
        s.release_jobs(&[], OWNER, now).await.unwrap(),
        Vec::<String>::new(),
        "an empty list"
    );
    let released = s.release_jobs(&releases, OWNER, now).await.unwrap();
    let all: Vec<String> = releases.iter().map(|r| r.id.clone()).collect();
    assert_eq!(sorted(released), sorted(all));
    for (id, result) in [("ok", ok), ("fail", fail), ("err", err), ("quiet", quiet)] {
        let j = get(s, id).await;
        assert_eq!(
            (j.lock.as_str(), j.done_dt, j.dt, j.attempts),
            (LOCK_DONE, Some(now), now + ARCHIVE_HORIZON_MS, 1),
            "{id}"
        );
        assert_eq!(j.result, Some(result), "{id}");
    }
    for (id, dt) in [
        ("soon", now + 30 * SEC),
        ("now", now),
        ("later", now + 3600 * SEC),
    ] {
        let j = get(s, id).await;
        assert_eq!(
            (j.lock.as_str(), j.dt, j.attempts, j.done_dt, j.result),
            (LOCK_FREE, dt, 1, None, None),
            "{id}"
        );
    }
    let back = get(s, "back").await;
    assert_eq!(
        (back.lock.as_str(), back.dt, back.attempts),
        (LOCK_FREE, now, 0)
    );
    assert_eq!(s.get_job("gone").await.unwrap(), None);

    let mut counts = s.job_counts(now).await.unwrap();
    counts.sort_by(|a, b| a.jobtype.cmp(&b.jobtype));
    assert_eq!(
        counts,
        vec![
            JobCounts {
                jobtype: "mail".into(),
                scheduled: 1,
                archived: archived(&[(ResultCode::Ok, 1), (ResultCode::Failed, 1)]),
                ..JobCounts::default()
            },
            JobCounts {
                jobtype: "push".into(),
                waiting: 1,
                scheduled: 1,
                ..JobCounts::default()
            },
            JobCounts {
                jobtype: "sms".into(),
                waiting: 1,
                archived: archived(&[(ResultCode::Error, 1), (ResultCode::Timeout, 1)]),
                ..JobCounts::default()
            },
        ]
    );
    let again = add(s, vec![NewJob::new("gone", "mail", "again")], now).await;
    assert_eq!(again.new, ids(&["gone"]), "a deleted id is free again");
    assert_eq!(
        job_ids(&claim(s, "mail", 10, OTHER, now).await),
        ids(&["gone"])
    );
    assert_eq!(
        job_ids(&claim(s, "push", 10, OTHER, now).await),
        ids(&["now"])
    );
    let sms = claim(s, "sms", 10, OTHER, now).await;
    assert_eq!(job_ids(&sms), ids(&["back"]));
    assert_eq!(sms[0].attempts, 1, "the unget took its attempt back");
}

/// Fencing per entry: entries for jobs locked by another owner (also after
/// taking over an expired lease), free, archived or unknown are skipped,
/// whatever they ask, and leave those jobs exactly as they were; the
/// caller's own entries in the same list are applied.
pub async fn release_per_job_fencing(c: Ctx) {
    let s = &*c.store;
    add(
        s,
        vec![
            NewJob::new("mine1", "t", "").priority(9),
            NewJob::new("mine2", "t", "").priority(9),
            NewJob::new("done", "t", "").priority(9),
            NewJob::new("theirs", "t", "").priority(5),
            NewJob::new("free", "t", "").run_at(T0 + 100 * SEC),
            NewJob::new("taken", "u", ""),
        ],
        T0,
    )
    .await;
    assert_eq!(claim(s, "t", 3, OWNER, T0).await.len(), 3);
    s.release_all(
        &ids(&["done"]),
        OWNER,
        &Release::Archive(JobResult::from_status(200)),
        T0,
    )
    .await
    .unwrap();
    assert_eq!(
        job_ids(&claim(&*c.peer, "t", 1, OTHER, T0).await),
        ids(&["theirs"])
    );
    s.claim_jobs("u", 1, OWNER, Duration::from_secs(1), T0)
        .await
        .unwrap();
    assert_eq!(
        job_ids(&claim(&*c.peer, "u", 1, OTHER, T0 + 2 * SEC).await),
        ids(&["taken"]),
        "OWNER's lease on taken ran out and OTHER took it"
    );
    let untouched = ["theirs", "taken", "free", "done"];
    let before: Vec<Job> = futures::future::join_all(untouched.map(|i| get(s, i))).await;
    let now = T0 + 3 * SEC;
    let releases = vec![
        JobRelease::new("theirs", Release::Delete),
        JobRelease::new("mine1", Release::Archive(JobResult::from_status(201))),
        JobRelease::new("taken", Release::Archive(JobResult::from_status(500))),
        JobRelease::new(
            "free",
            Release::Retry {
                delay: Duration::ZERO,
            },
        ),
        JobRelease::new("missing", Release::Delete),
        JobRelease::new("done", Release::Unget),
        JobRelease::new(
            "mine2",
            Release::Retry {
                delay: Duration::from_secs(10),
            },
        ),
    ];
    let released = s.release_jobs(&releases, OWNER, now).await.unwrap();
    assert_eq!(sorted(released), ids(&["mine1", "mine2"]));
    let after: Vec<Job> = futures::future::join_all(untouched.map(|i| get(s, i))).await;
    assert_eq!(after, before);
    assert_eq!(s.get_job("missing").await.unwrap(), None);
    let mine1 = get(s, "mine1").await;
    assert_eq!(
        (mine1.lock.as_str(), mine1.result),
        (LOCK_DONE, Some(JobResult::from_status(201)))
    );
    let mine2 = get(s, "mine2").await;
    assert_eq!((mine2.lock.as_str(), mine2.dt), (LOCK_FREE, now + 10 * SEC));
    // The same list from the other owner applies exactly its own entries.
    let theirs = c.peer.release_jobs(&releases, OTHER, now).await.unwrap();
    assert_eq!(sorted(theirs), ids(&["taken", "theirs"]));
    assert_eq!(s.get_job("theirs").await.unwrap(), None);
    assert_eq!(
        get(s, "taken").await.result,
        Some(JobResult::from_status(500))
    );
}

/// An id twice in one list of releases is invalid input, whether its two
/// entries agree or not, and nothing is released.
pub async fn release_per_job_duplicate_id_rejected(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 2, T0).await;
    let got = job_ids(&claim(s, "t", 2, OWNER, T0).await);
    let before: Vec<Job> = futures::future::join_all(got.iter().map(|i| get(s, i))).await;
    let (a, b) = (got[0].clone(), got[1].clone());
    for list in [
        vec![
            JobRelease::new(a.clone(), Release::Archive(JobResult::from_status(200))),
            JobRelease::new(b.clone(), Release::Unget),
            JobRelease::new(a.clone(), Release::Delete),
        ],
        vec![
            JobRelease::new(b.clone(), Release::Unget),
            JobRelease::new(b.clone(), Release::Unget),
        ],
    ] {
        assert_kind(
            s.release_jobs(&list, OWNER, T0 + 1).await,
            ErrorKind::InvalidInput,
            "repeated id",
        );
    }
    let after: Vec<Job> = futures::future::join_all(got.iter().map(|i| get(s, i))).await;
    assert_eq!(after, before);
}

/// Result output over `MAX_OUTPUT` in one entry is `TooLarge`, and no entry
/// of the list is released; without it the rest goes through.
pub async fn release_per_job_output_too_large_releases_nothing(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 3, T0).await;
    let got = job_ids(&claim(s, "t", 3, OWNER, T0).await);
    let before: Vec<Job> = futures::future::join_all(got.iter().map(|i| get(s, i))).await;
    let fits = JobResult::from_status(200).with_output(vec![b'o'; MAX_OUTPUT]);
    let mut too_big = JobResult::from_status(500);
    too_big.output = vec![b'x'; MAX_OUTPUT + 1];
    let mut list = vec![
        JobRelease::new(got[0].clone(), Release::Archive(fits.clone())),
        JobRelease::new(got[1].clone(), Release::Archive(too_big)),
        JobRelease::new(got[2].clone(), Release::Unget),
    ];
    assert_kind(
        s.release_jobs(&list, OWNER, T0 + 1).await,
        ErrorKind::TooLarge,
        "one output over MAX_OUTPUT",
    );
    let after: Vec<Job> = futures::future::join_all(got.iter().map(|i| get(s, i))).await;
    assert_eq!(after, before, "nothing released");
    list.remove(1);
    let released = s.release_jobs(&list, OWNER, T0 + 1).await.unwrap();
    assert_eq!(
        sorted(released),
        sorted(vec![got[0].clone(), got[2].clone()])
    );
    assert_eq!(get(s, &got[0]).await.result, Some(fits));
    assert_eq!(get(s, &got[1]).await.lock, OWNER);
}

/// A retry delay over `MAX_DELAY` in one entry is invalid input, and no
/// entry of the list is released.
pub async fn release_per_job_delay_too_long_releases_nothing(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 2, T0).await;
    let got = job_ids(&claim(s, "t", 2, OWNER, T0).await);
    let before: Vec<Job> = futures::future::join_all(got.iter().map(|i| get(s, i))).await;
    let list = vec![
        JobRelease::new(got[0].clone(), Release::Retry { delay: MAX_DELAY }),
        JobRelease::new(
            got[1].clone(),
            Release::Retry {
                delay: MAX_DELAY + Duration::from_millis(1),
            },
        ),
    ];
    assert_kind(
        s.release_jobs(&list, OWNER, T0 + 1).await,
        ErrorKind::InvalidInput,
        "one delay over MAX_DELAY",
    );
    let after: Vec<Job> = futures::future::join_all(got.iter().map(|i| get(s, i))).await;
    assert_eq!(after, before, "nothing released");
    let released = s.release_jobs(&list[..1], OWNER, T0 + 1).await.unwrap();
    assert_eq!(released, vec![got[0].clone()]);
    assert_eq!(
        get(s, &got[0]).await.dt,
        T0 + 1 + duration_ms(MAX_DELAY),
        "the longest delay is kept exactly"
    );
}

/// `MAX_BATCH` entries over two jobtypes, each with its own outcome (as
/// many different results and delays as entries), in one call.
pub async fn release_per_job_max_batch(c: Ctx) {
    let s = &*c.store;
    let jobtype = |i: usize| {
        if i.is_multiple_of(2) {
            "bulk-a"
        } else {
            "bulk-b"
        }
    };
    let jobs: Vec<NewJob> = (0..MAX_BATCH)
        .map(|i| NewJob::new(format!("j{i:05}"), jobtype(i), vec![b'x'; 8]))
        .collect();
    s.add_jobs(&jobs, T0).await.unwrap();
    let mut claimed = 0;
    for t in ["bulk-a", "bulk-b"] {
        loop {
            let got = claim(s, t, MAX_CLAIM, OWNER, T0).await.len();
            claimed += got;
            if got < MAX_CLAIM {
                break;
            }
        }
    }
    assert_eq!(claimed, MAX_BATCH);
    let now = T0 + SEC;
    let how = |i: usize| match i % 4 {
        0 => Release::Archive(
            JobResult::from_status(200 + (i % 100) as u16).with_output(format!("out {i}").into()),
        ),
        1 => Release::Retry {
            delay: Duration::from_millis(i as u64),
        },
        2 => Release::Unget,
        _ => Release::Delete,
    };
    let releases: Vec<JobRelease> = (0..MAX_BATCH)
        .rev()
        .map(|i| JobRelease::new(format!("j{i:05}"), how(i)))
        .collect();
    let released = s.release_jobs(&releases, OWNER, now).await.unwrap();
    assert_eq!(released.len(), MAX_BATCH);
    for i in [
        0, 1, 2, 3, 4, 5, 6, 7, 4_998, 4_999, 9_996, 9_997, 9_998, 9_999,
    ] {
        let id = format!("j{i:05}");
        match how(i) {
            Release::Archive(result) => {
                let j = get(s, &id).await;
                assert_eq!(
                    (j.lock.as_str(), j.result),
                    (LOCK_DONE, Some(result)),
                    "{id}"
                );
            }
            Release::Retry { delay } => {
                let j = get(s, &id).await;
                assert_eq!(
                    (j.lock.as_str(), j.dt, j.attempts),
                    (LOCK_FREE, now + duration_ms(delay), 1),
                    "{id}"
                );
            }
            Release::Unget => {
                let j = get(s, &id).await;
                assert_eq!(
                    (j.lock.as_str(), j.dt, j.attempts),
                    (LOCK_FREE, now, 0),
                    "{id}"
                );
            }
            Release::Delete => assert_eq!(s.get_job(&id).await.unwrap(), None, "{id}"),
            Release::Repeat { .. } => unreachable!("the list has no repeats"),
        }
    }
    let quarter = (MAX_BATCH / 4) as u64;
    let mut total = JobCounts::default();
    for t in ["bulk-a", "bulk-b"] {
        let c = counts_of(s, t, now).await;
        total.waiting += c.waiting;
        total.scheduled += c.scheduled;
        total.running += c.running;
        for (code, n) in c.archived {
            *total.archived.entry(code).or_default() += n;
        }
    }
    assert_eq!(
        (total.waiting, total.scheduled, total.running),
        (quarter, quarter, 0)
    );
    assert_eq!(total.archived, archived(&[(ResultCode::Ok, quarter)]));
    let due = now + MAX_BATCH as Millis;
    let waiting: u64 =
        futures::future::join_all(["bulk-a", "bulk-b"].map(|t| counts_of(s, t, due)))
            .await
            .iter()
            .map(|c| c.waiting)
            .sum();
    assert_eq!(waiting, 2 * quarter, "every retry is due by then");
}

// -------------------------------------------------------------- update data

/// The owner replaces the payload, and the next run sees it.
pub async fn update_data_by_owner(c: Ctx) {
    let s = &*c.store;
    add(s, vec![NewJob::new("j", "t", "v1")], T0).await;
    claim(s, "t", 1, OWNER, T0).await;
    assert!(
        s.update_data("j", OWNER, b"v2\x00progress", T0 + 1)
            .await
            .unwrap()
    );
    assert_eq!(get(s, "j").await.data, b"v2\x00progress");
    s.release_all(
        &ids(&["j"]),
        OWNER,
        &Release::Retry {
            delay: Duration::ZERO,
        },
        T0 + 2,
    )
    .await
    .unwrap();
    assert_eq!(
        claim(s, "t", 1, OTHER, T0 + 2).await[0].data,
        b"v2\x00progress"
    );
}

/// Non-owners, free jobs, archived jobs and unknown ids: no change, `false`.
pub async fn update_data_by_non_owner_changes_nothing(c: Ctx) {
    let s = &*c.store;
    add(
        s,
        vec![
            NewJob::new("run", "t", "orig"),
            NewJob::new("done", "t", "orig"),
        ],
        T0,
    )
    .await;
    claim(s, "t", 2, OWNER, T0).await;
    s.release_all(
        &ids(&["done"]),
        OWNER,
        &Release::Archive(JobResult::from_status(200)),
        T0,
    )
    .await
    .unwrap();
    add(s, vec![NewJob::new("free", "t", "orig")], T0).await;
    assert!(!s.update_data("run", OTHER, b"x", T0).await.unwrap());
    assert!(!s.update_data("done", OWNER, b"x", T0).await.unwrap());
    assert!(!s.update_data("free", OWNER, b"x", T0).await.unwrap());
    assert!(!s.update_data("missing", OWNER, b"x", T0).await.unwrap());
    for id in ["run", "done", "free"] {
        assert_eq!(get(s, id).await.data, b"orig", "{id}");
    }
}

// ------------------------------------------------------------------- cancel

/// Waiting and scheduled jobs are archived as `cancelled`.
pub async fn cancel_waiting_and_scheduled(c: Ctx) {
    let s = &*c.store;
    add(
        s,
        vec![
            NewJob::new("now", "t", ""),
            NewJob::new("later", "t", "").run_at(T0 + 99 * SEC),
        ],
        T0,
    )
    .await;
    let got = s
        .cancel_jobs(&ids(&["now", "later"]), T0 + 5)
        .await
        .unwrap()
        .cancelled;
    assert_eq!(sorted(got), ids(&["later", "now"]));
    // Neither waits any more, before and after the time "later" was due.
    for at in [T0 + 5, T0 + 100 * SEC] {
        let counts = counts_of(s, "t", at).await;
        assert_eq!(
            (counts.waiting, counts.scheduled, counts.running),
            (0, 0, 0),
            "at {at}: {counts:?}"
        );
        assert!(s.waiting_jobtypes(at).await.unwrap().is_empty(), "at {at}");
    }
    for id in ["now", "later"] {
        let j = get(s, id).await;
        assert_eq!(j.lock, LOCK_DONE);
        assert_eq!(j.done_dt, Some(T0 + 5));
        assert_eq!(j.dt, T0 + 5 + ARCHIVE_HORIZON_MS);
        assert_eq!(j.result, Some(JobResult::cancelled()));
    }
    assert!(claim(s, "t", 5, OWNER, T0 + 100 * SEC).await.is_empty());
    assert_eq!(
        counts_of(s, "t", T0).await.archived,
        archived(&[(ResultCode::Cancelled, 2)])
    );
    // A cancel of a single job counts it too.
    add(s, vec![NewJob::new("one", "t", "")], T0).await;
    assert_eq!(
        s.cancel_jobs(&ids(&["one"]), T0 + 6)
            .await
            .unwrap()
            .cancelled,
        ids(&["one"])
    );
    assert_eq!(
        counts_of(s, "t", T0 + 6).await.archived,
        archived(&[(ResultCode::Cancelled, 3)])
    );
}

/// Running, expired and archived jobs are untouched by cancel; unknown ids
/// are ignored.
pub async fn cancel_leaves_locked_and_archived(c: Ctx) {
    let s = &*c.store;
    add(
        s,
        vec![
            NewJob::new("run", "t", "").priority(3),
            NewJob::new("done", "t", "").priority(2),
        ],
        T0,
    )
    .await;
    add(s, vec![NewJob::new("exp", "t", "").priority(1)], T0).await;
    claim(s, "t", 3, OWNER, T0).await;
    s.release_all(
        &ids(&["done"]),
        OWNER,
        &Release::Archive(JobResult::from_status(200)),
        T0,
    )
    .await
    .unwrap();
    s.renew_locks(&ids(&["run"]), OWNER, Duration::from_secs(3600), T0)
        .await
        .unwrap();
    let now = T0 + 120 * SEC; // "exp" has expired by now, "run" has not
    let before: Vec<Job> =
        futures::future::join_all(["run", "done", "exp"].map(|i| get(s, i))).await;
    let got = s
        .cancel_jobs(&ids(&["run", "done", "exp", "missing"]), now)
        .await
        .unwrap();
    assert!(got.cancelled.is_empty(), "cancelled {got:?}");
    let after: Vec<Job> =
        futures::future::join_all(["run", "done", "exp"].map(|i| get(s, i))).await;
    // Locked jobs are only marked (when the store marks them): nothing
    // else about them changes, and the archived job is untouched.
    let marks = s.capabilities().cancel_running;
    let want_marked: Vec<String> = if marks { ids(&["exp", "run"]) } else { vec![] };
    assert_eq!(sorted(got.marked.clone()), want_marked);
    let want: Vec<Job> = before
        .into_iter()
        .map(|j| {
            if marks && j.lock == OWNER {
                let ev = JobEvent::new(now, "", j.attempts, EventKind::CancelRequested);
                let marked = Job {
                    cancel_requested: true,
                    ..j
                };
                with_event(s, marked, ev)
            } else {
                j
            }
        })
        .collect();
    assert_eq!(after, want);
}

// -------------------------------------------------------------------- purge

/// Purge deletes archived jobs with `done_dt < before`, and nothing else.
pub async fn purge_archived_by_age(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 4, T0).await;
    let got = job_ids(&claim(s, "t", 3, OWNER, T0).await);
    let ok = Release::Archive(JobResult::from_status(200));
    s.release_all(&got[0..1], OWNER, &ok, T0 + 10)
        .await
        .unwrap();
    s.release_all(&got[1..2], OWNER, &ok, T0 + 20)
        .await
        .unwrap();
    s.cancel_jobs(&ids(&["t-000003"]), T0 + 30).await.unwrap();
    assert_eq!(
        s.purge_archived(T0 + 10, &ResultCode::ALL).await.unwrap(),
        0
    );
    assert_eq!(
        s.purge_archived(T0 + 11, &ResultCode::ALL).await.unwrap(),
        1
    );
    assert_eq!(s.get_job(&got[0]).await.unwrap(), None);
    assert!(s.get_job(&got[1]).await.unwrap().is_some());
    assert_eq!(
        s.purge_archived(T0 + 1_000_000, &ResultCode::ALL)
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        get(s, &got[2]).await.lock,
        OWNER,
        "running job survives purge"
    );
    let counts = counts_of(s, "t", T0 + 40).await;
    assert_eq!((counts.running, counts.archived.len()), (1, 0));
}

/// The status each code is archived with below (any status goes with any
/// code; these are the usual ones).
fn status_of(code: ResultCode) -> u16 {
    match code {
        ResultCode::Ok => 200,
        ResultCode::Failed => 400,
        ResultCode::Retry => 100,
        ResultCode::Error => 500,
        ResultCode::Cancelled => 0,
        ResultCode::Timeout => 504,
    }
}

/// Jobs of jobtype `t` archived with each of the six codes, one done at
/// `T0` and one at `T0 + 2 * SEC` per code (`old-<code>`, `new-<code>`):
/// cancelled ones by `cancel_jobs`, the others by an archive release with
/// that code. Returns every job as stored.
async fn archive_every_code_twice(s: &dyn JobStore) -> HashMap<String, Job> {
    let name = |age: &str, code: ResultCode| format!("{age}-{code}");
    let jobs: Vec<NewJob> = ["old", "new"]
        .iter()
        .flat_map(|age| ResultCode::ALL.map(|c| NewJob::new(name(age, c), "t", "x")))
        .collect();
    assert_eq!(add(s, jobs, T0).await.new.len(), 12);
    for (age, now) in [("old", T0), ("new", T0 + 2 * SEC)] {
        let cancelled = s
            .cancel_jobs(&[name(age, ResultCode::Cancelled)], now)
            .await
            .unwrap()
            .cancelled;
        assert_eq!(cancelled.len(), 1, "{age}: cancelled");
    }
    assert_eq!(claim(s, "t", 20, OWNER, T0).await.len(), 10);
    for (age, now) in [("old", T0), ("new", T0 + 2 * SEC)] {
        let list: Vec<JobRelease> = ResultCode::ALL
            .into_iter()
            .filter(|c| *c != ResultCode::Cancelled)
            .map(|c| {
                let result = JobResult::new(c, status_of(c)).with_output(c.as_str().into());
                JobRelease::new(name(age, c), Release::Archive(result))
            })
            .collect();
        let done = s.release_jobs(&list, OWNER, now).await.unwrap();
        assert_eq!(done.len(), 5, "{age}: archived");
    }
    let mut all = HashMap::new();
    for age in ["old", "new"] {
        for c in ResultCode::ALL {
            let job = get(s, &name(age, c)).await;
            assert_eq!(job.result.as_ref().map(|r| r.code), Some(c), "{}", job.id);
            all.insert(job.id.clone(), job);
        }
    }
    all
}

/// Checks that exactly `gone` of `jobs` are gone, that every other one
/// reads back as it was, and that the archived counts of jobtype `t` are
/// those of what is left.
async fn assert_purged(s: &dyn JobStore, jobs: &HashMap<String, Job>, gone: &[&str], what: &str) {
    let mut left: std::collections::BTreeMap<ResultCode, u64> = Default::default();
    for (id, job) in jobs {
        let now = s.get_job(id).await.unwrap();
        if gone.contains(&id.as_str()) {
            assert_eq!(now, None, "{what}: {id} purged");
        } else {
            assert_eq!(now.as_ref(), Some(job), "{what}: {id} untouched");
            *left.entry(job.result.as_ref().unwrap().code).or_default() += 1;
        }
    }
    let counts = s.job_counts(T0 + 3 * SEC).await.unwrap();
    if left.is_empty() {
        assert_eq!(counts, vec![], "{what}: counts");
    } else {
        let want = JobCounts {
            jobtype: "t".into(),
            archived: left,
            ..JobCounts::default()
        };
        assert_eq!(counts, vec![want], "{what}: counts");
    }
}

/// A purge by code deletes exactly the archived jobs done before the
/// cutoff whose code it names: with jobs of all six codes archived before
/// and after the cutoff, a purge of some codes takes those codes' old
/// jobs and leaves every other job as it was (read back and counted); a
/// code named twice counts once; a purge again takes nothing more; the
/// other codes, then a later cutoff, take the rest, and a code whose
/// jobs are all purged leaves the counts.
pub async fn purge_archived_by_code(c: Ctx) {
    use ResultCode::*;
    let s = &*c.store;
    let jobs = archive_every_code_twice(s).await;
    let cutoff = T0 + SEC;
    assert_purged(s, &jobs, &[], "nothing yet").await;

    let some = [Ok, Failed, Cancelled, Ok];
    assert_eq!(s.purge_archived(cutoff, &some).await.unwrap(), 3);
    let mut gone = vec!["old-ok", "old-failed", "old-cancelled"];
    assert_purged(s, &jobs, &gone, "ok, failed, cancelled").await;
    assert_eq!(s.purge_archived(cutoff, &some).await.unwrap(), 0);
    assert_purged(s, &jobs, &gone, "the same again").await;

    assert_eq!(
        s.purge_archived(cutoff, &[Timeout, Retry, Error])
            .await
            .unwrap(),
        3
    );
    gone.extend(["old-retry", "old-error", "old-timeout"]);
    assert_purged(s, &jobs, &gone, "the other codes").await;

    let later = T0 + 2 * SEC + 1;
    assert_eq!(s.purge_archived(later, &[Timeout]).await.unwrap(), 1);
    gone.push("new-timeout");
    assert_purged(s, &jobs, &gone, "timeout after the cutoff").await;
    assert_eq!(s.purge_archived(later, &ResultCode::ALL).await.unwrap(), 5);
    gone.extend([
        "new-ok",
        "new-failed",
        "new-retry",
        "new-error",
        "new-cancelled",
    ]);
    assert_purged(s, &jobs, &gone, "every code").await;
}

/// A purge of no codes purges nothing, however old the archived jobs.
pub async fn purge_with_no_codes_purges_nothing(c: Ctx) {
    let s = &*c.store;
    let jobs = archive_every_code_twice(s).await;
    assert_eq!(s.purge_archived(MAX_TIME, &[]).await.unwrap(), 0);
    assert_purged(s, &jobs, &[], "no codes").await;
}

/// A purge racing archives of the code it purges (on another handle)
/// leaves no job half done: every job is either gone, as if deleted, or
/// archived whole, and counted exactly when it is there; the purges'
/// counts add up to the jobs gone; jobs of a code not purged all stay;
/// and a purged id added again is a new job.
pub async fn purge_racing_archives_leaves_no_job_half_done(c: Ctx) {
    let (s, peer) = (c.store.clone(), c.peer.clone());
    let n = 120;
    let all = add_n(&*s, "t", n, T0).await;
    let mut claimed = 0;
    while claimed < n {
        claimed += claim(&*s, "t", n - claimed, OWNER, T0).await.len();
    }
    // Chunks of 10 archived one after the other, alternately ok and error.
    let code = |i: usize| {
        if (i / 10).is_multiple_of(2) {
            ResultCode::Ok
        } else {
            ResultCode::Error
        }
    };
    let archiver = tokio::spawn({
        let all = all.clone();
        async move {
            for (k, chunk) in all.chunks(10).enumerate() {
                let c = code(k * 10);
                let how = Release::Archive(JobResult::new(c, status_of(c)));
                let done = peer.release_all(chunk, OWNER, &how, T0 + 1 + k as Millis);
                assert_eq!(done.await.unwrap().len(), chunk.len());
            }
        }
    });
    let cutoff = T0 + 1_000;
    let mut purged = 0;
    while !archiver.is_finished() {
        purged += s.purge_archived(cutoff, &[ResultCode::Ok]).await.unwrap();
    }
    archiver.await.unwrap();
    let mut left_ok = 0;
    for (i, id) in all.iter().enumerate() {
        match (s.get_job(id).await.unwrap(), code(i)) {
            (None, ResultCode::Ok) => {}
            (Some(job), c) => {
                assert_eq!(job.lock, LOCK_DONE, "{id}");
                assert_eq!(job.result, Some(JobResult::new(c, status_of(c))), "{id}");
                assert!(job.done_dt.is_some_and(|d| d < cutoff), "{id}");
                left_ok += u64::from(c == ResultCode::Ok);
            }
            (None, c) => panic!("{id} of code {c} purged"),
        }
    }
    let oks = (0..n).filter(|i| code(*i) == ResultCode::Ok).count() as u64;
    assert_eq!(purged + left_ok, oks, "purged {purged}, {left_ok} ok left");
    let mut want = archived(&[(ResultCode::Error, n as u64 - oks)]);
    if left_ok > 0 {
        want.insert(ResultCode::Ok, left_ok);
    }
    assert_eq!(counts_of(&*s, "t", cutoff).await.archived, want);
    assert_eq!(
        s.purge_archived(cutoff, &[ResultCode::Ok]).await.unwrap(),
        left_ok
    );
    assert_eq!(
        counts_of(&*s, "t", cutoff).await.archived,
        archived(&[(ResultCode::Error, n as u64 - oks)])
    );
    let out = add(&*s, vec![NewJob::new(&all[0], "t", "again")], cutoff).await;
    assert_eq!(out.new, vec![all[0].clone()]);
    let job = get(&*s, &all[0]).await;
    assert_eq!((job.attempts, job.done_dt, job.result), (0, None, None));
}

// ------------------------------------------------------------ counts, types

/// Waiting jobtypes list each jobtype with eligible jobs and their count:
/// waiting and expired count; scheduled, running and archived do not.
pub async fn waiting_jobtypes_counts(c: Ctx) {
    let s = &*c.store;
    add_n(s, "alpha", 5, T0).await;
    add_n(s, "beta", 2, T0).await;
    add(
        s,
        vec![NewJob::new("sched", "gamma", "").run_at(T0 + 1000 * SEC)],
        T0,
    )
    .await;
    claim(s, "beta", 2, OWNER, T0).await; // running until T0 + 60 s
    let got = claim(s, "alpha", 1, OWNER, T0).await;
    s.release_all(
        &job_ids(&got),
        OWNER,
        &Release::Archive(JobResult::from_status(200)),
        T0,
    )
    .await
    .unwrap();
    let mut w = s.waiting_jobtypes(T0 + 1).await.unwrap();
    w.sort_by(|a, b| a.jobtype.cmp(&b.jobtype));
    let cap = s.capabilities().waiting_count_cap.unwrap_or(u64::MAX);
    assert_eq!(
        w,
        vec![WaitingJobtype {
            jobtype: "alpha".into(),
            count: 4.min(cap)
        }]
    );
    let mut w = s.waiting_jobtypes(T0 + 60 * SEC).await.unwrap();
    w.sort_by(|a, b| a.jobtype.cmp(&b.jobtype));
    assert_eq!(
        w,
        vec![
            WaitingJobtype {
                jobtype: "alpha".into(),
                count: 4.min(cap)
            },
            WaitingJobtype {
                jobtype: "beta".into(),
                count: 2.min(cap)
            },
        ]
    );
}

/// Every jobtype with eligible jobs is listed, however its jobs are spread
/// between waiting and expired ones: here three jobtypes whose only jobs
/// are expired (one between the other two), and one whose only job is
/// waiting.
pub async fn waiting_jobtypes_with_only_expired_jobs(c: Ctx) {
    let s = &*c.store;
    add_n(s, "a", 2, T0).await;
    add_n(s, "b", 1, T0).await;
    add_n(s, "c", 3, T0).await;
    add_n(s, "d", 1, T0).await;
    claim(s, "a", 2, OWNER, T0).await; // leases run out at T0 + 60 s
    claim(s, "c", 3, OWNER, T0).await;
    claim(s, "d", 1, OWNER, T0).await;
    let mut w = s.waiting_jobtypes(T0 + 60 * SEC).await.unwrap();
    w.sort_by(|a, b| a.jobtype.cmp(&b.jobtype));
    let cap = s.capabilities().waiting_count_cap.unwrap_or(u64::MAX);
    let listed: Vec<(&str, u64)> = w.iter().map(|t| (t.jobtype.as_str(), t.count)).collect();
    assert_eq!(
        listed,
        vec![
            ("a", 2.min(cap)),
            ("b", 1.min(cap)),
            ("c", 3.min(cap)),
            ("d", 1.min(cap))
        ]
    );
}

/// An empty store has no waiting jobtypes and no counts.
pub async fn empty_store_has_no_counts(c: Ctx) {
    assert!(c.store.waiting_jobtypes(T0).await.unwrap().is_empty());
    assert!(c.store.job_counts(T0).await.unwrap().is_empty());
}

/// Counts above the declared cap are capped, never over-reported; below it
/// they are exact. Waiting and expired jobs count together.
pub async fn waiting_count_cap_respected(c: Ctx) {
    let s = &*c.store;
    let n = 1_500;
    add_n(s, "many", n, T0).await;
    let w = s.waiting_jobtypes(T0).await.unwrap();
    let expected = match s.capabilities().waiting_count_cap {
        Some(cap) => (n as u64).min(cap),
        None => n as u64,
    };
    assert_eq!(
        w,
        vec![WaitingJobtype {
            jobtype: "many".into(),
            count: expected
        }]
    );
    // Expired jobs count beside waiting ones, under the same cap.
    let ten = Duration::from_secs(10);
    let got = s
        .claim_jobs("many", MAX_CLAIM, OWNER, ten, T0)
        .await
        .unwrap();
    assert_eq!(got.len(), MAX_CLAIM);
    let w = s.waiting_jobtypes(T0 + 10 * SEC).await.unwrap();
    assert_eq!(
        w,
        vec![WaitingJobtype {
            jobtype: "many".into(),
            count: expected
        }],
        "{} waiting and {MAX_CLAIM} expired",
        n - MAX_CLAIM
    );
}

/// Job counts per jobtype by state, archived ones by result code.
pub async fn job_counts_by_state(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 6, T0).await;
    add(
        s,
        vec![NewJob::new("sched", "t", "").run_at(T0 + 1000 * SEC)],
        T0,
    )
    .await;
    add_n(s, "u", 1, T0).await;
    let got = job_ids(&claim(s, "t", 4, OWNER, T0).await);
    archive_as(s, &got[0..1], 200, T0).await;
    archive_as(s, &got[1..2], 500, T0).await;
    s.renew_locks(&got[2..3], OWNER, Duration::from_secs(3600), T0)
        .await
        .unwrap();
    // got[3] expires at T0 + 60 s
    let mut counts = s.job_counts(T0 + 100 * SEC).await.unwrap();
    counts.sort_by(|a, b| a.jobtype.cmp(&b.jobtype));
    assert_eq!(
        counts,
        vec![
            JobCounts {
                jobtype: "t".into(),
                waiting: 3,
                scheduled: 1,
                running: 1,
                blocked: 0,
                archived: archived(&[(ResultCode::Ok, 1), (ResultCode::Error, 1)]),
            },
            JobCounts {
                jobtype: "u".into(),
                waiting: 1,
                ..JobCounts::default()
            },
        ]
    );
}

/// A held job counts as running until the instant its lease ends, and as
/// waiting from that instant on, as a claim at that instant would take it.
pub async fn a_lease_ends_in_the_counts_at_its_expiry(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 1, T0).await;
    let got = claim(s, "t", 1, OWNER, T0).await;
    let until = got[0].dt;
    let state = |c: &[JobCounts]| (c[0].waiting, c[0].running);
    assert_eq!(state(&s.job_counts(until - 1).await.unwrap()), (0, 1));
    assert_eq!(state(&s.job_counts(until).await.unwrap()), (1, 0));
    let waiting = s.waiting_jobtypes(until).await.unwrap();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert_eq!(claim(s, "t", 1, "other", until).await.len(), 1);
}

/// A result code whose archived jobs are all purged is absent from the
/// counts (not there with 0), while the jobtype's other jobs still count.
pub async fn purged_result_codes_leave_the_counts(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 3, T0).await;
    let got = job_ids(&claim(s, "t", 2, OWNER, T0).await);
    archive_as(s, &got[0..1], 200, T0).await;
    archive_as(s, &got[1..2], 500, T0 + SEC).await;
    assert_eq!(s.purge_archived(T0 + 1, &ResultCode::ALL).await.unwrap(), 1);
    let expected = JobCounts {
        jobtype: "t".into(),
        waiting: 1,
        archived: archived(&[(ResultCode::Error, 1)]),
        ..JobCounts::default()
    };
    assert_eq!(s.job_counts(T0 + 2 * SEC).await.unwrap(), vec![expected]);
    assert_eq!(
        s.purge_archived(T0 + 2 * SEC, &ResultCode::ALL)
            .await
            .unwrap(),
        1
    );
    let expected = JobCounts {
        jobtype: "t".into(),
        waiting: 1,
        ..JobCounts::default()
    };
    assert_eq!(s.job_counts(T0 + 2 * SEC).await.unwrap(), vec![expected]);
}

/// A purged job is gone as if deleted: nothing of it is left behind. Two
/// purged at once with one result code take two from its count, and a
/// purged id added again is a new job, which keeps none of the old one's
/// result, output or attempts, even once it is archived itself.
pub async fn purged_jobs_leave_nothing_behind(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 4, T0).await;
    let got = job_ids(&claim(s, "t", 4, OWNER, T0).await);
    let failed = JobResult::from_status(500).with_output(b"first run".to_vec());
    let failed = Release::Archive(failed);
    s.release_all(&got[0..1], OWNER, &failed, T0).await.unwrap();
    archive_as(s, &got[1..3], 200, T0).await;
    archive_as(s, &got[3..4], 200, T0 + SEC).await;
    assert_eq!(s.purge_archived(T0 + 1, &ResultCode::ALL).await.unwrap(), 3);
    let expected = JobCounts {
        jobtype: "t".into(),
        archived: archived(&[(ResultCode::Ok, 1)]),
        ..JobCounts::default()
    };
    assert_eq!(s.job_counts(T0 + SEC).await.unwrap(), vec![expected]);
    let again = 2 * SEC + T0;
    let out = add(s, vec![NewJob::new(&got[0], "t", "again")], again).await;
    assert_eq!(out.new, vec![got[0].clone()]);
    let job = get(s, &got[0]).await;
    assert_eq!(
        (job.data.as_slice(), job.attempts, job.done_dt, job.result),
        (&b"again"[..], 0, None, None)
    );
    assert_eq!(job_ids(&claim(s, "t", 1, OWNER, again).await), &got[0..1]);
    archive_as(s, &got[0..1], 200, again).await;
    let job = get(s, &got[0]).await;
    assert_eq!(
        (job.attempts, job.done_dt, job.result),
        (1, Some(again), Some(JobResult::from_status(200)))
    );
}

/// Only jobtypes that hold a job are counted: one whose jobs were all
/// deleted, or all purged, is absent, however it was counted before.
pub async fn jobtypes_with_no_jobs_left_are_not_counted(c: Ctx) {
    let s = &*c.store;
    for jobtype in ["deleted", "purged", "kept"] {
        add_n(s, jobtype, 1, T0).await;
    }
    let deleted = job_ids(&claim(s, "deleted", 1, OWNER, T0).await);
    let purged = job_ids(&claim(s, "purged", 1, OWNER, T0).await);
    assert_eq!(s.job_counts(T0).await.unwrap().len(), 3);
    let done = s.release_all(&deleted, OWNER, &Release::Delete, T0).await;
    assert_eq!(done.unwrap(), deleted);
    archive_as(s, &purged, 200, T0).await;
    assert_eq!(s.purge_archived(T0 + 1, &ResultCode::ALL).await.unwrap(), 1);
    let expected = JobCounts {
        jobtype: "kept".into(),
        waiting: 1,
        ..JobCounts::default()
    };
    assert_eq!(s.job_counts(T0 + 1).await.unwrap(), vec![expected]);
}

// ----------------------------------------------------------------- handlers

fn full_handler(body: &str) -> Handler {
    Handler {
        method: "process".into(),
        body: body.into(),
        eid: Some("ctx-1".into()),
        before: Some("setup\nmore".into()),
        before_each: Some("".into()),
        after_each: None,
        limits: HandlerLimits::default(),
    }
}

/// Every handler field reads back; the version has an id and `dt = now`.
pub async fn handler_round_trip(c: Ctx) {
    let s = &*c.store;
    let h = full_handler("/usr/bin/env cat");
    let v = s.set_handler("acme-mail", &h, T0).await.unwrap();
    assert!(!v.id.is_empty());
    assert_eq!(
        (v.jobtype.as_str(), v.dt, &v.handler),
        ("acme-mail", T0, &h)
    );
    assert_eq!(s.get_handler("acme-mail").await.unwrap(), Some(v));
    assert_eq!(s.get_handler("other").await.unwrap(), None);
}

/// The newest version wins: greatest `dt`, the last set among equal `dt`.
pub async fn handler_versions_newest_wins(c: Ctx) {
    let s = &*c.store;
    let v1 = s
        .set_handler("t", &Handler::new("process", "v1"), T0)
        .await
        .unwrap();
    let v2 = s
        .set_handler("t", &Handler::new("process", "v2"), T0 + 10)
        .await
        .unwrap();
    assert_ne!(v1.id, v2.id);
    assert_eq!(
        s.get_handler("t").await.unwrap().unwrap().handler.body,
        "v2"
    );
    let v3 = s
        .set_handler("t", &Handler::new("http", "v3"), T0 + 10)
        .await
        .unwrap();
    assert!(v3.id != v1.id && v3.id != v2.id);
    assert_eq!(s.get_handler("t").await.unwrap(), Some(v3.clone()));
    s.set_handler("t", &Handler::new("process", "old"), T0 + 5)
        .await
        .unwrap();
    assert_eq!(s.get_handler("t").await.unwrap(), Some(v3));
}

/// Delete removes every version and says whether any existed.
pub async fn handler_delete_removes_all_versions(c: Ctx) {
    let s = &*c.store;
    s.set_handler("t", &Handler::new("process", "v1"), T0)
        .await
        .unwrap();
    s.set_handler("t", &Handler::new("process", "v2"), T0 + 1)
        .await
        .unwrap();
    s.set_handler("keep", &Handler::new("process", "k"), T0)
        .await
        .unwrap();
    assert!(s.delete_handler("t").await.unwrap());
    assert_eq!(s.get_handler("t").await.unwrap(), None);
    assert!(!s.delete_handler("t").await.unwrap());
    assert!(s.get_handler("keep").await.unwrap().is_some());
    let v = s
        .set_handler("t", &Handler::new("process", "v3"), T0 - 100)
        .await
        .unwrap();
    assert_eq!(
        s.get_handler("t").await.unwrap(),
        Some(v),
        "no old version survives delete"
    );
}

/// The list holds the newest version of each jobtype: greatest `dt`, the
/// last set among equal `dt`.
pub async fn handler_list_newest_per_jobtype(c: Ctx) {
    let s = &*c.store;
    assert!(s.list_handlers().await.unwrap().is_empty());
    s.set_handler("a", &Handler::new("process", "a1"), T0)
        .await
        .unwrap();
    let a2 = s
        .set_handler("a", &Handler::new("process", "a2"), T0 + 1)
        .await
        .unwrap();
    let b1 = s.set_handler("b", &full_handler("b1"), T0).await.unwrap();
    let mut list = s.list_handlers().await.unwrap();
    list.sort_by(|x, y| x.jobtype.cmp(&y.jobtype));
    assert_eq!(list, vec![a2, b1.clone()]);
    let a3 = s
        .set_handler("a", &Handler::new("process", "a3"), T0 + 1)
        .await
        .unwrap();
    let mut list = s.list_handlers().await.unwrap();
    list.sort_by(|x, y| x.jobtype.cmp(&y.jobtype));
    assert_eq!(list, vec![a3, b1]);
}

/// Malformed handlers are invalid input and are not stored.
pub async fn handler_invalid_rejected(c: Ctx) {
    let s = &*c.store;
    for (jobtype, h) in [
        ("t", Handler::new("", "x")),
        ("t", Handler::new("Process", "x")),
        ("t", Handler::new("process", "nul\0byte")),
        ("-bad", Handler::new("process", "x")),
    ] {
        assert_kind(
            s.set_handler(jobtype, &h, T0).await,
            ErrorKind::InvalidInput,
            &format!("{jobtype} {h:?}"),
        );
    }
    assert!(s.list_handlers().await.unwrap().is_empty());
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).expect("bounded duration")
}

/// Limits read back as set: all of them, none, some; each new version's
/// limits replace the previous version's (never merged), and the list shows
/// the newest version's.
pub async fn handler_limits_round_trip(c: Ctx) {
    let s = &*c.store;
    let all = HandlerLimits {
        max_attempts: Some(5),
        max_age_ms: Some(86_400_000),
        time_limit_ms: Some(30_000),
        concurrency: Some(8),
        backoff_base_ms: Some(1_000),
        backoff_max_ms: Some(600_000),
    };
    let v1 = s
        .set_handler("limited", &full_handler("run").limits(all), T0)
        .await
        .unwrap();
    assert_eq!(v1.handler.limits, all);
    assert_eq!(s.get_handler("limited").await.unwrap(), Some(v1));

    let plain = s
        .set_handler("plain", &Handler::new("process", "x"), T0)
        .await
        .unwrap();
    let got = s.get_handler("plain").await.unwrap().unwrap();
    assert_eq!(got.handler.limits, HandlerLimits::default());
    assert_eq!(got, plain);

    let extremes = HandlerLimits {
        max_attempts: Some(MAX_HANDLER_ATTEMPTS),
        max_age_ms: Some(ms(MAX_DELAY)),
        time_limit_ms: Some(ms(MAX_LEASE)),
        concurrency: Some(MAX_HANDLER_CONCURRENCY),
        backoff_base_ms: Some(1),
        backoff_max_ms: Some(ms(MAX_DELAY)),
    };
    let v2 = s
        .set_handler(
            "limited",
            &Handler::new("http", "x").limits(extremes),
            T0 + 1,
        )
        .await
        .unwrap();
    assert_eq!(s.get_handler("limited").await.unwrap(), Some(v2));

    let some = HandlerLimits {
        concurrency: Some(1),
        backoff_max_ms: Some(1),
        ..HandlerLimits::default()
    };
    let v3 = s
        .set_handler(
            "limited",
            &Handler::new("process", "y").limits(some),
            T0 + 2,
        )
        .await
        .unwrap();
    assert_eq!(
        s.get_handler("limited")
            .await
            .unwrap()
            .unwrap()
            .handler
            .limits,
        some,
        "the previous version's limits are not merged in"
    );
    assert_eq!(s.get_handler("limited").await.unwrap(), Some(v3));

    let v4 = s
        .set_handler("limited", &Handler::new("process", "z"), T0 + 3)
        .await
        .unwrap();
    assert!(
        s.get_handler("limited")
            .await
            .unwrap()
            .unwrap()
            .handler
            .limits
            .is_unset(),
        "a version without limits clears them"
    );
    // An older version set late keeps its limits to itself.
    s.set_handler(
        "limited",
        &Handler::new("process", "old").limits(all),
        T0 - 1,
    )
    .await
    .unwrap();
    let mut list = s.list_handlers().await.unwrap();
    list.sort_by(|x, y| x.jobtype.cmp(&y.jobtype));
    assert_eq!(list, vec![v4, plain]);
}

/// The handler a validation case sets, and how setting it must end: `None`
/// stored, else the error kind. Cases sit at and just past each bound.
fn handler_case(case: &str) -> (Handler, Option<ErrorKind>) {
    let invalid = Some(ErrorKind::InvalidInput);
    let too_large = Some(ErrorKind::TooLarge);
    let base = || Handler::new("process", "true");
    let lim = |l: HandlerLimits| base().limits(l);
    let d = HandlerLimits::default;
    let max_delay = ms(MAX_DELAY);
    let max_lease = ms(MAX_LEASE);
    let field = |n: usize| "f".repeat(n);
    match case {
        "lang-32-bytes" => (Handler::new("a".repeat(32), "x"), None),
        "lang-33-bytes" => (Handler::new("a".repeat(33), "x"), invalid),
        "lang-empty" => (Handler::new("", "x"), invalid),
        "lang-uppercase" => (Handler::new("Process", "x"), invalid),
        "lang-dot" => (Handler::new("proc.ess", "x"), invalid),
        "lang-underscore-dash-digit" => (Handler::new("my_run-2", "x"), None),
        "body-at-max" => (Handler::new("process", field(MAX_HANDLER_FIELD)), None),
        "body-one-past" => (
            Handler::new("process", field(MAX_HANDLER_FIELD + 1)),
            too_large,
        ),
        "body-nul" => (Handler::new("process", "a\0b"), invalid),
        "hook-at-max" => (
            Handler {
                before: Some(field(MAX_HANDLER_FIELD)),
                ..base()
            },
            None,
        ),
        "hook-one-past" => (
            Handler {
                after_each: Some(field(MAX_HANDLER_FIELD + 1)),
                ..base()
            },
            too_large,
        ),
        "hook-nul" => (
            Handler {
                before_each: Some("\0".into()),
                ..base()
            },
            invalid,
        ),
        "hooks-at-max" => (
            Handler {
                before_each: Some(field(MAX_HANDLER_FIELD)),
                after_each: Some(field(MAX_HANDLER_FIELD)),
                ..base()
            },
            None,
        ),
        "before-one-past" => (
            Handler {
                before: Some(field(MAX_HANDLER_FIELD + 1)),
                ..base()
            },
            too_large,
        ),
        "before-each-one-past" => (
            Handler {
                before_each: Some(field(MAX_HANDLER_FIELD + 1)),
                ..base()
            },
            too_large,
        ),
        "before-nul" => (
            Handler {
                before: Some("a\0".into()),
                ..base()
            },
            invalid,
        ),
        "after-each-nul" => (
            Handler {
                after_each: Some("\0a".into()),
                ..base()
            },
            invalid,
        ),
        "eid-at-max" => (
            Handler {
                eid: Some("e".repeat(MAX_ID_LEN)),
                ..base()
            },
            None,
        ),
        "eid-one-past" => (
            Handler {
                eid: Some("e".repeat(MAX_ID_LEN + 1)),
                ..base()
            },
            invalid,
        ),
        "eid-empty" => (
            Handler {
                eid: Some(String::new()),
                ..base()
            },
            invalid,
        ),
        "eid-pipe" => (
            Handler {
                eid: Some("a|b".into()),
                ..base()
            },
            invalid,
        ),
        "eid-nul" => (
            Handler {
                eid: Some("a\0b".into()),
                ..base()
            },
            invalid,
        ),
        "max-attempts-1" => (
            lim(HandlerLimits {
                max_attempts: Some(1),
                ..d()
            }),
            None,
        ),
        "max-attempts-0" => (
            lim(HandlerLimits {
                max_attempts: Some(0),
                ..d()
            }),
            invalid,
        ),
        "max-attempts-max" => (
            lim(HandlerLimits {
                max_attempts: Some(MAX_HANDLER_ATTEMPTS),
                ..d()
            }),
            None,
        ),
        "max-attempts-past-max" => (
            lim(HandlerLimits {
                max_attempts: Some(MAX_HANDLER_ATTEMPTS + 1),
                ..d()
            }),
            invalid,
        ),
        "concurrency-1" => (
            lim(HandlerLimits {
                concurrency: Some(1),
                ..d()
            }),
            None,
        ),
        "concurrency-0" => (
            lim(HandlerLimits {
                concurrency: Some(0),
                ..d()
            }),
            invalid,
        ),
        "concurrency-max" => (
            lim(HandlerLimits {
                concurrency: Some(MAX_HANDLER_CONCURRENCY),
                ..d()
            }),
            None,
        ),
        "concurrency-past-max" => (
            lim(HandlerLimits {
                concurrency: Some(MAX_HANDLER_CONCURRENCY + 1),
                ..d()
            }),
            invalid,
        ),
        "max-age-1" => (
            lim(HandlerLimits {
                max_age_ms: Some(1),
                ..d()
            }),
            None,
        ),
        "max-age-0" => (
            lim(HandlerLimits {
                max_age_ms: Some(0),
                ..d()
            }),
            invalid,
        ),
        "max-age-max" => (
            lim(HandlerLimits {
                max_age_ms: Some(max_delay),
                ..d()
            }),
            None,
        ),
        "max-age-past-max" => (
            lim(HandlerLimits {
                max_age_ms: Some(max_delay + 1),
                ..d()
            }),
            invalid,
        ),
        "time-limit-1" => (
            lim(HandlerLimits {
                time_limit_ms: Some(1),
                ..d()
            }),
            None,
        ),
        "time-limit-0" => (
            lim(HandlerLimits {
                time_limit_ms: Some(0),
                ..d()
            }),
            invalid,
        ),
        "time-limit-max" => (
            lim(HandlerLimits {
                time_limit_ms: Some(max_lease),
                ..d()
            }),
            None,
        ),
        "time-limit-past-max" => (
            lim(HandlerLimits {
                time_limit_ms: Some(max_lease + 1),
                ..d()
            }),
            invalid,
        ),
        "backoff-base-1" => (
            lim(HandlerLimits {
                backoff_base_ms: Some(1),
                ..d()
            }),
            None,
        ),
        "backoff-base-0" => (
            lim(HandlerLimits {
                backoff_base_ms: Some(0),
                ..d()
            }),
            invalid,
        ),
        "backoff-base-max" => (
            lim(HandlerLimits {
                backoff_base_ms: Some(max_delay),
                ..d()
            }),
            None,
        ),
        "backoff-base-past-max" => (
            lim(HandlerLimits {
                backoff_base_ms: Some(max_delay + 1),
                ..d()
            }),
            invalid,
        ),
        "backoff-max-1" => (
            lim(HandlerLimits {
                backoff_max_ms: Some(1),
                ..d()
            }),
            None,
        ),
        "backoff-max-0" => (
            lim(HandlerLimits {
                backoff_max_ms: Some(0),
                ..d()
            }),
            invalid,
        ),
        "backoff-max-max" => (
            lim(HandlerLimits {
                backoff_max_ms: Some(max_delay),
                ..d()
            }),
            None,
        ),
        "backoff-max-past-max" => (
            lim(HandlerLimits {
                backoff_max_ms: Some(max_delay + 1),
                ..d()
            }),
            invalid,
        ),
        "backoff-base-equals-max" => (
            lim(HandlerLimits {
                backoff_base_ms: Some(5_000),
                backoff_max_ms: Some(5_000),
                ..d()
            }),
            None,
        ),
        "backoff-base-above-max" => (
            lim(HandlerLimits {
                backoff_base_ms: Some(5_001),
                backoff_max_ms: Some(5_000),
                ..d()
            }),
            invalid,
        ),
        other => panic!("unknown handler case {other}"),
    }
}

/// One handler validation case (see `handler_case`): a valid handler is
/// stored and reads back exactly; an invalid one is rejected with its kind
/// and nothing is stored.
pub async fn handler_validation(c: Ctx, case: &str) {
    let s = &*c.store;
    let (handler, expected) = handler_case(case);
    let r = s.set_handler("t", &handler, T0).await;
    match expected {
        None => {
            let v = r.unwrap_or_else(|e| panic!("{case}: rejected: {e}"));
            assert_eq!(v.handler, handler, "{case}");
            assert_eq!(s.get_handler("t").await.unwrap(), Some(v), "{case}");
        }
        Some(kind) => {
            assert_kind(r, kind, case);
            assert_eq!(s.get_handler("t").await.unwrap(), None, "{case}");
            assert!(s.list_handlers().await.unwrap().is_empty(), "{case}");
        }
    }
}

// ------------------------------------------------------------------- sysids

const TTL: Duration = Duration::from_secs(10);

/// A reserved sysid cannot be reserved again while its lease is valid.
pub async fn sysid_double_reserve_conflicts(c: Ctx) {
    let s = &*c.store;
    let lease = s.reserve_sysid("node-1", TTL, T0).await.unwrap();
    assert_eq!(
        (lease.sysid.as_str(), lease.expires),
        ("node-1", T0 + 10 * SEC)
    );
    assert!(!lease.token.is_empty());
    assert_kind(
        c.peer.reserve_sysid("node-1", TTL, T0 + 9 * SEC).await,
        ErrorKind::Conflict,
        "second reserve",
    );
    let other = s.reserve_sysid("node-2", TTL, T0).await.unwrap();
    assert_ne!(other.token, lease.token);
}

/// An expired sysid lease frees the sysid; the stale lease can then neither
/// renew nor release it.
pub async fn sysid_expiry_frees_and_fences(c: Ctx) {
    let s = &*c.store;
    let old = s.reserve_sysid("node", TTL, T0).await.unwrap();
    let new = c
        .peer
        .reserve_sysid("node", TTL, T0 + 10 * SEC)
        .await
        .unwrap();
    assert_ne!(old.token, new.token);
    assert_kind(
        s.renew_sysid(&old, TTL, T0 + 11 * SEC).await,
        ErrorKind::Conflict,
        "stale renew",
    );
    assert!(!s.release_sysid(&old).await.unwrap());
    let renewed = c.peer.renew_sysid(&new, TTL, T0 + 12 * SEC).await.unwrap();
    assert_eq!(renewed.expires, T0 + 22 * SEC);
}

/// The holder's renewal moves the expiry; reserving before it still fails.
pub async fn sysid_renew_extends(c: Ctx) {
    let s = &*c.store;
    let lease = s.reserve_sysid("node", TTL, T0).await.unwrap();
    let renewed = s
        .renew_sysid(&lease, Duration::from_secs(30), T0 + 5 * SEC)
        .await
        .unwrap();
    assert_eq!(
        (renewed.expires, renewed.token.as_str()),
        (T0 + 35 * SEC, lease.token.as_str())
    );
    assert_kind(
        s.reserve_sysid("node", TTL, T0 + 20 * SEC).await,
        ErrorKind::Conflict,
        "reserve while renewed",
    );
    let late = s.renew_sysid(&renewed, TTL, T0 + 40 * SEC).await.unwrap();
    assert_eq!(
        late.expires,
        T0 + 50 * SEC,
        "renew past expiry while nobody took it"
    );
}

/// A forged or stale token renews and releases nothing.
pub async fn sysid_wrong_token_rejected(c: Ctx) {
    let s = &*c.store;
    let lease = s.reserve_sysid("node", TTL, T0).await.unwrap();
    let forged = SysidLease {
        token: "not-the-token".into(),
        ..lease.clone()
    };
    assert_kind(
        s.renew_sysid(&forged, TTL, T0).await,
        ErrorKind::Conflict,
        "forged renew",
    );
    assert!(!s.release_sysid(&forged).await.unwrap());
    assert_kind(
        s.reserve_sysid("node", TTL, T0 + 1).await,
        ErrorKind::Conflict,
        "still held",
    );
    let unknown = SysidLease {
        sysid: "never".into(),
        ..lease
    };
    assert!(!s.release_sysid(&unknown).await.unwrap());
    assert_kind(
        s.renew_sysid(&unknown, TTL, T0).await,
        ErrorKind::Conflict,
        "renew of unheld sysid",
    );
}

/// Release frees the sysid at once.
pub async fn sysid_release_frees(c: Ctx) {
    let s = &*c.store;
    let lease = s.reserve_sysid("node", TTL, T0).await.unwrap();
    assert!(s.release_sysid(&lease).await.unwrap());
    assert!(!s.release_sysid(&lease).await.unwrap());
    c.peer.reserve_sysid("node", TTL, T0 + 1).await.unwrap();
}

// ---------------------------------------------------------------- isolation

/// Stores on different namespaces share no jobs, handlers or sysids.
pub async fn namespace_isolation(a: Ctx, b: Ctx) {
    let (a, b) = (&*a.store, &*b.store);
    add(a, vec![NewJob::new("shared-id", "t", "in a")], T0).await;
    a.set_handler("t", &Handler::new("process", "a"), T0)
        .await
        .unwrap();
    a.reserve_sysid("node", TTL, T0).await.unwrap();
    assert_eq!(b.get_job("shared-id").await.unwrap(), None);
    assert!(b.waiting_jobtypes(T0).await.unwrap().is_empty());
    assert!(b.job_counts(T0).await.unwrap().is_empty());
    assert!(claim(b, "t", 10, OWNER, T0).await.is_empty());
    assert_eq!(b.get_handler("t").await.unwrap(), None);
    assert!(b.list_handlers().await.unwrap().is_empty());
    b.reserve_sysid("node", TTL, T0).await.unwrap();
    assert!(
        b.cancel_jobs(&ids(&["shared-id"]), T0)
            .await
            .unwrap()
            .cancelled
            .is_empty()
    );
    assert_eq!(
        b.purge_archived(MAX_TIME, &ResultCode::ALL).await.unwrap(),
        0
    );
    // The same id added to b is new there, and a's job is unchanged.
    let out = add(b, vec![NewJob::new("shared-id", "t", "in b")], T0).await;
    assert_eq!(out.new, ids(&["shared-id"]));
    assert_eq!(get(a, "shared-id").await.data, b"in a");
    assert_eq!(get(b, "shared-id").await.data, b"in b");
}

// ------------------------------------------------------------ state matrix

/// The six states the matrix tests put a job in, by id (each job has the
/// jobtype `m-<state>`): waiting, scheduled, running (locked by `OWNER`),
/// expired (locked by `OWNER`, lease run out, not yet taken), taken (was
/// `OWNER`'s, expired, then claimed by `OTHER`) and archived.
pub const MATRIX_STATES: [&str; 6] = [
    "waiting",
    "scheduled",
    "running",
    "expired",
    "taken",
    "archived",
];

/// When the matrix operations run: every job is in its state.
const M_NOW: Millis = T0 + 30 * SEC;
/// When the `archived` job was archived.
const M_DONE: Millis = T0 + 20 * SEC;
const THIRD: &str = "sys-c";

fn m_type(state: &str) -> String {
    format!("m-{state}")
}

/// Puts one job in each of [`MATRIX_STATES`] as of [`M_NOW`] and returns
/// them as stored, by state.
async fn matrix_jobs(s: &dyn JobStore) -> HashMap<&'static str, Job> {
    let jobs = MATRIX_STATES
        .iter()
        .map(|st| {
            let job = NewJob::new(*st, m_type(st), format!("data of {st}"));
            if *st == "scheduled" {
                job.run_at(T0 + 3_600 * SEC)
            } else {
                job
            }
        })
        .collect();
    add(s, jobs, T0).await;
    let short = Duration::from_secs(10);
    let hour = Duration::from_secs(3_600);
    for st in ["expired", "taken"] {
        let got = s
            .claim_jobs(&m_type(st), 1, OWNER, short, T0)
            .await
            .unwrap();
        assert_eq!(job_ids(&got), vec![st.to_owned()]);
    }
    let t1 = M_DONE;
    let got = s.claim_jobs("m-taken", 1, OTHER, hour, t1).await.unwrap();
    assert_eq!(job_ids(&got), ids(&["taken"]), "takeover");
    for st in ["running", "archived"] {
        let got = s.claim_jobs(&m_type(st), 1, OWNER, hour, t1).await.unwrap();
        assert_eq!(job_ids(&got), vec![st.to_owned()]);
    }
    let archived = s
        .release_jobs(
            &[JobRelease::new(
                "archived",
                Release::Archive(JobResult::from_status(200).with_output(b"out".to_vec())),
            )],
            OWNER,
            t1,
        )
        .await
        .unwrap();
    assert_eq!(archived, ids(&["archived"]));
    let mut out = HashMap::new();
    for st in MATRIX_STATES {
        out.insert(st, get(s, st).await);
    }
    let expected = [
        ("waiting", JobState::Waiting, LOCK_FREE, 0),
        ("scheduled", JobState::Scheduled, LOCK_FREE, 0),
        ("running", JobState::Running, OWNER, 1),
        ("expired", JobState::Expired, OWNER, 1),
        ("taken", JobState::Running, OTHER, 2),
        ("archived", JobState::Archived, LOCK_DONE, 1),
    ];
    for (st, state, lock, attempts) in expected {
        let j = &out[st];
        assert_eq!(
            (j.state(M_NOW), j.lock.as_str(), j.attempts),
            (state, lock, attempts),
            "matrix job {st} before the operation"
        );
    }
    out
}

/// Asserts the jobs of `states` read back exactly as `before`.
async fn assert_untouched(
    s: &dyn JobStore,
    before: &HashMap<&str, Job>,
    states: &[&str],
    op: &str,
) {
    for st in states {
        assert_eq!(
            s.get_job(st).await.unwrap().as_ref(),
            Some(&before[st]),
            "{op} must leave the {st} job untouched"
        );
    }
}

fn all_but<'a>(except: &[&str]) -> Vec<&'a str> {
    MATRIX_STATES
        .iter()
        .copied()
        .filter(|st| !except.contains(st))
        .collect()
}

/// One operation against a job in each of the six states, by the owner of
/// the running and expired jobs (and, for a claim, by a third claimer):
/// the jobs the contract says it applies to change exactly as it says,
/// every other job reads back unchanged. `op` is one of add, claim, renew,
/// retry, unget, archive, delete, update, cancel, purge, get, and the
/// management operations rerun, remove (`delete_jobs`), edit, list, and the
/// stats and schedule methods.
pub async fn state_matrix(c: Ctx, op: &str) {
    let s = &*c.store;
    let before = matrix_jobs(s).await;
    let all = ids(&MATRIX_STATES);
    let now = M_NOW;
    let owned = ["expired", "running"];
    match op {
        "add" => {
            let again: Vec<NewJob> = MATRIX_STATES
                .iter()
                .map(|st| NewJob::new(*st, "m-other", "new data").priority(9))
                .collect();
            let out = add(s, again, now).await;
            assert!(out.new.is_empty(), "add: {out:?}");
            assert_eq!(sorted(out.existing), sorted(all.clone()));
            assert_untouched(s, &before, &MATRIX_STATES, op).await;
        }
        "claim" => {
            let mut claimed = vec![];
            for st in MATRIX_STATES {
                for j in claim(s, &m_type(st), 10, THIRD, now).await {
                    assert_eq!(j.lock, THIRD);
                    assert_eq!(j.dt, now + MIN.as_millis() as Millis);
                    assert_eq!(j.attempts, before[st].attempts + 1, "{st}");
                    assert_eq!(j.data, before[st].data);
                    assert_eq!(j.claimed_due, Some(before[st].dt), "{st}");
                    let stored = Job {
                        claimed_due: j.claimed_due,
                        ..get(s, st).await
                    };
                    assert_eq!(&stored, &j);
                    claimed.push(j.id);
                }
            }
            let eligible = ["expired", "waiting"];
            assert_eq!(sorted(claimed), ids(&eligible), "claimable");
            assert_untouched(s, &before, &all_but(&eligible), op).await;
        }
        "renew" => {
            let lease = Duration::from_secs(7_200);
            let got = s
                .renew_locks(&all, OWNER, lease, now)
                .await
                .unwrap()
                .renewed;
            assert_eq!(sorted(got), ids(&owned), "renewed");
            for st in owned {
                let j = get(s, st).await;
                let want = Job {
                    dt: now + 7_200 * SEC,
                    ..before[st].clone()
                };
                assert_eq!(j, want, "renewed {st}");
            }
            assert_untouched(s, &before, &all_but(&owned), op).await;
        }
        "retry" | "unget" | "archive" | "delete" => {
            let result = JobResult::from_status(503).with_output(b"matrix".to_vec());
            let how = match op {
                "retry" => Release::Retry {
                    delay: Duration::from_secs(5),
                },
                "unget" => Release::Unget,
                "archive" => Release::Archive(result.clone()),
                _ => Release::Delete,
            };
            let list: Vec<JobRelease> = MATRIX_STATES
                .iter()
                .map(|st| JobRelease::new(*st, how.clone()))
                .collect();
            let got = s.release_jobs(&list, OWNER, now).await.unwrap();
            assert_eq!(sorted(got), ids(&owned), "{op}: released");
            for st in owned {
                let b = &before[st];
                let after = s.get_job(st).await.unwrap();
                let ev = |attempt, what| JobEvent::new(now, OWNER, attempt, what);
                let want = match op {
                    "retry" => Some(with_event(
                        s,
                        Job {
                            lock: LOCK_FREE.into(),
                            dt: now + 5 * SEC,
                            ..b.clone()
                        },
                        ev(
                            b.attempts,
                            EventKind::Retried {
                                delay_ms: 5_000,
                                status: None,
                            },
                        ),
                    )),
                    "unget" => Some(with_event(
                        s,
                        Job {
                            lock: LOCK_FREE.into(),
                            dt: now,
                            attempts: b.attempts - 1,
                            ..b.clone()
                        },
                        ev(b.attempts - 1, EventKind::HandedBack),
                    )),
                    "archive" => Some(with_event(
                        s,
                        Job {
                            lock: LOCK_DONE.into(),
                            dt: now + ARCHIVE_HORIZON_MS,
                            done_dt: Some(now),
                            result: Some(result.clone()),
                            ..b.clone()
                        },
                        ev(
                            b.attempts,
                            EventKind::Archived {
                                code: result.code,
                                status: result.status,
                            },
                        ),
                    )),
                    _ => None,
                };
                assert_eq!(after, want, "{op} of {st}");
            }
            assert_untouched(s, &before, &all_but(&owned), op).await;
        }
        "update" => {
            for st in MATRIX_STATES {
                let done = s.update_data(st, OWNER, b"updated", now).await.unwrap();
                assert_eq!(done, owned.contains(&st), "update of {st}");
            }
            for st in owned {
                let want = Job {
                    data: b"updated".to_vec(),
                    ..before[st].clone()
                };
                assert_eq!(get(s, st).await, want, "updated {st}");
            }
            assert_untouched(s, &before, &all_but(&owned), op).await;
        }
        "cancel" => {
            let free = ["scheduled", "waiting"];
            let got = s.cancel_jobs(&all, now).await.unwrap();
            assert_eq!(sorted(got.cancelled), ids(&free), "cancelled");
            let locked = ["expired", "running", "taken"];
            if s.capabilities().cancel_running {
                assert_eq!(sorted(got.marked), ids(&locked), "marked");
                for st in locked {
                    let b = &before[st];
                    let want = Job {
                        cancel_requested: true,
                        ..b.clone()
                    };
                    let ev = JobEvent::new(now, "", b.attempts, EventKind::CancelRequested);
                    assert_eq!(get(s, st).await, with_event(s, want, ev), "marked {st}");
                }
            } else {
                assert!(got.marked.is_empty());
                assert_untouched(s, &before, &locked, op).await;
            }
            for st in free {
                let want = Job {
                    lock: LOCK_DONE.into(),
                    dt: now + ARCHIVE_HORIZON_MS,
                    done_dt: Some(now),
                    result: Some(JobResult::cancelled()),
                    ..before[st].clone()
                };
                let ev = JobEvent::new(now, "", 0, EventKind::Cancelled);
                assert_eq!(get(s, st).await, with_event(s, want, ev), "cancelled {st}");
            }
            assert_untouched(s, &before, &["archived"], op).await;
        }
        "rerun" if s.capabilities().edit_jobs => {
            let got = s.rerun_jobs(&all, Duration::ZERO, now).await.unwrap();
            assert_eq!(got, ids(&["archived"]), "run again");
            let want = Job {
                lock: LOCK_FREE.into(),
                dt: now,
                attempts: 0,
                done_dt: None,
                ..before["archived"].clone()
            };
            let ev = JobEvent::new(now, "", 0, EventKind::Rerun { delay_ms: 0 });
            assert_eq!(
                get(s, "archived").await,
                with_event(s, want, ev),
                "run again"
            );
            assert_untouched(s, &before, &all_but(&["archived"]), op).await;
        }
        "remove" if s.capabilities().edit_jobs => {
            let got = s.delete_jobs(&all, T0).await.unwrap();
            let free = ["archived", "scheduled", "waiting"];
            let locked = ["expired", "running", "taken"];
            assert_eq!(sorted(got.deleted), ids(&free), "deleted");
            assert_eq!(sorted(got.running), ids(&locked), "refused");
            for st in free {
                assert_eq!(s.get_job(st).await.unwrap(), None, "{st} deleted");
            }
            assert_untouched(s, &before, &locked, op).await;
        }
        "edit" if s.capabilities().edit_jobs => {
            let edits: Vec<JobEdit> = all
                .iter()
                .map(|i| JobEdit::new(i.clone()).priority(7).data("edited"))
                .collect();
            let got = s.edit_jobs(&edits, now).await.unwrap();
            let free = ["scheduled", "waiting"];
            assert_eq!(sorted(got), ids(&free), "edited");
            for st in free {
                let want = Job {
                    priority: 7,
                    data: b"edited".to_vec(),
                    ..before[st].clone()
                };
                let ev = JobEvent::new(now, "", 0, EventKind::Edited);
                assert_eq!(get(s, st).await, with_event(s, want, ev), "edited {st}");
            }
            assert_untouched(s, &before, &all_but(&free), op).await;
        }
        "list" if s.capabilities().list_jobs => {
            let want = [
                (JobState::Waiting, &["waiting"][..]),
                (JobState::Scheduled, &["scheduled"]),
                (JobState::Running, &["running", "taken"]),
                (JobState::Expired, &["expired"]),
                (JobState::Archived, &["archived"]),
            ];
            for (state, listed) in want {
                let page = s
                    .list_jobs(&JobQuery::new(state).with_data(), now)
                    .await
                    .unwrap();
                let expected: Vec<Job> = listed.iter().map(|st| before[st].clone()).collect();
                assert_eq!(page.jobs, expected, "{state} jobs");
            }
            assert_untouched(s, &before, &MATRIX_STATES, op).await;
        }
        "stats" if s.capabilities().stats => {
            // Stats are kept apart from jobs: adding and reading them
            // changes no job, and no job shows in them.
            let minute = jobstore_api::StatsResolution::Minute.start_of(now);
            let jobtypes: Vec<String> = before.values().map(|j| j.jobtype.clone()).collect();
            let deltas: Vec<StatsDelta> = [jobtypes[0].clone(), "m-stats".to_owned()]
                .into_iter()
                .map(|jobtype| StatsDelta {
                    wait: Durations::of(&[1]),
                    ..StatsDelta::new(jobtype, minute)
                })
                .collect();
            let q = StatsQuery::new(StatsResolution::Minute);
            assert!(s.job_stats(&q, now).await.unwrap().is_empty(), "no stats");
            s.add_stats(&deltas, now).await.unwrap();
            let read = s.job_stats(&q, now).await.unwrap();
            assert_eq!(read.len(), 2, "{read:?}");
            assert_untouched(s, &before, &MATRIX_STATES, op).await;
        }
        "schedules" if s.capabilities().schedules => {
            // Schedules are kept apart from jobs: every schedule method
            // leaves every job as it was, and no job shows as a schedule.
            let jobtypes: Vec<String> = before.values().map(|j| j.jobtype.clone()).collect();
            assert!(
                s.list_schedules("").await.unwrap().is_empty(),
                "no schedules"
            );
            let sched = Schedule::new(jobtypes[0].clone(), "* * * * *", jobtypes[0].clone());
            s.set_schedule(&sched, Some(now), now).await.unwrap();
            assert_eq!(s.due_schedules(now, 10).await.unwrap().len(), 1);
            let adv = ScheduleAdvance {
                fired_through: now,
                last_job: Some("waiting".to_owned()),
                next_due: Some(now + MIN.as_millis() as Millis),
                fired: 1,
                skipped: 0,
            };
            assert!(s.advance_schedule(&sched.name, 1, &adv, now).await.unwrap());
            assert!(
                s.pause_schedule(&sched.name, true, None, now)
                    .await
                    .unwrap()
            );
            assert!(s.delete_schedule(&sched.name).await.unwrap());
            assert_untouched(s, &before, &MATRIX_STATES, op).await;
        }
        "rerun" | "remove" | "edit" | "list" | "stats" | "schedules" => {
            // Not offered: checked by their own behaviours.
            assert_untouched(s, &before, &MATRIX_STATES, op).await;
        }
        "purge" => {
            assert_eq!(s.purge_archived(M_DONE, &ResultCode::ALL).await.unwrap(), 0);
            assert_untouched(s, &before, &MATRIX_STATES, op).await;
            // The archived job's code is `ok`: purges of the other codes,
            // or of none, leave it.
            let others: Vec<ResultCode> = ResultCode::ALL
                .into_iter()
                .filter(|c| *c != ResultCode::Ok)
                .collect();
            assert_eq!(s.purge_archived(M_DONE + 1, &others).await.unwrap(), 0);
            assert_eq!(s.purge_archived(M_DONE + 1, &[]).await.unwrap(), 0);
            assert_untouched(s, &before, &MATRIX_STATES, op).await;
            assert_eq!(
                s.purge_archived(M_DONE + 1, &ResultCode::ALL)
                    .await
                    .unwrap(),
                1
            );
            assert_eq!(s.get_job("archived").await.unwrap(), None);
            assert_untouched(s, &before, &all_but(&["archived"]), op).await;
        }
        "get" => {
            // Every field as the operations that made the state say.
            let b = &before;
            assert_eq!(b["waiting"].dt, T0);
            assert_eq!(b["scheduled"].dt, T0 + 3_600 * SEC);
            assert_eq!(b["expired"].dt, T0 + 10 * SEC);
            assert_eq!(b["running"].dt, M_DONE + 3_600 * SEC);
            assert_eq!(b["taken"].dt, M_DONE + 3_600 * SEC);
            assert_eq!(b["archived"].dt, M_DONE + ARCHIVE_HORIZON_MS);
            assert_eq!(b["archived"].done_dt, Some(M_DONE));
            assert_eq!(
                b["archived"].result,
                Some(JobResult::from_status(200).with_output(b"out".to_vec()))
            );
            for st in MATRIX_STATES {
                let j = &b[st];
                assert_eq!(j.id, st);
                assert_eq!(j.jobtype, m_type(st));
                assert_eq!(j.data, format!("data of {st}").into_bytes());
                assert_eq!(j.create_dt, T0);
                if st != "archived" {
                    assert_eq!((j.done_dt, &j.result), (None, &None), "{st}");
                }
            }
            // The peer handle reads the same.
            for st in MATRIX_STATES {
                assert_eq!(get(&*c.peer, st).await, b[st], "{st} through the peer");
            }
        }
        other => panic!("unknown matrix operation {other}"),
    }
}

/// Every by-id operation on one namespace leaves a job with the same id, in
/// the same state and locked by the same owner, on another namespace
/// untouched: renew, each kind of release, update, cancel, purge, add, get.
pub async fn namespace_isolation_by_id(a: Ctx, b: Ctx) {
    let (a, b) = (&*a.store, &*b.store);
    let names = ["n-retry", "n-unget", "n-archive", "n-delete", "n-free"];
    for s in [a, b] {
        let jobs = names
            .iter()
            .map(|n| {
                let jobtype = if *n == "n-free" { "u" } else { "t" };
                NewJob::new(*n, jobtype, format!("{n} data"))
            })
            .collect();
        add(s, jobs, T0).await;
        assert_eq!(claim(s, "t", 4, OWNER, T0).await.len(), 4);
    }
    let mut before = HashMap::new();
    for n in names {
        before.insert(n, get(a, n).await);
    }
    let now = T0 + SEC;
    let held = ids(&names[..4]);
    assert_eq!(
        b.renew_locks(&held, OWNER, Duration::from_secs(900), now)
            .await
            .unwrap()
            .renewed
            .len(),
        4
    );
    assert!(b.update_data("n-retry", OWNER, b"b", now).await.unwrap());
    let list = [
        JobRelease::new("n-retry", Release::Retry { delay: MIN }),
        JobRelease::new("n-unget", Release::Unget),
        JobRelease::new("n-archive", Release::Archive(JobResult::from_status(200))),
        JobRelease::new("n-delete", Release::Delete),
    ];
    assert_eq!(b.release_jobs(&list, OWNER, now).await.unwrap().len(), 4);
    assert_eq!(
        b.cancel_jobs(&ids(&["n-free", "n-unget"]), now)
            .await
            .unwrap()
            .cancelled
            .len(),
        2
    );
    assert_eq!(
        b.purge_archived(MAX_TIME, &ResultCode::ALL).await.unwrap(),
        3
    );
    let out = add(b, vec![NewJob::new("n-delete", "t", "again")], now).await;
    assert_eq!(out.new, ids(&["n-delete"]));
    for n in names {
        assert_eq!(get(a, n).await, before[n], "{n} in the other namespace");
    }
    // And the other way round: a's owner still holds its jobs.
    let renewed = a.renew_locks(&held, OWNER, MIN, now).await.unwrap().renewed;
    assert_eq!(sorted(renewed), sorted(held));
    assert_eq!(b.get_job("n-archive").await.unwrap(), None);
    assert_eq!(get(b, "n-retry").await.data, b"b");
}

// -------------------------------------------------------------- bad input

/// Which operation an invalid-input case is tried on.
async fn try_everywhere(
    s: &dyn JobStore,
    id: Option<&str>,
    jobtype: Option<&str>,
    sysid: Option<&str>,
) {
    let what = format!("id={id:?} jobtype={jobtype:?} sysid={sysid:?}");
    let i = id.unwrap_or("ok-id");
    let t = jobtype.unwrap_or("ok-type");
    let o = sysid.unwrap_or(OWNER);
    let kind = ErrorKind::InvalidInput;
    if id.is_some() || jobtype.is_some() {
        assert_kind(
            s.add_jobs(&[NewJob::new(i, t, "x")], T0).await,
            kind,
            &format!("add {what}"),
        );
    }
    if id.is_some() {
        assert_kind(s.get_job(i).await, kind, &format!("get {what}"));
        assert_kind(
            s.cancel_jobs(&[i.to_owned()], T0).await,
            kind,
            &format!("cancel {what}"),
        );
        assert_kind(
            s.renew_locks(&[i.to_owned()], o, MIN, T0).await,
            kind,
            &format!("renew {what}"),
        );
        assert_kind(
            s.release_all(&[i.to_owned()], o, &Release::Delete, T0)
                .await,
            kind,
            &format!("release_all {what}"),
        );
        assert_kind(
            s.release_jobs(&[JobRelease::new(i, Release::Unget)], o, T0)
                .await,
            kind,
            &format!("release_jobs {what}"),
        );
        assert_kind(
            s.update_data(i, o, b"x", T0).await,
            kind,
            &format!("update {what}"),
        );
    }
    if jobtype.is_some() || sysid.is_some() {
        assert_kind(
            s.claim_jobs(t, 1, o, MIN, T0).await,
            kind,
            &format!("claim {what}"),
        );
    }
    if jobtype.is_some() {
        assert_kind(s.get_handler(t).await, kind, &format!("get_handler {what}"));
        assert_kind(
            s.delete_handler(t).await,
            kind,
            &format!("delete_handler {what}"),
        );
        assert_kind(
            s.set_handler(t, &Handler::new("process", "x"), T0).await,
            kind,
            &format!("set_handler {what}"),
        );
    }
    if sysid.is_some() {
        assert_kind(
            s.renew_locks(&["ok-id".to_owned()], o, MIN, T0).await,
            kind,
            &format!("renew {what}"),
        );
        assert_kind(
            s.reserve_sysid(o, TTL, T0).await,
            kind,
            &format!("reserve {what}"),
        );
    }
    assert!(
        s.job_counts(T0).await.unwrap().is_empty(),
        "nothing stored for {what}"
    );
    assert!(
        s.list_handlers().await.unwrap().is_empty(),
        "no handler stored for {what}"
    );
}

/// A malformed job id is invalid input everywhere ids are taken.
pub async fn invalid_job_id_rejected(c: Ctx, id: &str) {
    try_everywhere(&*c.store, Some(id), None, None).await;
}

/// A malformed jobtype is invalid input everywhere jobtypes are taken.
pub async fn invalid_jobtype_rejected(c: Ctx, jobtype: &str) {
    try_everywhere(&*c.store, None, Some(jobtype), None).await;
}

/// A malformed sysid (or owner) is invalid input.
pub async fn invalid_sysid_rejected(c: Ctx, sysid: &str) {
    try_everywhere(&*c.store, None, None, Some(sysid)).await;
}

/// Times outside `0..=MAX_TIME` are invalid input.
pub async fn invalid_time_rejected(c: Ctx) {
    let s = &*c.store;
    let kind = ErrorKind::InvalidInput;
    for now in [-1, MAX_TIME + 1, i64::MIN, i64::MAX] {
        assert_kind(
            s.add_jobs(&[NewJob::new("a", "t", "")], now).await,
            kind,
            "add now",
        );
        assert_kind(
            s.claim_jobs("t", 1, OWNER, MIN, now).await,
            kind,
            "claim now",
        );
        assert_kind(s.waiting_jobtypes(now).await, kind, "waiting now");
        assert_kind(s.job_counts(now).await, kind, "counts now");
        assert_kind(s.cancel_jobs(&ids(&["a"]), now).await, kind, "cancel now");
        assert_kind(
            s.purge_archived(now, &ResultCode::ALL).await,
            kind,
            "purge before",
        );
        assert_kind(
            s.purge_archived(now, &[]).await,
            kind,
            "purge before, no codes",
        );
        assert_kind(s.reserve_sysid("n", TTL, now).await, kind, "reserve now");
        assert_kind(
            s.add_jobs(&[NewJob::new("a", "t", "").run_at(now)], T0)
                .await,
            kind,
            "run_at",
        );
    }
    assert_eq!(s.get_job("a").await.unwrap(), None);
}

/// Leases of zero or above `MAX_LEASE`, and retry delays above `MAX_DELAY`,
/// are invalid input.
pub async fn invalid_lease_rejected(c: Ctx) {
    let s = &*c.store;
    add_n(s, "t", 1, T0).await;
    let kind = ErrorKind::InvalidInput;
    for lease in [
        Duration::ZERO,
        Duration::from_micros(999),
        MAX_LEASE + Duration::from_millis(1),
    ] {
        assert_kind(
            s.claim_jobs("t", 1, OWNER, lease, T0).await,
            kind,
            "claim lease",
        );
        assert_kind(
            s.renew_locks(&ids(&["t-000000"]), OWNER, lease, T0).await,
            kind,
            "renew lease",
        );
        assert_kind(s.reserve_sysid("n", lease, T0).await, kind, "sysid ttl");
    }
    assert_eq!(counts_of(s, "t", T0).await.waiting, 1);
    claim(s, "t", 1, OWNER, T0).await;
    let delay = jobstore_api::limits::MAX_DELAY + Duration::from_secs(1);
    assert_kind(
        s.release_all(&ids(&["t-000000"]), OWNER, &Release::Retry { delay }, T0)
            .await,
        kind,
        "retry delay",
    );
    assert_kind(
        s.release_jobs(
            &[JobRelease::new("t-000000", Release::Retry { delay })],
            OWNER,
            T0,
        )
        .await,
        kind,
        "per-job retry delay",
    );
    assert_eq!(get(s, "t-000000").await.lock, OWNER);
    assert_eq!(
        s.claim_jobs("t", 1, OWNER, MAX_LEASE, T0)
            .await
            .unwrap()
            .len(),
        0
    );
}

/// An id twice in one renew, release or cancel list is invalid input, and
/// nothing changes.
pub async fn duplicate_ids_in_list_rejected(c: Ctx) {
    let s = &*c.store;
    add(
        s,
        vec![
            NewJob::new("a", "t", ""),
            NewJob::new("b", "t", "").run_at(T0 + SEC),
        ],
        T0,
    )
    .await;
    claim(s, "t", 1, OWNER, T0).await;
    let twice = ids(&["a", "b", "a"]);
    let kind = ErrorKind::InvalidInput;
    assert_kind(s.renew_locks(&twice, OWNER, MIN, T0).await, kind, "renew");
    assert_kind(
        s.release_all(&twice, OWNER, &Release::Unget, T0).await,
        kind,
        "release",
    );
    let per_job: Vec<JobRelease> = twice
        .iter()
        .map(|i| JobRelease::new(i.clone(), Release::Unget))
        .collect();
    assert_kind(
        s.release_jobs(&per_job, OWNER, T0).await,
        kind,
        "per-job release",
    );
    assert_kind(s.cancel_jobs(&ids(&["b", "b"]), T0).await, kind, "cancel");
    assert_eq!(get(s, "a").await.lock, OWNER);
    assert_eq!(get(s, "b").await.lock, LOCK_FREE);
}

/// Batches above `MAX_BATCH` are `TooLarge` and change nothing.
pub async fn oversized_batch_rejected(c: Ctx) {
    let s = &*c.store;
    let many: Vec<String> = (0..=MAX_BATCH).map(|i| format!("id{i}")).collect();
    let jobs: Vec<NewJob> = many
        .iter()
        .map(|i| NewJob::new(i.clone(), "t", ""))
        .collect();
    assert_kind(
        s.add_jobs(&jobs, T0).await,
        ErrorKind::TooLarge,
        "add batch",
    );
    assert_kind(
        s.cancel_jobs(&many, T0).await,
        ErrorKind::TooLarge,
        "cancel batch",
    );
    assert_kind(
        s.renew_locks(&many, OWNER, MIN, T0).await,
        ErrorKind::TooLarge,
        "renew batch",
    );
    assert_kind(
        s.release_all(&many, OWNER, &Release::Unget, T0).await,
        ErrorKind::TooLarge,
        "release batch",
    );
    let per_job: Vec<JobRelease> = many
        .iter()
        .map(|i| JobRelease::new(i.clone(), Release::Delete))
        .collect();
    assert_kind(
        s.release_jobs(&per_job, OWNER, T0).await,
        ErrorKind::TooLarge,
        "per-job release batch",
    );
    assert!(s.job_counts(T0).await.unwrap().is_empty());
}

// ---------------------------------------------------------------- injection

/// Ids that look like SQL, Lua, Redis commands and key patterns, MongoDB
/// operators and other syntax a backend might splice into a query. Job ids
/// and sysids may hold any non-control character except `|`.
pub const HOSTILE_IDS: &[&str] = &[
    "'; DROP TABLE jobs; --",
    "\" OR \"1\"=\"1",
    "1' OR '1'='1' /*",
    "$$; DROP SCHEMA public CASCADE; $$",
    "E'\\\\x00'",
    "%",
    "_",
    "%_%\\",
    "$1",
    "?",
    ":id",
    "{\"$gt\":\"\"}",
    "$where",
    "{\"$where\":\"sleep(1000)\"}",
    "this.dt > 0 && true",
    "__proto__",
    "a.b.c",
    "$",
    "redis.call('FLUSHALL')",
    "]]..redis.call('FLUSHALL')..[[",
    "FLUSHALL",
    "*",
    "[a-z]*",
    "{t}",
    "}{",
    "jobs:ready",
    "__done",
    "${jndi:ldap://x/a}",
    "../../etc/passwd",
    "`rm -rf /` $(reboot)",
    "null",
    "\\",
    "\u{202e}\u{feff}\u{1F600}",
];

/// Payloads, handler fields and result outputs that look like queries and
/// protocol (CRLF with RESP, NUL bytes, JSON with operators) or like a
/// store's own markers (the lock of an archived job).
pub const HOSTILE_DATA: &[&[u8]] = &[
    b"'; DROP TABLE jobs; --",
    b"redis.call('FLUSHALL')",
    b"]]..redis.call('FLUSHALL')..[[",
    b"\r\nFLUSHALL\r\n",
    b"*1\r\n$8\r\nFLUSHALL\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n",
    b"{\"$gt\":\"\"}",
    b"{\"$where\":\"function(){return true}\",\"__proto__\":{\"x\":1}}",
    b"\x00'\x00\"\x00\\\x00",
    b"$1 ? :name %s %n \\x00 E'\\\\'",
    b"\xff\xfe{\"$set\":{\"lock\":\"\"}}",
    b"__done",
];

/// Jobtypes built from the characters the rules allow that mean something
/// to a query language or a key layout.
pub const HOSTILE_JOBTYPES: &[&str] = &[
    "DROP-TABLE-jobs--",
    "jobs:ready",
    "a:b:",
    "a.b.c",
    "t.constructor.prototype",
    "0x00",
    "jobstore:ready",
];

/// Jobtypes that a parser of JSON or of numbers would read as something
/// other than a string.
pub const LITERAL_JOBTYPES: &[&str] = &[
    "null", "true", "false", "NaN", "Infinity", "1e5", "123", "0", "0.5", "1_000",
];

/// Hostile ids, jobtypes, owners, payloads, result outputs and handler
/// fields are stored and returned byte for byte by every operation, and
/// nothing else in the namespace changes.
pub async fn injection_round_trip(c: Ctx) {
    let s = &*c.store;
    add(s, vec![NewJob::new("canary", "canary", "still here")], T0).await;
    // One job per hostile id, spread over the hostile jobtypes, each with a
    // hostile payload.
    let data_of = |i: usize| HOSTILE_DATA[i % HOSTILE_DATA.len()].to_vec();
    let type_of = |i: usize| HOSTILE_JOBTYPES[i % HOSTILE_JOBTYPES.len()];
    let jobs: Vec<NewJob> = HOSTILE_IDS
        .iter()
        .enumerate()
        .map(|(i, id)| NewJob::new(*id, type_of(i), data_of(i)))
        .collect();
    let out = add(s, jobs.clone(), T0).await;
    assert_eq!(sorted(out.new), sorted(ids(HOSTILE_IDS)));
    for (i, id) in HOSTILE_IDS.iter().enumerate() {
        let job = get(s, id).await;
        assert_eq!(
            (job.id.as_str(), job.jobtype.as_str(), &job.data),
            (*id, type_of(i), &data_of(i)),
            "job {id:?} as stored"
        );
    }
    // Adding them again finds each one by its exact id.
    let again = add(s, jobs, T0).await;
    assert!(again.new.is_empty(), "re-add: {again:?}");
    let mut waiting: Vec<(String, u64)> = s
        .waiting_jobtypes(T0)
        .await
        .unwrap()
        .into_iter()
        .map(|w| (w.jobtype, w.count))
        .collect();
    waiting.sort();
    let mut expected: HashMap<String, u64> = HashMap::from([("canary".to_owned(), 1)]);
    for i in 0..HOSTILE_IDS.len() {
        *expected.entry(type_of(i).to_owned()).or_default() += 1;
    }
    let mut expected: Vec<(String, u64)> = expected.into_iter().collect();
    expected.sort();
    assert_eq!(waiting, expected, "waiting jobtypes");

    // Claims by hostile owners (sysids follow the id rules), renewals,
    // updates and releases with hostile outputs, each of its own job.
    let owner_of = |i: usize| HOSTILE_IDS[(i + 1) % HOSTILE_IDS.len()];
    for (t, jobtype) in HOSTILE_JOBTYPES.iter().enumerate() {
        let owner = owner_of(t);
        let mut got = job_ids(&claim(s, jobtype, MAX_CLAIM, owner, T0).await);
        got.sort();
        let want: Vec<String> = (0..HOSTILE_IDS.len())
            .filter(|i| type_of(*i) == *jobtype)
            .map(|i| HOSTILE_IDS[i].to_owned())
            .collect();
        assert_eq!(got, sorted(want), "claim of {jobtype:?} by {owner:?}");
        let renewed = s
            .renew_locks(&got, owner, MIN, T0 + SEC)
            .await
            .unwrap()
            .renewed;
        assert_eq!(sorted(renewed), got, "renew by {owner:?}");
        for id in &got {
            let job = get(s, id).await;
            assert_eq!(job.lock, owner, "{id:?} locked by {owner:?}");
        }
    }
    let t1 = T0 + 2 * SEC;
    let mut by_owner: HashMap<&str, Vec<JobRelease>> = HashMap::new();
    for (i, id) in HOSTILE_IDS.iter().enumerate() {
        let t = HOSTILE_JOBTYPES
            .iter()
            .position(|j| *j == type_of(i))
            .unwrap();
        let owner = owner_of(t);
        let new_data = data_of(i + 3);
        assert!(
            s.update_data(id, owner, &new_data, t1).await.unwrap(),
            "update {id:?}"
        );
        assert_eq!(get(s, id).await.data, new_data, "updated payload of {id:?}");
        let how = match i % 4 {
            0 => Release::Archive(JobResult::from_status(500).with_output(data_of(i + 5))),
            1 => Release::Retry { delay: MIN },
            2 => Release::Unget,
            _ => Release::Archive(JobResult::from_status(200).with_output(data_of(i + 7))),
        };
        by_owner
            .entry(owner)
            .or_default()
            .push(JobRelease::new(*id, how));
    }
    for (owner, releases) in &by_owner {
        let released = s.release_jobs(releases, owner, t1).await.unwrap();
        let want: Vec<String> = releases.iter().map(|r| r.id.clone()).collect();
        assert_eq!(sorted(released), sorted(want), "release by {owner:?}");
    }
    for (i, id) in HOSTILE_IDS.iter().enumerate() {
        let job = get(s, id).await;
        assert_eq!(job.id, *id);
        assert_eq!(job.data, data_of(i + 3), "payload of {id:?} after release");
        match i % 4 {
            0 => assert_eq!(
                job.result.map(|r| r.output),
                Some(data_of(i + 5)),
                "output of {id:?}"
            ),
            3 => assert_eq!(
                job.result.map(|r| r.output),
                Some(data_of(i + 7)),
                "output of {id:?}"
            ),
            _ => assert_eq!(job.lock, LOCK_FREE, "{id:?} free again"),
        }
    }
    // Cancel finds the free ones by their exact ids.
    let free: Vec<String> = (0..HOSTILE_IDS.len())
        .filter(|i| matches!(i % 4, 1 | 2))
        .map(|i| HOSTILE_IDS[i].to_owned())
        .collect();
    let cancelled = s
        .cancel_jobs(&ids(HOSTILE_IDS), t1)
        .await
        .unwrap()
        .cancelled;
    assert_eq!(sorted(cancelled), sorted(free), "cancelled");

    // Handlers with hostile fields under hostile jobtypes.
    for (t, jobtype) in HOSTILE_JOBTYPES.iter().enumerate() {
        let text = |k: usize| {
            String::from_utf8_lossy(HOSTILE_DATA[(t + k) % HOSTILE_DATA.len()]).replace('\0', "")
        };
        let handler = Handler {
            method: "process".into(),
            body: text(0),
            eid: Some(HOSTILE_IDS[t].to_owned()),
            before: Some(text(1)),
            before_each: Some(text(2)),
            after_each: Some(text(3)),
            limits: HandlerLimits::default(),
        };
        let v = s.set_handler(jobtype, &handler, t1).await.unwrap();
        assert_eq!(v.handler, handler, "handler of {jobtype:?}");
        let read = s.get_handler(jobtype).await.unwrap();
        assert_eq!(read.map(|v| v.handler), Some(handler), "{jobtype:?}");
    }
    let mut listed: Vec<String> = s
        .list_handlers()
        .await
        .unwrap()
        .into_iter()
        .map(|v| v.jobtype)
        .collect();
    listed.sort();
    let mut want: Vec<String> = HOSTILE_JOBTYPES.iter().map(|t| t.to_string()).collect();
    want.sort();
    assert_eq!(listed, want, "listed handlers");

    // Hostile sysids reserve and release like any other.
    for sysid in HOSTILE_IDS.iter().filter(|id| !id.starts_with("__")) {
        let lease = s.reserve_sysid(sysid, MIN, t1).await.unwrap();
        assert_eq!(lease.sysid, *sysid);
        assert_kind(
            s.reserve_sysid(sysid, MIN, t1).await,
            ErrorKind::Conflict,
            sysid,
        );
        assert!(s.release_sysid(&lease).await.unwrap(), "release {sysid:?}");
    }

    // Purge removes exactly the archived ones, the canary is untouched.
    let archived_n = HOSTILE_IDS.len() as u64;
    assert_eq!(
        s.purge_archived(MAX_TIME, &ResultCode::ALL).await.unwrap(),
        archived_n
    );
    for id in HOSTILE_IDS {
        assert_eq!(s.get_job(id).await.unwrap(), None, "{id:?} purged");
    }
    let canary = get(s, "canary").await;
    assert_eq!(canary.data, b"still here");
    assert_eq!(canary.lock, LOCK_FREE);
}

/// Jobtypes that read as JSON literals or numbers stay strings in every
/// operation that returns jobtypes: jobs, waiting jobtypes, counts and
/// handlers.
pub async fn injection_literal_jobtypes_round_trip(c: Ctx) {
    let s = &*c.store;
    let jobs: Vec<NewJob> = LITERAL_JOBTYPES
        .iter()
        .map(|t| NewJob::new(format!("id-{t}"), *t, *t))
        .collect();
    add(s, jobs, T0).await;
    let want: Vec<String> = sorted(LITERAL_JOBTYPES.iter().map(|t| t.to_string()).collect());
    for t in LITERAL_JOBTYPES {
        assert_eq!(get(s, &format!("id-{t}")).await.jobtype, *t);
        s.set_handler(t, &Handler::new("process", *t), T0)
            .await
            .unwrap();
    }
    let waiting = s.waiting_jobtypes(T0).await.unwrap();
    assert_eq!(
        sorted(waiting.iter().map(|w| w.jobtype.clone()).collect()),
        want,
        "waiting jobtypes"
    );
    assert!(waiting.iter().all(|w| w.count == 1), "{waiting:?}");
    let counts = s.job_counts(T0).await.unwrap();
    assert_eq!(
        sorted(counts.iter().map(|c| c.jobtype.clone()).collect()),
        want,
        "counted jobtypes"
    );
    let handlers = s.list_handlers().await.unwrap();
    assert_eq!(
        sorted(handlers.iter().map(|h| h.jobtype.clone()).collect()),
        want,
        "handler jobtypes"
    );
    for t in LITERAL_JOBTYPES {
        let got = claim(s, t, 10, OWNER, T0).await;
        assert_eq!(job_ids(&got), vec![format!("id-{t}")], "claim of {t:?}");
        assert_eq!(got[0].jobtype, *t);
    }
}

// ---------------------------------------------------------- wake-ups

/// A watcher wakes when another handle adds work; a store that declares
/// notifications names the jobtype.
pub async fn watch_wakes_on_add(c: Ctx) {
    let mut w = c.store.watch().await.unwrap();
    assert_eq!(w.is_notified(), c.store.capabilities().notifications);
    let peer = c.peer.clone();
    let adder = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        peer.add_jobs(&[NewJob::new("w1", "wake-type", "")], T0)
            .await
            .unwrap();
    });
    let wake = wait_for(&mut w, "wake-type", c.store.capabilities().notifications).await;
    adder.await.unwrap();
    assert_ne!(wake, Wakeup::TimedOut);
}

/// A watcher wakes when a job is released for retry.
pub async fn watch_wakes_on_retry(c: Ctx) {
    let s = &*c.store;
    add(s, vec![NewJob::new("r", "retry-type", "")], T0).await;
    claim(s, "retry-type", 1, OWNER, T0).await;
    let mut w = s.watch().await.unwrap();
    let peer = c.peer.clone();
    let releaser = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        peer.release_all(
            &ids(&["r"]),
            OWNER,
            &Release::Retry {
                delay: Duration::ZERO,
            },
            T0 + 1,
        )
        .await
        .unwrap();
    });
    let wake = wait_for(&mut w, "retry-type", s.capabilities().notifications).await;
    releaser.await.unwrap();
    assert_ne!(wake, Wakeup::TimedOut);
}

/// A watcher wakes for the retry and unget entries of a per-job release
/// (made through the peer handle, mixed with an archive); a store that
/// declares notifications names both jobtypes.
pub async fn watch_wakes_on_per_job_release(c: Ctx) {
    let s = &*c.store;
    add(
        s,
        vec![
            NewJob::new("a", "wake-archive", ""),
            NewJob::new("r", "wake-retry", ""),
            NewJob::new("u", "wake-unget", ""),
        ],
        T0,
    )
    .await;
    for t in ["wake-archive", "wake-retry", "wake-unget"] {
        claim(s, t, 1, OWNER, T0).await;
    }
    let notified = s.capabilities().notifications;
    let mut w = s.watch().await.unwrap();
    let peer = c.peer.clone();
    let releaser = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let list = [
            JobRelease::new("a", Release::Archive(JobResult::from_status(200))),
            JobRelease::new(
                "r",
                Release::Retry {
                    delay: Duration::ZERO,
                },
            ),
            JobRelease::new("u", Release::Unget),
        ];
        peer.release_jobs(&list, OWNER, T0 + 1).await.unwrap()
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut seen = BTreeSet::new();
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match w.wait(left).await {
            Wakeup::TimedOut => panic!("no wake-up for the release; saw {seen:?}"),
            Wakeup::Work(types) => seen.extend(types),
            Wakeup::Unknown if !notified => break,
            Wakeup::Unknown => {}
        }
        if !notified || (seen.contains("wake-retry") && seen.contains("wake-unget")) {
            break;
        }
    }
    assert_eq!(releaser.await.unwrap().len(), 3);
}

/// A watcher wakes for every kind of new work made through the peer handle,
/// one at a time: an add of a due job, an add of a scheduled job, an add
/// naming two jobtypes at once, a retry with a delay, and an unget through
/// [`JobStoreExt::release_all`]. A store that declares notifications names
/// the jobtype of each.
pub async fn watch_wakes_on_every_kind_of_new_work(c: Ctx) {
    let s = &*c.store;
    let notified = s.capabilities().notifications;
    add(
        s,
        vec![
            NewJob::new("d", "wk-delay", ""),
            NewJob::new("u", "wk-unget", ""),
        ],
        T0,
    )
    .await;
    for t in ["wk-delay", "wk-unget"] {
        assert_eq!(claim(s, t, 1, OWNER, T0).await.len(), 1);
    }
    let mut w = s.watch().await.unwrap();
    let steps: [(&str, &[&str]); 5] = [
        ("add", &["wk-due"]),
        ("add scheduled", &["wk-sched"]),
        ("add two jobtypes", &["wk-a", "wk-b"]),
        ("retry with a delay", &["wk-delay"]),
        ("unget", &["wk-unget"]),
    ];
    for (step, jobtypes) in steps {
        let peer = c.peer.clone();
        let act = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let now = T0 + SEC;
            let changed = match step {
                "add" => {
                    peer.add_jobs(&[NewJob::new("due", "wk-due", "")], now)
                        .await
                }
                "add scheduled" => {
                    peer.add_jobs(
                        &[NewJob::new("s", "wk-sched", "").run_at(now + 60 * SEC)],
                        now,
                    )
                    .await
                }
                "add two jobtypes" => {
                    peer.add_jobs(
                        &[NewJob::new("a", "wk-a", ""), NewJob::new("b", "wk-b", "")],
                        now,
                    )
                    .await
                }
                "retry with a delay" => {
                    let how = Release::Retry { delay: MIN };
                    let list = [JobRelease::new("d", how)];
                    return peer.release_jobs(&list, OWNER, now).await.unwrap().len();
                }
                _ => {
                    let list = ids(&["u"]);
                    let r = peer.release_all(&list, OWNER, &Release::Unget, now);
                    return r.await.unwrap().len();
                }
            };
            changed.unwrap().new.len()
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut missing: BTreeSet<&str> = jobtypes.iter().copied().collect();
        while !missing.is_empty() {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match w.wait(left).await {
                Wakeup::TimedOut => panic!("no wake-up for {step}: {missing:?} not named"),
                Wakeup::Work(types) => missing.retain(|t| !types.contains(*t)),
                Wakeup::Unknown => {}
            }
            if !notified {
                break;
            }
        }
        assert_eq!(act.await.unwrap(), jobtypes.len(), "{step}");
    }
}

/// Waits until the watcher reports `jobtype` (notifying stores) or any wake-up
/// (polling stores), within 10 s in all.
async fn wait_for(w: &mut WorkWatcher, jobtype: &str, notified: bool) -> Wakeup {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Wakeup::TimedOut;
        }
        match w.wait(left).await {
            Wakeup::Work(types) if types.contains(jobtype) => return Wakeup::Work(types),
            Wakeup::TimedOut => return Wakeup::TimedOut,
            other if !notified => return other,
            _ => continue,
        }
    }
}

// -------------------------------------------------------------- concurrency

/// 8 concurrent claimers, split over the store and its peer handle, drain
/// 2,000 jobs: every job is handed out exactly once while leases are valid.
pub async fn concurrent_claims_exactly_once(c: Ctx) {
    const JOBS: usize = 2_000;
    const CLAIMERS: usize = 8;
    let s = &*c.store;
    for chunk in 0..(JOBS / 500) {
        let jobs: Vec<NewJob> = (chunk * 500..(chunk + 1) * 500)
            .map(|i| NewJob::new(format!("c{i:05}"), "conc", "").priority((i % 3) as i32))
            .collect();
        s.add_jobs(&jobs, T0).await.unwrap();
    }
    // A JoinSet aborts the other claimers when one panics, so none outlives
    // the test (and its namespace cleanup).
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..CLAIMERS {
        let store = if n % 2 == 0 {
            c.store.clone()
        } else {
            c.peer.clone()
        };
        tasks.spawn(async move {
            let owner = format!("claimer-{n}");
            let mut mine = Vec::new();
            let mut empty_in_a_row = 0;
            while empty_in_a_row < 3 {
                let got = store
                    .claim_jobs(
                        "conc",
                        1 + n * 7 % 40,
                        &owner,
                        Duration::from_secs(3600),
                        T0 + 1,
                    )
                    .await
                    .expect("claim");
                if got.is_empty() {
                    empty_in_a_row += 1;
                    tokio::task::yield_now().await;
                    continue;
                }
                empty_in_a_row = 0;
                for j in &got {
                    assert_eq!(
                        (j.lock.as_str(), j.attempts),
                        (owner.as_str(), 1),
                        "{}",
                        j.id
                    );
                }
                let got_ids = job_ids(&got);
                // Archive every other batch, keep the rest running: both must
                // stay out of other claimers' hands.
                if mine.len() % 2 == 0 {
                    let rel = store
                        .release_all(
                            &got_ids,
                            &owner,
                            &Release::Archive(JobResult::from_status(200)),
                            T0 + 2,
                        )
                        .await
                        .expect("release");
                    assert_eq!(rel.len(), got_ids.len());
                }
                mine.extend(got_ids);
            }
            mine
        });
    }
    let mut times: HashMap<String, usize> = HashMap::new();
    while let Some(claimed) = tasks.join_next().await {
        for id in claimed.expect("claimer task") {
            *times.entry(id).or_default() += 1;
        }
    }
    let twice: Vec<_> = times.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "handed out more than once: {twice:?}");
    assert_eq!(times.len(), JOBS, "every job handed out");
    assert!(claim(s, "conc", 10, "late", T0 + 3).await.is_empty());
    let counts = counts_of(s, "conc", T0 + 3).await;
    assert_eq!(counts.waiting, 0);
    assert_eq!(counts.total(), JOBS as u64);
}
