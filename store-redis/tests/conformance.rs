//! The conformance suite against a single Redis server
//! (`JOBSTORE_TEST_REDIS_URL`, default `redis://127.0.0.1:6379`).

mod support;

use jobstore_conformance::TestStore;
use jobstore_conformance::services::{redis_url, unique_namespace};
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;
use jobstore_api::limits::MAX_PAGE;
use jobstore_api::{
    Duplicate, EventKind, Handler, JobEvent, JobQuery, JobRelease, JobResult, JobState, JobStore,
    JobStoreExt, LOCK_DONE, NewJob, Release, Repeat, ResultCode, Unique,
};
use jobstore_redis::{RedisOptions, RedisStore};

async fn factory() -> Option<TestStore> {
    let url = redis_url().await?;
    let prefix = unique_namespace();
    let open = || RedisStore::connect_with(&url, RedisOptions::new().prefix(prefix.clone()));
    let store = open().await.expect("connect to redis");
    let peer = open().await.expect("connect peer to redis");
    let cleaner = open().await.expect("connect cleaner to redis");
    Some(
        TestStore::new(store)
            .with_peer(peer)
            .with_cleanup(async move {
                // A cleanup that times out on a loaded server is tried
                // again, then reported; it is not the test's verdict.
                if let Err(e) = cleaner.drop_namespace().await
                    && let Err(e2) = cleaner.drop_namespace().await
                {
                    eprintln!("could not drop the namespace: {e}; then {e2}");
                }
            }),
    )
}

jobstore_conformance::conformance_tests!(factory);

/// A handle's id -> jobtype cache (filled by its claims) goes stale when
/// the job is deleted and its id added again under another jobtype; renew
/// and release through that handle must still find the job.
#[test]
fn stale_jobtype_cache_falls_back_to_the_index() {
    jobstore_conformance::block_on(async {
        let Some(url) = redis_url().await else {
            return;
        };
        let prefix = unique_namespace();
        let open = || RedisStore::connect_with(&url, RedisOptions::new().prefix(prefix.clone()));
        let (a, b) = (open().await.unwrap(), open().await.unwrap());
        let outcome = AssertUnwindSafe(scenario(&a, &b)).catch_unwind().await;
        a.drop_namespace().await.unwrap();
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    });
}

async fn scenario(a: &RedisStore, b: &RedisStore) {
    {
        let t0 = 1_700_000_000_000;
        let min = Duration::from_secs(60);
        let x = vec!["x".to_owned()];
        a.add_jobs(&[NewJob::new("x", "t1", "")], t0).await.unwrap();
        assert_eq!(
            a.claim_jobs("t1", 1, "own-a", min, t0).await.unwrap().len(),
            1
        );
        // b takes it over after expiry, deletes it, re-adds it as t2, claims it.
        let later = t0 + 61_000;
        assert_eq!(
            b.claim_jobs("t1", 1, "own-b", min, later)
                .await
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            b.release_all(&x, "own-b", &Release::Delete, later)
                .await
                .unwrap(),
            x
        );
        assert_eq!(
            b.add_jobs(&[NewJob::new("x", "t2", "")], later)
                .await
                .unwrap()
                .new,
            x
        );
        assert_eq!(
            b.claim_jobs("t2", 1, "own-b", min, later)
                .await
                .unwrap()
                .len(),
            1
        );
        // a still believes x is a t1 job. The first call through that
        // stale entry must find the job (the entry is dropped after it).
        assert_eq!(
            a.renew_locks(&x, "own-b", min, later)
                .await
                .unwrap()
                .renewed,
            x
        );
        assert!(
            a.renew_locks(&x, "own-a", min, later)
                .await
                .unwrap()
                .renewed
                .is_empty()
        );
        let done = Release::Archive(JobResult::from_status(200));
        assert_eq!(a.release_all(&x, "own-b", &done, later).await.unwrap(), x);
        let job = a.get_job("x").await.unwrap().unwrap();
        assert_eq!((job.jobtype.as_str(), job.lock.as_str()), ("t2", LOCK_DONE));
    }
}

/// Runs `body` against a fresh namespace and drops it afterwards, even when
/// `body` panics.
fn with_namespace<F, Fut>(opts: fn(RedisOptions) -> RedisOptions, body: F)
where
    F: FnOnce(RedisStore, String, String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    jobstore_conformance::block_on(async {
        let Some(url) = redis_url().await else {
            return;
        };
        let prefix = unique_namespace();
        let open =
            || RedisStore::connect_with(&url, opts(RedisOptions::new().prefix(prefix.clone())));
        let (a, cleaner) = (open().await.unwrap(), open().await.unwrap());
        let outcome = AssertUnwindSafe(body(a, url.clone(), prefix.clone()))
            .catch_unwind()
            .await;
        cleaner.drop_namespace().await.unwrap();
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    });
}

/// A promotion slice below `MAX_CLAIM` (by the setter or the field) is
/// raised to it: a claim still hands out its whole limit of due jobs.
#[test]
fn small_promote_slice_still_fills_the_claim() {
    fn by_setter(o: RedisOptions) -> RedisOptions {
        o.promote_slice(1)
    }
    fn by_field(mut o: RedisOptions) -> RedisOptions {
        o.promote_slice = 1;
        o
    }
    for opts in [by_setter as fn(RedisOptions) -> RedisOptions, by_field] {
        with_namespace(opts, |s, _, _| async move {
            let t0 = 1_700_000_000_000;
            let jobs: Vec<NewJob> = (0..5)
                .map(|i| NewJob::new(format!("s{i}"), "t", "").run_at(t0 + 10))
                .collect();
            s.add_jobs(&jobs, t0).await.unwrap();
            let got = s
                .claim_jobs("t", 5, "w1", Duration::from_secs(60), t0 + 100)
                .await
                .unwrap();
            assert_eq!(got.len(), 5);
        });
    }
}

/// A prefix containing ':' is refused (by the option and by the URL): with
/// it, prefix `a` + jobtype `b:x` and prefix `a:b` + jobtype `x` would
/// share keys.
#[test]
fn prefix_with_colon_is_invalid_input() {
    jobstore_conformance::block_on(async {
        let Some(url) = redis_url().await else {
            return;
        };
        let by_option = RedisStore::connect_with(&url, RedisOptions::new().prefix("jst_a:b")).await;
        assert!(matches!(
            by_option,
            Err(jobstore_api::Error::InvalidInput { .. })
        ));
        let sep = if url.contains('?') { '&' } else { '?' };
        let by_url = RedisStore::connect(&format!("{url}{sep}prefix=jst_a%3Ab")).await;
        assert!(matches!(
            by_url,
            Err(jobstore_api::Error::InvalidInput { .. })
        ));
    });
}

/// Breaks one of `prefix`'s keys: replaces it with a string, so every
/// script that touches it fails with WRONGTYPE.
async fn break_key(url: &str, key: &str) {
    let mut c = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg("broken")
        .query_async(&mut c)
        .await
        .unwrap();
}

/// A delete over two jobtypes where one jobtype's script fails still
/// unreserves the ids the other deleted: the id is free for another
/// jobtype afterwards.
#[test]
fn failed_delete_in_one_jobtype_unreserves_the_others() {
    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let t0 = 1_700_000_000_000;
            let min = Duration::from_secs(60);
            s.add_jobs(&[NewJob::new("x", "t", ""), NewJob::new("y", "u", "")], t0)
                .await
                .unwrap();
            assert_eq!(s.claim_jobs("t", 1, "w", min, t0).await.unwrap().len(), 1);
            assert_eq!(s.claim_jobs("u", 1, "w", min, t0).await.unwrap().len(), 1);
            break_key(&url, &format!("{{{prefix}:u}}:lock")).await;
            let ids = vec!["x".to_owned(), "y".to_owned()];
            assert!(
                s.release_all(&ids, "w", &Release::Delete, t0)
                    .await
                    .is_err()
            );
            assert!(s.get_job("x").await.unwrap().is_none());
            let again = s.add_jobs(&[NewJob::new("x", "v", "")], t0).await.unwrap();
            assert_eq!(again.new, vec!["x".to_owned()]);
        },
    );
}

/// A purge where one jobtype fails still unreserves what the others purged.
#[test]
fn failed_purge_in_one_jobtype_unreserves_the_others() {
    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let t0 = 1_700_000_000_000;
            let min = Duration::from_secs(60);
            s.add_jobs(&[NewJob::new("x", "t", ""), NewJob::new("y", "u", "")], t0)
                .await
                .unwrap();
            let done = Release::Archive(JobResult::from_status(200));
            for jt in ["t", "u"] {
                let got = s.claim_jobs(jt, 1, "w", min, t0).await.unwrap();
                assert_eq!(got.len(), 1);
                let ids = vec![got[0].id.clone()];
                assert_eq!(s.release_all(&ids, "w", &done, t0).await.unwrap(), ids);
            }
            break_key(&url, &format!("{{{prefix}:u}}:done:ok")).await;
            assert!(s.purge_archived(t0 + 1, &ResultCode::ALL).await.is_err());
            assert!(s.get_job("x").await.unwrap().is_none());
            let again = s.add_jobs(&[NewJob::new("x", "v", "")], t0).await.unwrap();
            assert_eq!(again.new, vec!["x".to_owned()]);
        },
    );
}

/// The scripts, as the store runs them (job scripts get `lib.lua` first).
mod raw {
    use redis::Script;

