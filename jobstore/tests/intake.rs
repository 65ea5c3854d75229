//! End to end, intake side: the real `jobstore` binary on a free port, over
//! both body forms and every endpoint, with and without tokens.

mod support;

use std::time::Duration;

use rstest::rstest;
use serde_json::json;
use support::*;

const WAIT: Duration = Duration::from_secs(30);

/// Adds over the line form and the JSON form reach the store with every
/// field as given; client ids are idempotent; a restart keeps them.
#[rstest]
#[case::memory("memory")]
#[case::sqlite("sqlite")]
#[case::postgres("postgres")]
#[case::redis("redis")]
fn adds_over_both_body_forms_reach_the_store(#[case] backend: &'static str) {
    block_on(async {
        let Some(be) = Backend::new(backend).await else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let mut d = DaemonProc::start(dir.path(), &Start::intake(be.url.as_deref()));
        let c = http();

        // Line form: one payload a line, CR dropped, empty lines skipped.
        let (s, v) = json(
            c.post(format!("{}/acme/job/mail/add?priority=7", d.url))
                .body("alpha\nbeta\r\n\ngamma|with|pipes\n"),
        )
        .await;
        assert_eq!(s, 200, "{v}");
        let line_ids = ids(&v);
        assert_eq!(line_ids.len(), 3);
        assert!(
            line_ids.windows(2).all(|w| w[0] < w[1]),
            "ids are time-sortable: {line_ids:?}"
        );

        // JSON form: client ids, priorities, delays, binary data.
        let (s, v) = json(c.post(format!("{}/acme/job/mail/add", d.url)).json(&json!([
            {"id": "order-1", "data": {"to": "a@example.com"}, "priority": -3},
            {"id": "order-2", "data": "plain text\nwith a newline", "delay_ms": 3_600_000},
            {"data_base64": "AP8KDQ=="},
        ])))
        .await;
        assert_eq!(s, 200, "{v}");
        let json_ids = ids(&v);
        assert_eq!(&json_ids[..2], ["order-1", "order-2"]);
        assert_eq!(v["existing"], json!([]));

        // A retried request creates nothing twice and says so.
        let (s, v) = json(c.post(format!("{}/acme/job/mail/add", d.url)).json(&json!([
            {"id": "order-1", "data": "changed"},
            {"id": "order-3", "data": "new"},
        ])))
        .await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["ids"], json!(["order-1", "order-3"]));
        assert_eq!(v["existing"], json!(["order-1"]));

        let get = |id: String| {
            let c = c.clone();
            let url = format!("{}/acme/jobs/{id}", d.url);
            async move {
                let (s, v) = json(c.get(url)).await;
                (s == 200).then_some(v)
            }
        };
        let beta = eventually(WAIT, "beta ingested", || get(line_ids[1].clone())).await;
        assert_eq!(beta["data"], "beta");
        assert_eq!(beta["priority"], 7);
        assert_eq!(beta["type"], "mail");
        assert_eq!(beta["state"], "waiting");
        assert_eq!(beta["attempts"], 0);
        let gamma = eventually(WAIT, "gamma", || get(line_ids[2].clone())).await;
        assert_eq!(gamma["data"], "gamma|with|pipes");
        let o1 = eventually(WAIT, "order-1", || get("order-1".into())).await;
        assert_eq!(o1["data"], r#"{"to":"a@example.com"}"#);
        assert_eq!(o1["priority"], -3);
        let o2 = eventually(WAIT, "order-2", || get("order-2".into())).await;
        assert_eq!(o2["data"], "plain text\nwith a newline");
        assert_eq!(o2["state"], "scheduled");
        let bin = eventually(WAIT, "binary job", || get(json_ids[2].clone())).await;
        assert_eq!(bin["data_base64"], "AP8KDQ==");
        assert!(bin.get("data").is_none());

        // The store holds them under the client's prefix.
        if backend != "memory" {
            let store = be.open(dir.path()).await;
            let job = store
                .get_job("acme-order-1")
                .await
                .unwrap()
                .expect("in the store");
            assert_eq!(job.jobtype, "acme-mail");
            assert_eq!(job.data, br#"{"to":"a@example.com"}"#);
            let job = store
                .get_job(&format!("acme-{}", json_ids[2]))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(job.data, b"\x00\xff\n\r");
            let counts = store.job_counts(jobstore_api::now_millis()).await.unwrap();
            let mail = counts.iter().find(|c| c.jobtype == "acme-mail").unwrap();
            assert_eq!(mail.total(), 7, "3 lines + 3 JSON + order-3, none twice");
        }

        // A clean stop exits 0 and a restart still has everything.
        assert!(d.terminate().success(), "{}", d.log());
        if backend != "memory" {
            let d2 = DaemonProc::start(dir.path(), &Start::intake(be.url.as_deref()));
            let (s, v) = json(c.get(format!("{}/acme/jobs/order-3", d2.url))).await;
            assert_eq!(s, 200, "{v}");
        }
    });
}

/// Every endpoint, and the 4xx answers to bad input.
#[test]
fn every_endpoint_and_its_errors() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let d = DaemonProc::start(
            dir.path(),
            &Start::intake(None).arg("--max-body-bytes").arg("4096"),
        );
        let c = http();
        let u = &d.url;

        // Handlers: query form, JSON form, get, list, delete (both verbs).
        let (s, v) = json(
            c.post(format!(
                "{u}/acme/handler/add/mail/add?method=http&concurrency=2"
            ))
            .body("http://127.0.0.1:9/hook"),
        )
        .await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["method"], "http");
        assert_eq!(v["limits"]["concurrency"], 2);
        let (s, v) = json(
            c.post(format!("{u}/acme/handler/add/sms/add"))
                .json(&json!({
                    "method": "http", "body": "https://example.com/sms", "limits": {"max_attempts": 3}
                })),
        )
        .await;
        assert_eq!(s, 200, "{v}");
        let (s, v) = json(c.get(format!("{u}/acme/handler/get/mail"))).await;
        assert_eq!(
            (s, v["body"].clone()),
            (200, json!("http://127.0.0.1:9/hook"))
        );
        let (s, v) = json(c.get(format!("{u}/acme/handlers"))).await;
        assert_eq!(s, 200);
        let types: Vec<&str> = v["handlers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["mail", "sms"]);
        let (s, _) = json(c.delete(format!("{u}/acme/handler/del/mail/delete"))).await;
        assert_eq!(s, 200);
        let (s, v) = json(c.post(format!("{u}/acme/handler/del/sms/delete"))).await;
        assert_eq!((s, v["deleted"].clone()), (200, json!(true)));
        let (s, v) = json(c.get(format!("{u}/acme/handler/get/mail"))).await;
        assert_eq!((s, v["error"]["kind"].clone()), (404, json!("not_found")));
        let (s, _) = json(c.delete(format!("{u}/acme/handler/del/mail/delete"))).await;
        assert_eq!(s, 404);

        // Handler refusals.
        let (s, v) = json(
            c.post(format!("{u}/acme/handler/add/x/add?method=process"))
                .body("cat"),
        )
        .await;
        assert_eq!(s, 403, "process handlers are off by default: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("--allow-process-handlers")
        );
        let (s, v) = json(
            c.post(format!("{u}/acme/handler/add/x/add?method=cobol"))
                .body("x"),
        )
        .await;
        assert_eq!((s, v["error"]["field"].clone()), (400, json!("method")));
        let (s, v) = json(c.post(format!("{u}/acme/handler/add/x/add")).body("x")).await;
        assert_eq!((s, v["error"]["field"].clone()), (400, json!("method")));
        let (s, _) = json(
            c.post(format!("{u}/acme/handler/add/x/add?method=http"))
                .body("not a url"),
        )
        .await;
        assert_eq!(s, 400);
        let (s, _) = json(
            c.post(format!("{u}/acme/handler/add/x/add?method=http"))
                .body("file:///etc/passwd"),
        )
        .await;
        assert_eq!(s, 400);
        // Fields a method never reads are refused, named, not stored.
        for (query, field) in [
            ("method=http&eid=e", "eid"),
            ("method=http&before=x", "before"),
            ("method=remote&before_each=x", "before_each"),
            ("method=remote&after_each=x", "after_each"),
        ] {
            let (s, v) = json(
                c.post(format!("{u}/acme/handler/add/x/add?{query}"))
                    .body("http://127.0.0.1:9/"),
            )
            .await;
            assert_eq!(
                (s, v["error"]["field"].clone()),
                (400, json!(field)),
                "{query}: {v}"
            );
        }
        let (s, v) = json(
            c.post(format!("{u}/acme/handler/add/x/add"))
                .json(&json!({"method": "remote", "body": "", "eid": "e"})),
        )
        .await;
        assert_eq!((s, v["error"]["field"].clone()), (400, json!("eid")), "{v}");
        let (s, _) = json(c.get(format!("{u}/acme/handler/get/x"))).await;
        assert_eq!(s, 404, "nothing was stored");

        // Jobs: add, get, cancel, stats.
        let (s, v) = json(
            c.post(format!("{u}/acme/job/mail/add?delay_ms=600000"))
                .body("later\nlater2"),
        )
        .await;
        assert_eq!(s, 200, "{v}");
        let later = ids(&v);
        let (s, v) = json(c.post(format!("{u}/acme/job/mail/add")).body("now")).await;
        assert_eq!(s, 200, "{v}");
        let now_id = ids(&v)[0].clone();
        for id in [&later[1], &now_id] {
            eventually(WAIT, "ingest", || {
                let c = c.clone();
                let url = format!("{u}/acme/jobs/{id}");
                async move { (json(c.get(url)).await.0 == 200).then_some(()) }
            })
            .await;
        }
        let (s, v) = json(
            c.post(format!("{u}/acme/jobs/cancel"))
                .json(&json!({"ids": [later[0], "no-such-job"]})),
        )
        .await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["cancelled"], json!([later[0]]));
        assert_eq!(v["not_cancelled"], json!(["no-such-job"]));
        let (s, v) = json(
            c.post(format!("{u}/acme/jobs/cancel"))
                .body(format!("{}\n", later[0])),
        )
        .await;
        assert_eq!(
            (s, v["cancelled"].clone()),
            (200, json!([])),
            "already archived"
        );
        let (s, v) = json(c.get(format!("{u}/acme/jobs/{}", later[0]))).await;
        assert_eq!(s, 200);
        assert_eq!(v["state"], "archived");
        assert_eq!(v["result"]["code"], "cancelled");
        let (s, v) = json(c.get(format!("{u}/acme/stats"))).await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(
            v["jobtypes"],
            json!([{"type": "mail", "waiting": 1, "scheduled": 1, "running": 0, "blocked": 0, "archived": {"cancelled": 1}, "paused": false}])
        );
        json(c.post(format!("{u}/globex/job/report/add")).body("x")).await;
        let (s, v) = eventually(WAIT, "globex stats", || {
            let c = c.clone();
            let url = format!("{u}/stats");
            async move {
                let (s, v) = json(c.get(url)).await;
                (v["clients"].as_array().map(Vec::len) == Some(2)).then_some((s, v))
            }
        })
        .await;
        assert_eq!(s, 200);
        assert_eq!(v["clients"][0]["client"], "acme");
        assert_eq!(v["clients"][1]["client"], "globex");

        // Health, metrics, OpenAPI.
        let (s, v) = json(c.get(format!("{u}/health"))).await;
        assert_eq!(s, 200);
        assert_eq!(v["status"], "ok", "{v}");
        assert_eq!(v["sysid"]["held"], true);
        assert_eq!(v["store"]["reachable"], true);
        let metrics = c.get(format!("{u}/metrics")).send().await.unwrap();
        assert!(
            metrics.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/plain")
        );
        let metrics = metrics.text().await.unwrap();
        for name in [
            "jobstore_http_requests_total{",
            "jobstore_jobs_acknowledged_total 4",
            "jobstore_journal_appended_records_total 4",
            "jobstore_journal_backlog_records 0",
            "jobstore_ingest_lag_seconds",
            "jobstore_store_call_duration_seconds_bucket{op=\"add_jobs\"",
            "jobstore_errors_total{source=\"http\"",
            "jobstore_store_up 1",
            "jobstore_sysid_held 1",
        ] {
            assert!(metrics.contains(name), "metrics lack {name}:\n{metrics}");
        }
        let (s, api) = json(c.get(format!("{u}/openapi.json"))).await;
        assert_eq!(s, 200);
        for path in [
            "/{client}/job/{type}/add",
            "/{client}/handler/add/{type}/add",
            "/{client}/handler/del/{type}/delete",
            "/{client}/handler/get/{type}",
            "/{client}/jobs/{id}",
            "/{client}/jobs/cancel",
            "/{client}/stats",
            "/health",
            "/metrics",
        ] {
            assert!(api["paths"].get(path).is_some(), "openapi lacks {path}");
        }

        // Bad input: each a 4xx whose body says what is wrong.
        let cases: Vec<(&str, reqwest::RequestBuilder, u16, &str)> = vec![
            (
                "client with '-'",
                c.post(format!("{u}/a-b/job/t/add")).body("x"),
                400,
                "client",
            ),
            (
                "client '..'",
                c.post(format!("{u}/../job/t/add")).body("x"),
                404,
                "",
            ),
            (
                "jobtype starting with '-'",
                c.post(format!("{u}/acme/job/-t/add")).body("x"),
                400,
                "jobtype",
            ),
            (
                "jobtype with '/'",
                c.post(format!("{u}/acme/job/a%2Fb/add")).body("x"),
                400,
                "jobtype",
            ),
            (
                "invalid UTF-8 in a name",
                c.post(format!("{u}/acme/job/%FF/add")).body("x"),
                400,
                "",
            ),
            (
                "control character in a name",
                c.post(format!("{u}/acme/job/a%0Ab/add")).body("x"),
                400,
                "jobtype",
            ),
            (
                "empty body",
                c.post(format!("{u}/acme/job/t/add")).body(""),
                400,
                "",
            ),
            (
                "body over the limit",
                c.post(format!("{u}/acme/job/t/add")).body("x".repeat(5000)),
                413,
                "",
            ),
            (
                "malformed JSON",
                c.post(format!("{u}/acme/job/t/add"))
                    .header("content-type", "application/json")
                    .body("[{"),
                400,
                "",
            ),
            (
                "JSON item without data",
                c.post(format!("{u}/acme/job/t/add"))
                    .json(&json!([{"data": "ok"}, {"id": "x"}])),
                400,
                "data",
            ),
            (
                "unknown JSON field",
                c.post(format!("{u}/acme/job/t/add"))
                    .json(&json!([{"data": "x", "prio": 1}])),
                400,
                "",
            ),
            (
                "duplicate id in one request",
                c.post(format!("{u}/acme/job/t/add"))
                    .json(&json!([{"data": "x", "id": "d"}, {"data": "y", "id": "d"}])),
                400,
                "id",
            ),
            (
                "id with '/'",
                c.post(format!("{u}/acme/job/t/add"))
                    .json(&json!([{"data": "x", "id": "a/b"}])),
                400,
                "id",
            ),
            (
                "run_at and delay_ms",
                c.post(format!("{u}/acme/job/t/add"))
                    .json(&json!([{"data": "x", "run_at": 5, "delay_ms": 5}])),
                400,
                "run_at",
            ),
            (
                "run_at not a time",
                c.post(format!("{u}/acme/job/t/add"))
                    .json(&json!([{"data": "x", "run_at": "tomorrow"}])),
                400,
                "run_at",
            ),
            (
                "priority not an i32",
                c.post(format!("{u}/acme/job/t/add?priority=99999999999"))
                    .body("x"),
                400,
                "",
            ),
            (
                "unknown query parameter",
                c.post(format!("{u}/acme/job/t/add?prio=1")).body("x"),
                400,
                "",
            ),
            ("unknown job", c.get(format!("{u}/acme/jobs/nope")), 404, ""),
            (
                "cancel with no ids",
                c.post(format!("{u}/acme/jobs/cancel"))
                    .json(&json!({"ids": []})),
                400,
                "",
            ),
            (
                "unknown endpoint",
                c.get(format!("{u}/acme/nothing/here")),
                404,
                "",
            ),
            (
                "wrong method",
                c.get(format!("{u}/acme/job/t/add")),
                405,
                "",
            ),
        ];
        for (what, req, status, field) in cases {
            let (s, v) = json(req).await;
            assert_eq!(s, status, "{what}: {v}");
            if status != 404 || !field.is_empty() || what == "unknown job" {
                let msg = v["error"]["message"].as_str().unwrap_or_default();
                assert!(!msg.is_empty(), "{what}: no message in {v}");
            }
            if !field.is_empty() {
                assert_eq!(v["error"]["field"], field, "{what}: {v}");
            }
        }
        let (s, v) = json(
            c.post(format!("{u}/acme/job/t/add"))
                .json(&json!([{"data": "ok"}, {"id": "x"}])),
        )
        .await;
        assert_eq!(
            (s, v["error"]["item"].clone()),
            (400, json!(2)),
            "names the item: {v}"
        );

        // Nothing bad was stored, and the daemon is still healthy.
        let (_, v) = json(c.get(format!("{u}/health"))).await;
        assert_eq!(v["status"], "ok");
        let (_, v) = json(c.get(format!("{u}/acme/stats"))).await;
        assert_eq!(v["jobtypes"].as_array().unwrap().len(), 1, "{v}");
    });
}

