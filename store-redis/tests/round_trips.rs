//! Script calls per add on a private redis-server (`INFO commandstats`
//! is server-wide, so the shared test server would count other tests'
//! calls): a batch of keyed jobs without duplicates makes exactly the
//! calls of a plain batch (one `reserve.lua` per index bucket, one
//! `SADD`, one `add.lua` per jobtype); duplicates add one `unreserve.lua`
//! per bucket of their ids, and nothing else. Jobs with repeat rules are
//! added with the calls of plain ones, and a release mixing repeats with
//! archives and retries is one `release.lua` call, as a plain one.
//! Dependencies: a plain release in a namespace with waiters is still one
//! call; an add with dependencies, a release that ends edges in other
//! slots, `waits_of` and `unblock_jobs` make a fixed number of calls,
//! whatever the number of jobs. `get_jobs` makes one index `HMGET` per
//! touched bucket, then one `get.lua` per jobtype, whatever the number of
//! jobs.

mod support;

use std::collections::BTreeSet;

use jobstore_api::{JobRelease, JobResult, JobStore, JobStoreExt, NewJob, Release, Repeat, Unique};
use jobstore_conformance::services::skip;
use jobstore_redis::{RedisOptions, RedisStore};
use std::time::Duration;

/// Calls of `cmd` the server counted so far.
fn calls(port: u16, cmd: &str) -> u64 {
    let info = support::cli(port, &["INFO", "commandstats"]).expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().expect("calls"))
}

/// How many index buckets `ids` fall in (FNV-1a mod 16, as the store).
fn buckets(ids: &[&str]) -> u64 {
    let set: BTreeSet<u64> = ids
        .iter()
        .map(|id| {
            id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
            }) % 16
        })
        .collect();
    set.len() as u64
}

#[test]
fn keyed_adds_make_the_calls_of_plain_ones_plus_unreserve_of_duplicates() {
    if let Err(why) = support::redis_binaries() {
        skip::<()>(
            "redis",
            &format!("no private redis-server can be started: {why}"),
        );
        return;
    }
    let dir = support::temp_dir("redis-round-trips");
    support::watchdog(&dir);
    let port = support::free_port(false);
    support::start_server(&dir, port, &[]);
    jobstore_conformance::block_on(async {
        let url = format!("redis://127.0.0.1:{port}");
        let s = RedisStore::connect_with(&url, RedisOptions::new().prefix("rt"))
            .await
            .unwrap();
        let t0 = 1_700_000_000_000;
        let keyed = |id: &str, key: &str| NewJob::new(id, "t", "").unique(Unique::new(key));
        // Every script loaded once (a first EVALSHA may meet NOSCRIPT).
        s.add_jobs(&[keyed("w1", "w"), keyed("w2", "w")], t0)
            .await
            .unwrap();
        let count = || calls(port, "evalsha") + calls(port, "eval") + calls(port, "sadd");
        let plain = ["p1", "p2", "p3", "p4"];
        let before = count();
        let jobs: Vec<NewJob> = plain.iter().map(|id| NewJob::new(*id, "t", "")).collect();
        assert_eq!(s.add_jobs(&jobs, t0).await.unwrap().new.len(), 4);
        assert_eq!(count() - before, buckets(&plain) + 2, "plain batch");
        let ks = ["k1", "k2", "k3", "k4"];
        let before = count();
        let jobs: Vec<NewJob> = ks.iter().map(|id| keyed(id, id)).collect();
        assert_eq!(s.add_jobs(&jobs, t0).await.unwrap().new.len(), 4);
        assert_eq!(
            count() - before,
            buckets(&ks) + 2,
            "keyed batch without duplicates"
        );
        let ds = ["d1", "d2", "d3", "d4"];
        let before = count();
        let jobs: Vec<NewJob> = ds.iter().zip(ks).map(|(id, k)| keyed(id, k)).collect();
        assert_eq!(s.add_jobs(&jobs, t0).await.unwrap().duplicates.len(), 4);
        assert_eq!(
            count() - before,
            2 * buckets(&ds) + 2,
            "duplicates: one unreserve per bucket more"
        );
    });
    support::shutdown(port);
}