    pub fn reserve() -> Script {
        Script::new(include_str!("../scripts/reserve.lua"))
    }
    pub fn rereserve() -> Script {
        Script::new(include_str!("../scripts/rereserve.lua"))
    }
    pub fn add() -> Script {
        Script::new(concat!(
            include_str!("../scripts/lib.lua"),
            include_str!("../scripts/add.lua")
        ))
    }
    pub fn unreserve() -> Script {
        Script::new(include_str!("../scripts/unreserve.lua"))
    }
    /// One `add.lua` call for one job of jobtype `t` with unique key `key`
    /// (mode `k`, no window, keep, no repeat rule), as the store sends it.
    pub async fn add_keyed(
        c: &mut redis::aio::MultiplexedConnection,
        prefix: &str,
        id: &str,
        token: &str,
        key: &str,
        now: i64,
    ) -> redis::Value {
        let nowp = format!("{now:015}");
        add()
            .key(format!("{{{prefix}:t}}:ready"))
            .key(format!("{{{prefix}:t}}:sched"))
            .key(format!("{{{prefix}:t}}:fence"))
            .arg(format!("{{{prefix}:t}}:j:"))
            .arg(&nowp)
            .arg(format!("{{{prefix}}}:wake"))
            .arg("t")
            .arg(token)
            .arg(id)
            .arg("k")
            .arg("data")
            .arg(0)
            .arg(0)
            .arg(&nowp)
            .arg("")
            .arg("")
            .arg(key)
            .arg("")
            .arg("0")
            .arg("")
            .invoke_async(c)
            .await
            .unwrap()
    }
    pub fn bucket(prefix: &str, id: &str) -> String {
        let h = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        format!("{{{prefix}|i{}}}", h % 16)
    }
    pub async fn conn(url: &str) -> redis::aio::MultiplexedConnection {
        redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }
    /// One `add.lua` call for one job of jobtype `t`, as the store sends it
    /// (mode `r` carries the token of the reservation found, `tokA` here).
    pub async fn add_one(
        c: &mut redis::aio::MultiplexedConnection,
        prefix: &str,
        id: &str,
        token: &str,
        mode: &str,
        now: i64,
    ) -> redis::Value {
        let third = if mode == "r" { "tokA" } else { "data" };
        let nowp = format!("{now:015}");
        add()
            .key(format!("{{{prefix}:t}}:ready"))
            .key(format!("{{{prefix}:t}}:sched"))
            .key(format!("{{{prefix}:t}}:fence"))
            .arg(format!("{{{prefix}:t}}:j:"))
            .arg(&nowp)
            .arg(format!("{{{prefix}}}:wake"))
            .arg("t")
            .arg(token)
            .arg(id)
            .arg(mode)
            .arg(third)
            .arg(0)
            .arg(0)
            .arg(&nowp)
            .arg("")
            .arg("")
            .invoke_async(c)
            .await
            .unwrap()
    }
}

/// Two adds of one id and jobtype race (the reviewer's interleaving, step
/// by step with the store's own scripts): A reserves; B finds A's
/// reservation without a job and takes it over; A's create then comes. The
/// job must end up under the token the index carries, so that after the
/// job is deleted the id is free again.
#[test]
fn racing_adds_leave_the_index_on_the_live_token() {
    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let now = 1_700_000_000_000_i64;
            let id = "job 1 {x}";
            let bucket = raw::bucket(&prefix, id);
            let mut c = raw::conn(&url).await;
            let _: i64 = redis::cmd("SADD")
                .arg(format!("{{{prefix}}}:jobtypes"))
                .arg("t")
                .query_async(&mut c)
                .await
                .unwrap();
            let script = raw::reserve();
            let reserve = |tok: &'static str| {
                let mut inv = script.prepare_invoke();
                inv.key(&bucket).arg(tok).arg(id).arg("t");
                inv
            };
            let v: Vec<String> = reserve("tokA").invoke_async(&mut c).await.unwrap();
            assert_eq!(v, vec![String::new()]);
            let v: Vec<String> = reserve("tokB").invoke_async(&mut c).await.unwrap();
            assert_eq!(v, vec!["t tokA".to_owned()]);
            let f = raw::add_one(&mut c, &prefix, id, "tokB", "r", now).await;
            assert_eq!(f, redis::Value::Array(vec![redis::Value::Int(2)]));
            let f: Vec<i64> = raw::rereserve()
                .key(&bucket)
                .arg(id)
                .arg("t tokA")
                .arg("t tokB")
                .invoke_async(&mut c)
                .await
                .unwrap();
            assert_eq!(f, vec![1]);
            // A's create comes after B found the job missing: A's token
            // was fenced then, so A creates nothing ...
            let f = raw::add_one(&mut c, &prefix, id, "tokA", "c", now).await;
            assert_eq!(f, redis::Value::Array(vec![redis::Value::Int(3)]));
            // ... and B's create makes the job under B's token, the one in
            // the index.
            let f = raw::add_one(&mut c, &prefix, id, "tokB", "c", now).await;
            assert_eq!(f, redis::Value::Array(vec![redis::Value::Int(1)]));
            let g: String = redis::cmd("HGET")
                .arg(format!("{{{prefix}:t}}:j:{id}"))
                .arg("g")
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(g, "tokB");
            let ids = vec![id.to_owned()];
            let min = Duration::from_secs(60);
            assert_eq!(s.claim_jobs("t", 1, "w1", min, now).await.unwrap().len(), 1);
            assert_eq!(
                s.release_all(&ids, "w1", &Release::Delete, now)
                    .await
                    .unwrap(),
                ids
            );
            let left: Option<String> = redis::cmd("HGET")
                .arg(&bucket)
                .arg(id)
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(left, None, "reservation leaked");
            let out = s.add_jobs(&[NewJob::new(id, "u", "")], now).await.unwrap();
            assert_eq!(out.new, ids);
        },
    );
}

/// The store's own add aligns the index: an index entry whose token is not
/// the job's (left by a race whose second add died before aligning) is set
/// to the job's token by the next add of that id, which reports it existing.
#[test]
fn add_of_an_existing_job_aligns_its_index_entry() {
    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let now = 1_700_000_000_000_i64;
            let id = "y";
            let ids = vec![id.to_owned()];
            assert_eq!(
                s.add_jobs(&[NewJob::new(id, "t", "")], now)
                    .await
                    .unwrap()
                    .new,
                ids
            );
            let bucket = raw::bucket(&prefix, id);
            let mut c = raw::conn(&url).await;
            let _: i64 = redis::cmd("HSET")
                .arg(&bucket)
                .arg(id)
                .arg("t stale")
                .query_async(&mut c)
                .await
                .unwrap();
            let again = s.add_jobs(&[NewJob::new(id, "t", "")], now).await.unwrap();
            assert_eq!(again.existing, ids);
            let min = Duration::from_secs(60);
            assert_eq!(s.claim_jobs("t", 1, "w1", min, now).await.unwrap().len(), 1);
            assert_eq!(
                s.release_all(&ids, "w1", &Release::Delete, now)
                    .await
                    .unwrap(),
                ids
            );
            let out = s.add_jobs(&[NewJob::new(id, "u", "")], now).await.unwrap();
            assert_eq!(out.new, ids);
        },
    );
}

/// Which sets of jobtype `t` hold `id`, and its lock field.
async fn whereabouts(
    c: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
    id: &str,
) -> (Vec<&'static str>, Option<String>) {
    let mut sets = Vec::new();
    let ready: Vec<String> = redis::cmd("ZRANGE")
        .arg(format!("{{{prefix}:t}}:ready"))
        .arg(0)
        .arg(-1)
        .query_async(c)
        .await
        .unwrap();
    if ready.iter().any(|m| &m[15..] == id) {
        sets.push("ready");
    }
    let sets_of_codes = [
        "done:ok",
        "done:failed",
        "done:retry",
        "done:error",
        "done:cancelled",
        "done:timeout",
    ];
    for set in ["sched", "lock", "done"].into_iter().chain(sets_of_codes) {
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(format!("{{{prefix}:t}}:{set}"))
            .arg(id)
            .query_async(c)
            .await
            .unwrap();
        if score.is_some() {
            sets.push(set);
        }
    }
    let lock: Option<String> = redis::cmd("HGET")
        .arg(format!("{{{prefix}:t}}:j:{id}"))
        .arg("l")
        .query_async(c)
        .await
        .unwrap();
    (sets, lock)
}

/// A claim that fails midway (one job's key unreadable, as for a key being
/// migrated to another cluster node) leaves every other job in a set: the
/// jobs around the broken one are claimable again once it is gone.
#[test]
fn claim_failing_midway_loses_no_job() {
    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let now = 1_700_000_000_000_i64;
            let jobs: Vec<NewJob> = ["a", "b", "c"].map(|id| NewJob::new(id, "t", "")).into();
            assert_eq!(s.add_jobs(&jobs, now).await.unwrap().new.len(), 3);
            let b = format!("{{{prefix}:t}}:j:b");
            break_key(&url, &b).await;
            let min = Duration::from_secs(60);
            assert!(s.claim_jobs("t", 3, "w1", min, now).await.is_err());
            let mut c = raw::conn(&url).await;
            for id in ["a", "c"] {
                let (sets, _) = whereabouts(&mut c, &prefix, id).await;
                assert!(sets == ["ready"] || sets == ["lock"], "{id} is in {sets:?}");
            }
            let _: i64 = redis::cmd("DEL").arg(&b).query_async(&mut c).await.unwrap();
            let mut got: Vec<String> = s
                .claim_jobs("t", 3, "w2", min, now)
                .await
                .unwrap()
                .into_iter()
                .map(|j| j.id)
                .collect();
            got.sort();
            assert_eq!(got, ["a", "c"]);
        },
    );
}

