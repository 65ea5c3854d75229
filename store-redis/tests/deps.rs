//! Dependencies on Redis, where the suite cannot reach: a crash between
//! an archive's record and its delivery (and an add's staging and its
//! commit) finished by `settle_flows`, cascades through many jobtypes
//! (one slot each: one round of deliveries per hop), chains of 1,000, and
//! the keys the flows leave behind (none once settled).

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;
use jobstore_api::{
    DependencyFailure, EventKind, JobQuery, JobResult, JobState, JobStore, JobStoreExt, LOCK_DONE,
    LOCK_FREE, NewJob, ResultCode,
};
use jobstore_conformance::services::{redis_url, unique_namespace};
use jobstore_redis::{RedisOptions, RedisStore};

const T0: i64 = 1_700_000_000_000;
const MIN: Duration = Duration::from_secs(60);
/// Past the store's grace for settling (60 s).
const LATER: i64 = T0 + 120_000;

/// Runs `body` with two handles on a fresh namespace, dropped afterwards.
fn with_stores<F, Fut>(body: F)
where
    F: FnOnce(RedisStore, RedisStore, String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    jobstore_conformance::block_on(async {
        let Some(url) = redis_url().await else {
            return;
        };
        let prefix = unique_namespace();
        let open = || RedisStore::connect_with(&url, RedisOptions::new().prefix(prefix.clone()));
        let (a, b, cleaner) = (
            open().await.unwrap(),
            open().await.unwrap(),
            open().await.unwrap(),
        );
        let outcome = AssertUnwindSafe(body(a, b, prefix.clone()))
            .catch_unwind()
            .await;
        cleaner.drop_namespace().await.unwrap();
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    });
}

async fn cmd<T: redis::FromRedisValue>(
    c: &mut redis::aio::MultiplexedConnection,
    args: &[&str],
) -> T {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(c).await.unwrap()
}

