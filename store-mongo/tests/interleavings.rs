//! Another caller's operations placed between two round trips of one call
//! (through the store's round-trip hook), in the orders that once made a
//! call misreport what it did; and claims failed or cancelled after their
//! update, which must give their jobs back.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use jobstore_api::{
    Error, EventKind, Job, JobRelease, JobResult, JobStore, JobStoreExt, NewJob, Release, Repeat,
    Unique,
};
use jobstore_conformance::services;
use jobstore_mongo::{MongoOptions, MongoStore, RoundTripHook};

const T0: i64 = 1_700_000_000_000;
const MIN: Duration = Duration::from_secs(60);

/// Two stores on one fresh database, each with its own client; runs `body`
/// and drops the database whatever happens.
async fn with_two_stores<F, Fut>(body: F)
where
    F: FnOnce(MongoStore, MongoStore) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(url) = services::mongo_url().await else {
        return;
    };
    let ns = services::unique_namespace();
    let options = MongoOptions::default().database(&ns);
    let a = MongoStore::connect_with(&url, options.clone())
        .await
        .expect("connect a");
    let b = MongoStore::connect_with(&url, options)
        .await
        .expect("connect b");
    let db = a.database().clone();
    let result = std::panic::AssertUnwindSafe(body(a, b))
        .catch_unwind()
        .await;
    db.drop().await.expect("drop test database");
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// A hook that runs `step(n)` after round trip `n` of `op` (other
/// operations pass through).
fn hook_on<F, Fut>(op: &'static str, step: F) -> RoundTripHook
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let step = Arc::new(step);
    Arc::new(move |name, n| {
        let step = step.clone();
        async move {
            if name == op {
                step(n).await;
            }
            Ok(())
        }
        .boxed()
    })
}