/// A cancel that fails midway leaves no job archived outside
/// `done:cancelled`, nor free outside `ready`.
#[test]
fn cancel_failing_midway_loses_no_job() {
    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let now = 1_700_000_000_000_i64;
            let jobs: Vec<NewJob> = ["a", "b", "c"].map(|id| NewJob::new(id, "t", "")).into();
            assert_eq!(s.add_jobs(&jobs, now).await.unwrap().new.len(), 3);
            break_key(&url, &format!("{{{prefix}:t}}:j:b")).await;
            let ids: Vec<String> = ["a", "b", "c"].map(String::from).into();
            assert!(s.cancel_jobs(&ids, now).await.is_err());
            let mut c = raw::conn(&url).await;
            for id in ["a", "c"] {
                let (sets, lock) = whereabouts(&mut c, &prefix, id).await;
                let ok = (sets == ["ready"] && lock.as_deref() == Some(""))
                    || (sets == ["done:cancelled"] && lock.as_deref() == Some(LOCK_DONE));
                assert!(ok, "{id} is in {sets:?} with lock {lock:?}");
            }
        },
    );
}

/// A per-job release that fails on one job's key (unreadable, as for a key
/// being migrated) changes nothing: every job is read before the first
/// write, so the others stay claimed by their owner, in `lock`.
#[test]
fn release_failing_midway_changes_nothing() {
    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let now = 1_700_000_000_000_i64;
            let ids = ["a", "b", "c", "d", "e", "f"];
            let mut jobs: Vec<NewJob> = ids.map(|id| NewJob::new(id, "t", "")).into();
            jobs[5] = NewJob::new("f", "t", "").repeat(Repeat::new("@hourly"));
            assert_eq!(s.add_jobs(&jobs, now).await.unwrap().new.len(), 6);
            let min = Duration::from_secs(60);
            assert_eq!(s.claim_jobs("t", 6, "w1", min, now).await.unwrap().len(), 6);
            break_key(&url, &format!("{{{prefix}:t}}:j:c")).await;
            let releases = vec![
                JobRelease::new("a", Release::Archive(JobResult::from_status(200))),
                JobRelease::new("b", Release::Retry { delay: min }),
                JobRelease::new("c", Release::Unget),
                JobRelease::new("d", Release::Delete),
                JobRelease::new("e", Release::Unget),
                JobRelease::new(
                    "f",
                    Release::Repeat {
                        at: now + 1,
                        result: JobResult::from_status(200),
                        data: Some(b"next".to_vec()),
                    },
                ),
            ];
            assert!(s.release_jobs(&releases, "w1", now + 1).await.is_err());
            let mut c = raw::conn(&url).await;
            for id in ["a", "b", "d", "e", "f"] {
                let (sets, lock) = whereabouts(&mut c, &prefix, id).await;
                assert_eq!(
                    (sets, lock.as_deref()),
                    (vec!["lock"], Some("w1")),
                    "{id} is untouched"
                );
            }
        },
    );
}

/// The layout of "Repeating jobs": `rp` holds `Repeat::to_text` only on a
/// job added with a rule (mode `p`, and the 12th value of a keyed group);
/// one release call mixing an archive with repeats (with and without a
/// payload, due now and later) puts each repeat back in `ready` or
/// `sched` with `a = 0`, no pending claim, its result in `r` (no owner),
/// the claimed and repeated events stored as `JobEvent::to_json`'s text,
/// its key still held in `uq`, and counts only the archive in `codes`.
#[test]
fn repeating_jobs_keep_their_layout() {
    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let t0 = 1_700_000_000_000_i64;
            let min = Duration::from_secs(60);
            let job = |id: &str| format!("{{{prefix}:t}}:j:{id}");
            let mut c = raw::conn(&url).await;
            let hourly = Repeat::new("0 * * * *");
            let paris = Repeat::new("0 9 * * 1-5").time_zone("Europe/Paris");
            let jobs = vec![
                NewJob::new("plain", "t", "p"),
                NewJob::new("r", "t", "r0").repeat(hourly.clone()),
                NewJob::new("k", "t", "k0")
                    .unique(Unique::new("key"))
                    .repeat(paris.clone()),
                NewJob::new("konly", "t", "").unique(Unique::new("other")),
            ];
            assert_eq!(s.add_jobs(&jobs, t0).await.unwrap().new.len(), 4);
            assert_eq!(hget(&mut c, &job("plain"), "rp").await, None);
            assert_eq!(hget(&mut c, &job("konly"), "rp").await, None);
            assert_eq!(
                hget(&mut c, &job("r"), "rp").await.as_deref(),
                Some("0 * * * *")
            );
            assert_eq!(
                hget(&mut c, &job("k"), "rp").await.as_deref(),
                Some("TZ=Europe/Paris 0 9 * * 1-5")
            );
            let got = s.claim_jobs("t", 4, "w1", min, t0).await.unwrap();
            assert_eq!(got.len(), 4);
            let t1 = t0 + 10;
            let later = t1 + 3_600_000;
            let res = |status: u16, out: &str| JobResult {
                output: out.as_bytes().to_vec(),
                ..JobResult::from_status(status)
            };
            let releases = vec![
                JobRelease::new("plain", Release::Archive(res(200, "done"))),
                JobRelease::new(
                    "r",
                    Release::Repeat {
                        at: t1,
                        result: res(200, "line 1\nline 2"),
                        data: Some(b"r1".to_vec()),
                    },
                ),
                JobRelease::new(
                    "k",
                    Release::Repeat {
                        at: later,
                        result: res(204, ""),
                        data: None,
                    },
                ),
            ];
            let mut released = s.release_jobs(&releases, "w1", t1).await.unwrap();
            released.sort();
            assert_eq!(released, ["k", "plain", "r"]);
            let (sets, _) = whereabouts(&mut c, &prefix, "r").await;
            assert_eq!(sets, ["ready"], "due now");
            let (sets, _) = whereabouts(&mut c, &prefix, "k").await;
            assert_eq!(sets, ["sched"], "due later");
            let score: Option<f64> = redis::cmd("ZSCORE")
                .arg(format!("{{{prefix}:t}}:sched"))
                .arg("k")
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(score, Some(later as f64));
            let t1p = format!("{t1:015}");
            for (id, data, r, dt) in [
                (
                    "r",
                    "r1",
                    format!("ok 200 {t1p} \nline 1\nline 2"),
                    t1p.clone(),
                ),
                (
                    "k",
                    "k0",
                    format!("ok 204 {t1p} \n"),
                    format!("{later:015}"),
                ),
            ] {
                let f: Vec<Option<String>> = redis::cmd("HMGET")
                    .arg(job(id))
                    .arg(&["l", "a", "ca", "d", "r", "dt", "x"])
                    .query_async(&mut c)
                    .await
                    .unwrap();
                let want = [
                    Some(""),
                    Some("0"),
                    Some(""),
                    Some(data),
                    Some(&r),
                    Some(&dt),
                    None,
                ];
                assert_eq!(f, want.map(|v| v.map(str::to_owned)), "{id}");
                let h = hget(&mut c, &job(id), "h").await.unwrap();
                let (at, status) = if id == "r" { (t1, 200) } else { (later, 204) };
                let stored = [
                    JobEvent::new(t0, "w1", 1, EventKind::Claimed),
                    JobEvent::new(
                        t1,
                        "w1",
                        1,
                        EventKind::Repeated {
                            code: ResultCode::Ok,
                            status,
                            next_ms: at,
                        },
                    ),
                ];
                let text: Vec<String> = stored.iter().map(JobEvent::to_json).collect();
                assert_eq!(h, format!("02\n{}", text.join("\n")), "{id}");
            }
            assert_eq!(
                hget(&mut c, &format!("{{{prefix}:t}}:uq"), "key")
                    .await
                    .as_deref(),
                Some("k"),
                "the key stays held"
            );
            let codes: Vec<(String, String)> = redis::cmd("HGETALL")
                .arg(format!("{{{prefix}:t}}:codes"))
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(
                codes,
                [("ok".to_owned(), "1".to_owned())],
                "only the archive"
            );
            let r = s.get_job("r").await.unwrap().unwrap();
            assert_eq!((r.done_dt, r.lock.as_str(), r.attempts), (None, "", 0));
            assert_eq!(r.result, Some(res(200, "line 1\nline 2")));
            assert_eq!(r.flow.unwrap().repeat, Some(hourly));
            let k = s.get_job("k").await.unwrap().unwrap();
            let flow = k.flow.unwrap();
            assert_eq!(
                (flow.unique_key.as_deref(), flow.repeat),
                (Some("key"), Some(paris))
            );
        },
    );
}

/// The reviewer's delayed add: A reserves an id and stalls before its
/// `add.lua`; B's add (through the store) takes the reservation over and
/// creates the job; a worker claims and deletes it, which frees the id.
/// A's late `add.lua` must not create a job without an index entry.
#[test]
fn late_add_after_takeover_and_delete_creates_nothing() {
    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let now = 1_700_000_000_000_i64;
            let id = "dup";
            let ids = vec![id.to_owned()];
            let bucket = raw::bucket(&prefix, id);
            let mut c = raw::conn(&url).await;
            let v: Vec<String> = raw::reserve()
                .key(&bucket)
                .arg("tokA")
                .arg(id)
                .arg("t")
                .invoke_async(&mut c)
                .await
                .unwrap();
            assert_eq!(v, vec![String::new()]);
            assert_eq!(
                s.add_jobs(&[NewJob::new(id, "t", "")], now)
                    .await
                    .unwrap()
                    .new,
                ids
            );
            let min = Duration::from_secs(60);
            assert_eq!(s.claim_jobs("t", 1, "w1", min, now).await.unwrap().len(), 1);
            assert_eq!(
                s.release_all(&ids, "w1", &Release::Delete, now)
                    .await
                    .unwrap(),
                ids
            );
            // A's add.lua arrives now.
            let f = raw::add_one(&mut c, &prefix, id, "tokA", "c", now).await;
            assert_eq!(f, redis::Value::Array(vec![redis::Value::Int(3)]));
            assert!(s.get_job(id).await.unwrap().is_none());
            assert!(
                s.claim_jobs("t", 1, "w1", min, now)
                    .await
                    .unwrap()
                    .is_empty()
            );
            assert_eq!(
                s.add_jobs(&[NewJob::new(id, "u", "")], now)
                    .await
                    .unwrap()
                    .new,
                ids
            );
            assert_eq!(s.claim_jobs("u", 1, "w1", min, now).await.unwrap().len(), 1);
            assert!(
                s.claim_jobs("t", 1, "w1", min, now)
                    .await
                    .unwrap()
                    .is_empty()
            );
        },
    );
}