fn config_file(dir: &std::path::Path) -> std::path::PathBuf {
    token_config(
        &dir.join("jobstore.toml"),
        "allow_process_handlers = true",
        Some("admin-secret-token"),
        &[("acme", "acme-secret"), ("globex", "globex-secret")],
    )
}

/// With tokens configured: 401 without one, 403 with another client's, and
/// a client reaches only its own jobs, handlers and stats; only the admin
/// sets process handlers.
#[test]
fn tokens_isolate_tenants() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config_file(dir.path());
        let d = DaemonProc::start(
            &dir.path().join("data"),
            &Start::intake(None)
                .arg("--config")
                .arg(cfg.to_str().unwrap()),
        );
        let c = http();
        let u = &d.url;
        let acme = |r: reqwest::RequestBuilder| r.bearer_auth("acme-secret");
        let globex = |r: reqwest::RequestBuilder| r.bearer_auth("globex-secret");
        let admin = |r: reqwest::RequestBuilder| r.bearer_auth("admin-secret-token");

        let r = c
            .post(format!("{u}/acme/job/t/add"))
            .body("x")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
        assert!(r.headers().contains_key("www-authenticate"));
        let (s, _) = json(
            c.post(format!("{u}/acme/job/t/add"))
                .bearer_auth("wrong")
                .body("x"),
        )
        .await;
        assert_eq!(s, 401);
        let (s, _) = json(globex(c.post(format!("{u}/acme/job/t/add")).body("x"))).await;
        assert_eq!(s, 403);

        let (s, v) = json(acme(
            c.post(format!("{u}/acme/job/t/add"))
                .json(&json!([{"id": "secret-1", "data": "acme data"}])),
        ))
        .await;
        assert_eq!(s, 200, "{v}");
        let (s, _) = json(acme(c.get(format!("{u}/acme/jobs/secret-1")))).await;
        assert_eq!(s, 200);
        // globex cannot reach acme's job by acme's path, nor by its own.
        let (s, _) = json(globex(c.get(format!("{u}/acme/jobs/secret-1")))).await;
        assert_eq!(s, 403);
        let (s, _) = json(globex(c.get(format!("{u}/globex/jobs/secret-1")))).await;
        assert_eq!(s, 404);
        let (s, _) = json(globex(
            c.post(format!("{u}/acme/jobs/cancel"))
                .json(&json!({"ids": ["secret-1"]})),
        ))
        .await;
        assert_eq!(s, 403);
        let (s, v) = json(globex(
            c.post(format!("{u}/globex/jobs/cancel"))
                .json(&json!({"ids": ["secret-1"]})),
        ))
        .await;
        assert_eq!((s, v["cancelled"].clone()), (200, json!([])));
        let (s, _) = json(globex(c.get(format!("{u}/acme/stats")))).await;
        assert_eq!(s, 403);
        let (s, v) = json(globex(c.get(format!("{u}/globex/stats")))).await;
        assert_eq!((s, v["jobtypes"].clone()), (200, json!([])));
        // The same client-chosen id in another tenant is another job.
        let (s, v) = json(globex(
            c.post(format!("{u}/globex/job/t/add"))
                .json(&json!([{"id": "secret-1", "data": "globex data"}])),
        ))
        .await;
        assert_eq!((s, v["existing"].clone()), (200, json!([])), "{v}");

        // Handlers: a client sets its own http handler, not another's, and
        // never a process handler; the admin may.
        let (s, _) = json(acme(
            c.post(format!("{u}/acme/handler/add/t/add?method=http"))
                .body("http://127.0.0.1:1/"),
        ))
        .await;
        assert_eq!(s, 200);
        let (s, _) = json(globex(c.get(format!("{u}/acme/handler/get/t")))).await;
        assert_eq!(s, 403);
        let (s, _) = json(globex(c.delete(format!("{u}/acme/handler/del/t/delete")))).await;
        assert_eq!(s, 403);
        let (s, v) = json(acme(
            c.post(format!("{u}/acme/handler/add/t/add?method=process"))
                .body("cat"),
        ))
        .await;
        assert_eq!(s, 403, "{v}");
        let (s, v) = json(admin(
            c.post(format!("{u}/acme/handler/add/t/add?method=process"))
                .body("cat"),
        ))
        .await;
        assert_eq!(s, 200, "{v}");

        // Admin-only views; health is open.
        let (s, _) = json(acme(c.get(format!("{u}/stats")))).await;
        assert_eq!(s, 403);
        let (s, _) = json(admin(c.get(format!("{u}/stats")))).await;
        assert_eq!(s, 200);
        let (s, _) = json(acme(c.get(format!("{u}/metrics")))).await;
        assert_eq!(s, 403);
        let r = admin(c.get(format!("{u}/metrics"))).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let (s, _) = json(c.get(format!("{u}/health"))).await;
        assert_eq!(s, 200);
        let (s, _) = json(admin(c.get(format!("{u}/acme/jobs/secret-1")))).await;
        assert_eq!(s, 200, "the admin reaches every client");
    });
}

