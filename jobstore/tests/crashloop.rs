//! The crash loop: 20,000 jobs run through a daemon that is killed with
//! SIGKILL at random moments (at least five times) and started again on the
//! same data dir. Afterwards every acknowledged job is archived exactly once
//! as ok, none is missing, and the test prints how many ran more than once
//! (only jobs in flight at a kill may: no job runs twice in the life of one
//! daemon).

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rstest::rstest;
use serde_json::json;
use support::*;

const JOBS: usize = 20_000;
const BATCH: usize = 500;
const KILLS: usize = 5;

/// A long-lived worker that appends each job's id and its daemon's
/// incarnation (`$NODE`) to `$RAN` before it answers, so a job that runs
/// twice shows twice, with the daemons that ran it.
const WORKER: &str = r#"python3 -c '
import json, os, sys
ran = open(os.environ["RAN"], "a")
for line in sys.stdin:
    msg = json.loads(line)
    if msg["op"] == "job":
        ran.write(msg["id"] + " " + os.environ["NODE"] + "\n")
        ran.flush()
    sys.stdout.write("D: 200\n")
    sys.stdout.flush()
'"#;

/// Starts incarnation `node` of the daemon on the data dir `dir`.
fn start(
    dir: &std::path::Path,
    store: Option<&str>,
    ran: &std::path::Path,
    node: usize,
) -> DaemonProc {
    DaemonProc::start(
        dir,
        &Start::store(store)
            .env("JOBSTORE_ADMIN_TOKEN", "crash-loop-admin-token")
            .env("RAN", ran.to_str().unwrap())
            .env("NODE", &node.to_string())
            .arg("--allow-process-handlers")
            .arg("--lease")
            .arg("2s")
            .arg("--poll")
            .arg("200ms")
            .arg("--max-running")
            .arg("128"),
    )
}

#[rstest]
#[case::sqlite("sqlite")]
#[case::postgres("postgres")]
#[case::redis("redis")]
fn crash_loop_loses_nothing(#[case] backend: &'static str) {
    block_on(async {
        let Some(be) = Backend::new(backend).await else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let ran = dir.path().join("ran.log");
        let store = be.url.clone();
        let daemon = Arc::new(Mutex::new(start(&data, store.as_deref(), &ran, 0)));
        let url = || daemon.lock().unwrap().url.clone();
        let c = http();
        let (s, v) = json(
            c.post(format!("{}/acme/handler/add/crash/add", url()))
                .bearer_auth("crash-loop-admin-token")
                .json(&json!({"method": "process", "eid": "crash", "body": WORKER})),
        )
        .await;
        assert_eq!(s, 200, "{v}");

        // Clients add batches with their own ids, retrying a batch until a
        // daemon acknowledges it (the ids make retries idempotent).
        let acked = Arc::new(Mutex::new(0usize));
        let adding = Arc::new(AtomicBool::new(true));
        let adder = {
            let (daemon, acked, adding) = (daemon.clone(), acked.clone(), adding.clone());
            tokio::spawn(async move {
                let c = http();
                for b in 0..JOBS / BATCH {
                    let items: Vec<_> = (0..BATCH)
                        .map(|i| json!({"id": format!("j{:05}", b * BATCH + i), "data": "x"}))
                        .collect();
                    loop {
                        let url = daemon.lock().unwrap().url.clone();
                        let r = c
                            .post(format!("{url}/acme/job/crash/add"))
                            .bearer_auth("crash-loop-admin-token")
                            .json(&items)
                            .timeout(Duration::from_secs(15))
                            .send()
                            .await;
                        match r {
                            Ok(r) if r.status().is_success() => break,
                            _ => tokio::time::sleep(Duration::from_millis(100)).await,
                        }
                    }
                    *acked.lock().unwrap() += BATCH;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                adding.store(false, Ordering::SeqCst);
            })
        };

        // Kill and restart at random moments while jobs are added and run.
        let mut kills = 0;
        while kills < KILLS || adding.load(Ordering::SeqCst) {
            let pause = Duration::from_millis(300 + rand::random_range(0..1500));
            tokio::time::sleep(pause).await;
            if kills >= KILLS && !adding.load(Ordering::SeqCst) {
                break;
            }
            let fresh = {
                let mut d = daemon.lock().unwrap();
                d.kill9();
                start(&data, store.as_deref(), &ran, kills + 1)
            };
            *daemon.lock().unwrap() = fresh;
            kills += 1;
        }
        adder.await.unwrap();
        assert_eq!(*acked.lock().unwrap(), JOBS);

        // Everything runs to the end; every job is archived once, as ok.
        let started = Instant::now();
        let counts = loop {
            let (s, v) = json(
                c.get(format!("{}/acme/stats", url()))
                    .bearer_auth("crash-loop-admin-token"),
            )
            .await;
            if s == 200 {
                let ok = v["jobtypes"][0]["archived"]["ok"].as_u64().unwrap_or(0);
                if ok as usize == JOBS {
                    break v;
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(300),
                "jobs did not all finish: {v}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let t = &counts["jobtypes"][0];
        assert_eq!(t["type"], "crash");
        assert_eq!(t["waiting"], 0);
        assert_eq!(t["scheduled"], 0);
        assert_eq!(t["running"], 0);
        assert_eq!(t["archived"], json!({"ok": JOBS}), "all ok, nothing else");

        // Per job, the daemon incarnations that ran it. Every incarnation
        // but the last was killed, so a job may run in several, but never
        // twice in one: that would be a run that was not in flight at a kill.
        let log = std::fs::read_to_string(&ran).unwrap();
        let mut runs: HashMap<&str, Vec<&str>> = HashMap::new();
        for line in log.lines() {
            let (id, node) = line.split_once(' ').expect("id and incarnation");
            runs.entry(id).or_default().push(node);
        }
        let twice = runs.values().filter(|n| n.len() > 1).count();
        assert_eq!(runs.len(), JOBS, "every job ran");
        report(format!(
            "{backend}: {JOBS} jobs, {kills} kills with SIGKILL; all archived ok once; {twice} ran more than once"
        ));
        for (id, nodes) in &runs {
            let mut distinct = nodes.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(
                distinct.len(),
                nodes.len(),
                "{id} ran twice in one daemon's life (incarnations {nodes:?})"
            );
        }
        daemon.lock().unwrap().terminate();
    });
}