/// A job with unique key `key` of jobtype `t`.
fn keyed(id: &str, key: &str) -> NewJob {
    NewJob::new(id, "t", "").unique(Unique::new(key))
}

/// The value of field `field` of hash `key`.
async fn hget(c: &mut redis::aio::MultiplexedConnection, key: &str, field: &str) -> Option<String> {
    redis::cmd("HGET")
        .arg(key)
        .arg(field)
        .query_async(c)
        .await
        .unwrap()
}

/// The ids a keyed add reserved for its duplicates are given back: the
/// index holds no entry for them, and each can be added at once as a new
/// job of another jobtype; also when the duplicate was found after a
/// repair (a dangling reservation taken over). An existing id with a key
/// is existing, and keeps its reservation.
#[test]
fn keyed_duplicates_give_their_ids_back() {
    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let now = 1_700_000_000_000_i64;
            let mut c = raw::conn(&url).await;
            // "c" reserved for t by an add that died before its add.lua
            let v: Vec<String> = raw::reserve()
                .key(raw::bucket(&prefix, "c"))
                .arg("tokA")
                .arg("c")
                .arg("t")
                .invoke_async(&mut c)
                .await
                .unwrap();
            assert_eq!(v, vec![String::new()]);
            let out = s
                .add_jobs(
                    &[
                        keyed("a", "k"),
                        keyed("b", "k"),
                        NewJob::new("p", "t", ""),
                        keyed("c", "k"),
                    ],
                    now,
                )
                .await
                .unwrap();
            assert_eq!(out.new, ["a", "p"]);
            let dup = |id: &str| Duplicate {
                id: id.to_owned(),
                existing: "a".to_owned(),
                replaced: false,
            };
            assert_eq!(out.duplicates, [dup("b"), dup("c")]);
            for id in ["b", "c"] {
                assert_eq!(hget(&mut c, &raw::bucket(&prefix, id), id).await, None);
                let again = s.add_jobs(&[NewJob::new(id, "u", "")], now).await.unwrap();
                assert_eq!(again.new, [id], "{id} is free for another jobtype");
            }
            let replay = s.add_jobs(&[keyed("a", "other")], now).await.unwrap();
            assert_eq!(replay.existing, ["a"]);
            assert!(
                hget(&mut c, &raw::bucket(&prefix, "a"), "a")
                    .await
                    .is_some()
            );
            let other = s.add_jobs(&[NewJob::new("a", "u", "")], now).await.unwrap();
            assert_eq!(other.existing, ["a"], "a keeps its reservation");
        },
    );
}

/// A keyed add's duplicate races an add of the same id: A reserves "x"
/// and its `add.lua` finds the key held (a duplicate, nothing stored);
/// before A gives the id back, B adds "x" as a plain job of the same
/// jobtype, takes A's reservation over and creates it. A's late
/// `unreserve` (of its own token) must leave B's entry, so the job keeps
/// its index entry and its delete frees the id.
#[test]
fn late_unreserve_of_a_duplicate_leaves_the_new_job_indexed() {
    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let now = 1_700_000_000_000_i64;
            let (id, ids) = ("x", vec!["x".to_owned()]);
            let bucket = raw::bucket(&prefix, id);
            let mut c = raw::conn(&url).await;
            assert_eq!(
                s.add_jobs(&[keyed("h", "k")], now).await.unwrap().new,
                ["h"]
            );
            let v: Vec<String> = raw::reserve()
                .key(&bucket)
                .arg("tokA")
                .arg(id)
                .arg("t")
                .invoke_async(&mut c)
                .await
                .unwrap();
            assert_eq!(v, vec![String::new()]);
            let f = raw::add_keyed(&mut c, &prefix, id, "tokA", "k", now).await;
            let holder = redis::Value::Array(vec![
                redis::Value::BulkString(b"h".to_vec()),
                redis::Value::Int(0),
            ]);
            assert_eq!(f, redis::Value::Array(vec![holder]));
            let out = s.add_jobs(&[NewJob::new(id, "t", "")], now).await.unwrap();
            assert_eq!(out.new, ids);
            let _: () = raw::unreserve()
                .key(&bucket)
                .arg(id)
                .arg("t tokA")
                .invoke_async(&mut c)
                .await
                .unwrap();
            let entry = hget(&mut c, &bucket, id).await.unwrap();
            assert!(entry.starts_with("t ") && entry != "t tokA", "{entry}");
            let other = s.add_jobs(&[NewJob::new(id, "u", "")], now).await.unwrap();
            assert_eq!(other.existing, ids, "x is still indexed under t");
            let out = s.delete_jobs(&ids, 1_700_000_000_000).await.unwrap();
            assert_eq!(out.deleted, ids);
            let again = s.add_jobs(&[NewJob::new(id, "u", "")], now).await.unwrap();
            assert_eq!(again.new, ids);
        },
    );
}

/// The layout of "Unique keys": `uq` names the live holder, `uk` is the
/// job's field, an archive (release or cancel) moves the key to `uqd` as
/// `"<done_dt> <id>"`, a run again takes `uq` back, and a delete (release
/// or `delete_jobs`) or a purge removes each entry naming the job, so no
/// key of either hash is left.
#[test]
fn unique_keys_follow_their_job() {
    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let t0 = 1_700_000_000_000_i64;
            let min = Duration::from_secs(60);
            let (uq, uqd) = (format!("{{{prefix}:t}}:uq"), format!("{{{prefix}:t}}:uqd"));
            let job = |id: &str| format!("{{{prefix}:t}}:j:{id}");
            let mut c = raw::conn(&url).await;
            let ok = Release::Archive(JobResult::from_status(200));
            s.add_jobs(&[keyed("a", "k")], t0).await.unwrap();
            assert_eq!(hget(&mut c, &uq, "k").await.as_deref(), Some("a"));
            assert_eq!(hget(&mut c, &job("a"), "uk").await.as_deref(), Some("k"));
            s.claim_jobs("t", 1, "w", min, t0).await.unwrap();
            s.release_all(&["a".to_owned()], "w", &ok, t0 + 1)
                .await
                .unwrap();
            assert_eq!(hget(&mut c, &uq, "k").await, None);
            let a_done = format!("{:015} a", t0 + 1);
            assert_eq!(hget(&mut c, &uqd, "k").await, Some(a_done.clone()));
            s.add_jobs(&[keyed("b", "k")], t0 + 2).await.unwrap();
            s.cancel_jobs(&["b".to_owned()], t0 + 3).await.unwrap();
            let b_done = format!("{:015} b", t0 + 3);
            assert_eq!(hget(&mut c, &uqd, "k").await, Some(b_done));
            let rerun = s
                .rerun_jobs(&["a".to_owned()], Duration::ZERO, t0 + 4)
                .await
                .unwrap();
            assert_eq!(rerun, ["a"]);
            assert_eq!(hget(&mut c, &uq, "k").await.as_deref(), Some("a"));
            let out = s
                .delete_jobs(&["b".to_owned()], 1_700_000_000_000)
                .await
                .unwrap();
            assert_eq!(out.deleted, ["b"]);
            assert_eq!(hget(&mut c, &uqd, "k").await, None, "b named no more");
            s.claim_jobs("t", 1, "w", min, t0 + 4).await.unwrap();
            s.release_all(&["a".to_owned()], "w", &Release::Delete, t0 + 5)
                .await
                .unwrap();
            s.add_jobs(&[keyed("c", "k2")], t0 + 6).await.unwrap();
            s.delete_jobs(&["c".to_owned()], 1_700_000_000_000)
                .await
                .unwrap();
            s.add_jobs(&[keyed("d", "k")], t0 + 6).await.unwrap();
            s.claim_jobs("t", 1, "w", min, t0 + 6).await.unwrap();
            s.release_all(&["d".to_owned()], "w", &ok, t0 + 7)
                .await
                .unwrap();
            assert!(hget(&mut c, &uqd, "k").await.is_some());
            assert_eq!(s.purge_archived(t0 + 8, &ResultCode::ALL).await.unwrap(), 1);
            let left: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{{{prefix}:t}}:uq*"))
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(left, Vec::<String>::new());
        },
    );
}