/// Listening beyond loopback needs tokens or an explicit flag.
#[test]
fn public_listen_without_tokens_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(BIN)
        .args(["serve", "--listen", "0.0.0.0:0", "--data-dir"])
        .arg(dir.path())
        .env_remove("JOBSTORE_ADMIN_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--insecure-listen"), "{err}");
}

/// A sysid held by a live daemon is refused with a clear message; once that
/// daemon stops, the name is free again.
#[test]
fn a_sysid_held_by_a_live_daemon_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    let store = format!("sqlite://{}", db.display());
    let how = Start::intake(Some(&store)).arg("--sysid").arg("node-1");
    let mut a = DaemonProc::start(&dir.path().join("a"), &how);
    let err = DaemonProc::try_start(&dir.path().join("b"), &how)
        .err()
        .expect("a second daemon with the same sysid must not start");
    assert!(err.contains("held by another live daemon"), "{err}");
    assert!(a.terminate().success(), "{}", a.log());
    let mut b = DaemonProc::start(&dir.path().join("b"), &how);
    assert!(b.terminate().success(), "{}", b.log());
}

/// SIGTERM: requests in flight are answered, new ones refused, and what was
/// acknowledged is in the store when the process exits 0.
#[test]
fn sigterm_answers_in_flight_and_ingests_what_is_left() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let mut d = DaemonProc::start(dir.path(), &Start::intake(None));
        let c = http();
        let mut acked: Vec<String> = Vec::new();
        let body: String = (0..200).map(|i| format!("job {i}\n")).collect();
        for _ in 0..5 {
            let (s, v) = json(
                c.post(format!("{}/acme/job/t/add", d.url))
                    .body(body.clone()),
            )
            .await;
            assert_eq!(s, 200);
            acked.extend(ids(&v));
        }
        let status = tokio::task::spawn_blocking(move || {
            let s = d.terminate();
            (s, d.log())
        })
        .await
        .unwrap();
        assert!(status.0.success(), "{}", status.1);
        assert!(status.1.contains("sysid released"), "{}", status.1);
        let store = jobstore_daemon::factory::open(None, dir.path())
            .await
            .unwrap();
        for id in &acked {
            assert!(
                store
                    .get_job(&format!("acme-{id}"))
                    .await
                    .unwrap()
                    .is_some(),
                "acknowledged job {id} is missing after a clean stop"
            );
        }
    });
}
