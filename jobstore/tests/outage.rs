//! The store's server stops under load: the daemon keeps acknowledging adds
//! into its journal, says the store is unreachable in its health, and
//! catches up once the server is back, with nothing lost.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobstore_conformance::servers::{PrivatePostgres, PrivateRedis};
use jobstore_conformance::services::skip;
use serde_json::Value;
use support::*;

/// How the test stops and starts the server.
trait Server {
    fn url(&self) -> String;
    fn down(&self);
    fn up(&self);
}

impl Server for PrivatePostgres {
    fn url(&self) -> String {
        with_param(&PrivatePostgres::url(self), "schema", "outage")
    }
    fn down(&self) {
        self.stop("fast").expect("stop PostgreSQL");
    }
    fn up(&self) {
        self.start().expect("start PostgreSQL");
    }
}

impl Server for PrivateRedis {
    fn url(&self) -> String {
        with_param(&PrivateRedis::url(self), "prefix", "outage")
    }
    fn down(&self) {
        self.stop().expect("stop Redis");
    }
    fn up(&self) {
        self.start_again().expect("start Redis");
    }
}

async fn health(url: &str) -> Value {
    json(http().get(format!("{url}/health"))).await.1
}

async fn metric(url: &str, name: &str) -> Option<f64> {
    let text = http()
        .get(format!("{url}/metrics"))
        .bearer_auth("outage-admin-token")
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// A no-op long-lived worker.
const WORKER: &str = r#"while IFS= read -r line; do echo "D: 200"; done"#;

fn outage(server: &dyn Server, backend: &str) {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let url = server.url();
        let d = DaemonProc::start(
            dir.path(),
            &Start::store(Some(&url))
                .env("JOBSTORE_ADMIN_TOKEN", "outage-admin-token")
                .arg("--allow-process-handlers")
                .arg("--poll")
                .arg("200ms"),
        );
        let (s, v) = json(
            http()
                .post(format!("{}/acme/handler/add/t/add", d.url))
                .bearer_auth("outage-admin-token")
                .json(&serde_json::json!({"method": "process", "eid": "noop", "body": WORKER})),
        )
        .await;
        assert_eq!(s, 200, "{v}");
        let acked = Arc::new(Mutex::new(Vec::<String>::new()));
        let stop = tokio_util::sync::CancellationToken::new();
        let load = {
            let (acked, stop, base) = (acked.clone(), stop.clone(), d.url.clone());
            tokio::spawn(async move {
                let c = http();
                let body: String = (0..50).map(|i| format!("job {i}\n")).collect();
                while !stop.is_cancelled() {
                    let (s, v) = json(
                        c.post(format!("{base}/acme/job/t/add"))
                            .bearer_auth("outage-admin-token")
                            .body(body.clone()),
                    )
                    .await;
                    assert_eq!(s, 200, "adds are acknowledged whatever the store does: {v}");
                    acked.lock().unwrap().extend(ids(&v));
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let before = acked.lock().unwrap().len();

        server.down();
        let down_at = Instant::now();
        let h = eventually(
            Duration::from_secs(30),
            "health to see the outage",
            || async {
                let h = health(&d.url).await;
                (h["store"]["reachable"] == false).then_some(h)
            },
        )
        .await;
        assert_eq!(h["status"], "degraded", "{h}");
        assert_eq!(metric(&d.url, "jobstore_store_up").await, Some(0.0));
        let started_before = metric(&d.url, "jobstore_jobs_started_total").await;
        // Ten seconds down: adds go on into the journal, nothing is claimed.
        tokio::time::sleep(Duration::from_secs(10).saturating_sub(down_at.elapsed())).await;
        let during = acked.lock().unwrap().len() - before;
        let h = health(&d.url).await;
        let backlog = h["journal"]["backlog_records"].as_u64().unwrap();
        assert!(
            during > 0 && backlog > 0,
            "acknowledged {during} during the outage, backlog {backlog}"
        );
        assert_eq!(
            metric(&d.url, "jobstore_jobs_started_total").await,
            started_before,
            "nothing claimed while the store is down"
        );

        server.up();
        let back_at = Instant::now();
        stop.cancel();
        load.await.unwrap();
        let acked = acked.lock().unwrap().clone();
        // Every run ends `ok`, or `lost` when its release's retry found
        // the job no longer held (as when the server ran the first try
        // just before it stopped and its reply never came back: the job
        // is archived already). The store's counts below hold every job
        // archived once, ok, either way.
        eventually(Duration::from_secs(120), "every job to run", || async {
            let h = health(&d.url).await;
            let ok = metric(&d.url, "jobstore_jobs_finished_total{outcome=\"ok\"}").await;
            let lost = metric(&d.url, "jobstore_jobs_finished_total{outcome=\"lost\"}").await;
            let ended = ok.unwrap_or(0.0) + lost.unwrap_or(0.0);
            (h["journal"]["backlog_records"] == 0
                && h["store"]["reachable"] == true
                && ended >= acked.len() as f64)
                .then_some(())
        })
        .await;
        let caught_up = back_at.elapsed();
        let store = jobstore_daemon::factory::open(Some(&url), dir.path())
            .await
            .unwrap();
        // A run is counted when it ends; its release reaches the store in
        // the completer's next call: wait for the last ones to land.
        let t = eventually(Duration::from_secs(30), "every release to land", || async {
            let counts = store.job_counts(jobstore_api::now_millis()).await.ok()?;
            let t = counts.into_iter().find(|c| c.jobtype == "acme-t")?;
            (t.archived.values().sum::<u64>() == t.total()).then_some(t)
        })
        .await;
        assert_eq!(t.total(), acked.len() as u64, "every acknowledged job once");
        assert_eq!(
            t.archived.get(&jobstore_api::ResultCode::Ok).copied(),
            Some(acked.len() as u64),
            "and every one ran to ok"
        );
        report(format!(
            "{backend}: {} jobs acknowledged, {during} during a {:?} outage; all run {:?} after the server came back",
            acked.len(),
            back_at.duration_since(down_at),
            caught_up
        ));
    });
}

#[test]
fn postgres_outage_under_load() {
    let bin = match PrivatePostgres::binaries() {
        Ok(b) => b,
        Err(why) => {
            skip::<()>("postgres", &why);
            return;
        }
    };
    let server = PrivatePostgres::create(bin).expect("private PostgreSQL");
    outage(&server, "postgres");
}

#[test]
fn redis_outage_under_load() {
    if let Err(why) = PrivateRedis::binaries() {
        skip::<()>("redis", &why);
        return;
    }
    let server = PrivateRedis::start().expect("private Redis");
    outage(&server, "redis");
}