/// With two jobs of one key archived at the same time, the window names
/// the one `MemoryStore` names (the greater id, also when one id is a
/// prefix of the other), whichever was archived last; a `uq` entry naming
/// a job that is gone (a lost write) or archived holds nothing.
#[test]
fn unique_window_names_the_memory_stores_job() {
    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let t0 = 1_700_000_000_000_i64;
            let min = Duration::from_secs(60);
            let memory = jobstore_api::MemoryStore::new();
            let ok = Release::Archive(JobResult::from_status(200));
            let mut outs = Vec::new();
            // Per key, two ids archived in this order; one a prefix of the
            // other in the last two (the greater is the longer).
            let pairs = [("k", ["b", "a"]), ("p", ["pa", "p"]), ("q", ["q", "qa"])];
            for store in [&s as &dyn JobStore, &memory] {
                let mut out = Vec::new();
                for (key, ids) in pairs {
                    for id in ids {
                        store.add_jobs(&[keyed(id, key)], t0).await.unwrap();
                        store.claim_jobs("t", 1, "w", min, t0).await.unwrap();
                        store
                            .release_all(&[id.to_owned()], "w", &ok, t0 + 1)
                            .await
                            .unwrap();
                    }
                    let w = NewJob::new(format!("z{key}"), "t", "")
                        .unique(Unique::new(key).window(min));
                    out.push(store.add_jobs(&[w], t0 + 2).await.unwrap());
                }
                outs.push(out);
            }
            assert_eq!(outs[0], outs[1]);
            let named: Vec<_> = outs[0]
                .iter()
                .map(|o| o.duplicates[0].existing.as_str())
                .collect();
            assert_eq!(named, ["b", "pa", "qa"]);
            let mut c = raw::conn(&url).await;
            let _: i64 = redis::cmd("HSET")
                .arg(format!("{{{prefix}:t}}:uq"))
                .arg("ghost key")
                .arg("ghost")
                .query_async(&mut c)
                .await
                .unwrap();
            let out = s.add_jobs(&[keyed("x", "ghost key")], t0).await.unwrap();
            assert_eq!(out.new, ["x"]);
            // Nor does one naming an archived job, for an add (without a
            // window) or a run again.
            for (key, archived) in [("p", "pa"), ("k", "b")] {
                let _: i64 = redis::cmd("HSET")
                    .arg(format!("{{{prefix}:t}}:uq"))
                    .arg(key)
                    .arg(archived)
                    .query_async(&mut c)
                    .await
                    .unwrap();
            }
            let out = s.add_jobs(&[keyed("y", "p")], t0).await.unwrap();
            assert_eq!(out.new, ["y"]);
            let rerun = s.rerun_jobs(&["a".to_owned()], min, t0 + 3).await.unwrap();
            assert_eq!(rerun, ["a"]);
        },
    );
}

/// `drop_namespace` leaves no key of its namespace and every key of
/// another.
#[test]
fn drop_namespace_removes_only_its_own() {
    jobstore_conformance::block_on(async {
        let Some(url) = redis_url().await else {
            return;
        };
        support::drop_namespace_removes_only_its_own(&url, std::slice::from_ref(&url)).await;
    });
}

/// A store's `Debug` names it, its prefix and whether it is a cluster,
/// and never its URL (which may carry a password); `prefix` and
/// `is_cluster` say the same.
#[test]
fn debug_output_names_the_prefix_and_no_url() {
    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let debug = format!("{s:?}");
            assert!(debug.starts_with("RedisStore {"), "{debug}");
            assert!(debug.contains(&format!("prefix: \"{prefix}\"")), "{debug}");
            assert!(debug.contains("cluster: false"), "{debug}");
            assert!(!debug.contains(&url), "{debug}");
            assert_eq!(s.prefix(), prefix);
            assert!(!s.is_cluster());
        },
    );
}

/// Deleting a jobtype's handler removes every key it had: its versions,
/// their data and its entry in the set of jobtypes with handlers, and
/// leaves another jobtype's handler as it was.
#[test]
fn deleted_handler_leaves_no_keys() {
    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let t0 = 1_700_000_000_000;
            for jt in ["t", "u"] {
                s.set_handler(jt, &Handler::new("process", "true"), t0)
                    .await
                    .unwrap();
            }
            assert!(s.delete_handler("t").await.unwrap());
            let mut c = raw::conn(&url).await;
            let (exists, types): (i64, Vec<String>) = redis::pipe()
                .cmd("EXISTS")
                .arg(format!("{{{prefix}}}:hv:t"))
                .arg(format!("{{{prefix}}}:hd:t"))
                .cmd("SMEMBERS")
                .arg(format!("{{{prefix}}}:htypes"))
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!((exists, types), (0, vec!["u".to_owned()]));
            assert!(s.get_handler("u").await.unwrap().is_some());
            assert!(!s.delete_handler("t").await.unwrap());
        },
    );
}

/// Purging every job of a jobtype leaves none of its keys: no job hash,
/// no archive entry and no per-code count, not even a count of 0.
#[test]
fn purged_jobs_leave_no_keys() {
    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let t0 = 1_700_000_000_000;
            let min = Duration::from_secs(60);
            let jobs = ["a", "b", "c"].map(|id| NewJob::new(id, "t", "data"));
            s.add_jobs(&jobs, t0).await.unwrap();
            let got: Vec<String> = s
                .claim_jobs("t", 3, "w", min, t0)
                .await
                .unwrap()
                .into_iter()
                .map(|j| j.id)
                .collect();
            for (ids, status) in [(&got[..2], 200), (&got[2..], 500)] {
                let done = Release::Archive(JobResult::from_status(status));
                assert_eq!(s.release_all(ids, "w", &done, t0).await.unwrap(), ids);
            }
            assert_eq!(s.purge_archived(t0 + 1, &ResultCode::ALL).await.unwrap(), 3);
            let mut c = raw::conn(&url).await;
            let left: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{{{prefix}:t}}*"))
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(left, Vec::<String>::new());
        },
    );
}

/// Archived jobs kept as stores before the sets per code kept them (every
/// code in one set, `{P:T}:done`) are moved into the set of their code by
/// the next purge, whatever codes it purges, and from then on are purged
/// by code like any other: counted all along, and gone only once their
/// own code is purged.
#[test]
fn archives_kept_in_one_set_are_moved_to_their_codes_and_purged_by_code() {
    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let t0 = 1_700_000_000_000;
            let min = Duration::from_secs(60);
            let jobs = ["a", "b", "c"].map(|id| NewJob::new(id, "t", "data"));
            s.add_jobs(&jobs, t0).await.unwrap();
            assert_eq!(s.claim_jobs("t", 3, "w", min, t0).await.unwrap().len(), 3);
            let archive = |status| Release::Archive(JobResult::from_status(status));
            let list = [
                JobRelease::new("a", archive(200)),
                JobRelease::new("b", archive(500)),
            ];
            assert_eq!(s.release_jobs(&list, "w", t0).await.unwrap().len(), 2);
            let list = [JobRelease::new("c", archive(200))];
            assert_eq!(s.release_jobs(&list, "w", t0 + 10).await.unwrap().len(), 1);
            // Back to one set for every code.
            let mut c = raw::conn(&url).await;
            let tag = format!("{{{prefix}:t}}");
            for (id, code) in [("a", "ok"), ("b", "error"), ("c", "ok")] {
                let set = format!("{tag}:done:{code}");
                let score: f64 = redis::cmd("ZSCORE")
                    .arg(&set)
                    .arg(id)
                    .query_async(&mut c)
                    .await
                    .unwrap();
                let _: () = redis::pipe()
                    .cmd("ZADD")
                    .arg(format!("{tag}:done"))
                    .arg(score)
                    .arg(id)
                    .ignore()
                    .cmd("ZREM")
                    .arg(&set)
                    .arg(id)
                    .ignore()
                    .query_async(&mut c)
                    .await
                    .unwrap();
                assert_eq!(whereabouts(&mut c, &prefix, id).await.0, ["done"]);
            }
            // "b" as archived before the result field: its code is rc
            let key = format!("{tag}:j:b");
            let _: i64 = redis::cmd("HDEL")
                .arg(&key)
                .arg("r")
                .query_async(&mut c)
                .await
                .unwrap();
            let _: () = redis::cmd("HSET")
                .arg(&key)
                .arg(&["dd", &t0.to_string(), "rc", "error", "rs", "500", "ro", ""][..])
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(
                s.purge_archived(t0 + 1, &[ResultCode::Failed])
                    .await
                    .unwrap(),
                0
            );
            for (id, set) in [("a", "done:ok"), ("b", "done:error"), ("c", "done:ok")] {
                assert_eq!(whereabouts(&mut c, &prefix, id).await.0, [set], "{id}");
            }
            let old: i64 = redis::cmd("EXISTS")
                .arg(format!("{tag}:done"))
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(old, 0, "the one set is gone");
            let archived = s.job_counts(t0 + 20).await.unwrap()[0].archived.clone();
            let want = [(ResultCode::Ok, 2), (ResultCode::Error, 1)];
            assert_eq!(archived, want.into_iter().collect());
            assert_eq!(
                s.purge_archived(t0 + 1, &[ResultCode::Ok]).await.unwrap(),
                1
            );
            assert!(s.get_job("a").await.unwrap().is_none());
            assert!(s.get_job("c").await.unwrap().is_some());
            let archived = s.job_counts(t0 + 20).await.unwrap()[0].archived.clone();
            let want = [(ResultCode::Ok, 1), (ResultCode::Error, 1)];
            assert_eq!(archived, want.into_iter().collect());
            assert_eq!(
                s.purge_archived(t0 + 1, &[ResultCode::Error])
                    .await
                    .unwrap(),
                1
            );
            assert!(s.get_job("b").await.unwrap().is_none());
        },
    );
}

/// `rereserve.lua` is a compare-and-set per id: it answers 1 for each id
/// whose entry held the expected value (now the new one) and 0 for each
/// whose entry had changed (left as it is), in the order of the ids. The
/// store takes a 0 for a takeover lost to a racing add.
#[test]
fn rereserve_answers_each_compare_and_set() {
    with_namespace(
        |o| o,
        |_, url, prefix| async move {
            let mut c = raw::conn(&url).await;
            let bucket = raw::bucket(&prefix, "x");
            let _: () = redis::cmd("HSET")
                .arg(&bucket)
                .arg(&["a", "t tokA", "b", "t tokC", "c", "t tokA"][..])
                .query_async(&mut c)
                .await
                .unwrap();
            let script = raw::rereserve();
            let mut inv = script.key(&bucket);
            for id in ["a", "b", "c"] {
                inv.arg(id).arg("t tokA").arg("t tokB");
            }
            let f: Vec<i64> = inv.invoke_async(&mut c).await.unwrap();
            assert_eq!(f, vec![1, 0, 1]);
            let v: Vec<String> = redis::cmd("HMGET")
                .arg(&bucket)
                .arg(&["a", "b", "c"][..])
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(v, ["t tokB", "t tokC", "t tokB"]);
        },
    );
}

