//! Dependencies on the real binary: a job that waits for jobs of other
//! jobtypes is blocked (counted, listed, shown with what it waits for)
//! until they have run, then runs; a failed dependency cancels its waiter
//! down a chain, or lets it run under `run`; an unknown dependency is
//! refused and kept in the rejected file; the command line's
//! `--depends-on`; bad input answered with a 400 naming the field. On the
//! embedded SQLite store, and in CI on PostgreSQL and Redis too.

mod support;

use std::time::Duration;

use rstest::rstest;
use serde_json::{Value, json};
use support::admin::*;
use support::*;

const WAIT: Duration = Duration::from_secs(60);

async fn add_json(api: &Api, jobtype: &str, items: Value) -> (u16, Value) {
    api.post(&format!("/acme/job/{jobtype}/add"), items).await
}

fn field(v: &Value) -> &str {
    v["error"]["field"].as_str().unwrap_or("")
}

async fn state_of(api: &Api, id: &str) -> String {
    api.job(id).await["state"].as_str().unwrap_or("").to_owned()
}

async fn archived(api: &Api, id: &str) -> Value {
    eventually(WAIT, &format!("{id} archived"), || async {
        let job = api.job(id).await;
        (job["state"] == "archived").then_some(job)
    })
    .await
}

#[rstest]
#[case::sqlite("sqlite")]
#[case::postgres("postgres")]
#[case::redis("redis")]
#[test]
fn dependencies_block_a_job_until_they_have_run(#[case] backend: &'static str) {
    block_on(async {
        let Some(be) = Backend::new(backend).await else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let d = DaemonProc::start(dir.path(), &admin_runner(be.url.as_deref()));
        let api = Api::new(&d.url);

        // Two steps with no handler yet (they wait), and a report that
        // waits for both.
        add_json(
            &api,
            "extract",
            json!([{"id": "e1", "data": "1"}, {"id": "e2", "data": "2"}]),
        )
        .await;
        let (s, v) = add_json(
            &api,
            "report",
            json!([{"id": "r", "data": "r", "depends_on": ["e1", "e2"]}]),
        )
        .await;
        assert_eq!((s, ids(&v)), (200, vec!["r".to_owned()]), "{v}");
        assert!(v.get("refused").is_none(), "{v}");
        let job = api.job("r").await;
        assert_eq!(job["state"], "blocked", "{job}");
        assert_eq!(job["dependencies_pending"], 2);
        assert_eq!(job["on_dependency_failure"], "cancel");
        let (s, w) = api.get("/acme/jobs/r/waits").await;
        assert_eq!(s, 200, "{w}");
        assert_eq!(w["pending"], 2);
        assert_eq!(
            w["jobs"],
            json!([{"id": "e1", "state": "pending"}, {"id": "e2", "state": "pending"}])
        );
        let (_, stats) = api.get("/acme/stats").await;
        let report = stats["jobtypes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["type"] == "report")
            .cloned()
            .unwrap();
        assert_eq!(report["blocked"], 1, "{stats}");
        let (s, list) = api.get("/acme/jobs?state=blocked").await;
        assert_eq!(s, 200, "{list}");
        assert_eq!(list["jobs"][0]["id"], "r", "{list}");

        // The steps run; then the report does.
        api.handler(
            "report",
            json!({"method": "process", "body": "echo reported"}),
        )
        .await;
        api.handler("extract", json!({"method": "process", "body": "cat"}))
            .await;
        let job = archived(&api, "r").await;
        assert_eq!(job["result"]["code"], "ok", "{job}");
        let events: Vec<&str> = job["history"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["event"].as_str())
            .collect();
        assert!(events.contains(&"unblocked"), "{events:?}");
        let (_, w) = api.get("/acme/jobs/r/waits").await;
        assert_eq!(w["done"], json!({"ok": 2}), "{w}");
        assert_eq!(w["jobs"][0]["code"], "ok");

        // A chain under cancel: a failing step cancels what waits for it,
        // and what waits for that; a `run` waiter runs anyway.
        api.handler(
            "fail",
            json!({"method": "process", "body": "echo 'S: 404'"}),
        )
        .await;
        add_json(&api, "hold", json!([{"id": "f", "data": "x"}])).await;
        add_json(
            &api,
            "report",
            json!([
                {"id": "c1", "data": "", "depends_on": ["f"]},
                {"id": "anyway", "data": "", "depends_on": ["f"], "on_dependency_failure": "run"}
            ]),
        )
        .await;
        add_json(
            &api,
            "report",
            json!([{"id": "c2", "data": "", "depends_on": ["c1"]}]),
        )
        .await;
        // f (a jobtype without a handler, so it waits) is cancelled: an end
        // other than ok.
        let (s, v) = api.post("/acme/jobs/cancel", json!({"ids": ["f"]})).await;
        assert_eq!(s, 200, "{v}");
        let c1 = archived(&api, "c1").await;
        assert_eq!(c1["result"]["code"], "cancelled");
        assert_eq!(
            c1["result"]["output"], "[jobstore] dependency acme-f ended cancelled\n",
            "the note names the store id (client prefix, then id): {c1}"
        );
        let c2 = archived(&api, "c2").await;
        assert_eq!(
            c2["result"]["output"],
            "[jobstore] dependency acme-c1 ended cancelled\n"
        );
        let anyway = archived(&api, "anyway").await;
        assert_eq!(anyway["result"]["code"], "ok", "{anyway}");

        // A dependency that fails by its run.
        add_json(&api, "fail", json!([{"id": "bad", "data": ""}])).await;
        archived(&api, "bad").await;
        add_json(
            &api,
            "report",
            json!([{"id": "late", "data": "", "depends_on": ["bad"]}]),
        )
        .await;
        let late = archived(&api, "late").await;
        assert_eq!(
            late["result"]["output"],
            "[jobstore] dependency acme-bad ended failed\n"
        );

        // Unknown dependencies: refused, named, kept in the rejected file.
        let (s, v) = add_json(
            &api,
            "report",
            json!([{"id": "orphan", "data": "", "depends_on": ["e1", "nobody"]},
                   {"id": "fine", "data": ""}]),
        )
        .await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(
            v["refused"],
            json!([{"id": "orphan", "field": "depends_on[1]",
                    "reason": "dependency \"nobody\" is not a job"}]),
            "{v}"
        );
        let (s, _) = api.get("/acme/jobs/orphan").await;
        assert_eq!(s, 404);
        let rejected =
            std::fs::read_to_string(dir.path().join("rejected.jsonl")).unwrap_or_default();
        assert!(rejected.contains("acme-orphan"), "{rejected}");

        // The command line.
        add_json(&api, "hold", json!([{"id": "h1", "data": ""}])).await;
        let added = cli_json(
            &d.url,
            &[
                "add",
                "acme",
                "report",
                "--depends-on",
                "h1",
                "--on-dependency-failure",
                "run",
                "x",
            ],
        );
        let id = added["ids"][0].as_str().unwrap().to_owned();
        let job = eventually(WAIT, "the CLI's job stored", || async {
            let job = api.job(&id).await;
            (job["state"] == "blocked").then_some(job)
        })
        .await;
        assert_eq!(job["on_dependency_failure"], "run");
        let out = cli(&d.url, &["job", "acme", &id]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("1 pending; on failure: run"), "{text}");
        let out = cli(
            &d.url,
            &[
                "add",
                "acme",
                "report",
                "--on-dependency-failure",
                "run",
                "x",
            ],
        );
        assert!(
            !out.status.success(),
            "--on-dependency-failure without --depends-on"
        );

        // Bad input: a 400 naming the field, nothing of the request added.
        let bad = [
            (
                json!({"data": "x", "id": "self", "depends_on": ["self"]}),
                "depends_on[0]",
            ),
            (
                json!({"data": "x", "depends_on": ["e1", "e1"]}),
                "depends_on[1]",
            ),
            (json!({"data": "x", "depends_on": ["a|b"]}), "depends_on[0]"),
            (json!({"data": "x", "depends_on": []}), "depends_on"),
            (
                json!({"data": "x", "depends_on": ["e1"], "on_dependency_failure": "hold"}),
                "on_dependency_failure",
            ),
            (
                json!({"data": "x", "on_dependency_failure": "run"}),
                "on_dependency_failure",
            ),
        ];
        for (item, want) in bad {
            let (s, v) = add_json(&api, "bad", json!([{"id": "ok-1", "data": "ok"}, item])).await;
            assert_eq!((s, field(&v)), (400, want), "{v}");
        }
        let (s, v) = json(
            http()
                .post(format!(
                    "{}/acme/job/bad/add?on_dependency_failure=run",
                    d.url
                ))
                .bearer_auth(ADMIN)
                .body("x"),
        )
        .await;
        assert_eq!((s, field(&v)), (400, "on_dependency_failure"), "{v}");
        let many: Vec<String> = (0..1001).map(|i| format!("m{i}")).collect();
        let (s, v) = add_json(&api, "bad", json!([{"data": "x", "depends_on": many}])).await;
        assert_eq!((s, field(&v)), (413, "depends_on"), "{v}");
        let (s, _) = api.get("/acme/jobs/ok-1").await;
        assert_eq!(s, 404, "nothing of a refused request was added");
        let (s, v) = api.get("/acme/jobs/r/waits?limit=0").await;
        assert_eq!((s, field(&v)), (400, "limit"), "{v}");
        let (s, _) = api.get("/acme/jobs/nobody/waits").await;
        assert_eq!(s, 404);
        assert_ne!(
            state_of(&api, "h1").await,
            "archived",
            "h1 has no handler: it waits"
        );
        drop(d);
    });
}