#[test]
fn repeating_jobs_make_the_calls_of_plain_ones() {
    if let Err(why) = support::redis_binaries() {
        skip::<()>(
            "redis",
            &format!("no private redis-server can be started: {why}"),
        );
        return;
    }
    let dir = support::temp_dir("redis-round-trips-repeat");
    support::watchdog(&dir);
    let port = support::free_port(false);
    support::start_server(&dir, port, &[]);
    jobstore_conformance::block_on(async {
        let url = format!("redis://127.0.0.1:{port}");
        let s = RedisStore::connect_with(&url, RedisOptions::new().prefix("rt"))
            .await
            .unwrap();
        let t0 = 1_700_000_000_000;
        let min = Duration::from_secs(60);
        let repeating = |id: &str| NewJob::new(id, "t", "").repeat(Repeat::new("@hourly"));
        let ok = || Release::Archive(JobResult::from_status(200));
        // Every script loaded once (a first EVALSHA may meet NOSCRIPT).
        s.add_jobs(&[repeating("w1"), NewJob::new("w2", "t", "")], t0)
            .await
            .unwrap();
        s.claim_jobs("t", 2, "o", min, t0).await.unwrap();
        let warm = [JobRelease::new("w1", ok()), JobRelease::new("w2", ok())];
        s.release_jobs(&warm, "o", t0).await.unwrap();
        let count = || calls(port, "evalsha") + calls(port, "eval") + calls(port, "sadd");
        let plain = ["p1", "p2", "p3", "p4"];
        let before = count();
        let jobs: Vec<NewJob> = plain.iter().map(|id| NewJob::new(*id, "t", "")).collect();
        assert_eq!(s.add_jobs(&jobs, t0).await.unwrap().new.len(), 4);
        assert_eq!(count() - before, buckets(&plain) + 2, "plain batch");
        let rs = ["r1", "r2", "r3", "r4"];
        let before = count();
        let jobs: Vec<NewJob> = rs.iter().map(|id| repeating(id)).collect();
        assert_eq!(s.add_jobs(&jobs, t0).await.unwrap().new.len(), 4);
        assert_eq!(count() - before, buckets(&rs) + 2, "batch with rules");
        // This handle claims them, so the release needs no index lookup.
        assert_eq!(s.claim_jobs("t", 8, "o", min, t0).await.unwrap().len(), 8);
        let mut releases: Vec<JobRelease> =
            plain.iter().map(|id| JobRelease::new(*id, ok())).collect();
        releases[1] = JobRelease::new("p2", Release::Retry { delay: min });
        releases.extend(rs.iter().enumerate().map(|(i, id)| {
            let how = Release::Repeat {
                at: t0 + 1_000 * i as i64,
                result: JobResult::from_status(200),
                data: (i % 2 == 0).then(|| b"next".to_vec()),
            };
            JobRelease::new(*id, how)
        }));
        let before = count();
        assert_eq!(s.release_jobs(&releases, "o", t0).await.unwrap().len(), 8);
        assert_eq!(count() - before, 1, "one release.lua call for the list");
    });
    support::shutdown(port);
}

