//! Remote workers against the real binary: fetch, heartbeat, finish,
//! update, long-poll, fencing, caps, tenants, and `jobstore work`.

mod support;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rstest::rstest;
use serde_json::{Value, json};
use support::*;

const WAIT: Duration = Duration::from_secs(60);

struct Api {
    c: reqwest::Client,
    url: String,
    token: Option<String>,
}

impl Api {
    fn new(url: &str) -> Api {
        Api {
            c: http(),
            url: url.to_owned(),
            token: None,
        }
    }

    fn with_token(url: &str, token: &str) -> Api {
        Api {
            token: Some(token.to_owned()),
            ..Api::new(url)
        }
    }

    fn req(&self, r: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        json(self.req(self.c.post(format!("{}{path}", self.url)).json(&body))).await
    }

    async fn add(&self, client: &str, jobtype: &str, n: usize) -> Vec<String> {
        let body: String = (0..n).map(|i| format!("p{i}\n")).collect();
        let (s, v) = json(
            self.req(
                self.c
                    .post(format!("{}/{client}/job/{jobtype}/add", self.url))
                    .body(body),
            ),
        )
        .await;
        assert_eq!(s, 200, "{v}");
        ids(&v)
    }

    async fn remote_handler(&self, client: &str, jobtype: &str, limits: Value) {
        let (s, v) = self
            .post(
                &format!("/{client}/handler/add/{jobtype}/add"),
                json!({"method": "remote", "body": "", "limits": limits}),
            )
            .await;
        assert_eq!(s, 200, "{v}");
    }

    async fn fetch(&self, client: &str, types: &str, query: &str) -> (u16, Value) {
        json(
            self.req(
                self.c
                    .post(format!("{}/{client}/job/{types}/get?{query}", self.url)),
            ),
        )
        .await
    }

    async fn job(&self, client: &str, id: &str) -> Value {
        json(self.req(self.c.get(format!("{}/{client}/jobs/{id}", self.url))))
            .await
            .1
    }
}