/// Waiting jobs still in `sched` (due since the last claim) are moved to
/// `ready` by a listing, in slices, until none is left: a listing of more
/// due jobs than one slice lists every one, in claim order, and its
/// cursors leave no member behind in `ready`.
#[test]
fn listing_promotes_every_due_job_first() {
    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let t0 = 1_700_000_000_000;
            let n = 2_500;
            let jobs: Vec<NewJob> = (0..n)
                .map(|i| {
                    NewJob::new(format!("j{i:04}"), "t", "")
                        .priority(i % 5)
                        .run_at(t0 + 1_000)
                })
                .collect();
            assert_eq!(s.add_jobs(&jobs, t0).await.unwrap().new.len(), n as usize);
            let now = t0 + 2_000;
            let mut want: Vec<(i32, String)> =
                jobs.iter().map(|j| (-j.priority, j.id.clone())).collect();
            want.sort();
            let mut q = JobQuery::new(JobState::Waiting).limit(MAX_PAGE);
            let mut got = Vec::new();
            loop {
                let page = s.list_jobs(&q, now).await.unwrap();
                got.extend(page.jobs.into_iter().map(|j| j.id));
                match page.next {
                    Some(next) => q.cursor = Some(next),
                    None => break,
                }
            }
            let want: Vec<String> = want.into_iter().map(|(_, id)| id).collect();
            assert_eq!(got, want);
            let mut c = raw::conn(&url).await;
            let cards: (i64, i64) = redis::pipe()
                .cmd("ZCARD")
                .arg(format!("{{{prefix}:t}}:ready"))
                .cmd("ZCARD")
                .arg(format!("{{{prefix}:t}}:sched"))
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(cards, (i64::from(n), 0));
        },
    );
}

/// Archived jobs kept in the old set of every code (`{P:T}:done`) are
/// listed with the others, by code, and can be run again or deleted.
#[test]
fn archives_kept_in_one_set_are_listed_run_again_and_deleted() {
    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let t0 = 1_700_000_000_000;
            let min = Duration::from_secs(60);
            let jobs = ["a", "b", "c", "d"].map(|id| NewJob::new(id, "t", "data"));
            s.add_jobs(&jobs, t0).await.unwrap();
            assert_eq!(s.claim_jobs("t", 4, "w", min, t0).await.unwrap().len(), 4);
            let archive = |status| Release::Archive(JobResult::from_status(status));
            let list = [
                JobRelease::new("a", archive(200)),
                JobRelease::new("b", archive(500)),
            ];
            assert_eq!(s.release_jobs(&list, "w", t0).await.unwrap().len(), 2);
            let list = [
                JobRelease::new("c", archive(200)),
                JobRelease::new("d", archive(200)),
            ];
            assert_eq!(s.release_jobs(&list, "w", t0 + 10).await.unwrap().len(), 2);
            // a, b and c back to the one set for every code; d stays.
            let mut c = raw::conn(&url).await;
            let tag = format!("{{{prefix}:t}}");
            for (id, code) in [("a", "ok"), ("b", "error"), ("c", "ok")] {
                let set = format!("{tag}:done:{code}");
                let score: f64 = redis::cmd("ZSCORE")
                    .arg(&set)
                    .arg(id)
                    .query_async(&mut c)
                    .await
                    .unwrap();
                let _: () = redis::pipe()
                    .cmd("ZADD")
                    .arg(format!("{tag}:done"))
                    .arg(score)
                    .arg(id)
                    .ignore()
                    .cmd("ZREM")
                    .arg(&set)
                    .arg(id)
                    .ignore()
                    .query_async(&mut c)
                    .await
                    .unwrap();
            }
            let now = t0 + 20;
            let listed = |q: JobQuery| {
                let s = &s;
                async move {
                    let mut q = q.limit(1);
                    let mut out = Vec::new();
                    loop {
                        let page = s.list_jobs(&q, now).await.unwrap();
                        out.extend(page.jobs.into_iter().map(|j| j.id));
                        match page.next {
                            Some(next) => q.cursor = Some(next),
                            None => return out,
                        }
                    }
                }
            };
            let all = JobQuery::new(JobState::Archived);
            assert_eq!(listed(all.clone()).await, ["d", "c", "b", "a"]);
            let ok = all.clone().codes([ResultCode::Ok]);
            assert_eq!(listed(ok).await, ["d", "c", "a"]);
            let errors = all.clone().codes([ResultCode::Error]);
            assert_eq!(listed(errors).await, ["b"]);
            let rerun = s.rerun_jobs(&["b".to_owned()], min, now).await.unwrap();
            assert_eq!(rerun, ["b"]);
            let gone = s
                .delete_jobs(&["a".to_owned()], 1_700_000_000_000)
                .await
                .unwrap();
            assert_eq!(gone.deleted, ["a"]);
            assert_eq!(listed(all).await, ["d", "c"]);
            let archived = s.job_counts(now).await.unwrap()[0].archived.clone();
            assert_eq!(archived, [(ResultCode::Ok, 2)].into_iter().collect());
            assert_eq!(whereabouts(&mut c, &prefix, "b").await.0, ["sched"]);
        },
    );
}

/// A job hash stored before histories and tags (no `h`, no `t`) reads
/// back with no tags and its implicit `added` event alone (as every hash
/// added since), is listed, and stores its history from the next change;
/// the stored events are `JobEvent::to_json`'s text.
#[test]
fn hashes_without_history_or_tags_read_as_empty() {
    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let now = 1_700_000_000_000;
            let job = NewJob::new("old", "t", "").tags(["a"]);
            assert_eq!(s.add_jobs(&[job], now).await.unwrap().new, ["old"]);
            let key = format!("{{{prefix}:t}}:j:old");
            let mut c = raw::conn(&url).await;
            let _: i64 = redis::cmd("HDEL")
                .arg(&key)
                .arg("h")
                .arg("t")
                .query_async(&mut c)
                .await
                .unwrap();
            let got = s.get_job("old").await.unwrap().unwrap();
            let added = [JobEvent::new(now, "", 0, EventKind::Added)];
            assert!(got.history == added && got.tags.is_empty(), "{got:?}");
            let page = s
                .list_jobs(&JobQuery::new(JobState::Waiting), now)
                .await
                .unwrap();
            assert_eq!(page.jobs.len(), 1);
            assert_eq!(page.jobs[0].history, added);
            let tagged = JobQuery::new(JobState::Waiting).tag("a");
            assert!(s.list_jobs(&tagged, now).await.unwrap().jobs.is_empty());
            let min = Duration::from_secs(60);
            let claimed = s.claim_jobs("t", 1, "w\"1", min, now).await.unwrap();
            assert_eq!(claimed.len(), 1);
            assert_eq!(claimed[0].history.len(), 2);
            assert_eq!(
                s.get_job("old").await.unwrap().unwrap().history,
                claimed[0].history
            );
            // The claim is kept in the job's fields (ca), not in h, until
            // a change that is not its archive stores it.
            let h: Option<String> = redis::cmd("HGET")
                .arg(&key)
                .arg("h")
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(h, None);
            let retry = Release::Retry {
                delay: Duration::ZERO,
            };
            let released = s
                .release_jobs(&[JobRelease::new("old", retry)], "w\"1", now)
                .await
                .unwrap();
            assert_eq!(released, ["old"]);
            let job = s.get_job("old").await.unwrap().unwrap();
            assert_eq!(job.history.len(), 3);
            let h: String = redis::cmd("HGET")
                .arg(&key)
                .arg("h")
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(
                h,
                format!(
                    "02\n{}\n{}",
                    job.history[1].to_json(),
                    job.history[2].to_json()
                )
            );
            assert_eq!(job.history[..2], claimed[0].history);
        },
    );
}

/// A job's trace context is the one hash field `tc`, the traceparent
/// and, after a space, the tracestate (which may hold spaces itself),
/// written only for a job added with one; a hash without it (as stored
/// before trace context) reads, lists and claims without one.
#[test]
fn trace_context_is_one_hash_field() {
    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let now = 1_700_000_000_000;
            let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
            let ctx = jobstore_api::TraceContext::parse(tp, Some("a=1 , b=x y")).unwrap();
            let plain = jobstore_api::TraceContext::parse(tp, None).unwrap();
            let jobs = [
                NewJob::new("full", "t", "").trace(ctx.clone()),
                NewJob::new("plain", "t", "").trace(plain.clone()),
                NewJob::new("none", "t", ""),
                NewJob::new("old", "t", "").trace(plain.clone()),
            ];
            assert_eq!(s.add_jobs(&jobs, now).await.unwrap().new.len(), 4);
            let mut c = raw::conn(&url).await;
            let field = |id: &str| {
                redis::cmd("HGET")
                    .arg(format!("{{{prefix}:t}}:j:{id}"))
                    .arg("tc")
                    .clone()
            };
            let full: Option<String> = field("full").query_async(&mut c).await.unwrap();
            assert_eq!(full.as_deref(), Some(format!("{tp} a=1 , b=x y").as_str()));
            let only: Option<String> = field("plain").query_async(&mut c).await.unwrap();
            assert_eq!(only.as_deref(), Some(tp));
            let none: Option<String> = field("none").query_async(&mut c).await.unwrap();
            assert_eq!(none, None);
            let _: i64 = redis::cmd("HDEL")
                .arg(format!("{{{prefix}:t}}:j:old"))
                .arg("tc")
                .query_async(&mut c)
                .await
                .unwrap();
            let want = |id: &str| match id {
                "full" => Some(ctx.clone()),
                "plain" => Some(plain.clone()),
                _ => None,
            };
            for id in ["full", "plain", "none", "old"] {
                assert_eq!(
                    s.get_job(id).await.unwrap().unwrap().trace,
                    want(id),
                    "{id}"
                );
            }
            let page = s
                .list_jobs(&JobQuery::new(JobState::Waiting), now)
                .await
                .unwrap();
            assert_eq!(page.jobs.len(), 4);
            for j in &page.jobs {
                assert_eq!(j.trace, want(&j.id), "listed {}", j.id);
            }
            let min = Duration::from_secs(60);
            let claimed = s.claim_jobs("t", 4, "w1", min, now).await.unwrap();
            assert_eq!(claimed.len(), 4);
            for j in &claimed {
                assert_eq!(j.trace, want(&j.id), "claimed {}", j.id);
            }
        },
    );
}