async fn conn() -> redis::aio::MultiplexedConnection {
    let url = redis_url().await.unwrap();
    redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Claims `id` (the only eligible job of `jobtype`) and archives it.
async fn finish(s: &RedisStore, jobtype: &str, id: &str, status: u16, now: i64) {
    let got = s.claim_jobs(jobtype, 1, "o", MIN, now).await.unwrap();
    assert_eq!(got.len(), 1, "{id} claimed");
    assert_eq!(got[0].id, id);
    let ids = [id.to_owned()];
    let done = s
        .archive_jobs(&ids, "o", JobResult::from_status(status), now)
        .await
        .unwrap();
    assert_eq!(done, ids);
}

fn unblocked(job: &jobstore_api::Job) -> usize {
    job.history
        .iter()
        .filter(|e| e.what == EventKind::Unblocked)
        .count()
}

/// A release whose delivery to a waiter in another slot never happens (a
/// crash right after `release.lua`) leaves the entry in the target's
/// outbox and the waiter blocked; `settle_flows` delivers it once the
/// grace has passed (not before), exactly once however often it runs, and
/// leaves the outbox empty.
#[test]
fn a_crash_between_record_and_delivery_is_settled() {
    with_stores(|a, b, prefix| async move {
        a.add_jobs(&[NewJob::new("x", "tx", "")], T0).await.unwrap();
        let w = NewJob::new("w", "tw", "").depends_on(["x"]);
        assert_eq!(a.add_jobs(&[w], T0).await.unwrap().new, ["w"]);
        assert_eq!(
            a.get_job("w").await.unwrap().unwrap().state(T0),
            JobState::Blocked
        );
        a.set_flow_delivery(false);
        finish(&a, "tx", "x", 200, T0 + 1_000).await;
        let mut c = conn().await;
        let fx = format!("{{{prefix}:tx}}:fx");
        assert_eq!(cmd::<i64>(&mut c, &["ZCARD", &fx]).await, 1, "recorded");
        assert_eq!(b.get_job("w").await.unwrap().unwrap().lock, "__blocked");
        // within the grace: nothing to settle
        assert_eq!(b.settle_flows(T0 + 2_000, 100).await.unwrap(), 0);
        assert_eq!(b.settle_flows(LATER, 100).await.unwrap(), 1);
        let job = b.get_job("w").await.unwrap().unwrap();
        assert_eq!((job.lock.as_str(), unblocked(&job)), (LOCK_FREE, 1));
        assert_eq!(job.flow.as_ref().map(|f| f.pending), Some(0));
        assert_eq!(cmd::<i64>(&mut c, &["ZCARD", &fx]).await, 0, "acknowledged");
        // a second settle, and a late redelivery by hand, change nothing
        assert_eq!(a.settle_flows(LATER, 100).await.unwrap(), 0);
        let member = "ok 200 tw x\nw";
        let _: i64 = cmd(&mut c, &["ZADD", &fx, "1", member]).await;
        assert_eq!(a.settle_flows(LATER, 100).await.unwrap(), 1);
        let again = b.get_job("w").await.unwrap().unwrap();
        assert_eq!((again.lock.as_str(), unblocked(&again)), (LOCK_FREE, 1));
        assert_eq!(
            b.claim_jobs("tw", 5, "o", MIN, LATER).await.unwrap().len(),
            1
        );
    });
}

/// An add whose link and commit never run (a crash right after
/// `add.lua`) leaves its job staged: absent for every read, counted
/// nowhere. `settle_flows` links and commits it after the grace; a target
/// archived while it was staged delivers to it, and the commit frees it
/// with the event `Unblocked`; a target missing by then refuses it (gone,
/// its id free again).
#[test]
fn a_crash_between_staging_and_commit_is_settled() {
    with_stores(|a, b, _| async move {
        let targets = [
            NewJob::new("x1", "tx", ""),
            NewJob::new("x2", "ty", ""),
            NewJob::new("x3", "ty", ""),
        ];
        a.add_jobs(&targets, T0).await.unwrap();
        a.set_flow_delivery(false);
        let jobs = [
            NewJob::new("w1", "tw", "").depends_on(["x1", "x2"]),
            NewJob::new("w2", "tw", "").depends_on(["x3"]),
        ];
        assert_eq!(a.add_jobs(&jobs, T0).await.unwrap().new, ["w1", "w2"]);
        assert_eq!(
            b.get_job("w1").await.unwrap(),
            None,
            "staged: not a job yet"
        );
        assert!(b.job_waits("w1", None, 10).await.unwrap().is_none());
        let counts = b.job_counts(T0).await.unwrap();
        assert!(counts.iter().all(|c| c.jobtype != "tw"), "{counts:?}");
        // x1 ends and x3 is deleted while they are staged (nothing was
        // linked, so nothing delivers): the commit finds x1 archived and
        // x3 missing.
        finish(&b, "tx", "x1", 200, T0 + 1_000).await;
        b.delete_jobs(&["x3".to_owned()], T0 + 1_000).await.unwrap();
        assert_eq!(b.settle_flows(LATER, 100).await.unwrap(), 2);
        let w1 = b.get_job("w1").await.unwrap().unwrap();
        assert_eq!(w1.lock, "__blocked");
        assert_eq!(w1.flow.as_ref().map(|f| f.pending), Some(1));
        assert_eq!(
            b.get_job("w2").await.unwrap(),
            None,
            "refused at the commit"
        );
        // its id is free again, under any jobtype
        assert_eq!(
            b.add_jobs(&[NewJob::new("w2", "other", "")], LATER)
                .await
                .unwrap()
                .new,
            ["w2"]
        );
        finish(&b, "ty", "x2", 200, LATER).await;
        let w1 = b.get_job("w1").await.unwrap().unwrap();
        assert_eq!((w1.lock.as_str(), unblocked(&w1)), (LOCK_FREE, 1));
        assert_eq!(b.settle_flows(LATER + 120_000, 100).await.unwrap(), 0);
    });
}

/// A target archived between the link and the commit of its waiter (the
/// link ran, then the add crashed) delivers to the staged job: its edge is
/// done, and the commit that `settle_flows` makes frees it once, with
/// `Unblocked`, or archives it cancelled for a failed dependency. The link
/// is made by hand here, as `link.lua` makes it (`SADD up:<X>`, `w`).
#[test]
fn a_delivery_to_a_staged_job_is_kept_for_its_commit() {
    with_stores(|a, b, prefix| async move {
        let targets = [NewJob::new("x", "tx", ""), NewJob::new("y", "tx", "")];
        a.add_jobs(&targets, T0).await.unwrap();
        a.set_flow_delivery(false);
        let ws = [
            NewJob::new("w1", "tw", "").depends_on(["x"]),
            NewJob::new("w2", "tw", "").depends_on(["y"]),
        ];
        a.add_jobs(&ws, T0).await.unwrap();
        let mut c = conn().await;
        for (x, w) in [("x", "w1"), ("y", "w2")] {
            let up = format!("{{{prefix}:tx}}:up:{x}");
            let _: i64 = cmd(&mut c, &["SADD", &up, &format!("tw {w}")]).await;
            let key = format!("{{{prefix}:tx}}:j:{x}");
            let _: i64 = cmd(&mut c, &["HSET", &key, "w", "1"]).await;
        }
        finish(&b, "tx", "x", 200, T0 + 1_000).await;
        finish(&b, "tx", "y", 500, T0 + 1_000).await;
        assert_eq!(b.get_job("w1").await.unwrap(), None, "still staged");
        assert_eq!(b.settle_flows(LATER, 100).await.unwrap(), 2);
        let w1 = b.get_job("w1").await.unwrap().unwrap();
        assert_eq!((w1.lock.as_str(), unblocked(&w1)), (LOCK_FREE, 1));
        assert_eq!(w1.dt, LATER, "dt = max(not-before, now)");
        let w2 = b.get_job("w2").await.unwrap().unwrap();
        assert_eq!(w2.lock, LOCK_DONE);
        let r = w2.result.unwrap();
        assert_eq!(r.code, ResultCode::Cancelled);
        assert_eq!(r.output, b"[jobstore] dependency y ended error\n");
        let waits = b.job_waits("w2", None, 10).await.unwrap().unwrap();
        assert_eq!(
            (waits.pending, waits.done.get(&ResultCode::Error)),
            (0, Some(&1))
        );
    });
}

/// A failure at the head of a chain through 30 jobtypes (each hop another
/// slot) cancels every job of it, each naming its own dependency, in one
/// release call; a chain of 1,000 alternating two jobtypes does too, and
/// one of 1,000 in one jobtype is one script's cascade. The outboxes are
/// empty afterwards and every waiter's edge is done.
#[test]
fn failures_cascade_through_many_jobtypes_and_long_chains() {
    with_stores(|a, _b, prefix| async move {
        for (name, len, types) in [("m", 30, 30), ("alt", 1_000, 2), ("one", 1_000, 1)] {
            let jt = |i: usize| format!("{name}{}", i % types);
            let id = |i: usize| format!("{name}-{i:04}");
            a.add_jobs(&[NewJob::new(id(0), jt(0), "")], T0)
                .await
                .unwrap();
            for i in 1..len {
                let job = NewJob::new(id(i), jt(i), "").depends_on([id(i - 1)]);
                assert_eq!(a.add_jobs(&[job], T0).await.unwrap().new, [id(i)]);
            }
            let last = a.get_job(&id(len - 1)).await.unwrap().unwrap();
            assert_eq!(last.state(T0), JobState::Blocked);
            finish(&a, &jt(0), &id(0), 500, T0 + 1_000).await;
            for i in [1, len / 2, len - 1] {
                let job = a.get_job(&id(i)).await.unwrap().unwrap();
                assert_eq!(job.lock, LOCK_DONE, "{name} {i}");
                let r = job.result.unwrap();
                let code = if i == 1 { "error" } else { "cancelled" };
                let note = format!("[jobstore] dependency {} ended {code}\n", id(i - 1));
                assert_eq!(
                    (r.code, r.output),
                    (ResultCode::Cancelled, note.into_bytes())
                );
                let waits = a.job_waits(&id(i), None, 10).await.unwrap().unwrap();
                assert_eq!(waits.pending, 0);
            }
            let counts = a.job_counts(T0 + 1_000).await.unwrap();
            let cancelled: u64 = counts
                .iter()
                .filter(|c| c.jobtype.starts_with(name))
                .map(|c| c.archived.get(&ResultCode::Cancelled).copied().unwrap_or(0))
                .sum();
            assert_eq!(cancelled, len as u64 - 1, "{name}");
            let mut c = conn().await;
            for t in 0..types {
                let fx = format!("{{{prefix}:{name}{t}}}:fx");
                assert_eq!(cmd::<i64>(&mut c, &["ZCARD", &fx]).await, 0, "{fx}");
            }
        }
    });
}

/// One target with waiters in ten jobtypes under the policy `Run`: a
/// failure frees them all, each jobtype's claim hands its waiter out, and
/// the waiters list as waiting, none as blocked.
#[test]
fn a_fan_out_over_many_jobtypes_frees_every_waiter() {
    with_stores(|a, b, _| async move {
        a.add_jobs(&[NewJob::new("x", "src", "")], T0)
            .await
            .unwrap();
        let waiters: Vec<NewJob> = (0..10)
            .map(|k| {
                NewJob::new(format!("w{k}"), format!("fan{k}"), "")
                    .depends_on(["x"])
                    .on_dependency_failure(DependencyFailure::Run)
            })
            .collect();
        assert_eq!(a.add_jobs(&waiters, T0).await.unwrap().new.len(), 10);
        let q = JobQuery::new(JobState::Blocked);
        assert_eq!(b.list_jobs(&q, T0).await.unwrap().jobs.len(), 10);
        finish(&a, "src", "x", 500, T0 + 1_000).await;
        for k in 0..10 {
            let got = b
                .claim_jobs(&format!("fan{k}"), 5, "o", MIN, T0 + 1_000)
                .await
                .unwrap();
            assert_eq!(got.len(), 1, "fan{k}");
            let flow = got[0].flow.as_ref().unwrap();
            assert_eq!((flow.pending, flow.has_edges), (0, true));
        }
        assert!(b.list_jobs(&q, T0).await.unwrap().jobs.is_empty());
    });
}

/// A namespace written before dependencies: a job hash and index entry as
/// an older version stored them (no `w`, no `dp`, no `blocked` key) reads,
/// counts and lists as before, and can be depended on: the link marks it,
/// and its archive by the new scripts frees the waiter.
#[test]
fn jobs_stored_before_dependencies_can_be_depended_on() {
    with_stores(|a, _b, prefix| async move {
        let mut c = conn().await;
        let key = format!("{{{prefix}:old}}:j:o1");
        let dt = format!("{T0:015}");
        let _: i64 = cmd(
            &mut c,
            &[
                "HSET", &key, "d", "", "p", "0", "dt", &dt, "l", "", "a", "0", "c", &dt, "g", "tok",
            ],
        )
        .await;
        let ready = format!("{{{prefix}:old}}:ready");
        let _: i64 = cmd(&mut c, &["ZADD", &ready, "0", &format!("{dt}o1")]).await;
        // the index bucket of "o1" (FNV-1a mod 16), as reserve.lua writes it
        let b = "o1".bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, x| {
            (h ^ u64::from(x)).wrapping_mul(0x0000_0100_0000_01b3)
        }) % 16;
        let bucket = format!("{{{prefix}|i{b}}}");
        let _: i64 = cmd(&mut c, &["HSET", &bucket, "o1", "old tok"]).await;
        let _: i64 = cmd(&mut c, &["SADD", &format!("{{{prefix}}}:jobtypes"), "old"]).await;
        let counts = a.job_counts(T0).await.unwrap();
        assert_eq!((counts[0].waiting, counts[0].blocked), (1, 0));
        let w = NewJob::new("w", "new", "").depends_on(["o1"]);
        assert_eq!(a.add_jobs(&[w], T0).await.unwrap().new, ["w"]);
        assert_eq!(cmd::<String>(&mut c, &["HGET", &key, "w"]).await, "1");
        finish(&a, "old", "o1", 200, T0 + 1_000).await;
        let job = a.get_job("w").await.unwrap().unwrap();
        assert_eq!((job.lock.as_str(), unblocked(&job)), (LOCK_FREE, 1));
        assert_eq!(
            cmd::<i64>(&mut c, &["HEXISTS", &key, "w"]).await,
            0,
            "marker gone"
        );
    });
}