fn job_ids(fetched: &Value) -> Vec<String> {
    fetched["jobs"]
        .as_array()
        .unwrap_or_else(|| panic!("no jobs in {fetched}"))
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Many workers drain every job, each finished exactly once.
#[rstest]
#[case::sqlite("sqlite")]
#[case::postgres("postgres")]
#[case::redis("redis")]
fn many_workers_drain_every_job_once(#[case] backend: &'static str) {
    block_on(async {
        let Some(be) = Backend::new(backend).await else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let d = DaemonProc::start(dir.path(), &Start::store(be.url.as_deref()));
        let api = Arc::new(Api::new(&d.url));
        api.remote_handler("acme", "pull", json!({})).await;
        let added: HashSet<String> = api.add("acme", "pull", 300).await.into_iter().collect();
        let finished: Arc<Mutex<Vec<String>>> = Arc::default();
        let mut workers = Vec::new();
        for w in 0..6 {
            let (api, finished) = (api.clone(), finished.clone());
            workers.push(tokio::spawn(async move {
                let mut lease: Option<String> = None;
                loop {
                    let q = match &lease {
                        Some(l) => format!("max=10&wait=500&lease={l}"),
                        None => format!("max=10&wait=500&worker=w{w}"),
                    };
                    let (s, v) = api.fetch("acme", "pull", &q).await;
                    assert_eq!(s, 200, "{v}");
                    lease = Some(v["lease"].as_str().unwrap().to_owned());
                    let got = job_ids(&v);
                    if got.is_empty() {
                        return;
                    }
                    let jobs: Vec<Value> = got
                        .iter()
                        .map(|id| json!({"id": id, "status": 200, "output": format!("w{w}")}))
                        .collect();
                    let (s, r) = api
                        .post("/acme/jobs/finish", json!({"lease": lease, "jobs": jobs}))
                        .await;
                    assert_eq!(s, 200, "{r}");
                    assert_eq!(r["lost"], json!([]));
                    finished.lock().unwrap().extend(got);
                }
            }));
        }
        for w in workers {
            w.await.unwrap();
        }
        let finished = finished.lock().unwrap().clone();
        let unique: HashSet<String> = finished.iter().cloned().collect();
        assert_eq!(finished.len(), unique.len(), "no job finished twice");
        assert_eq!(unique, added, "every job finished");
        let stats = json(api.req(api.c.get(format!("{}/acme/stats", d.url))))
            .await
            .1;
        assert_eq!(stats["jobtypes"][0]["archived"]["ok"], 300, "{stats}");
        let (s, list) = json(api.req(api.c.get(format!("{}/acme/workers", d.url)))).await;
        assert_eq!(s, 200);
        assert_eq!(list["workers"].as_array().unwrap().len(), 6, "{list}");
        let served: u64 = list["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["finished"].as_u64().unwrap())
            .sum();
        assert_eq!(served, 300);
        let metrics = api
            .req(api.c.get(format!("{}/metrics", d.url)))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            metrics.contains("jobstore_remote_workers{state=\"active\"} 6"),
            "{metrics}"
        );
        assert!(metrics.contains("jobstore_remote_jobs_held 0"), "{metrics}");
    });
}

/// A worker that stops heartbeating loses its job to another after one
/// lease; its late heartbeat, update and finish are refused with 409.
#[test]
fn a_silent_worker_loses_its_jobs_and_its_late_finish_is_refused() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let d = DaemonProc::start(dir.path(), &Start::store(None));
        let api = Api::new(&d.url);
        api.remote_handler("acme", "pull", json!({})).await;
        let ids = api.add("acme", "pull", 1).await;
        let (_, a) = eventually(WAIT, "worker a gets the job", || async {
            let r = api.fetch("acme", "pull", "worker=a&lease_ms=1000").await;
            (!job_ids(&r.1).is_empty()).then_some(r)
        })
        .await;
        assert_eq!(a["jobs"][0]["attempt"], 1);
        let a_lease = a["lease"].as_str().unwrap().to_owned();
        // a goes silent; b gets the job once a's lease ran out.
        let (s, b) = api.fetch("acme", "pull", "worker=b&wait=5000").await;
        assert_eq!(s, 200);
        assert_eq!(job_ids(&b), ids, "{b}");
        assert_eq!(b["jobs"][0]["attempt"], 2);
        let b_lease = b["lease"].as_str().unwrap().to_owned();
        for (path, body) in [
            (
                "/acme/jobs/heartbeat",
                json!({"lease": a_lease, "ids": ids}),
            ),
            (
                "/acme/jobs/finish",
                json!({"lease": a_lease, "jobs": [{"id": ids[0], "status": 200, "output": "a"}]}),
            ),
            (
                &format!("/acme/jobs/{}/update", ids[0]),
                json!({"lease": a_lease, "data": "from a"}),
            ),
        ] {
            let (s, v) = api.post(path, body).await;
            assert_eq!(s, 409, "{path}: {v}");
            assert_eq!(v["error"]["kind"], "conflict");
        }
        let (s, v) = api
            .post(
                &format!("/acme/jobs/{}/update", ids[0]),
                json!({"lease": b_lease, "data": "progress 50%"}),
            )
            .await;
        assert_eq!((s, v["updated"].clone()), (200, json!(true)));
        let (s, v) = api
            .post(
                "/acme/jobs/finish",
                json!({"lease": b_lease, "jobs": [{"id": ids[0], "status": 201, "output": "b"}]}),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        let job = api.job("acme", &ids[0]).await;
        assert_eq!(job["result"]["output"], "b");
        assert_eq!(job["result"]["status"], 201);
        assert_eq!(job["data"], "progress 50%");
        assert_eq!(job["attempts"], 2);
    });
}

/// Heartbeats keep a long job: nobody else is handed it while they go on.
#[test]
fn heartbeats_keep_a_long_job() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let d = DaemonProc::start(dir.path(), &Start::store(None));
        let api = Api::new(&d.url);
        api.remote_handler("acme", "long", json!({})).await;
        let ids = api.add("acme", "long", 1).await;
        let (_, a) = eventually(WAIT, "the job", || async {
            let r = api.fetch("acme", "long", "lease_ms=1000").await;
            (!job_ids(&r.1).is_empty()).then_some(r)
        })
        .await;
        let lease = a["lease"].as_str().unwrap().to_owned();
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until {
            let (s, v) = api
                .post(
                    "/acme/jobs/heartbeat",
                    json!({"lease": lease, "ids": ids, "lease_ms": 1000}),
                )
                .await;
            assert_eq!((s, v["held"].clone()), (200, json!(ids)), "{v}");
            let (_, other) = api.fetch("acme", "long", "").await;
            assert_eq!(
                job_ids(&other),
                Vec::<String>::new(),
                "nobody else gets a held job"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let (s, v) = api
            .post(
                "/acme/jobs/finish",
                json!({"lease": lease, "jobs": [{"id": ids[0], "status": 200}]}),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(api.job("acme", &ids[0]).await["attempts"], 1);
    });
}

