//! End to end, W3C trace context from add to run, on the real binary: an
//! add's `traceparent` header (or a JSON item's own) is kept with the job,
//! shown in its view, and every kind of run continues it: a process
//! handler's `$TRACEPARENT`, a long-lived worker's job line, an `http`
//! handler's request header, a remote worker's fetch answer; the jobs a
//! run adds carry it on. On SQLite and (required in CI) PostgreSQL and
//! Redis.

mod support;

use std::time::Duration;

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::post;
use rstest::rstest;
use serde_json::{Value, json};
use support::*;

const ADMIN: &str = "admin-token-for-tests";
const WAIT: Duration = Duration::from_secs(60);
/// The producer's trace.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TS: &str = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE";
/// Another trace, a JSON item's own.
const OWN_TP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
/// In the daemon's own environment: never passed to a job.
const DAEMON_TP: &str = "00-11111111111111111111111111111111-2222222222222222-01";

struct Api {
    c: reqwest::Client,
    url: String,
}

impl Api {
    async fn post(
        &self,
        path: &str,
        r: impl FnOnce(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> (u16, Value) {
        json(r(self
            .c
            .post(format!("{}{path}", self.url))
            .bearer_auth(ADMIN)))
        .await
    }

    async fn handler(&self, jobtype: &str, spec: Value) {
        let (s, v) = self
            .post(&format!("/acme/handler/add/{jobtype}/add"), |r| {
                r.json(&spec)
            })
            .await;
        assert_eq!(s, 200, "set handler {jobtype}: {v}");
    }

    /// Adds one job with a line body and these headers.
    async fn add(&self, jobtype: &str, headers: &[(&str, &str)]) -> String {
        let (s, v) = self
            .post(&format!("/acme/job/{jobtype}/add"), |mut r| {
                for (k, v) in headers {
                    r = r.header(*k, *v);
                }
                r.body("x")
            })
            .await;
        assert_eq!(s, 200, "add {jobtype}: {v}");
        ids(&v).remove(0)
    }

    async fn job(&self, id: &str) -> Value {
        json(
            self.c
                .get(format!("{}/acme/jobs/{id}", self.url))
                .bearer_auth(ADMIN),
        )
        .await
        .1
    }

    async fn archived(&self, id: &str) -> Value {
        eventually(WAIT, &format!("job {id} archived"), || async {
            let v = self.job(id).await;
            (v["state"] == "archived").then_some(v)
        })
        .await
    }

    /// The ids of acme's jobs of `jobtype`, archived, once there are `n`.
    async fn archived_of(&self, jobtype: &str, n: usize) -> Vec<Value> {
        eventually(WAIT, &format!("{n} archived {jobtype} jobs"), || async {
            let (s, v) = json(
                self.c
                    .get(format!(
                        "{}/acme/jobs?state=archived&type={jobtype}",
                        self.url
                    ))
                    .bearer_auth(ADMIN),
            )
            .await;
            assert_eq!(s, 200, "{v}");
            let jobs = v["jobs"].as_array().cloned().unwrap_or_default();
            (jobs.len() == n).then_some(jobs)
        })
        .await
    }
}

fn output(job: &Value) -> String {
    job["result"]["output"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// An `http` handler that answers with the trace headers it got.
async fn hook_server() -> String {
    async fn hook(headers: HeaderMap) -> String {
        let h = |n: &str| {
            headers
                .get(n)
                .map_or("none", |v| v.to_str().unwrap_or("?"))
                .to_owned()
        };
        format!(
            "traceparent={} tracestate={}\n",
            h("traceparent"),
            h("tracestate")
        )
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, Router::new().route("/hook", post(hook)))
            .await
            .unwrap()
    });
    format!("http://{addr}/hook")
}

#[rstest]
#[case::sqlite("sqlite")]
#[case::postgres("postgres")]
#[case::redis("redis")]
fn a_traced_add_is_continued_by_every_kind_of_run(#[case] backend: &'static str) {
    block_on(async {
        let Some(be) = Backend::new(backend).await else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let how = Start::store(be.url.as_deref())
            .env("JOBSTORE_ADMIN_TOKEN", ADMIN)
            .env("TRACEPARENT", DAEMON_TP)
            .arg("--allow-process-handlers")
            .arg("--poll")
            .arg("200ms");
        let d = DaemonProc::start(dir.path(), &how);
        let api = Api {
            c: http(),
            url: d.url.clone(),
        };
        let hook = hook_server().await;
        let show = r#"echo "traceparent=${TRACEPARENT-unset} tracestate=${TRACESTATE-unset}""#;
        api.handler(
            "proc",
            json!({"method": "process", "body": format!("{show}; echo 'J: child|from proc'")}),
        )
        .await;
        api.handler("child", json!({"method": "process", "body": show}))
            .await;
        api.handler(
            "worker",
            json!({"method": "process", "eid": "traced", "body": r#"while IFS= read -r line; do echo "$line"; echo "D: 200"; done"#}),
        )
        .await;
        api.handler("hook", json!({"method": "http", "body": hook}))
            .await;
        api.handler("remote", json!({"method": "remote", "body": ""}))
            .await;

        let traced = [("traceparent", TP), ("tracestate", TS)];
        // A process: $TRACEPARENT and $TRACESTATE; its J: child continues
        // the trace.
        let proc = api.add("proc", &traced).await;
        let job = api.archived(&proc).await;
        assert_eq!(
            (job["traceparent"].as_str(), job["tracestate"].as_str()),
            (Some(TP), Some(TS)),
            "{job}"
        );
        assert_eq!(
            output(&job),
            format!("traceparent={TP} tracestate={TS}\n"),
            "{job}"
        );
        let child = api.archived_of("child", 1).await.remove(0);
        assert_eq!(
            child["traceparent"], TP,
            "the J: child continues the trace: {child}"
        );
        let child = api.job(child["id"].as_str().unwrap()).await;
        assert!(
            output(&child).contains(&format!("traceparent={TP} ")),
            "{child}"
        );

        // A job without a trace context: neither variable, and never the
        // daemon's own.
        let plain = api.add("child", &[]).await;
        let job = api.archived(&plain).await;
        assert!(job.get("traceparent").is_none(), "{job}");
        assert_eq!(output(&job), "traceparent=unset tracestate=unset\n");

        // A long-lived worker: in its job line.
        let worker = api.add("worker", &traced).await;
        let job = api.archived(&worker).await;
        let line: Value = serde_json::from_str(output(&job).trim()).unwrap();
        assert_eq!(
            (line["traceparent"].as_str(), line["tracestate"].as_str()),
            (Some(TP), Some(TS)),
            "{line}"
        );

        // An http handler: the request's headers.
        let called = api.add("hook", &[("traceparent", TP)]).await;
        let job = api.archived(&called).await;
        assert_eq!(
            output(&job),
            format!("traceparent={TP} tracestate=none\n"),
            "{job}"
        );

        // A remote worker: in the fetch answer; a new job of its finish
        // without a context continues the fetched job's, one with its own
        // keeps that.
        let fetched_id = api.add("remote", &traced).await;
        let (s, got) = api
            .post("/acme/job/remote/get?max=1&wait=10000", |r| r)
            .await;
        assert_eq!(s, 200, "{got}");
        let fetched = &got["jobs"][0];
        assert_eq!(fetched["id"], fetched_id.as_str());
        assert_eq!(
            (
                fetched["traceparent"].as_str(),
                fetched["tracestate"].as_str()
            ),
            (Some(TP), Some(TS)),
            "{got}"
        );
        let finish = json!({"lease": got["lease"], "jobs": [{"id": fetched_id, "status": 200, "jobs": [
            {"type": "later", "data": "inherits"},
            {"type": "later", "data": "own", "traceparent": OWN_TP},
        ]}]});
        let (s, done) = api.post("/acme/jobs/finish", |r| r.json(&finish)).await;
        assert_eq!(s, 200, "{done}");
        let created: Vec<String> = done["created"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect();
        assert_eq!(created.len(), 2, "{done}");
        let later = eventually(WAIT, "the new jobs ingested", || async {
            let a = api.job(&created[0]).await;
            let b = api.job(&created[1]).await;
            (a.get("state").is_some() && b.get("state").is_some()).then_some((a, b))
        })
        .await;
        assert_eq!(
            (
                later.0["traceparent"].as_str(),
                later.0["tracestate"].as_str()
            ),
            (Some(TP), Some(TS))
        );
        assert_eq!(
            (later.1["traceparent"].as_str(), later.1.get("tracestate")),
            (Some(OWN_TP), None)
        );
        let bad = json!({"lease": got["lease"], "jobs": [{"id": fetched_id, "status": 200, "jobs": [
            {"type": "later", "data": "x", "traceparent": "nope"}]}]});
        let (s, v) = api.post("/acme/jobs/finish", |r| r.json(&bad)).await;
        assert_eq!(
            (s, v["error"]["field"].as_str()),
            (400, Some("traceparent")),
            "{v}"
        );
    });
}

/// A JSON add: an item's own context wins over the header, an item
/// without one takes the header's; a malformed field is a 400 naming it,
/// a malformed header is ignored (the job is added without one) and
/// counted. `jobstore add` sends `$TRACEPARENT`; `jobstore job` shows it.
#[test]
fn adds_take_their_trace_context_from_fields_headers_and_the_environment() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let d = DaemonProc::start(
            dir.path(),
            &Start::store(None).env("JOBSTORE_ADMIN_TOKEN", ADMIN),
        );
        let api = Api {
            c: http(),
            url: d.url.clone(),
        };
        let items = json!([
            {"id": "own", "data": "a", "traceparent": OWN_TP, "tracestate": "k=v"},
            {"id": "header", "data": "b"},
        ]);
        let (s, v) = api
            .post("/acme/job/t/add", |r| {
                r.header("traceparent", TP).json(&items)
            })
            .await;
        assert_eq!(s, 200, "{v}");
        let own = eventually(WAIT, "ingested", || async {
            let v = api.job("own").await;
            v.get("state").is_some().then_some(v)
        })
        .await;
        assert_eq!(
            (own["traceparent"].as_str(), own["tracestate"].as_str()),
            (Some(OWN_TP), Some("k=v"))
        );
        let header = api.job("header").await;
        assert_eq!(
            (header["traceparent"].as_str(), header.get("tracestate")),
            (Some(TP), None),
            "{header}"
        );

        for (item, field) in [
            (
                json!({"data": "x", "traceparent": TP.to_uppercase()}),
                "traceparent",
            ),
            (
                json!({"data": "x", "traceparent": TP, "tracestate": "Bad=1"}),
                "tracestate",
            ),
            (json!({"data": "x", "tracestate": "k=v"}), "tracestate"),
        ] {
            let (s, v) = api
                .post("/acme/job/t/add", |r| {
                    r.json(&json!([{"data": "fine"}, item]))
                })
                .await;
            assert_eq!(
                (s, v["error"]["field"].as_str(), v["error"]["item"].as_u64()),
                (400, Some(field), Some(2)),
                "{v}"
            );
        }

        // A malformed header: added without a context, and counted.
        let id = api
            .add(
                "t",
                &[("traceparent", "00-not-a-trace"), ("tracestate", "k=v")],
            )
            .await;
        let job = eventually(WAIT, "ingested", || async {
            let v = api.job(&id).await;
            v.get("state").is_some().then_some(v)
        })
        .await;
        assert!(
            job.get("traceparent").is_none() && job.get("tracestate").is_none(),
            "{job}"
        );
        let id = api
            .add("t", &[("traceparent", TP), ("tracestate", "Bad=1")])
            .await;
        let job = eventually(WAIT, "ingested", || async {
            let v = api.job(&id).await;
            v.get("state").is_some().then_some(v)
        })
        .await;
        assert_eq!(
            (job["traceparent"].as_str(), job.get("tracestate")),
            (Some(TP), None),
            "{job}"
        );
        let metrics = api
            .c
            .get(format!("{}/metrics", d.url))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        for header in ["traceparent", "tracestate"] {
            let line = format!("jobstore_trace_headers_ignored_total{{header=\"{header}\"}} 1");
            assert!(metrics.contains(&line), "{line} in:\n{metrics}");
        }

        // The command line: $TRACEPARENT goes with the add; the job shows it.
        let cli = |args: &[&str], env: &[(&str, &str)]| {
            let mut c = std::process::Command::new(BIN);
            c.args(args)
                .env("JOBSTORE_URL", &d.url)
                .env("JOBSTORE_TOKEN", ADMIN)
                .env_remove("TRACEPARENT")
                .env_remove("TRACESTATE");
            for (k, v) in env {
                c.env(k, v);
            }
            c.output().unwrap()
        };
        let out = cli(
            &["add", "acme", "t", "from-cli"],
            &[("TRACEPARENT", TP), ("TRACESTATE", TS)],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let id = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        let shown = eventually(WAIT, "the cli's job ingested", || async {
            let out = cli(&["job", "acme", &id], &[]);
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            out.status.success().then_some(text)
        })
        .await;
        assert!(shown.contains(TP) && shown.contains(TS), "{shown}");
        assert!(shown.contains(TRACE_ID));
        let out = cli(&["add", "acme", "t", "x", "--traceparent", "garbage"], &[]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "a malformed --traceparent is a usage error"
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains("traceparent"));
    });
}