fn ids(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Review finding 3: owner A renews [x, y] (y is B's, so the call needs
/// its read-back); between the update and the read-back another task of A
/// renews [x, z]. The first renew did renew x and must say so.
#[tokio::test]
async fn renew_reports_a_job_renewed_again_before_its_read_back() {
    with_two_stores(|a, b| async move {
        let jobs = [
            NewJob::new("x", "t", "x"),
            NewJob::new("z", "t", "z"),
            NewJob::new("y", "u", "y"),
        ];
        a.add_jobs(&jobs, T0).await.unwrap();
        assert_eq!(a.claim_jobs("t", 2, "A", MIN, T0).await.unwrap().len(), 2);
        assert_eq!(b.claim_jobs("u", 1, "B", MIN, T0).await.unwrap().len(), 1);
        let other_task = b.clone();
        let a = a.with_round_trip_hook(hook_on("renew", move |n| {
            let other_task = other_task.clone();
            async move {
                if n == 1 {
                    let r = other_task
                        .renew_locks(&ids(&["x", "z"]), "A", MIN * 2, T0 + 2)
                        .await
                        .unwrap()
                        .renewed;
                    assert_eq!(r, ids(&["x", "z"]), "the second renew");
                }
            }
        }));
        let renewed = a
            .renew_locks(&ids(&["x", "y"]), "A", MIN, T0 + 1)
            .await
            .unwrap()
            .renewed;
        assert_eq!(renewed, ids(&["x"]), "x was renewed by the first call");
        let x = a.get_job("x").await.unwrap().unwrap();
        assert_eq!((x.lock.as_str(), x.dt), ("A", T0 + 2 + 120_000));
    })
    .await;
}

/// Finding 3 for a release: A releases [x, y] for retry (y is B's);
/// before A's read-back, C claims x and renews it. A's release did free
/// x and must say so.
#[tokio::test]
async fn release_reports_a_job_changed_again_before_its_read_back() {
    with_two_stores(|a, b| async move {
        let jobs = [NewJob::new("x", "t", "x"), NewJob::new("y", "u", "y")];
        a.add_jobs(&jobs, T0).await.unwrap();
        assert_eq!(a.claim_jobs("t", 1, "A", MIN, T0).await.unwrap().len(), 1);
        assert_eq!(b.claim_jobs("u", 1, "B", MIN, T0).await.unwrap().len(), 1);
        let c = b.clone();
        let a = a.with_round_trip_hook(hook_on("release", move |n| {
            let c = c.clone();
            async move {
                if n == 1 {
                    let got = c.claim_jobs("t", 1, "C", MIN, T0 + 2).await.unwrap();
                    assert_eq!(got.len(), 1, "C claims x");
                    let r = c
                        .renew_locks(&ids(&["x"]), "C", MIN, T0 + 3)
                        .await
                        .unwrap()
                        .renewed;
                    assert_eq!(r, ids(&["x"]));
                }
            }
        }));
        let how = Release::Retry {
            delay: Duration::ZERO,
        };
        let released = a
            .release_all(&ids(&["x", "y"]), "A", &how, T0 + 1)
            .await
            .unwrap();
        assert_eq!(released, ids(&["x"]), "x was released by A");
    })
    .await;
}

/// A runs x again; between A's read of x's attempts and its update, B
/// runs x again, claims it twice (a retry between) and archives it: x is
/// archived again, with other attempts. A reads it again and runs it
/// again, and each run again keeps the attempts it reset.
#[tokio::test]
async fn a_run_again_reads_again_a_job_archived_anew_meanwhile() {
    use jobstore_api::{EventKind, JobResult, ResultCode};
    use std::sync::atomic::{AtomicBool, Ordering};

    with_two_stores(|a, b| async move {
        a.add_jobs(&[NewJob::new("x", "t", "x")], T0).await.unwrap();
        let ok = || Release::Archive(JobResult::new(ResultCode::Ok, 200));
        assert_eq!(a.claim_jobs("t", 1, "A", MIN, T0).await.unwrap().len(), 1);
        a.release_all(&ids(&["x"]), "A", &ok(), T0 + 1)
            .await
            .unwrap();
        let once = Arc::new(AtomicBool::new(false));
        let c = b.clone();
        let a = a.with_round_trip_hook(hook_on("rerun read", move |_| {
            let (c, once) = (c.clone(), once.clone());
            async move {
                if once.swap(true, Ordering::SeqCst) {
                    return;
                }
                let x = ids(&["x"]);
                assert_eq!(c.rerun_jobs(&x, Duration::ZERO, T0 + 2).await.unwrap(), x);
                let retry = Release::Retry {
                    delay: Duration::ZERO,
                };
                for (how, t) in [(retry, T0 + 3), (ok(), T0 + 5)] {
                    assert_eq!(c.claim_jobs("t", 1, "B", MIN, t).await.unwrap().len(), 1);
                    assert_eq!(c.release_all(&x, "B", &how, t + 1).await.unwrap(), x);
                }
                assert_eq!(c.get_job("x").await.unwrap().unwrap().attempts, 2);
            }
        }));
        let x = ids(&["x"]);
        assert_eq!(a.rerun_jobs(&x, Duration::ZERO, T0 + 10).await.unwrap(), x);
        let job = a.get_job("x").await.unwrap().unwrap();
        assert_eq!((job.attempts, job.lock.as_str()), (0, ""));
        let reruns: Vec<u32> = job
            .history
            .windows(2)
            .filter(|w| matches!(w[1].what, EventKind::Rerun { .. }))
            .map(|w| w[0].attempt)
            .collect();
        assert_eq!(reruns, [1, 2], "the attempts before each run again");
        // ... as A's event keeps them: those of x when A sent its update
        let raw = a
            .database()
            .collection::<mongodb::bson::Document>(&format!("{}jobs", a.prefix()))
            .find_one(mongodb::bson::doc! { "_id": "x" })
            .await
            .unwrap()
            .unwrap();
        let last = match raw.get_array("history").unwrap().last().unwrap() {
            mongodb::bson::Bson::Document(d) => d.get_i64("attempts_before").ok(),
            mongodb::bson::Bson::String(text) => text
                .replace(' ', "")
                .contains("\"attempts_before\":2")
                .then_some(2),
            other => panic!("history element {other:?}"),
        };
        assert_eq!(last, Some(2), "A's event keeps the attempts it reset");
    })
    .await;
}

/// Review finding 4: A's lease on d has run out; A deletes d while B
/// claims it (after A's first round trip) and deletes it (after A's
/// second). Exactly one of them deleted d, and only that one may say so.
#[tokio::test]
async fn delete_reports_only_what_the_caller_deleted() {
    with_two_stores(|a, b| async move {
        a.add_job(NewJob::new("d", "t", "d"), T0).await.unwrap();
        let lease = Duration::from_secs(1);
        assert_eq!(a.claim_jobs("t", 1, "A", lease, T0).await.unwrap().len(), 1);
        let now = T0 + 1500;
        let b_claimed = Arc::new(Mutex::new(Vec::new()));
        let b_deleted = Arc::new(Mutex::new(Vec::new()));
        let (bc, bd) = (b_claimed.clone(), b_deleted.clone());
        let a = a.with_round_trip_hook(hook_on("release", move |n| {
            let (b, bc, bd) = (b.clone(), bc.clone(), bd.clone());
            async move {
                if n == 1 {
                    let got = b.claim_jobs("t", 1, "B", MIN, now).await.unwrap();
                    bc.lock().unwrap().extend(got.into_iter().map(|j| j.id));
                } else if n == 2 {
                    let r = b
                        .release_all(&ids(&["d"]), "B", &Release::Delete, now)
                        .await
                        .unwrap();
                    bd.lock().unwrap().extend(r);
                }
            }
        }));
        let a_deleted = a
            .release_all(&ids(&["d"]), "A", &Release::Delete, now)
            .await
            .unwrap();
        let b_claimed = b_claimed.lock().unwrap().clone();
        let b_deleted = b_deleted.lock().unwrap().clone();
        assert_eq!(a.get_job("d").await.unwrap(), None, "d is gone");
        assert_eq!(
            a_deleted.len() + b_deleted.len(),
            1,
            "exactly one caller deleted d: A says {a_deleted:?}, B claimed {b_claimed:?} and says {b_deleted:?}"
        );
        if !b_claimed.is_empty() {
            assert!(a_deleted.is_empty(), "B held d, so A cannot have deleted it");
        }
    })
    .await;
}

/// Review finding 2: a claim whose read-back fails (after its update locked
/// the jobs) gives them back, as an unget would, before returning the error.
#[tokio::test]
async fn claim_whose_read_back_fails_gives_its_jobs_back() {
    with_two_stores(|a, _b| async move {
        let jobs = [NewJob::new("j1", "t", "1"), NewJob::new("j2", "t", "2")];
        a.add_jobs(&jobs, T0).await.unwrap();
        let failing = a.clone().with_round_trip_hook(Arc::new(|op, n| {
            async move {
                if op == "claim" && n == 3 {
                    Err(Error::backend_msg("injected read-back failure"))
                } else {
                    Ok(())
                }
            }
            .boxed()
        }));
        let err = failing.claim_jobs("t", 2, "A", MIN, T0 + 5).await;
        assert!(err.is_err(), "the claim fails: {err:?}");
        for id in ["j1", "j2"] {
            let j = a.get_job(id).await.unwrap().unwrap();
            assert_eq!((j.lock.as_str(), j.attempts, j.dt), ("", 0, T0 + 5), "{id}");
        }
        assert_eq!(
            a.claim_jobs("t", 2, "B", MIN, T0 + 6).await.unwrap().len(),
            2
        );
    })
    .await;
}

/// A claim round that fails after an earlier round claimed jobs (one that
/// lost a job to a racer, so that another round was needed) hands out the
/// jobs already claimed instead of failing and stranding them.
#[tokio::test]
async fn a_claim_whose_later_round_fails_returns_what_it_claimed() {
    with_two_stores(|a, b| async move {
        let jobs: Vec<NewJob> = (1..=4)
            .map(|i| NewJob::new(format!("j{i}"), "t", "x"))
            .collect();
        a.add_jobs(&jobs, T0).await.unwrap();
        let finds = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let failing = a.clone().with_round_trip_hook(Arc::new(move |op, n| {
            let (finds, racer) = (finds.clone(), b.clone());
            async move {
                if op != "claim" || n != 1 {
                    return Ok(());
                }
                match finds.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
                    // Between the first round's query and its update, a
                    // racer takes the first candidate.
                    0 => {
                        let got = racer.claim_jobs("t", 1, "B", MIN, T0).await.unwrap();
                        assert_eq!(got[0].id, "j1");
                        Ok(())
                    }
                    1 => Err(Error::backend_msg("injected failure of round 2")),
                    _ => Ok(()),
                }
            }
            .boxed()
        }));
        let got = failing.claim_jobs("t", 2, "A", MIN, T0).await.unwrap();
        let got: Vec<&str> = got.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(got, ["j2"]);
        for id in ["j3", "j4"] {
            let j = a.get_job(id).await.unwrap().unwrap();
            assert_eq!(j.lock, "", "{id} is not held");
        }
    })
    .await;
}

/// A claim round that lost a job to a racer is followed by one that takes
/// its candidates in a shuffled order, so that claimers racing for one
/// jobtype spread over its jobs instead of all trying the same next ones.
/// (A shuffle can put the next job in order first; three claims that all
/// do so, 1 in 66^3, would fail this test.)
#[tokio::test]
async fn a_round_after_losing_to_a_racer_spreads() {
    with_two_stores(|a, b| async move {
        let jobs: Vec<NewJob> = (0..200)
            .map(|i| NewJob::new(format!("j{i:03}"), "t", "x"))
            .collect();
        a.add_jobs(&jobs, T0).await.unwrap();
        let finds = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let raced = a.clone().with_round_trip_hook(Arc::new(move |op, n| {
            let (finds, racer) = (finds.clone(), b.clone());
            async move {
                let first_round = op == "claim"
                    && n == 1
                    && finds.fetch_add(1, std::sync::atomic::Ordering::SeqCst) % 2 == 0;
                if first_round {
                    // Between the first round's query and its update, a
                    // racer takes the first candidate.
                    assert_eq!(
                        racer.claim_jobs("t", 1, "B", MIN, T0).await.unwrap().len(),
                        1
                    );
                }
                Ok(())
            }
            .boxed()
        }));
        let mut free: std::collections::BTreeSet<String> =
            jobs.iter().map(|j| j.id.clone()).collect();
        let mut next_in_order = 0;
        for _ in 0..3 {
            let first: Vec<String> = free.iter().take(3).cloned().collect();
            let got = raced.claim_jobs("t", 2, "A", MIN, T0).await.unwrap();
            let got: Vec<String> = got.into_iter().map(|j| j.id).collect();
            assert_eq!(got.len(), 2, "{got:?}");
            assert!(got.contains(&first[1]), "round 1 took the second: {got:?}");
            assert!(!got.contains(&first[0]), "the racer's: {got:?}");
            if got.contains(&first[2]) {
                next_in_order += 1;
            }
            free.remove(&first[0]);
            for id in &got {
                free.remove(id);
            }
        }
        assert!(next_in_order < 3, "every second round kept to the order");
    })
    .await;
}

/// Finding 2, cancellation: a claim future dropped between its update and
/// its read-back gives its jobs back from a spawned task.
#[tokio::test]
async fn claim_cancelled_after_its_update_gives_its_jobs_back() {
    with_two_stores(|a, _b| async move {
        a.add_job(NewJob::new("j", "t", "1"), T0).await.unwrap();
        let stuck = a.clone().with_round_trip_hook(Arc::new(|op, n| {
            async move {
                if op == "claim" && n == 2 {
                    futures::future::pending::<()>().await;
                }
                Ok(())
            }
            .boxed()
        }));
        let claim = stuck.claim_jobs("t", 1, "A", MIN, T0 + 5);
        let timed_out = tokio::time::timeout(Duration::from_millis(500), claim).await;
        assert!(timed_out.is_err(), "the claim was cancelled mid-way");
        let mut job: Option<Job> = None;
        for _ in 0..100 {
            job = a.get_job("j").await.unwrap();
            if job.as_ref().is_some_and(|j| j.lock.is_empty()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let j = job.unwrap();
        assert_eq!((j.lock.as_str(), j.attempts, j.dt), ("", 0, T0 + 5));
    })
    .await;
}

/// A hook that fails round trip 1 of `op` once, after it applied (as a
/// write-concern error or a lost reply after the write would).
fn fail_once_after(op: &'static str) -> RoundTripHook {
    fail_once_with(op, || {
        Error::unavailable(
            "injected failure after the write",
            std::io::Error::other("test"),
        )
    })
}

/// A hook that fails round trip 1 of `op` once, after it applied, with
/// the error `make` gives.
fn fail_once_with(op: &'static str, make: fn() -> Error) -> RoundTripHook {
    fail_once_at(op, 1, make)
}

/// A hook that fails round trip 1 of `op` once, after it applied, with an
/// error that is not retryable.
fn fail_once_for_good(op: &'static str) -> RoundTripHook {
    fail_once_with(op, || Error::backend_msg(FOR_GOOD))
}

/// The message of [`fail_once_for_good`]'s error.
const FOR_GOOD: &str = "injected failure for good";

/// `err` is the error of [`fail_once_for_good`], handed to the caller.
fn assert_failed_for_good(err: &Error) {
    assert_eq!(err.kind(), jobstore_api::ErrorKind::Backend, "{err}");
    assert!(err.to_string().contains(FOR_GOOD), "{err}");
}

/// A hook that fails round trip `round` of `op` once, after it applied,
/// with the error `make` gives.
fn fail_once_at(op: &'static str, round: usize, make: fn() -> Error) -> RoundTripHook {
    let failed = Arc::new(Mutex::new(false));
    Arc::new(move |name, n| {
        let failed = failed.clone();
        async move {
            let mut failed = failed.lock().unwrap();
            if name == op && n == round && !*failed {
                *failed = true;
                return Err(make());
            }
            Ok(())
        }
        .boxed()
    })
}

/// Only a retryable failure is sent again: a release whose first round
/// trip fails for good gives the caller that error, and the hook is not
/// asked again.
#[tokio::test]
async fn release_failed_for_good_is_not_sent_again() {
    with_two_stores(|a, _b| async move {
        a.add_jobs(&[NewJob::new("x", "t", "x")], T0).await.unwrap();
        assert_eq!(a.claim_jobs("t", 1, "A", MIN, T0).await.unwrap().len(), 1);
        let failing = a
            .clone()
            .with_round_trip_hook(fail_once_for_good("release"));
        let err = failing
            .release_all(&ids(&["x"]), "A", &Release::Unget, T0 + 1)
            .await
            .unwrap_err();
        assert_failed_for_good(&err);
    })
    .await;
}

/// The delete of a release's tombstones (its second round trip) is sent
/// again after a retryable failure, and not after a failure for good.
#[tokio::test]
async fn release_delete_is_resent_only_after_a_retryable_failure() {
    with_two_stores(|a, _b| async move {
        let jobs = [NewJob::new("x", "t", "x"), NewJob::new("y", "t", "y")];
        a.add_jobs(&jobs, T0).await.unwrap();
        assert_eq!(a.claim_jobs("t", 2, "A", MIN, T0).await.unwrap().len(), 2);
        let retryable = a
            .clone()
            .with_round_trip_hook(fail_once_at("release", 2, || {
                Error::unavailable(
                    "injected failure after the delete",
                    std::io::Error::other("test"),
                )
            }));
        let done = retryable
            .release_all(&ids(&["x"]), "A", &Release::Delete, T0 + 1)
            .await;
        assert_eq!(done.unwrap(), ids(&["x"]));
        assert!(a.get_job("x").await.unwrap().is_none());
        let for_good = a
            .clone()
            .with_round_trip_hook(fail_once_at("release", 2, || Error::backend_msg(FOR_GOOD)));
        let err = for_good
            .release_all(&ids(&["y"]), "A", &Release::Delete, T0 + 1)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), jobstore_api::ErrorKind::Backend, "{err}");
    })
    .await;
}

/// A renew whose update applied but failed is sent again with the same
/// token and reports, by the token's read-back, every job it renewed.
#[tokio::test]
async fn renew_failed_after_applying_reports_what_it_renewed() {
    with_two_stores(|a, _b| async move {
        let jobs = [NewJob::new("x", "t", "x"), NewJob::new("y", "t", "y")];
        a.add_jobs(&jobs, T0).await.unwrap();
        assert_eq!(a.claim_jobs("t", 2, "A", MIN, T0).await.unwrap().len(), 2);
        let failing = a.clone().with_round_trip_hook(fail_once_after("renew"));
        let mut renewed = failing
            .renew_locks(&ids(&["x", "y"]), "A", MIN * 2, T0 + 1)
            .await
            .unwrap()
            .renewed;
        renewed.sort();
        assert_eq!(renewed, ids(&["x", "y"]));
        let x = a.get_job("x").await.unwrap().unwrap();
        assert_eq!(x.dt, T0 + 1 + 120_000);
    })
    .await;
}

/// A renew whose update failed for good is not sent again: the error
/// reaches the caller.
#[tokio::test]
async fn renew_failed_for_good_is_not_sent_again() {
    with_two_stores(|a, _b| async move {
        a.add_jobs(&[NewJob::new("x", "t", "x")], T0).await.unwrap();
        assert_eq!(a.claim_jobs("t", 1, "A", MIN, T0).await.unwrap().len(), 1);
        let failing = a.clone().with_round_trip_hook(fail_once_for_good("renew"));
        let err = failing
            .renew_locks(&ids(&["x"]), "A", MIN * 2, T0 + 1)
            .await
            .unwrap_err();
        assert_failed_for_good(&err);
    })
    .await;
}

/// An add whose insert failed for good is not sent again: the error
/// reaches the caller.
#[tokio::test]
async fn add_failed_for_good_is_not_sent_again() {
    with_two_stores(|a, _b| async move {
        let failing = a.clone().with_round_trip_hook(fail_once_for_good("add"));
        let err = failing
            .add_jobs(&[NewJob::new("x", "t", "x")], T0)
            .await
            .unwrap_err();
        assert_failed_for_good(&err);
    })
    .await;
}

/// A release whose command applied but failed is sent again (matching
/// nothing the second time) and still reports every job it released.
#[tokio::test]
async fn release_failed_after_applying_reports_what_it_released() {
    with_two_stores(|a, _b| async move {
        let jobs = [NewJob::new("x", "t", "x"), NewJob::new("y", "t", "y")];
        a.add_jobs(&jobs, T0).await.unwrap();
        assert_eq!(a.claim_jobs("t", 2, "A", MIN, T0).await.unwrap().len(), 2);
        let failing = a.clone().with_round_trip_hook(fail_once_after("release"));
        let mut released = failing
            .release_all(&ids(&["x", "y"]), "A", &Release::Unget, T0 + 1)
            .await
            .unwrap();
        released.sort();
        assert_eq!(released, ids(&["x", "y"]));
        let x = a.get_job("x").await.unwrap().unwrap();
        assert_eq!(
            (x.lock.as_str(), x.attempts),
            ("", 0),
            "ungot once, not twice"
        );
    })
    .await;
}

/// A release with repeats whose command applied but failed is sent again
/// (the repeated jobs are free: it matches nothing the second time) and
/// reports every job: each repeated once (one `repeated` event, attempts
/// 0), beside an archive of the same list; a repeat of a job another
/// claimer took over in between is fenced off.
#[tokio::test]
async fn repeat_failed_after_applying_is_applied_once() {
    with_two_stores(|a, b| async move {
        let rule = Repeat::new("HOURLY");
        let jobs = [
            NewJob::new("x", "t", "x").repeat(rule.clone()),
            NewJob::new("y", "t", "y").repeat(rule.clone()).priority(5),
            NewJob::new("z", "t", "z"),
        ];
        a.add_jobs(&jobs, T0).await.unwrap();
        let short = Duration::from_secs(1);
        assert_eq!(a.claim_jobs("t", 3, "A", short, T0).await.unwrap().len(), 3);
        let failing = a.clone().with_round_trip_hook(fail_once_after("release"));
        let at = T0 + 3_600_000;
        let repeat = |id: &str| {
            JobRelease::new(
                id,
                Release::Repeat {
                    at,
                    result: JobResult::from_status(200),
                    data: Some(b"next".to_vec()),
                },
            )
        };
        // y's lease runs out and B takes it.
        let late = T0 + 2_000;
        let taken = b.claim_jobs("t", 1, "B", MIN, late).await.unwrap();
        assert_eq!(taken[0].id, "y");
        let list = [
            repeat("x"),
            repeat("y"),
            JobRelease::new("z", Release::Archive(JobResult::from_status(200))),
        ];
        let mut released = failing.release_jobs(&list, "A", late).await.unwrap();
        released.sort();
        assert_eq!(released, ids(&["x", "z"]), "y was taken over");
        let x = a.get_job("x").await.unwrap().unwrap();
        assert_eq!(
            (x.lock.as_str(), x.dt, x.attempts, x.data.as_slice()),
            ("", at, 0, b"next".as_slice())
        );
        let repeats = x
            .history
            .iter()
            .filter(|e| matches!(e.what, EventKind::Repeated { .. }))
            .count();
        assert_eq!(repeats, 1, "repeated once: {:?}", x.history);
        let y = a.get_job("y").await.unwrap().unwrap();
        assert_eq!((y.lock.as_str(), y.attempts), ("B", 2));
    })
    .await;
}

/// An add whose insert applied but failed (a write-concern error after
/// the write) is sent again inside the store; the ids the first attempt
/// inserted are new, an id that existed before is existing.
#[tokio::test]
async fn add_failed_after_applying_reports_exact_outcome() {
    with_two_stores(|a, _b| async move {
        a.add_jobs(&[NewJob::new("old", "t", "o")], T0)
            .await
            .unwrap();
        let failing = a.clone().with_round_trip_hook(fail_once_after("add"));
        let jobs = [
            NewJob::new("n1", "t", "1"),
            NewJob::new("old", "t", "again"),
            NewJob::new("n2", "t", "2"),
        ];
        let out = failing.add_jobs(&jobs, T0 + 1).await.unwrap();
        assert_eq!(out.new, ids(&["n1", "n2"]));
        assert_eq!(out.existing, ids(&["old"]));
    })
    .await;
}

/// A keyed add whose insert applied but failed is sent again: the keyed
/// job the first attempt stored is new (its id and its key now refuse the
/// second attempt), a later job of its key in the batch names it, a job
/// meeting a holder from before names that one, an old id is existing.
#[tokio::test]
async fn keyed_add_failed_after_applying_reports_exact_outcome() {
    with_two_stores(|a, _b| async move {
        let keyed = |id: &str, key: &str| NewJob::new(id, "t", id).unique(Unique::new(key));
        a.add_jobs(&[NewJob::new("old", "t", "o"), keyed("h", "held")], T0)
            .await
            .unwrap();
        let failing = a.clone().with_round_trip_hook(fail_once_after("add"));
        let jobs = [
            keyed("k1", "x"),
            NewJob::new("old", "t", "again"),
            keyed("k2", "x"),
            keyed("k3", "held"),
        ];
        let out = failing.add_jobs(&jobs, T0 + 1).await.unwrap();
        assert_eq!(out.new, ids(&["k1"]));
        assert_eq!(out.existing, ids(&["old"]));
        let dups: Vec<_> = out
            .duplicates
            .iter()
            .map(|d| (d.id.as_str(), d.existing.as_str()))
            .collect();
        assert_eq!(dups, [("k2", "k1"), ("k3", "h")]);
    })
    .await;
}

/// A keyed add whose insert lost to a holder that another caller archives
/// before the add reads it: the add finds no holder and tries the job
/// again, which is then stored (the key was free when it was read).
#[tokio::test]
async fn keyed_add_whose_holder_leaves_before_the_read_tries_again() {
    with_two_stores(|a, b| async move {
        let keyed = |id: &str| NewJob::new(id, "t", id).unique(Unique::new("k"));
        a.add_jobs(&[keyed("h")], T0).await.unwrap();
        assert_eq!(a.claim_jobs("t", 1, "O", MIN, T0).await.unwrap().len(), 1);
        let done = Arc::new(Mutex::new(false));
        let a = a.with_round_trip_hook(hook_on("add", move |n| {
            let (b, done) = (b.clone(), done.clone());
            async move {
                if n == 1 && !std::mem::replace(&mut *done.lock().unwrap(), true) {
                    let how = Release::Archive(JobResult::from_status(200));
                    let out = b.release_all(&ids(&["h"]), "O", &how, T0 + 1).await;
                    assert_eq!(out.unwrap(), ids(&["h"]));
                }
            }
        }));
        let out = a.add_jobs(&[keyed("n")], T0 + 1).await.unwrap();
        assert_eq!(out.new, ids(&["n"]), "{out:?}");
        assert!(out.duplicates.is_empty());
    })
    .await;
}

/// A windowed keyed add of `batch` by A at `T0 + 2`, with B's `between`
/// placed after round trip `n` of A's window look-ups ("add (window)": 1
/// the look-up before the insert, 2 the one after), where job "h" held
/// key "k" (claimed by owner "O") when the add began and B archives it
/// (at `T0 + 1`) after the first look-up.
async fn windowed_add_past_an_archive<F, Fut>(
    a: MongoStore,
    b: MongoStore,
    batch: &[NewJob],
    between: F,
) -> jobstore_api::AddOutcome
where
    F: Fn(MongoStore) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let keyed = NewJob::new("h", "t", "h").unique(Unique::new("k"));
    a.add_jobs(&[keyed], T0).await.unwrap();
    assert_eq!(a.claim_jobs("t", 1, "O", MIN, T0).await.unwrap().len(), 1);
    let step = Arc::new(Mutex::new(0));
    let between = Arc::new(between);
    let a = a.with_round_trip_hook(hook_on("add (window)", move |n| {
        let (b, step, between) = (b.clone(), step.clone(), between.clone());
        async move {
            let first = {
                let mut step = step.lock().unwrap();
                *step += 1;
                *step == 1
            };
            if n == 1 && first {
                let how = Release::Archive(JobResult::from_status(200));
                let out = b.release_all(&ids(&["h"]), "O", &how, T0 + 1).await;
                assert_eq!(out.unwrap(), ids(&["h"]));
            } else if n == 2 {
                between(b).await;
            }
        }
    }));
    a.add_jobs(batch, T0 + 2).await.unwrap()
}