/// A long-poll wakes within milliseconds of an add.
#[rstest]
#[case::sqlite("sqlite")]
#[case::postgres("postgres")]
#[case::redis("redis")]
fn long_polls_wake_when_work_arrives(#[case] backend: &'static str) {
    block_on(async {
        let Some(be) = Backend::new(backend).await else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let d = DaemonProc::start(dir.path(), &Start::store(be.url.as_deref()));
        let api = Arc::new(Api::new(&d.url));
        api.remote_handler("acme", "poll", json!({})).await;
        let mut lat = Vec::new();
        for _ in 0..40 {
            let poll = {
                let api = api.clone();
                tokio::spawn(async move {
                    let r = api.fetch("acme", "poll", "wait=10000").await;
                    (Instant::now(), r)
                })
            };
            // Let the fetch start waiting.
            tokio::time::sleep(Duration::from_millis(30)).await;
            let added = Instant::now();
            api.add("acme", "poll", 1).await;
            let (woke, (s, v)) = poll.await.unwrap();
            assert_eq!(s, 200);
            let got = job_ids(&v);
            assert_eq!(got.len(), 1, "{v}");
            lat.push(woke.duration_since(added));
            api.post(
                "/acme/jobs/finish",
                json!({"lease": v["lease"], "jobs": [{"id": got[0], "status": 200}]}),
            )
            .await;
        }
        lat.sort();
        let p50 = lat[lat.len() / 2];
        let p99 = lat[lat.len() * 99 / 100];
        eprintln!(
            "{backend}: long-poll woken {p50:?} (p50), {p99:?} (p99) after the add was sent (the add's own fsync included)"
        );
        assert!(p99 < Duration::from_millis(500), "{backend}: p99 {p99:?}");
    });
}

/// Remote fetches are held to the jobtype's concurrency cap.
#[test]
fn fetches_respect_the_caps() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let d = DaemonProc::start(dir.path(), &Start::store(None));
        let api = Api::new(&d.url);
        api.remote_handler("acme", "capped", json!({"concurrency": 2}))
            .await;
        api.add("acme", "capped", 10).await;
        // The add is acknowledged once journaled; wait until ingest has put
        // all ten in the store, so that a fetch could take more than the cap.
        eventually(WAIT, "ten waiting jobs", || async {
            let stats = json(api.req(api.c.get(format!("{}/acme/stats", d.url))))
                .await
                .1;
            (stats["jobtypes"][0]["waiting"] == 10).then_some(())
        })
        .await;
        let (_, first) = api.fetch("acme", "capped", "max=10").await;
        let held = job_ids(&first);
        assert_eq!(held.len(), 2, "the cap is 2: {first}");
        let (_, more) = api.fetch("acme", "capped", "max=10").await;
        assert_eq!(job_ids(&more).len(), 0, "nothing more while 2 are held");
        api.post(
            "/acme/jobs/finish",
            json!({"lease": first["lease"], "jobs": [{"id": held[0], "status": 200}]}),
        )
        .await;
        let (_, next) = api.fetch("acme", "capped", "max=10").await;
        assert_eq!(job_ids(&next).len(), 1, "one slot came back");
    });
}