/// A held edge lives in `uh:<X>` of the target's slot, which outlives the
/// target's failed ends (with its marker `w`): run again and failing again
/// holds the edge with the new result, ending ok resolves it and frees
/// the waiter, and then neither `uh:<X>` nor `w` is left. The policy and
/// `with_outputs` are the waiter's `dp` (`"<open> h o"`).
#[test]
fn a_held_edge_survives_runs_again_of_its_target() {
    with_stores(|a, b, prefix| async move {
        a.add_jobs(&[NewJob::new("x", "tx", "")], T0).await.unwrap();
        let w = NewJob::new("w", "tw", "")
            .depends_on(["x"])
            .on_dependency_failure(DependencyFailure::Hold)
            .with_outputs();
        a.add_jobs(&[w], T0).await.unwrap();
        let mut c = conn().await;
        let (uh, xkey) = (
            format!("{{{prefix}:tx}}:uh:x"),
            format!("{{{prefix}:tx}}:j:x"),
        );
        let (up, ek, wkey) = (
            format!("{{{prefix}:tx}}:up:x"),
            format!("{{{prefix}:tw}}:e:w"),
            format!("{{{prefix}:tw}}:j:w"),
        );
        assert_eq!(
            cmd::<Vec<String>>(&mut c, &["SMEMBERS", &uh]).await,
            ["tw w"]
        );
        assert_eq!(cmd::<i64>(&mut c, &["EXISTS", &up]).await, 0);
        assert_eq!(cmd::<String>(&mut c, &["HGET", &wkey, "dp"]).await, "1 h o");

        let mut now = T0 + 1_000;
        for status in [500, 404] {
            finish(&a, "tx", "x", status, now).await;
            let code = ResultCode::from_status(status);
            let edge = format!("0 h {code} {status}");
            assert_eq!(cmd::<String>(&mut c, &["HGET", &ek, "x"]).await, edge);
            assert_eq!(
                cmd::<Vec<String>>(&mut c, &["SMEMBERS", &uh]).await,
                ["tw w"]
            );
            assert_eq!(cmd::<String>(&mut c, &["HGET", &xkey, "w"]).await, "1");
            let job = b.get_job("w").await.unwrap().unwrap();
            assert_eq!(job.lock, "__blocked");
            let flow = job.flow.unwrap();
            assert_eq!((flow.pending, flow.with_outputs), (1, true));
            now += 1_000;
            assert_eq!(
                b.rerun_jobs(&["x".to_owned()], Duration::ZERO, now)
                    .await
                    .unwrap(),
                ["x"]
            );
        }
        finish(&b, "tx", "x", 200, now).await;
        let job = a.get_job("w").await.unwrap().unwrap();
        assert_eq!(
            (job.lock.as_str(), unblocked(&job), job.dt),
            (LOCK_FREE, 1, now)
        );
        assert_eq!(cmd::<String>(&mut c, &["HGET", &wkey, "dp"]).await, "0 h o");
        assert_eq!(
            cmd::<String>(&mut c, &["HGET", &ek, "x"]).await,
            "0 d ok 200"
        );
        assert_eq!(cmd::<i64>(&mut c, &["EXISTS", &uh]).await, 0);
        assert_eq!(cmd::<i64>(&mut c, &["HEXISTS", &xkey, "w"]).await, 0);
    });
}