fn windowed(id: &str) -> NewJob {
    NewJob::new(id, "t", id).unique(Unique::new("k").window(MIN))
}

/// Review finding (window read before the insert): the holder of the key
/// is live when the window look-up runs, then archived before the insert,
/// which the freed key lets through. The look-up after the insert sees
/// the archive inside the window: the job is taken back and is a
/// duplicate naming the archived holder, as if both had been one step.
#[tokio::test]
async fn windowed_add_past_a_holder_archived_before_its_insert_is_a_duplicate() {
    with_two_stores(|a, b| async move {
        let check = a.clone();
        let out = windowed_add_past_an_archive(a, b, &[windowed("n")], |_| async {}).await;
        assert!(out.new.is_empty(), "{out:?}");
        let dups: Vec<_> = out
            .duplicates
            .iter()
            .map(|d| (d.id.as_str(), d.existing.as_str(), d.replaced))
            .collect();
        assert_eq!(dups, [("n", "h", false)]);
        assert_eq!(check.get_job("n").await.unwrap(), None, "taken back");
        // The key stays free for a job whose window the archive is out of.
        let plain_key = NewJob::new("m", "t", "m").unique(Unique::new("k"));
        assert_eq!(
            check.add_jobs(&[plain_key], T0 + 3).await.unwrap().new,
            ["m"]
        );
    })
    .await;
}