/// Results follow the outcome rules: retry and error run again until the
/// handler's attempt limit, failed is archived, new jobs are created.
#[test]
fn remote_results_follow_the_outcome_rules() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let d = DaemonProc::start(dir.path(), &Start::store(None));
        let api = Api::new(&d.url);
        api.remote_handler(
            "acme",
            "r",
            json!({"max_attempts": 2, "backoff_base_ms": 10, "backoff_max_ms": 20}),
        )
        .await;
        let ids = api.add("acme", "r", 3).await;
        let mut statuses: HashMap<String, Vec<u16>> = HashMap::new();
        let mut created = Vec::new();
        let mut dropped = 0;
        let deadline = Instant::now() + WAIT;
        loop {
            let (_, v) = api.fetch("acme", "r", "max=10&wait=200").await;
            let got = job_ids(&v);
            if got.is_empty() {
                let archived =
                    futures::future::join_all(ids.iter().map(|id| api.job("acme", id))).await;
                if archived.iter().all(|j| j["state"] == "archived") {
                    break;
                }
                assert!(Instant::now() < deadline, "jobs never finished");
                continue;
            }
            let mut report = Vec::new();
            for id in &got {
                let i = ids.iter().position(|x| x == id).unwrap();
                let status = [503u16, 404, 200][i];
                statuses.entry(id.clone()).or_default().push(status);
                let mut entry = json!({"id": id, "status": status, "output": format!("attempt {}", statuses[id].len())});
                if status == 200 {
                    // One rule for new jobs everywhere: a bad jobtype is
                    // dropped with a note, the result stands.
                    entry["jobs"] = json!([
                        {"type": "follow-up", "data": {"from": id}},
                        {"type": "no such/type", "data": "x"},
                    ]);
                }
                report.push(entry);
            }
            let (s, r) = api
                .post(
                    "/acme/jobs/finish",
                    json!({"lease": v["lease"], "jobs": report}),
                )
                .await;
            assert_eq!(s, 200, "{r}");
            for d in r["dropped"].as_array().unwrap() {
                assert_eq!(
                    (&d["new_job"], d["reason"].is_string()),
                    (&json!(2), true),
                    "{r}"
                );
                dropped += 1;
            }
            created.extend(
                r["created"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c.as_str().unwrap().to_owned()),
            );
        }
        let jobs: Vec<Value> =
            futures::future::join_all(ids.iter().map(|id| api.job("acme", id))).await;
        assert_eq!(
            jobs[0]["result"]["code"], "timeout",
            "503 until max_attempts: {}",
            jobs[0]
        );
        assert_eq!(jobs[0]["attempts"], 2);
        assert_eq!(jobs[1]["result"]["code"], "failed");
        assert_eq!(jobs[1]["attempts"], 1);
        assert_eq!(jobs[2]["result"]["code"], "ok");
        assert_eq!(created.len(), 1);
        assert_eq!(dropped, 1);
        let output = jobs[2]["result"]["output"].as_str().unwrap();
        assert!(
            output.starts_with("attempt 1[jobstore] new job 2 dropped: "),
            "{output}"
        );
        let child = eventually(WAIT, "the follow-up job", || async {
            let j = api.job("acme", &created[0]).await;
            (j["type"] == "follow-up").then_some(j)
        })
        .await;
        assert_eq!(child["data"], format!(r#"{{"from":"{}"}}"#, ids[2]));
    });
}

/// Archived ok jobs go after `--retention`; failed ones stay for
/// `--retention-failed`, so their output still says why.
#[test]
fn failed_jobs_outlive_ok_ones() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let d = DaemonProc::start(
            dir.path(),
            &Start::store(None)
                .arg("--retention")
                .arg("1s")
                .arg("--retention-failed")
                .arg("1h")
                .arg("--purge-every")
                .arg("200ms"),
        );
        let api = Api::new(&d.url);
        api.remote_handler("acme", "r", json!({})).await;
        let ids = api.add("acme", "r", 2).await;
        let mut fetched = Vec::new();
        while fetched.len() < 2 {
            let (s, v) = api.fetch("acme", "r", "max=2&wait=1000").await;
            assert_eq!(s, 200, "{v}");
            let lease = v["lease"].clone();
            for id in job_ids(&v) {
                fetched.push((id, lease.clone()));
            }
        }
        for (id, lease) in &fetched {
            let status = if *id == ids[0] { 200 } else { 404 };
            let (s, r) = api
                .post(
                    "/acme/jobs/finish",
                    json!({"lease": lease, "jobs": [{"id": id, "status": status, "output": "why"}]}),
                )
                .await;
            assert_eq!(s, 200, "{r}");
        }
        eventually(WAIT, "the ok job purged after --retention", || async {
            let (s, _) =
                json(api.req(api.c.get(format!("{}/acme/jobs/{}", api.url, ids[0])))).await;
            (s == 404).then_some(())
        })
        .await;
        // Several purges later, the failed job is still there.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let failed = api.job("acme", &ids[1]).await;
        assert_eq!(failed["result"]["code"], "failed", "{failed}");
        assert_eq!(failed["result"]["output"], "why");
    });
}