/// A job's current claim lives in its fields (`ca`, and `cb` once
/// archived), not in `h`: every path that stores it (a claim of an expired
/// lease, a cancel request, a retry, a hand-back, a run again of a job
/// archived by the claim's release) reads back exactly as `MemoryStore`'s
/// stored events, at every step, by `get_job`, by listings and in the
/// claim's reply; a hash claimed before the fields existed (its claim in
/// `h`, no `ca`) reads and archives as before.
#[test]
fn pending_claims_read_as_the_memory_stores_events() {
    use jobstore_api::MemoryStore;

    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let m = MemoryStore::new();
            let t = 1_700_000_000_000;
            let sec = Duration::from_secs(1);
            let both = [&s as &dyn JobStore, &m];
            let jobs = [NewJob::new("e", "pc", ""), NewJob::new("old", "pc2", "")];
            for st in both {
                st.add_jobs(&jobs, t).await.unwrap();
            }
            let same = |what: &'static str| {
                let (s, m) = (&s, &m);
                async move {
                    for id in ["e", "old"] {
                        let a = s.get_job(id).await.unwrap().unwrap();
                        let b = m.get_job(id).await.unwrap().unwrap();
                        assert_eq!(a.history, b.history, "{what}: {id}");
                        assert_eq!((a.lock, a.attempts), (b.lock, b.attempts), "{what}: {id}");
                    }
                }
            };
            let claim = |jobtype: &'static str, owner: &'static str, now| {
                let (s, m) = (&s, &m);
                async move {
                    let a = s.claim_jobs(jobtype, 1, owner, sec, now).await.unwrap();
                    let b = m.claim_jobs(jobtype, 1, owner, sec, now).await.unwrap();
                    assert_eq!(a.len(), 1);
                    assert_eq!(a[0].history, b[0].history, "claim reply at {now}");
                }
            };
            let release = |id: &'static str, owner: &'static str, how: Release, now| {
                let (s, m) = (&s, &m);
                async move {
                    let r = [JobRelease::new(id, how)];
                    assert_eq!(s.release_jobs(&r, owner, now).await.unwrap(), [id]);
                    assert_eq!(m.release_jobs(&r, owner, now).await.unwrap(), [id]);
                }
            };
            claim("pc", "w1", t + 1).await;
            same("claimed").await;
            // expired, taken again: the first claim is stored
            claim("pc", "w\"2", t + 5_000).await;
            same("claimed again").await;
            let page = s
                .list_jobs(&JobQuery::new(JobState::Running), t + 5_001)
                .await
                .unwrap();
            let want = m.get_job("e").await.unwrap().unwrap().history;
            assert_eq!(page.jobs[0].history, want, "listed");
            for st in both {
                st.cancel_jobs(&["e".to_owned()], t + 5_002).await.unwrap();
            }
            same("cancel requested").await;
            // expired with its claim stored by the cancel: nothing more
            claim("pc", "w1", t + 20_000).await;
            same("claimed after the cancel request").await;
            release("e", "w1", Release::Unget, t + 20_001).await;
            same("handed back").await;
            claim("pc", "w1", t + 20_002).await;
            let retry = Release::Retry {
                delay: Duration::ZERO,
            };
            release("e", "w1", retry, t + 20_003).await;
            same("retried").await;
            claim("pc", "w1", t + 20_004).await;
            let ok = Release::Archive(JobResult::new(ResultCode::Ok, 200));
            release("e", "w1", ok.clone(), t + 20_005).await;
            same("archived").await;
            let page = s
                .list_jobs(&JobQuery::new(JobState::Archived), t + 20_006)
                .await
                .unwrap();
            let want = m.get_job("e").await.unwrap().unwrap().history;
            assert_eq!(page.jobs[0].history, want, "listed archived");
            for st in both {
                st.rerun_jobs(&["e".to_owned()], Duration::ZERO, t + 20_006)
                    .await
                    .unwrap();
            }
            same("run again").await;
            let key = format!("{{{prefix}:pc}}:j:e");
            let mut c = raw::conn(&url).await;
            let left: Vec<Option<String>> = redis::cmd("HMGET")
                .arg(&key)
                .arg("ca")
                .arg("cb")
                .arg("dd")
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(left, [None, None, None], "run again clears the claim");
            // A claim as stored before the claim fields: in h, no ca.
            claim("pc2", "w1", t + 30_000).await;
            // (And before the implicit added event: h holds it too.)
            let key = format!("{{{prefix}:pc2}}:j:old");
            let events = m.get_job("old").await.unwrap().unwrap().history;
            let (added, claimed) = (events[0].to_json(), events[1].to_json());
            let _: () = redis::cmd("HSET")
                .arg(&key)
                .arg("h")
                .arg(format!("02\n{added}\n{claimed}"))
                .query_async(&mut c)
                .await
                .unwrap();
            let _: i64 = redis::cmd("HDEL")
                .arg(&key)
                .arg("ca")
                .query_async(&mut c)
                .await
                .unwrap();
            same("claimed before the claim fields").await;
            release("old", "w1", ok, t + 30_001).await;
            same("archived, claimed before the claim fields").await;
            for st in both {
                st.rerun_jobs(&["old".to_owned()], Duration::ZERO, t + 30_002)
                    .await
                    .unwrap();
            }
            same("run again, claimed before the claim fields").await;
        },
    );
}

/// Stats buckets drop themselves: each hash an add writes expires one
/// bucket width after the window stops holding it, a bucket the window no
/// longer holds is not written at all, and a jobtype's add that meets a
/// key it cannot write writes none of its buckets.
#[test]
fn stats_buckets_expire_by_themselves() {
    use jobstore_api::stats::{DAY_MS, MINUTE_MS};
    use jobstore_api::{Durations, StatsDelta};

    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let m0 = 1_700_000_000_000 / MINUTE_MS * MINUTE_MS;
            let day = m0 / DAY_MS * DAY_MS;
            let now = m0 + 30_000;
            let delta = |jobtype: &str, minute| StatsDelta {
                wait: Durations::of(&[1]),
                ..StatsDelta::new(jobtype, minute)
            };
            s.add_stats(
                &[
                    delta("st", m0),
                    delta("st", m0 - 59 * MINUTE_MS),
                    delta("st", m0 - 60 * MINUTE_MS),
                    delta("st-old", day - 30 * DAY_MS),
                ],
                now,
            )
            .await
            .unwrap();
            let mut c = raw::conn(&url).await;
            let mut keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{{{prefix}:st*"))
                .query_async(&mut c)
                .await
                .unwrap();
            keys.sort();
            let key = |res: &str, start: i64| format!("{{{prefix}:st}}:stats:{res}:{start}");
            let (newest, oldest, today) = (
                key("minute", m0),
                key("minute", m0 - 59 * MINUTE_MS),
                key("day", day),
            );
            assert_eq!(keys, [today.clone(), oldest.clone(), newest.clone()]);
            for (k, ttl) in [
                (&newest, m0 + 61 * MINUTE_MS - now),
                (&oldest, m0 + 2 * MINUTE_MS - now),
                (&today, day + 31 * DAY_MS - now),
            ] {
                let left: i64 = redis::cmd("PTTL").arg(k).query_async(&mut c).await.unwrap();
                assert!(left <= ttl && left > ttl - 10_000, "{k}: {left} of {ttl}");
            }
            // A bucket key of another type fails the add of its jobtype
            // before any write.
            let _: () = redis::cmd("SET")
                .arg(key("day", day))
                .arg("x")
                .query_async(&mut c)
                .await
                .unwrap();
            let err = s
                .add_stats(&[delta("st", m0 - MINUTE_MS)], now)
                .await
                .unwrap_err();
            assert!(!err.is_retryable(), "{err}");
            let written: i64 = redis::cmd("EXISTS")
                .arg(key("minute", m0 - MINUTE_MS))
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(written, 0);
        },
    );
}