/// A dependency already failed at the add is held at once and registered
/// in `uh:<X>`; deleting the target (it never runs again) drops `uh:<X>`,
/// and so does purging an archived one, the waiters staying held.
#[test]
fn held_edges_on_a_deleted_or_purged_target_stay_held() {
    with_stores(|a, b, prefix| async move {
        let xs = [NewJob::new("x", "tx", ""), NewJob::new("y", "tx", "")];
        a.add_jobs(&xs, T0).await.unwrap();
        let now = T0 + 1_000;
        finish(&a, "tx", "x", 500, now).await;
        let w = NewJob::new("w", "tw", "")
            .depends_on(["x", "y"])
            .on_dependency_failure(DependencyFailure::Hold);
        a.add_jobs(&[w], now).await.unwrap();
        let mut c = conn().await;
        let uh = |x: &str| format!("{{{prefix}:tx}}:uh:{x}");
        assert_eq!(
            cmd::<Vec<String>>(&mut c, &["SMEMBERS", &uh("x")]).await,
            ["tw w"]
        );
        assert_eq!(
            cmd::<Vec<String>>(&mut c, &["SMEMBERS", &uh("y")]).await,
            ["tw w"]
        );
        let waits = b.job_waits("w", None, 10).await.unwrap().unwrap();
        assert_eq!((waits.pending, waits.held), (1, 1));

        // y (live) deleted: held as cancelled, uh:y gone
        let out = b.delete_jobs(&["y".to_owned()], now).await.unwrap();
        assert_eq!(out.deleted, ["y"]);
        assert_eq!(cmd::<i64>(&mut c, &["EXISTS", &uh("y")]).await, 0);
        let waits = b.job_waits("w", None, 10).await.unwrap().unwrap();
        assert_eq!((waits.pending, waits.held), (0, 2));
        // x (archived) purged: uh:x gone, the edge still held
        let purged = b.purge_archived(LATER, &[ResultCode::Error]).await.unwrap();
        assert_eq!(purged, 1);
        assert_eq!(cmd::<i64>(&mut c, &["EXISTS", &uh("x")]).await, 0);
        let job = a.get_job("w").await.unwrap().unwrap();
        assert_eq!(
            (job.lock.as_str(), job.flow.unwrap().pending),
            ("__blocked", 2)
        );
        assert_eq!(
            a.unblock_jobs(&["w".to_owned()], LATER).await.unwrap(),
            ["w"]
        );
    });
}