/// Tokens and tenants hold for every worker endpoint.
#[test]
fn worker_endpoints_keep_tenants_apart() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let cfg = token_config(
            &dir.path().join("c.toml"),
            "",
            None,
            &[("acme", "acme-token"), ("globex", "globex-token")],
        );
        let d = DaemonProc::start(
            &dir.path().join("data"),
            &Start::store(None)
                .arg("--config")
                .arg(cfg.to_str().unwrap()),
        );
        let acme = Api::with_token(&d.url, "acme-token");
        let globex = Api::with_token(&d.url, "globex-token");
        let anon = Api::new(&d.url);
        acme.remote_handler("acme", "t", json!({})).await;
        let ids = acme.add("acme", "t", 1).await;
        let (_, got) = eventually(WAIT, "acme's job", || async {
            let r = acme.fetch("acme", "t", "").await;
            (!job_ids(&r.1).is_empty()).then_some(r)
        })
        .await;
        let lease = got["lease"].clone();
        assert_eq!(anon.fetch("acme", "t", "").await.0, 401);
        assert_eq!(globex.fetch("acme", "t", "").await.0, 403);
        assert_eq!(job_ids(&globex.fetch("globex", "t", "").await.1).len(), 0);
        for (path, body) in [
            ("/acme/jobs/heartbeat", json!({"lease": lease, "ids": ids})),
            (
                "/acme/jobs/finish",
                json!({"lease": lease, "jobs": [{"id": ids[0], "status": 200}]}),
            ),
            (
                &format!("/acme/jobs/{}/update", ids[0]),
                json!({"lease": lease, "data": "x"}),
            ),
        ] {
            assert_eq!(globex.post(path, body.clone()).await.0, 403, "{path}");
            assert_eq!(anon.post(path, body).await.0, 401, "{path}");
        }
        // acme's lease on globex's paths is refused: it names client acme.
        let (s, _) = globex
            .post(
                "/globex/jobs/heartbeat",
                json!({"lease": lease, "ids": ids}),
            )
            .await;
        assert_eq!(s, 403);
        assert_eq!(
            json(globex.req(globex.c.get(format!("{}/acme/workers", d.url))))
                .await
                .0,
            403
        );
        let (s, v) = json(globex.req(globex.c.get(format!("{}/globex/workers", d.url)))).await;
        assert_eq!(
            (s, v["workers"].as_array().unwrap().len()),
            (200, 1),
            "only globex's own fetch: {v}"
        );
        let (s, _) = acme
            .post(
                "/acme/jobs/finish",
                json!({"lease": lease, "jobs": [{"id": ids[0], "status": 200}]}),
            )
            .await;
        assert_eq!(s, 200);
    });
}

/// `jobstore work` runs a command per job and reports status, output and
/// new jobs.
#[test]
fn jobstore_work_runs_a_command_per_job() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let d = DaemonProc::start(dir.path(), &Start::store(None));
        let api = Api::new(&d.url);
        api.remote_handler("acme", "cmd", json!({"max_attempts": 1}))
            .await;
        let (s, v) = json(
            api.c
                .post(format!("{}/acme/job/cmd/add", d.url))
                .body("hello\nbad\nchain\n"),
        )
        .await;
        assert_eq!(s, 200);
        let ids = ids(&v);
        let out = tokio::task::spawn_blocking({
            let url = d.url.clone();
            move || {
                std::process::Command::new(BIN)
                    .args([
                        "work", "acme", "--type", "cmd", "--concurrency", "2", "--wait", "2s",
                        "--exit-when-idle", "--",
                        "sh", "-c",
                        r#"read x; echo "got $x attempt $JOBSTORE_ATTEMPT"; if [ "$x" = bad ]; then echo "S: 400"; fi; if [ "$x" = chain ]; then echo "J: cmd|link"; fi"#,
                    ])
                    .env("JOBSTORE_URL", url)
                    .output()
                    .unwrap()
            }
        })
        .await
        .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let jobs: Vec<Value> =
            futures::future::join_all(ids.iter().map(|id| api.job("acme", id))).await;
        assert_eq!(jobs[0]["result"]["code"], "ok", "{}", jobs[0]);
        assert_eq!(jobs[0]["result"]["output"], "got hello attempt 1\n");
        assert_eq!(jobs[1]["result"]["code"], "failed");
        assert_eq!(jobs[1]["result"]["status"], 400);
        assert_eq!(jobs[2]["result"]["code"], "ok");
        let stats = json(api.c.get(format!("{}/acme/stats", d.url))).await.1;
        assert_eq!(
            stats["jobtypes"][0]["archived"]["ok"], 3,
            "the J: job ran too: {stats}"
        );
    });
}
