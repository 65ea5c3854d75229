//! Dependencies on MongoDB, where the suite cannot reach: a delivery
//! stopped between its record and its apply (a crash) and finished by
//! `settle_flows`; a store from before dependencies; a cancel cascading
//! over many jobtypes; a chain of 1,000.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt;
use jobstore_api::{
    DependencyFailure, Error, EventKind, JobResult, JobStore, JobStoreExt, LOCK_BLOCKED, LOCK_DONE,
    LOCK_FREE, NewJob, ResultCode,
};
use jobstore_conformance::services;
use jobstore_mongo::{MongoOptions, MongoStore, RoundTripHook};
use mongodb::bson::doc;

const T0: i64 = 1_700_000_000_000;
const SEC: i64 = 1_000;
const LEASE: Duration = Duration::from_secs(60);

/// A store on a fresh database; runs `body` and drops the database.
async fn with_store<F, Fut>(body: F)
where
    F: FnOnce(String, MongoOptions, MongoStore) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(url) = services::mongo_url().await else {
        return;
    };
    let ns = services::unique_namespace();
    let options = MongoOptions::default().database(&ns);
    let s = MongoStore::connect_with(&url, options.clone())
        .await
        .expect("connect");
    let db = s.database().clone();
    let result = std::panic::AssertUnwindSafe(body(url, options, s))
        .catch_unwind()
        .await;
    db.drop().await.expect("drop test database");
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