/// `unblock_jobs` of a job with 1,000 edges (pending and held, in another
/// slot) is one call: every edge skipped, the job free; the targets' ends
/// afterwards change nothing, and leave no `up`/`uh` key behind.
/// `waits_of` answers what `job_waits` does, before and after.
#[test]
fn unblock_of_a_job_with_a_thousand_edges() {
    with_stores(|a, b, prefix| async move {
        let targets: Vec<String> = (0..1_000).map(|i| format!("t{i:04}")).collect();
        let jobs: Vec<NewJob> = targets
            .iter()
            .map(|id| NewJob::new(id.clone(), "tx", ""))
            .collect();
        a.add_jobs(&jobs, T0).await.unwrap();
        let now = T0 + 1_000;
        let got = a.claim_jobs("tx", 1_000, "o", MIN, now).await.unwrap();
        assert_eq!(got.len(), 1_000);
        // the first hundred fail before the add: held at once
        let failed = targets[..100].to_vec();
        a.archive_jobs(&failed, "o", JobResult::from_status(500), now)
            .await
            .unwrap();
        let w = NewJob::new("w", "tw", "")
            .depends_on(targets.clone())
            .on_dependency_failure(DependencyFailure::Hold);
        a.add_jobs(&[w], now).await.unwrap();
        let waits = b.job_waits("w", None, 10).await.unwrap().unwrap();
        assert_eq!((waits.pending, waits.held), (900, 100));
        // waits_of: the counts and first page job_waits gives, the page
        // chosen in the script
        let w = ["w".to_owned()];
        assert_eq!(a.waits_of(&w, 10).await.unwrap(), [waits]);
        let all = b.job_waits("w", None, 1_000).await.unwrap().unwrap();
        assert_eq!(a.waits_of(&w, 1_000).await.unwrap(), [all]);

        let now = now + 1_000;
        assert_eq!(b.unblock_jobs(&["w".to_owned()], now).await.unwrap(), ["w"]);
        let job = a.get_job("w").await.unwrap().unwrap();
        assert_eq!(
            (job.lock.as_str(), unblocked(&job), job.dt),
            (LOCK_FREE, 1, now)
        );
        let waits = b.job_waits("w", None, 10).await.unwrap().unwrap();
        assert_eq!((waits.pending, waits.held, waits.skipped), (0, 0, 1_000));
        assert_eq!(a.waits_of(&w, 10).await.unwrap(), [waits]);

        let rest = targets[100..].to_vec();
        a.archive_jobs(&rest, "o", JobResult::from_status(500), now)
            .await
            .unwrap();
        let waits = b.job_waits("w", None, 10).await.unwrap().unwrap();
        assert_eq!(waits.skipped, 1_000);
        let job = a.get_job("w").await.unwrap().unwrap();
        assert_eq!((job.lock.as_str(), unblocked(&job)), (LOCK_FREE, 1));
        // failed ends keep uh:<X> (a run again could resolve it): a delete
        // of the targets drops them
        a.delete_jobs(&targets, now).await.unwrap();
        let mut c = conn().await;
        let left: Vec<String> = cmd(&mut c, &["KEYS", &format!("{{{prefix}:tx}}:u*")]).await;
        assert!(left.is_empty(), "{left:?}");
    });
}