/// The same race, with a later job of the batch (same key, no window)
/// that named the job taken back: it is tried again and stored, as the
/// memory store would (the archive is no window of its).
#[tokio::test]
async fn a_batch_mate_naming_a_job_taken_back_is_tried_again() {
    with_two_stores(|a, b| async move {
        let check = a.clone();
        let mate = NewJob::new("m", "t", "m").unique(Unique::new("k"));
        let batch = [windowed("n"), mate];
        let out = windowed_add_past_an_archive(a, b, &batch, |_| async {}).await;
        assert_eq!(out.new, ids(&["m"]), "{out:?}");
        let dups: Vec<_> = out
            .duplicates
            .iter()
            .map(|d| (d.id.as_str(), d.existing.as_str()))
            .collect();
        assert_eq!(dups, [("n", "h")]);
        assert_eq!(check.get_job("n").await.unwrap(), None);
        let m = check.get_job("m").await.unwrap().unwrap();
        assert_eq!(m.flow.and_then(|f| f.unique_key), Some("k".to_owned()));
    })
    .await;
}

/// The same race, with the job claimed by B before the add takes it back:
/// it is no longer untouched, so it stays, and the add reports it new.
#[tokio::test]
async fn a_windowed_job_claimed_before_it_is_taken_back_stays_new() {
    with_two_stores(|a, b| async move {
        let check = a.clone();
        let out = windowed_add_past_an_archive(a, b, &[windowed("n")], |b| async move {
            let got = b.claim_jobs("t", 5, "P", MIN, T0 + 2).await.unwrap();
            let got: Vec<&str> = got.iter().map(|j| j.id.as_str()).collect();
            assert_eq!(got, ["n"]);
        })
        .await;
        assert_eq!(out.new, ids(&["n"]), "{out:?}");
        assert!(out.duplicates.is_empty());
        let n = check.get_job("n").await.unwrap().unwrap();
        assert_eq!(n.lock, "P");
    })
    .await;
}