/// An archived job's result is one hash field, `r`; a hash archived before
/// it (`dd`, `rc`, `rs`, `ro`, `cb`) reads, lists, runs again and deletes
/// as before, and its next archive replaces that old result whole (an
/// empty output leaves none of the old one).
#[test]
fn results_in_one_field_and_as_archived_before_read_the_same() {
    use jobstore_api::MemoryStore;

    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let m = MemoryStore::new();
            let t = 1_700_000_000_000;
            let sec = Duration::from_secs(1);
            let both = [&s as &dyn JobStore, &m];
            let ids = ["new", "old", "old2"];
            let jobs = ids.map(|id| NewJob::new(id, "rf", ""));
            let failed = |status, output: &str| {
                let mut r = JobResult::new(ResultCode::Failed, status);
                r.output = output.as_bytes().to_vec();
                Release::Archive(r)
            };
            // an owner with spaces: the last part of r's first line
            let owner = "w 1";
            for st in both {
                st.add_jobs(&jobs, t).await.unwrap();
                assert_eq!(
                    st.claim_jobs("rf", 3, owner, sec, t + 1)
                        .await
                        .unwrap()
                        .len(),
                    3
                );
                let r = ids.map(|id| JobRelease::new(id, failed(404, "boom\nat line 2")));
                assert_eq!(st.release_jobs(&r, owner, t + 2).await.unwrap().len(), 3);
            }
            let same = |what: &'static str| {
                let (s, m) = (&s, &m);
                async move {
                    for id in ids {
                        let a = s.get_job(id).await.unwrap().unwrap();
                        let b = m.get_job(id).await.unwrap().unwrap();
                        assert_eq!(
                            (&a.result, a.done_dt, &a.history, &a.lock, a.attempts),
                            (&b.result, b.done_dt, &b.history, &b.lock, b.attempts),
                            "{what}: {id}"
                        );
                    }
                }
            };
            same("archived").await;
            let mut c = raw::conn(&url).await;
            let key = |id: &str| format!("{{{prefix}:rf}}:j:{id}");
            let fields = |id: &str| {
                let key = key(id);
                let mut c = c.clone();
                async move {
                    let v: Vec<Option<Vec<u8>>> = redis::cmd("HMGET")
                        .arg(key)
                        .arg(&["r", "dd", "rc", "rs", "ro", "cb"][..])
                        .query_async(&mut c)
                        .await
                        .unwrap();
                    v
                }
            };
            assert_eq!(
                fields("new").await,
                [
                    Some(format!("failed 404 {:015} w 1\nboom\nat line 2", t + 2).into_bytes()),
                    None,
                    None,
                    None,
                    None,
                    None
                ],
                "one field"
            );
            // "old" and "old2" as archived before r existed
            for id in ["old", "old2"] {
                let _: i64 = redis::cmd("HDEL")
                    .arg(key(id))
                    .arg("r")
                    .query_async(&mut c)
                    .await
                    .unwrap();
                let _: () = redis::cmd("HSET")
                    .arg(key(id))
                    .arg(&["dd", &format!("{:015}", t + 2), "rc", "failed", "rs", "404"][..])
                    .arg(&["ro", "boom\nat line 2", "cb", owner][..])
                    .query_async(&mut c)
                    .await
                    .unwrap();
            }
            same("archived before r").await;
            let q = JobQuery::new(JobState::Archived).codes([ResultCode::Failed]);
            let (a, b) = (
                s.list_jobs(&q, t + 3).await.unwrap(),
                m.list_jobs(&q, t + 3).await.unwrap(),
            );
            let view = |p: &jobstore_api::JobPage| {
                p.jobs
                    .iter()
                    .map(|j| (j.id.clone(), j.result.clone(), j.done_dt))
                    .collect::<Vec<_>>()
            };
            assert_eq!(view(&a), view(&b), "listed");
            assert_eq!(a.jobs.len(), 3);
            for st in both {
                let mut again = st
                    .rerun_jobs(&["old".to_owned(), "new".to_owned()], Duration::ZERO, t + 4)
                    .await
                    .unwrap();
                again.sort();
                assert_eq!(again, ["new", "old"]);
            }
            same("run again: the last result stays").await;
            for st in both {
                assert_eq!(
                    st.claim_jobs("rf", 3, owner, sec, t + 5)
                        .await
                        .unwrap()
                        .len(),
                    2
                );
                let ok = Release::Archive(JobResult::new(ResultCode::Ok, 200));
                let r = ["old", "new"].map(|id| JobRelease::new(id, ok.clone()));
                assert_eq!(st.release_jobs(&r, owner, t + 6).await.unwrap().len(), 2);
            }
            same("archived again, no output").await;
            assert_eq!(
                s.get_job("old")
                    .await
                    .unwrap()
                    .unwrap()
                    .result
                    .unwrap()
                    .output,
                b""
            );
            for st in both {
                let out = st
                    .delete_jobs(&["old2".to_owned()], 1_700_000_000_000)
                    .await
                    .unwrap();
                assert_eq!(out.deleted, ["old2"]);
            }
            let counts = |c: Vec<jobstore_api::JobCounts>| {
                c.into_iter()
                    .map(|c| (c.jobtype, c.archived))
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                counts(s.job_counts(t + 7).await.unwrap()),
                counts(m.job_counts(t + 7).await.unwrap()),
                "counts after deleting a job archived before r"
            );
        },
    );
}

/// Schedules keep their layout: one hash per schedule with the firing
/// state in fields of their own, the due index `{P}:sch` holding exactly
/// the schedules not paused with a `next_due`, every name in `{P}:schn`.
/// A schedule script meeting a key of another type fails before any
/// write, and an advance whose counter would pass the largest Redis
/// integer fails and changes nothing (the counter it added first is taken
/// back).
#[test]
fn schedules_keep_their_index_and_fail_whole() {
    use jobstore_api::{Schedule, ScheduleAdvance};

    with_namespace(
        |o| o,
        |s, url, prefix| async move {
            let t = 1_700_000_000_000;
            let mut c = raw::conn(&url).await;
            let (due, names) = (format!("{{{prefix}}}:sch"), format!("{{{prefix}}}:schn"));
            let hash = |name: &str| format!("{{{prefix}}}:sch:{name}");
            let plain = |name: &str| Schedule::new(name, "* * * * *", "sc");
            for (name, next) in [("a", Some(t)), ("b", Some(t + 1)), ("c", None)] {
                s.set_schedule(&plain(name), next, t).await.unwrap();
            }
            s.pause_schedule("b", true, None, t).await.unwrap();
            let index = |c: &mut redis::aio::MultiplexedConnection| {
                let mut c = c.clone();
                let due = due.clone();
                async move {
                    redis::cmd("ZRANGE")
                        .arg(due)
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES")
                        .query_async::<Vec<(String, i64)>>(&mut c)
                        .await
                        .unwrap()
                }
            };
            assert_eq!(index(&mut c).await, [("a".to_owned(), t)]);
            let all: Vec<String> = redis::cmd("ZRANGE")
                .arg(&names)
                .arg(0)
                .arg(-1)
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(all, ["a", "b", "c"]);
            let fields: Vec<Option<String>> = redis::cmd("HMGET")
                .arg(hash("b"))
                .arg(&["version", "paused", "next_due", "fired_through", "fired"])
                .query_async(&mut c)
                .await
                .unwrap();
            let some = |v: &str| Some(v.to_owned());
            assert_eq!(
                fields,
                [
                    some("1"),
                    some("1"),
                    some(&(t + 1).to_string()),
                    None,
                    some("0")
                ]
            );
            // An advance to no next_due takes "a" out; a resume of "b" puts it back.
            let adv = |fired, skipped| ScheduleAdvance {
                fired_through: t,
                last_job: None,
                next_due: None,
                fired,
                skipped,
            };
            assert!(s.advance_schedule("a", 1, &adv(1, 0), t).await.unwrap());
            s.pause_schedule("b", false, Some(t + 2), t).await.unwrap();
            assert_eq!(index(&mut c).await, [("b".to_owned(), t + 2)]);

            // Counters past 2^63 - 1: refused whole.
            let before = s.get_schedule("a").await.unwrap().unwrap();
            let later = |fired, skipped| ScheduleAdvance {
                fired_through: t + 10,
                next_due: Some(t + 20),
                ..adv(fired, skipped)
            };
            let err = s
                .advance_schedule("a", 1, &later(u64::MAX, 0), t)
                .await
                .unwrap_err();
            assert!(!err.is_retryable(), "{err}");
            let _: () = redis::cmd("HSET")
                .arg(hash("a"))
                .arg("skipped")
                .arg(i64::MAX)
                .query_async(&mut c)
                .await
                .unwrap();
            let before = jobstore_api::ScheduleRecord {
                skipped: i64::MAX as u64,
                ..before
            };
            let err = s
                .advance_schedule("a", 1, &later(2, 1), t)
                .await
                .unwrap_err();
            assert!(!err.is_retryable(), "{err}");
            assert_eq!(s.get_schedule("a").await.unwrap().unwrap(), before);
            assert_eq!(index(&mut c).await, [("b".to_owned(), t + 2)]);

            // The due index of another type: every write fails before
            // writing anything.
            let _: () = redis::cmd("DEL")
                .arg(&due)
                .query_async(&mut c)
                .await
                .unwrap();
            let _: () = redis::cmd("SET")
                .arg(&due)
                .arg("x")
                .query_async(&mut c)
                .await
                .unwrap();
            assert!(s.set_schedule(&plain("d"), Some(t), t).await.is_err());
            assert_eq!(s.get_schedule("d").await.unwrap(), None);
            assert!(s.pause_schedule("a", true, None, t).await.is_err());
            assert!(s.advance_schedule("b", 1, &later(1, 0), t).await.is_err());
            assert!(s.delete_schedule("c").await.is_err());
            let names_left: Vec<String> = redis::cmd("ZRANGE")
                .arg(&names)
                .arg(0)
                .arg(-1)
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(names_left, ["a", "b", "c"]);
            let a = s.get_schedule("a").await.unwrap().unwrap();
            assert!(!a.paused);
            assert_eq!(
                s.get_schedule("b").await.unwrap().unwrap().fired_through,
                None
            );
            assert!(s.get_schedule("c").await.unwrap().is_some());
        },
    );
}
