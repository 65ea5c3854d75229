//! Connection loss and recovery on a private redis-server: a call during
//! the outage is a retryable `Unavailable`; after the restart the store
//! works again without being reconnected by hand.

mod support;

use std::time::Duration;

use jobstore_api::{ErrorKind, JobStore, NewJob, Wakeup};
use jobstore_conformance::services::skip;
use jobstore_redis::{RedisOptions, RedisStore};

#[test]
fn outage_is_unavailable_and_recovery_is_automatic() {
    if let Err(why) = support::redis_binaries() {
        skip::<()>(
            "redis",
            &format!("no private redis-server can be started: {why}"),
        );
        return;
    }
    let dir = support::temp_dir("redis-restart");
    support::watchdog(&dir);
    let port = support::free_port(false);
    support::start_server(&dir, port, &[]);
    jobstore_conformance::block_on(async {
        let opts = RedisOptions::new()
            .prefix("restart")
            .connection_timeout(Duration::from_secs(1))
            .response_timeout(Duration::from_secs(2));
        let store = RedisStore::connect_with(&format!("redis://127.0.0.1:{port}"), opts)
            .await
            .unwrap();
        let t0 = 1_700_000_000_000;
        store
            .add_jobs(&[NewJob::new("before", "t", "x")], t0)
            .await
            .unwrap();
        assert!(store.get_job("before").await.unwrap().is_some());
        let mut watcher = store.watch().await.unwrap();
        assert!(watcher.is_notified());

        tokio::task::spawn_blocking(move || support::shutdown(port))
            .await
            .unwrap();
        for attempt in 0..3 {
            let err = store
                .add_jobs(&[NewJob::new(format!("during-{attempt}"), "t", "x")], t0)
                .await
                .expect_err("a call while the server is down fails");
            assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
            assert!(err.is_retryable());
            let err = store
                .claim_jobs("t", 1, "sys-a", Duration::from_secs(60), t0)
                .await;
            assert_eq!(err.unwrap_err().kind(), ErrorKind::Unavailable);
        }
        // A new watcher cannot subscribe either: `watch` says so once every
        // node has failed, instead of waiting for the server.
        let err = tokio::time::timeout(Duration::from_secs(15), store.watch())
            .await
            .expect("watch answers while the server is down")
            .expect_err("no watcher without a server");
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");

        // Same port, empty server (no persistence): the store must find it
        // again by itself, and load its scripts again (NOSCRIPT).
        let d = dir.clone();
        tokio::task::spawn_blocking(move || support::start_server(&d, port, &[]))
            .await
            .unwrap();
        let started = std::time::Instant::now();
        let out = store
            .add_jobs(&[NewJob::new("after", "t", "x")], t0)
            .await
            .expect("the first call after the restart succeeds");
        assert_eq!(out.new, vec!["after".to_owned()]);
        let got = store
            .claim_jobs("t", 10, "sys-a", Duration::from_secs(60), t0)
            .await
            .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].id, "after");
        eprintln!("recovered in {:?}", started.elapsed());

        // The watcher resubscribed by itself, and hears adds again.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            assert!(
                std::time::Instant::now() < deadline,
                "watcher never heard the add"
            );
            store
                .add_jobs(
                    &[NewJob::new(
                        format!("ping-{:?}", std::time::Instant::now()),
                        "woken",
                        "",
                    )],
                    t0,
                )
                .await
                .unwrap();
            match watcher.wait(Duration::from_millis(300)).await {
                Wakeup::Work(types) if types.contains("woken") => break,
                _ => continue,
            }
        }
    });
    support::shutdown(port);
}