/// `unblock_jobs` racing an end recorded in the target's outbox but not
/// delivered (a crash): the waiter is unblocked, and the delivery that
/// `settle_flows` makes later finds the edge skipped and changes nothing
/// (under `Cancel`, the waiter is not cancelled); under `Hold`, a held
/// edge whose target's end after a run again is left undelivered the same.
#[test]
fn unblock_racing_an_undelivered_end_then_settled() {
    with_stores(|a, b, prefix| async move {
        let xs = [
            NewJob::new("x", "tx", ""),
            NewJob::new("y", "tx", "").priority(1),
        ];
        a.add_jobs(&xs, T0).await.unwrap();
        let ws = [
            NewJob::new("wc", "tw", "").depends_on(["x"]),
            NewJob::new("wh", "tw", "")
                .depends_on(["y"])
                .on_dependency_failure(DependencyFailure::Hold),
        ];
        a.add_jobs(&ws, T0).await.unwrap();
        let now = T0 + 1_000;
        finish(&a, "tx", "y", 500, now).await;
        let now = now + 1_000;
        a.rerun_jobs(&["y".to_owned()], Duration::ZERO, now)
            .await
            .unwrap();
        a.set_flow_delivery(false);
        let got = a.claim_jobs("tx", 2, "o", MIN, now).await.unwrap();
        assert_eq!(got.len(), 2);
        let both = ["x".to_owned(), "y".to_owned()];
        a.archive_jobs(&both, "o", JobResult::from_status(500), now)
            .await
            .unwrap();
        let mut c = conn().await;
        let fx = format!("{{{prefix}:tx}}:fx");
        assert_eq!(cmd::<i64>(&mut c, &["ZCARD", &fx]).await, 2, "recorded");

        let ids = ["wc".to_owned(), "wh".to_owned()];
        let mut got = b.unblock_jobs(&ids, now).await.unwrap();
        got.sort();
        assert_eq!(got, ids);
        assert_eq!(b.settle_flows(LATER, 100).await.unwrap(), 2);
        assert_eq!(cmd::<i64>(&mut c, &["ZCARD", &fx]).await, 0, "acknowledged");
        for id in &ids {
            let job = b.get_job(id).await.unwrap().unwrap();
            assert_eq!((job.lock.as_str(), unblocked(&job)), (LOCK_FREE, 1), "{id}");
            let waits = b.job_waits(id, None, 10).await.unwrap().unwrap();
            assert_eq!(
                (waits.pending, waits.held, waits.skipped),
                (0, 0, 1),
                "{id}"
            );
        }
        assert!(b.unblock_jobs(&ids, LATER).await.unwrap().is_empty());
        let many = a.waits_of(&ids, 10).await.unwrap();
        assert_eq!(many.len(), 2);
        assert!(many.iter().all(|w| w.skipped == 1 && w.edges.len() == 1));
    });
}