#[test]
fn dependencies_make_a_fixed_number_of_calls() {
    if let Err(why) = support::redis_binaries() {
        skip::<()>(
            "redis",
            &format!("no private redis-server can be started: {why}"),
        );
        return;
    }
    let dir = support::temp_dir("redis-round-trips-deps");
    support::watchdog(&dir);
    let port = support::free_port(false);
    support::start_server(&dir, port, &[]);
    jobstore_conformance::block_on(async {
        let url = format!("redis://127.0.0.1:{port}");
        let s = RedisStore::connect_with(&url, RedisOptions::new().prefix("rt"))
            .await
            .unwrap();
        let t0 = 1_700_000_000_000;
        let min = Duration::from_secs(60);
        let ok = JobResult::from_status(200);
        // Every script loaded once (a first EVALSHA may meet NOSCRIPT).
        s.add_jobs(&[NewJob::new("x0", "a", "")], t0).await.unwrap();
        s.add_jobs(&[NewJob::new("w0", "w", "").depends_on(["x0"])], t0)
            .await
            .unwrap();
        s.claim_jobs("a", 1, "o", min, t0).await.unwrap();
        s.archive_jobs(&["x0".to_owned()], "o", ok.clone(), t0)
            .await
            .unwrap();
        s.claim_jobs("w", 1, "o", min, t0).await.unwrap();
        s.archive_jobs(&["w0".to_owned()], "o", ok.clone(), t0)
            .await
            .unwrap();
        let w0 = ["w0".to_owned()];
        assert_eq!(s.waits_of(&w0, 10).await.unwrap().len(), 1);
        assert!(s.unblock_jobs(&w0, t0).await.unwrap().is_empty());
        // Scripts only: the server counts the commands scripts run too, so
        // the plain commands of the client (the index lookup's HMGET, SADD
        // of the jobtypes, the outbox's ZREM) are not counted here; each
        // is one per bucket, one, or one per source jobtype.
        let count = || calls(port, "evalsha") + calls(port, "eval");
        // targets in two jobtypes, waiters in two others
        let xs: Vec<String> = (0..20).map(|i| format!("x{i:02}")).collect();
        let targets: Vec<NewJob> = xs
            .iter()
            .enumerate()
            .map(|(i, id)| NewJob::new(id.clone(), if i % 2 == 0 { "a" } else { "b" }, ""))
            .collect();
        s.add_jobs(&targets, t0).await.unwrap();
        let ws: Vec<String> = (0..8).map(|i| format!("y{i}")).collect();
        let waiters: Vec<NewJob> = ws
            .iter()
            .enumerate()
            .map(|(i, id)| {
                NewJob::new(id.clone(), if i % 2 == 0 { "w" } else { "v" }, "")
                    .depends_on(xs.iter().cloned())
            })
            .collect();
        let before = count();
        assert_eq!(s.add_jobs(&waiters, t0).await.unwrap().new.len(), 8);
        let xr: Vec<&str> = xs.iter().map(String::as_str).collect();
        let wr: Vec<&str> = ws.iter().map(String::as_str).collect();
        // reserve per bucket of the waiters, add.lua per jobtype, link.lua
        // per target jobtype, commit.lua per waiter jobtype
        let _ = xr;
        assert_eq!(
            count() - before,
            buckets(&wr) + 2 + 2 + 2,
            "add with dependencies"
        );
        // a plain release (a job without waiters) is still one call
        s.add_jobs(&[NewJob::new("p", "a", "")], t0).await.unwrap();
        let got = s.claim_jobs("a", 20, "o", min, t0).await.unwrap();
        assert_eq!(got.len(), 11);
        let before = count();
        s.archive_jobs(&["p".to_owned()], "o", ok.clone(), t0)
            .await
            .unwrap();
        assert_eq!(count() - before, 1, "plain release");
        // ten targets of "a" archived at once: release.lua, then resolve.lua
        // per waiter jobtype
        let ids: Vec<String> = xs.iter().step_by(2).cloned().collect();
        let before = count();
        assert_eq!(s.archive_jobs(&ids, "o", ok, t0).await.unwrap().len(), 10);
        assert_eq!(count() - before, 1 + 2, "release that ends edges");
        // waits_of and unblock_jobs of the eight waiters: one script per
        // waiter jobtype each
        let before = count();
        assert_eq!(s.waits_of(&ws, 5).await.unwrap().len(), 8);
        assert_eq!(count() - before, 2, "waits_of");
        let before = count();
        assert_eq!(s.unblock_jobs(&ws, t0).await.unwrap().len(), 8);
        assert_eq!(count() - before, 2, "unblock_jobs");
    });
    support::shutdown(port);
}

#[test]
fn get_jobs_makes_one_call_per_bucket_and_per_jobtype() {
    if let Err(why) = support::redis_binaries() {
        skip::<()>(
            "redis",
            &format!("no private redis-server can be started: {why}"),
        );
        return;
    }
    let dir = support::temp_dir("redis-round-trips-get");
    support::watchdog(&dir);
    let port = support::free_port(false);
    support::start_server(&dir, port, &[]);
    jobstore_conformance::block_on(async {
        let url = format!("redis://127.0.0.1:{port}");
        let s = RedisStore::connect_with(&url, RedisOptions::new().prefix("rt"))
            .await
            .unwrap();
        let t0 = 1_700_000_000_000;
        let (a, b) = (["a1", "a2", "a3", "a4", "a5"], ["b1", "b2", "b3"]);
        let mut jobs: Vec<NewJob> = a.iter().map(|id| NewJob::new(*id, "ta", "")).collect();
        jobs.extend(b.iter().map(|id| NewJob::new(*id, "tb", "")));
        assert_eq!(s.add_jobs(&jobs, t0).await.unwrap().new.len(), 8);
        s.claim_jobs("ta", 2, "o", Duration::from_secs(60), t0)
            .await
            .unwrap();
        // The script loaded once (a first EVALSHA may meet NOSCRIPT).
        assert_eq!(s.get_jobs(&["a1".to_owned()]).await.unwrap().len(), 1);
        // (commands a script runs count too: `get.lua` runs no HMGET)
        let count = || calls(port, "evalsha") + calls(port, "eval") + calls(port, "hmget");
        let mut asked: Vec<&str> = a.iter().chain(&b).copied().collect();
        asked.push("nope");
        let ids: Vec<String> = asked.iter().map(|id| (*id).to_owned()).collect();
        let before = count();
        let got = s.get_jobs(&ids).await.unwrap();
        assert_eq!(count() - before, buckets(&asked) + 2, "get_jobs");
        assert_eq!(got.len(), 8);
        for job in &got {
            assert_eq!(Some(job), s.get_job(&job.id).await.unwrap().as_ref());
        }
    });
    support::shutdown(port);
}
