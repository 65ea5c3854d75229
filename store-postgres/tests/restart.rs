//! A private PostgreSQL server is stopped and started again under a store:
//! calls made while it is down fail with a retryable `Unavailable` error,
//! and the next call after it is back succeeds without reconnecting by
//! hand. The work listener reconnects by itself too.
//!
//! The server binaries (`initdb`, `pg_ctl`) are those of the newest
//! `/usr/lib/postgresql/<version>/bin` (Debian and Ubuntu packages), or of
//! the directory named by `JOBSTORE_PG_BIN`. PostgreSQL refuses to run as
//! root: as root the test runs them as the `postgres` user (`runuser`),
//! otherwise as the current user. With no server binaries at all the test
//! prints a skip notice, or fails when `JOBSTORE_REQUIRE_BACKENDS` names
//! `postgres`.

use std::time::Duration;

use jobstore_api::{ErrorKind, JobStore, NewJob, Wakeup, WorkWatcher};
use jobstore_conformance::servers::PrivatePostgres;
use jobstore_conformance::services::skip;
use jobstore_postgres::PgStore;

const T0: i64 = 1_700_000_000_000;

fn url(server: &PrivatePostgres) -> String {
    format!(
        "{}?schema=restart&acquire_timeout_ms=1000&max_connections=3&poll_interval_ms=200",
        server.url()
    )
}

/// Waits until the watcher reports `jobtype`, for at most `within`.
async fn woken_for(w: &mut WorkWatcher, jobtype: &str, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        if let Wakeup::Work(types) = w.wait(left).await
            && types.contains(jobtype)
        {
            return true;
        }
    }
}

async fn down_then_up(
    server: &PrivatePostgres,
    store: &PgStore,
    w: &mut WorkWatcher,
    mode: &str,
    round: i64,
) {
    let id = format!("job-{mode}");
    store
        .add_jobs(&[NewJob::new(id.clone(), "t", "x")], T0 + round)
        .await
        .expect("add before stop");

    server.stop(mode).expect("stop");
    for attempt in 0..2 {
        let err = store.get_job(&id).await.expect_err("server is down");
        assert_eq!(
            err.kind(),
            ErrorKind::Unavailable,
            "{mode} #{attempt}: {err:?}"
        );
        assert!(err.is_retryable(), "{err}");
    }
    let err = store
        .claim_jobs("t", 10, "sys-a", Duration::from_secs(60), T0 + round)
        .await
        .expect_err("server is down");
    assert!(err.is_retryable(), "{mode}: {err:?}");

    server.start().expect("start again");
    // The very next call succeeds: the pool reconnects by itself.
    let job = store.get_job(&id).await.expect("get after restart");
    assert_eq!(job.map(|j| j.id), Some(id.clone()));
    let claimed = store
        .claim_jobs("t", 10, "sys-a", Duration::from_secs(60), T0 + round)
        .await
        .expect("claim after restart");
    assert_eq!(claimed.len(), 1);

    // The listener reconnects too: a new add wakes the watcher by jobtype.
    let jt = format!("after-{mode}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut n = 0;
    while tokio::time::Instant::now() < deadline {
        // Notices sent before the listener is back are lost (that is what
        // the empty "anything changed" notice is for), so add new jobs until
        // one is seen.
        n += 1;
        store
            .add_jobs(&[NewJob::new(format!("{jt}-{n}"), jt.clone(), "")], T0)
            .await
            .expect("add after restart");
        if woken_for(w, &jt, Duration::from_secs(1)).await {
            return;
        }
    }
    panic!("watcher never woke for {jt} after the {mode} restart");
}

#[test]
fn store_survives_server_restart() {
    let bin = match PrivatePostgres::binaries() {
        Ok(bin) => bin,
        Err(why) => {
            skip::<()>("postgres", &format!("{why}; needed for the restart test"));
            return;
        }
    };
    // Binaries present: from here on, any failure to run the server is a
    // test failure, not a skip.
    let server = PrivatePostgres::create(bin).expect("private PostgreSQL server");
    jobstore_conformance::block_on(async {
        let store = PgStore::connect(&url(&server)).await.expect("connect");
        let mut watcher = store.watch().await.expect("watch");
        down_then_up(&server, &store, &mut watcher, "fast", 1).await;
        down_then_up(&server, &store, &mut watcher, "immediate", 2).await;
    });
}