/// Claims by A and B with B's claim placed after round trip `n` of A's;
/// returns what A and B got and the job as stored.
async fn claim_with_takeover(
    a: MongoStore,
    b: MongoStore,
    n: usize,
    b_now: i64,
) -> (Vec<Job>, Vec<Job>, Job) {
    a.add_job(NewJob::new("j", "t", "payload"), T0)
        .await
        .unwrap();
    let b_got = Arc::new(Mutex::new(Vec::new()));
    let bg = b_got.clone();
    let a = a.with_round_trip_hook(hook_on("claim", move |k| {
        let (b, bg) = (b.clone(), bg.clone());
        async move {
            if k == n {
                let got = b.claim_jobs("t", 1, "B", MIN, b_now).await.unwrap();
                bg.lock().unwrap().extend(got);
            }
        }
    }));
    let a_got = a
        .claim_jobs("t", 1, "A", Duration::from_secs(1), T0)
        .await
        .unwrap();
    let b_got = b_got.lock().unwrap().clone();
    let stored = a.get_job("j").await.unwrap().unwrap();
    (a_got, b_got, stored)
}

/// Review finding: A's claim stalls between its update and its read-back
/// past its lease, and B takes the job over. Every claim that counted an
/// attempt hands the job out: A with attempts 1, B with attempts 2, and
/// the stored count equals the hand-outs.
#[tokio::test]
async fn claim_attempts_equal_hand_outs_when_taken_over_before_read_back() {
    with_two_stores(|a, b| async move {
        let (a_got, b_got, stored) = claim_with_takeover(a, b, 2, T0 + 1000).await;
        assert_eq!(a_got.len(), 1, "A's update took the job: A hands it out");
        assert_eq!(
            (a_got[0].lock.as_str(), a_got[0].attempts, a_got[0].dt),
            ("A", 1, T0 + 1000)
        );
        assert_eq!(a_got[0].data, b"payload");
        assert_eq!(b_got.len(), 1, "B took it over after A's lease");
        assert_eq!((b_got[0].lock.as_str(), b_got[0].attempts), ("B", 2));
        assert_eq!(stored.attempts, 2, "two hand-outs, two attempts");
        assert_eq!(stored.lock, "B");
    })
    .await;
}