/// An add under `Hold` whose link and commit never run (a crash right
/// after `add.lua`), on a dependency that already failed: `settle_flows`
/// links it again under its policy (the waiter in `uh:<X>`) and commits
/// it blocked with the edge held; the target run again and ending ok
/// frees it.
#[test]
fn a_staged_job_under_hold_is_settled_with_its_edge_held() {
    with_stores(|a, b, prefix| async move {
        a.add_jobs(&[NewJob::new("x", "tx", "")], T0).await.unwrap();
        finish(&a, "tx", "x", 500, T0).await;
        a.set_flow_delivery(false);
        let w = NewJob::new("w", "tw", "")
            .depends_on(["x"])
            .on_dependency_failure(DependencyFailure::Hold);
        a.add_jobs(&[w], T0).await.unwrap();
        assert_eq!(b.get_job("w").await.unwrap(), None, "staged");
        assert_eq!(b.settle_flows(LATER, 100).await.unwrap(), 1);
        let mut c = conn().await;
        let uh = format!("{{{prefix}:tx}}:uh:x");
        assert_eq!(
            cmd::<Vec<String>>(&mut c, &["SMEMBERS", &uh]).await,
            ["tw w"]
        );
        let job = b.get_job("w").await.unwrap().unwrap();
        assert_eq!(
            (job.lock.as_str(), job.flow.unwrap().pending),
            ("__blocked", 1)
        );
        let waits = b.job_waits("w", None, 10).await.unwrap().unwrap();
        assert_eq!((waits.pending, waits.held), (0, 1));
        b.rerun_jobs(&["x".to_owned()], Duration::ZERO, LATER)
            .await
            .unwrap();
        finish(&b, "tx", "x", 200, LATER).await;
        let job = a.get_job("w").await.unwrap().unwrap();
        assert_eq!((job.lock.as_str(), unblocked(&job)), (LOCK_FREE, 1));
        assert_eq!(cmd::<i64>(&mut c, &["EXISTS", &uh]).await, 0);
    });
}