fn ids(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

async fn lock_of(s: &MongoStore, id: &str) -> String {
    s.get_job(id).await.unwrap().expect(id).lock
}

/// Claims `id` (the only eligible job of `jobtype`) and archives it with
/// `status`.
async fn run(s: &MongoStore, jobtype: &str, id: &str, status: u16, now: i64) {
    let got = s.claim_jobs(jobtype, 10, "own", LEASE, now).await.unwrap();
    assert_eq!(got.len(), 1, "{id}");
    assert_eq!(got[0].id, id);
    let out = s
        .archive_jobs(&ids(&[id]), "own", JobResult::from_status(status), now)
        .await
        .unwrap();
    assert_eq!(out, ids(&[id]));
}

/// A release whose delivery is stopped after the archive recorded its
/// effects (a crash between record and apply) still answers with the
/// job archived; the waiters stay blocked; `settle_flows` leaves records
/// younger than its grace alone and delivers the older ones, once: a
/// second settle finds nothing, and the waiter is unblocked exactly once.
/// A cancel's record is finished the same way, cascading.
#[tokio::test]
async fn settle_flows_finishes_a_delivery_a_crash_stopped() {
    with_store(|_, _, s| async move {
        let stop = Arc::new(AtomicBool::new(true));
        let flag = stop.clone();
        let hook: RoundTripHook = Arc::new(move |name, _| {
            let stop = flag.load(Ordering::SeqCst) && name == "deliver (before)";
            async move {
                if stop {
                    Err(Error::backend_msg("crash before the delivery"))
                } else {
                    Ok(())
                }
            }
            .boxed()
        });
        let s = s.with_round_trip_hook(hook);
        s.add_jobs(&[NewJob::new("x", "t", ""), NewJob::new("y", "t2", "")], T0)
            .await
            .unwrap();
        let out = s
            .add_jobs(
                &[
                    NewJob::new("w", "tw", "").depends_on(["x"]),
                    NewJob::new("v", "tw", "").depends_on(["y"]),
                ],
                T0,
            )
            .await
            .unwrap();
        assert_eq!(out.new, ids(&["w", "v"]));
        s.add_jobs(&[NewJob::new("below", "tb", "").depends_on(["v"])], T0)
            .await
            .unwrap();
        let now = T0 + SEC;
        run(&s, "t", "x", 200, now).await;
        assert_eq!(lock_of(&s, "x").await, LOCK_DONE, "the archive happened");
        assert_eq!(lock_of(&s, "w").await, LOCK_BLOCKED, "not delivered");
        // A cancel recorded, not delivered.
        let out = s.cancel_jobs(&ids(&["y"]), now).await.unwrap();
        assert_eq!(out.cancelled, ids(&["y"]));
        assert_eq!(lock_of(&s, "v").await, LOCK_BLOCKED);
        stop.store(false, Ordering::SeqCst);
        assert_eq!(
            s.settle_flows(now + 30 * SEC, 100).await.unwrap(),
            0,
            "grace"
        );
        let later = now + 61 * SEC;
        assert!(s.settle_flows(later, 100).await.unwrap() >= 2);
        let w = s.get_job("w").await.unwrap().unwrap();
        assert_eq!((w.lock.as_str(), w.dt), (LOCK_FREE, later));
        let unblocked = w
            .history
            .iter()
            .filter(|e| e.what == EventKind::Unblocked)
            .count();
        assert_eq!(unblocked, 1);
        for id in ["v", "below"] {
            let job = s.get_job(id).await.unwrap().unwrap();
            assert_eq!(job.lock, LOCK_DONE, "{id}");
            assert_eq!(job.result.map(|r| r.code), Some(ResultCode::Cancelled));
        }
        assert_eq!(s.settle_flows(later + 61 * SEC, 100).await.unwrap(), 0);
        let w = s.get_job("w").await.unwrap().unwrap();
        assert_eq!(w.history.len(), 2, "added, unblocked: {:?}", w.history);
    })
    .await;
}

/// An add that died after staging its waiter (the commit never ran)
/// leaves a document that reads as absent, holds the id until
/// `settle_flows` removes it past the grace, and nothing else.
#[tokio::test]
async fn settle_flows_removes_a_staged_add_that_died() {
    with_store(|_, _, s| async move {
        s.add_jobs(&[NewJob::new("x", "t", "")], T0).await.unwrap();
        let fail = Arc::new(AtomicBool::new(true));
        let flag = fail.clone();
        let hook: RoundTripHook = Arc::new(move |name, _| {
            let stop = flag.load(Ordering::SeqCst) && name == "add (link)";
            async move {
                if stop {
                    Err(Error::backend_msg("crash after the link"))
                } else {
                    Ok(())
                }
            }
            .boxed()
        });
        let s = s.with_round_trip_hook(hook);
        let r = s
            .add_jobs(&[NewJob::new("w", "tw", "").depends_on(["x"])], T0)
            .await;
        assert!(r.is_err());
        fail.store(false, Ordering::SeqCst);
        assert_eq!(
            s.get_job("w").await.unwrap(),
            None,
            "staged reads as absent"
        );
        assert_eq!(s.job_waits("w", None, 10).await.unwrap(), None);
        let counts = s.job_counts(T0).await.unwrap();
        assert!(counts.iter().all(|c| c.jobtype != "tw" || c.total() == 0));
        s.settle_flows(T0 + 61 * SEC, 10).await.unwrap();
        let out = s
            .add_jobs(
                &[NewJob::new("w", "tw", "").depends_on(["x"])],
                T0 + 62 * SEC,
            )
            .await
            .unwrap();
        assert_eq!(out.new, ids(&["w"]), "the id is free again");
        assert_eq!(lock_of(&s, "w").await, LOCK_BLOCKED);
    })
    .await;
}

/// A store written before dependencies: jobs without any flow field and
/// no `settle` index. A connect creates the index; old jobs become
/// targets and waiters wait for them; old plain jobs are released as
/// before.
#[tokio::test]
async fn a_store_from_before_dependencies_takes_them() {
    with_store(|url, options, s| async move {
        s.add_jobs(
            &[NewJob::new("old", "t", ""), NewJob::new("old2", "t", "")],
            T0,
        )
        .await
        .unwrap();
        s.database()
            .collection::<mongodb::bson::Document>("jobs")
            .drop_index("settle")
            .await
            .unwrap();
        let s = MongoStore::connect_with(&url, options).await.unwrap();
        let names = s
            .database()
            .collection::<mongodb::bson::Document>("jobs")
            .list_index_names()
            .await
            .unwrap();
        // The emulator names indexes by their keys.
        assert!(
            names.iter().any(|n| n == "settle" || n.contains("fx_at")),
            "{names:?}"
        );
        let raw = s
            .database()
            .collection::<mongodb::bson::Document>("jobs")
            .find_one(doc! { "_id": "old2" })
            .await
            .unwrap()
            .unwrap();
        assert!(raw.get("fx").is_none(), "a plain job carries no marker");
        s.add_jobs(&[NewJob::new("w", "tw", "").depends_on(["old"])], T0)
            .await
            .unwrap();
        let now = T0 + SEC;
        let got = s.claim_jobs("t", 10, "own", LEASE, now).await.unwrap();
        assert_eq!(got.len(), 2);
        let out = s
            .archive_jobs(
                &ids(&["old", "old2"]),
                "own",
                JobResult::from_status(200),
                now,
            )
            .await
            .unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(lock_of(&s, "w").await, LOCK_FREE);
    })
    .await;
}

/// A failure cancels down a chain crossing 40 jobtypes; the `run`
/// waiters beside it run; counts see every cancel.
#[tokio::test]
async fn a_cancel_cascades_over_many_jobtypes() {
    with_store(|_, _, s| async move {
        s.add_jobs(&[NewJob::new("c0", "k0", "")], T0)
            .await
            .unwrap();
        for i in 1..40 {
            let jobs = [
                NewJob::new(format!("c{i}"), format!("k{i}"), "")
                    .depends_on([format!("c{}", i - 1)]),
                NewJob::new(format!("r{i}"), format!("k{i}"), "")
                    .depends_on([format!("c{}", i - 1)])
                    .on_dependency_failure(DependencyFailure::Run),
            ];
            let out = s.add_jobs(&jobs, T0).await.unwrap();
            assert_eq!(out.new.len(), 2);
        }
        let now = T0 + SEC;
        run(&s, "k0", "c0", 500, now).await;
        for i in 1..40 {
            let c = s.get_job(&format!("c{i}")).await.unwrap().unwrap();
            assert_eq!(c.lock, LOCK_DONE, "c{i}");
            let r = s.get_job(&format!("r{i}")).await.unwrap().unwrap();
            assert_eq!((r.lock.as_str(), r.dt), (LOCK_FREE, now), "r{i}");
        }
        let counts = s.job_counts(now).await.unwrap();
        let cancelled: u64 = counts
            .iter()
            .map(|c| c.archived.get(&ResultCode::Cancelled).copied().unwrap_or(0))
            .sum();
        assert_eq!(cancelled, 39);
        assert_eq!(counts.iter().map(|c| c.blocked).sum::<u64>(), 0);
    })
    .await;
}

/// A chain of 1,000 (each job waiting for the one before): all blocked
/// but the head, claims see only the head, two steps run it forward one
/// job at a time, and a failure of the next cancels the 997 after it.
#[tokio::test]
async fn a_chain_of_a_thousand() {
    with_store(|_, _, s| async move {
        const N: usize = 1_000;
        s.add_jobs(&[NewJob::new("n0000", "chain", "")], T0)
            .await
            .unwrap();
        for i in 1..N {
            let job =
                NewJob::new(format!("n{i:04}"), "chain", "").depends_on([format!("n{:04}", i - 1)]);
            s.add_jobs(&[job], T0).await.unwrap();
        }
        let counts = s.job_counts(T0).await.unwrap();
        assert_eq!((counts[0].waiting, counts[0].blocked), (1, N as u64 - 1));
        for i in 0..2 {
            run(&s, "chain", &format!("n{i:04}"), 200, T0 + 1 + i as i64).await;
        }
        run(&s, "chain", "n0002", 500, T0 + 10).await;
        let counts = s.job_counts(T0 + 10).await.unwrap();
        assert_eq!(counts[0].blocked, 0);
        assert_eq!(
            counts[0].archived.get(&ResultCode::Cancelled),
            Some(&(N as u64 - 3))
        );
        let last = s.get_job("n0999").await.unwrap().unwrap();
        assert_eq!(
            last.result.map(|r| r.output),
            Some(b"[jobstore] dependency n0998 ended cancelled\n".to_vec())
        );
    })
    .await;
}