/// B claims the job after A read it and before A's update: A's update,
/// pinned to the version it read, takes nothing, and no attempt of A's is
/// counted.
#[tokio::test]
async fn claim_attempts_equal_hand_outs_when_taken_before_update() {
    with_two_stores(|a, b| async move {
        let (a_got, b_got, stored) = claim_with_takeover(a, b, 1, T0).await;
        assert_eq!(b_got.len(), 1);
        assert_eq!((b_got[0].lock.as_str(), b_got[0].attempts), ("B", 1));
        assert!(a_got.is_empty(), "A got {a_got:?}");
        assert_eq!((stored.lock.as_str(), stored.attempts), ("B", 1));
    })
    .await;
}

/// The old owner of an expired job updates its payload after A's claim
/// read the job and before A's update: A's update, pinned to the version
/// it read, does not take the job with the old payload; its next round
/// reads the job again and hands it out with the new one.
#[tokio::test]
async fn claim_never_hands_out_a_payload_changed_after_its_read() {
    with_two_stores(|a, b| async move {
        a.add_job(NewJob::new("j", "t", "old"), T0).await.unwrap();
        let lease = Duration::from_secs(1);
        assert_eq!(a.claim_jobs("t", 1, "O", lease, T0).await.unwrap().len(), 1);
        let done = Arc::new(Mutex::new(false));
        let a = a.with_round_trip_hook(hook_on("claim", move |n| {
            let (b, done) = (b.clone(), done.clone());
            async move {
                let first = {
                    let mut d = done.lock().unwrap();
                    !std::mem::replace(&mut *d, true)
                };
                if n == 1 && first {
                    assert!(b.update_data("j", "O", b"new", T0 + 2000).await.unwrap());
                }
            }
        }));
        let got = a.claim_jobs("t", 1, "A", MIN, T0 + 2000).await.unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].data.as_slice(), got[0].attempts), (&b"new"[..], 2));
        let stored = a.get_job("j").await.unwrap().unwrap();
        assert_eq!(
            (stored.data.as_slice(), stored.lock.as_str()),
            (&b"new"[..], "A")
        );
    })
    .await;
}
