//! Dependencies on MongoDB, where the suite cannot reach: a delivery
//! stopped between its record and its apply (a crash) and finished by
//! `settle_flows`; a store from before dependencies; a cancel cascading
//! over many jobtypes; a chain of 1,000; held edges in the documents
//! across runs again; `unblock_jobs` and `waits_of` of many edges in one
//! command; an unblock racing a recorded-but-undelivered end.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt;
use jobstore_api::{
    DependencyFailure, EdgeState, Error, EventKind, JobResult, JobStore, JobStoreExt, LOCK_BLOCKED,
    LOCK_DONE, LOCK_FREE, NewJob, ResultCode,
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

/// The commands a store sends on its jobs collection, by name.
type Sent = Arc<std::sync::Mutex<Vec<String>>>;

/// A second store on the database of `options` whose commands on `jobs`
/// (and every `getMore`) are recorded in the returned list.
async fn observed(url: &str, options: MongoOptions) -> (MongoStore, Sent) {
    use mongodb::event::EventHandler;
    use mongodb::event::command::CommandEvent;
    let sent: Sent = Arc::default();
    let log = sent.clone();
    let store = MongoStore::connect_observed(
        url,
        options,
        EventHandler::callback(move |ev: CommandEvent| {
            if let CommandEvent::Started(e) = ev {
                let on_jobs = e
                    .command
                    .get(&e.command_name)
                    .and_then(|v| v.as_str())
                    .is_some_and(|c| c == "jobs")
                    || e.command_name == "getMore";
                if on_jobs {
                    log.lock().unwrap().push(e.command_name.clone());
                }
            }
        }),
    )
    .await
    .expect("connect");
    (store, sent)
}

/// The raw document of job `id`.
async fn raw(s: &MongoStore, id: &str) -> mongodb::bson::Document {
    s.database()
        .collection::<mongodb::bson::Document>("jobs")
        .find_one(doc! { "_id": id })
        .await
        .unwrap()
        .expect(id)
}

/// The strings of array `field` of `d` (none when absent).
fn strings(d: &mongodb::bson::Document, field: &str) -> Vec<String> {
    d.get_array(field)
        .map(|a| {
            a.iter()
                .filter_map(|b| b.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The edges of `id` as (target, state).
async fn edges(s: &MongoStore, id: &str) -> Vec<(String, EdgeState)> {
    let w = s.job_waits(id, None, 1_000).await.unwrap().expect(id);
    w.edges.into_iter().map(|e| (e.target, e.state)).collect()
}

/// How many `Unblocked` events job `id` has.
async fn unblocked_events(s: &MongoStore, id: &str) -> usize {
    let job = s.get_job(id).await.unwrap().expect(id);
    job.history
        .iter()
        .filter(|e| e.what == EventKind::Unblocked)
        .count()
}

/// A held edge through the storage: the edge stays in `waits` and each
/// failed end is pushed to `wheld` (the newest read back); the target
/// keeps the waiter in `up` across runs again; a target archived failed
/// before the add learns its `hold` waiter (and only it) at the add;
/// `with_outputs` is stored as `wout` on the waiter only.
#[tokio::test]
async fn a_held_edge_survives_runs_again_in_the_documents() {
    with_store(|_, _, s| async move {
        s.add_jobs(&[NewJob::new("x", "t", ""), NewJob::new("f", "tf", "")], T0)
            .await
            .unwrap();
        run(&s, "tf", "f", 500, T0).await;
        let out = s
            .add_jobs(
                &[
                    NewJob::new("w", "tw", "")
                        .depends_on(["x", "f"])
                        .on_dependency_failure(DependencyFailure::Hold)
                        .with_outputs(),
                    NewJob::new("r", "tw", "")
                        .depends_on(["f"])
                        .on_dependency_failure(DependencyFailure::Run),
                ],
                T0,
            )
            .await
            .unwrap();
        assert_eq!(out.new, ids(&["w", "r"]));
        assert_eq!(lock_of(&s, "r").await, LOCK_FREE);
        let w = raw(&s, "w").await;
        assert_eq!(strings(&w, "waits"), ["x", "f"]);
        assert_eq!(strings(&w, "wheld"), ["error|500|f"]);
        assert_eq!(w.get_bool("wout").ok(), Some(true));
        assert!(raw(&s, "r").await.get("wout").is_none());
        assert_eq!(strings(&raw(&s, "f").await, "up"), ["w"], "hold only");
        let job = s.get_job("w").await.unwrap().unwrap();
        let flow = job.flow.unwrap();
        assert_eq!(
            (job.lock.as_str(), flow.pending, flow.with_outputs),
            (LOCK_BLOCKED, 2, true)
        );

        let mut now = T0 + SEC;
        run(&s, "t", "x", 200, now).await;
        // `f` fails twice more, then ends ok.
        for (status, code) in [(404, ResultCode::Failed), (503, ResultCode::Error)] {
            now += SEC;
            assert_eq!(
                s.rerun_jobs(&ids(&["f"]), Duration::ZERO, now)
                    .await
                    .unwrap(),
                ids(&["f"])
            );
            run(&s, "tf", "f", status, now).await;
            assert_eq!(
                edges(&s, "w").await,
                [
                    ("f".to_owned(), EdgeState::Held { code, status }),
                    (
                        "x".to_owned(),
                        EdgeState::Done {
                            code: ResultCode::Ok,
                            status: 200
                        }
                    ),
                ]
            );
            assert_eq!(lock_of(&s, "w").await, LOCK_BLOCKED);
        }
        let w = raw(&s, "w").await;
        assert_eq!(strings(&w, "waits"), ["f"]);
        assert_eq!(strings(&w, "wheld").len(), 3, "one per failed end");
        now += SEC;
        s.rerun_jobs(&ids(&["f"]), Duration::ZERO, now)
            .await
            .unwrap();
        run(&s, "tf", "f", 200, now).await;
        let job = s.get_job("w").await.unwrap().unwrap();
        assert_eq!((job.lock.as_str(), job.dt), (LOCK_FREE, now));
        assert_eq!(job.flow.unwrap().pending, 0);
        assert_eq!(unblocked_events(&s, "w").await, 1);
        let waits = s.job_waits("w", None, 10).await.unwrap().unwrap();
        assert_eq!(
            (waits.pending, waits.held, waits.done.get(&ResultCode::Ok)),
            (0, 0, Some(&2))
        );
        // `r` resolved `f` at its add: the ends after it leave it alone.
        assert_eq!(
            edges(&s, "r").await,
            [(
                "f".to_owned(),
                EdgeState::Done {
                    code: ResultCode::Error,
                    status: 500
                }
            )]
        );
    })
    .await;
}

/// `unblock_jobs` of 201 waiters, one with 1,000 edges, is one `update`
/// command; `waits_of` of them one `find`; the skipped edges' ends
/// change nothing; a second unblock matches nothing (one command, no
/// read-back).
#[tokio::test]
async fn unblock_of_a_thousand_edges_is_one_command() {
    with_store(|url, options, s| async move {
        const N: usize = 1_000;
        let targets: Vec<String> = (0..N).map(|i| format!("t{i:04}")).collect();
        // The targets of the 200 small waiters are of `t`, the others not.
        let jobs: Vec<NewJob> = targets
            .iter()
            .enumerate()
            .map(|(i, id)| NewJob::new(id.clone(), if i < 200 { "t" } else { "t2" }, ""))
            .collect();
        s.add_jobs(&jobs, T0).await.unwrap();
        let mut waiters = vec![NewJob::new("big", "tw", "").depends_on(targets.clone())];
        waiters.extend(
            (0..200).map(|i| NewJob::new(format!("w{i:03}"), "tw", "").depends_on([&targets[i]])),
        );
        let all: Vec<String> = waiters.iter().map(|j| j.id.clone()).collect();
        assert_eq!(s.add_jobs(&waiters, T0).await.unwrap().new.len(), 201);
        let (o, sent) = observed(&url, options).await;
        sent.lock().unwrap().clear();
        let now = T0 + SEC;
        let mut got = o.unblock_jobs(&all, now).await.unwrap();
        got.sort();
        let mut want = all.clone();
        want.sort();
        assert_eq!(got, want);
        assert_eq!(*sent.lock().unwrap(), ["update"], "one round trip");
        sent.lock().unwrap().clear();
        let many = o.waits_of(&all, 10).await.unwrap();
        assert_eq!(*sent.lock().unwrap(), ["find"], "one round trip");
        assert_eq!(many.len(), 201);
        let big = many.iter().find(|w| w.id == "big").unwrap();
        assert_eq!(
            (big.pending, big.held, big.skipped, big.edges.len()),
            (0, 0, N as u64, 10)
        );
        sent.lock().unwrap().clear();
        assert!(o.unblock_jobs(&all, now).await.unwrap().is_empty());
        assert_eq!(*sent.lock().unwrap(), ["update"]);
        // 200 targets fail: nothing reaches the waiters.
        let now = now + SEC;
        let got = s.claim_jobs("t", 1_000, "own", LEASE, now).await.unwrap();
        assert_eq!(got.len(), 200);
        s.archive_jobs(&targets[..200], "own", JobResult::from_status(500), now)
            .await
            .unwrap();
        for id in ["big", "w000", "w007", "w199"] {
            let job = s.get_job(id).await.unwrap().unwrap();
            assert_eq!((job.lock.as_str(), job.dt), (LOCK_FREE, T0 + SEC), "{id}");
            assert_eq!(unblocked_events(&s, id).await, 1);
        }
        let waits = s.job_waits("big", None, 10).await.unwrap().unwrap();
        assert_eq!((waits.skipped, waits.done.len()), (N as u64, 0));
        let waits = s.job_waits("w007", None, 10).await.unwrap().unwrap();
        assert_eq!((waits.skipped, waits.done.len()), (1, 0));
    })
    .await;
}

/// `unblock_jobs` racing a recorded-but-undelivered end (a crash between
/// the archive and its delivery): the unblock takes the edge (skipped),
/// and `settle_flows` then delivers the end to nobody: the waiter is not
/// cancelled (under `Cancel`) nor unblocked twice. A `hold` waiter whose
/// held dependency's next end is recorded but not delivered is unblocked
/// by `settle_flows`, once.
#[tokio::test]
async fn unblock_racing_a_recorded_end_and_settle_flows_after() {
    with_store(|_, _, s| async move {
        let stop = Arc::new(AtomicBool::new(false));
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
        s.add_jobs(
            &[
                NewJob::new("x", "t", ""),
                NewJob::new("y", "t2", ""),
                NewJob::new("h", "t3", ""),
            ],
            T0,
        )
        .await
        .unwrap();
        s.add_jobs(
            &[
                NewJob::new("c", "tw", "").depends_on(["x"]),
                NewJob::new("k", "tw", "").depends_on(["y"]),
                NewJob::new("held", "tw", "")
                    .depends_on(["h"])
                    .on_dependency_failure(DependencyFailure::Hold),
            ],
            T0,
        )
        .await
        .unwrap();
        let now = T0 + SEC;
        run(&s, "t3", "h", 500, now).await;
        assert_eq!(lock_of(&s, "held").await, LOCK_BLOCKED);
        stop.store(true, Ordering::SeqCst);
        run(&s, "t", "x", 500, now).await;
        run(&s, "t2", "y", 500, now).await;
        s.rerun_jobs(&ids(&["h"]), Duration::ZERO, now)
            .await
            .unwrap();
        run(&s, "t3", "h", 200, now).await;
        assert_eq!(lock_of(&s, "c").await, LOCK_BLOCKED, "not delivered");
        assert_eq!(lock_of(&s, "held").await, LOCK_BLOCKED, "not delivered");
        let now = now + SEC;
        assert_eq!(s.unblock_jobs(&ids(&["c"]), now).await.unwrap(), ["c"]);
        stop.store(false, Ordering::SeqCst);
        let later = now + 61 * SEC;
        assert!(s.settle_flows(later, 100).await.unwrap() >= 3);
        let c = s.get_job("c").await.unwrap().unwrap();
        assert_eq!((c.lock.as_str(), c.dt), (LOCK_FREE, now), "not cancelled");
        assert_eq!(edges(&s, "c").await, [("x".to_owned(), EdgeState::Skipped)]);
        assert_eq!(unblocked_events(&s, "c").await, 1);
        let k = s.get_job("k").await.unwrap().unwrap();
        assert_eq!(k.result.map(|r| r.code), Some(ResultCode::Cancelled));
        let held = s.get_job("held").await.unwrap().unwrap();
        assert_eq!((held.lock.as_str(), held.dt), (LOCK_FREE, later));
        assert_eq!(unblocked_events(&s, "held").await, 1);
        assert!(
            s.unblock_jobs(&ids(&["c", "held"]), later)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(s.settle_flows(later + 61 * SEC, 100).await.unwrap(), 0);
        assert_eq!(unblocked_events(&s, "c").await, 1);
    })
    .await;
}
