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
                json!({"data": "x", "depends_on": ["e1"], "on_dependency_failure": "wait"}),
                "on_dependency_failure",
            ),
            (json!({"data": "x", "with_outputs": true}), "with_outputs"),
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

/// `hold`: a failed dependency keeps its waiter blocked (`held` in its
/// waits) until the dependency is run again and ends ok; the waiter's run
/// reads its dependencies in `JOBSTORE_WAITED`, with their outputs when
/// added `with_outputs`; an operator unblocks a held job over HTTP and
/// with `jobstore jobs unblock`, and a remote worker's fetch carries
/// `waited`.
#[rstest]
#[case::sqlite("sqlite")]
#[case::postgres("postgres")]
#[case::redis("redis")]
#[test]
fn held_dependencies_wait_for_an_operator(#[case] backend: &'static str) {
    block_on(async {
        let Some(be) = Backend::new(backend).await else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let d = DaemonProc::start(dir.path(), &admin_runner(be.url.as_deref()));
        let api = Api::new(&d.url);

        // `step` fails while its payload is "bad", else prints its payload.
        api.handler(
            "step",
            json!({"method": "process", "body": "read p; if [ \"$p\" = bad ]; then echo 'S: 404'; else echo \"made $p\"; fi"}),
        )
        .await;
        add_json(
            &api,
            "step",
            json!([{"id": "s1", "data": "one"}, {"id": "s2", "data": "bad"}]),
        )
        .await;
        archived(&api, "s1").await;
        let s2 = archived(&api, "s2").await;
        assert_eq!(s2["result"]["code"], "failed", "{s2}");
        let (s, v) = add_json(
            &api,
            "join",
            json!([{"id": "j", "data": "", "depends_on": ["s1", "s2"],
                    "on_dependency_failure": "hold", "with_outputs": true}]),
        )
        .await;
        assert_eq!(s, 200, "{v}");
        let job = api.job("j").await;
        assert_eq!(
            (job["state"].as_str(), job["on_dependency_failure"].as_str()),
            (Some("blocked"), Some("hold")),
            "{job}"
        );
        let (_, w) = api.get("/acme/jobs/j/waits").await;
        assert_eq!(
            (w["held"].as_u64(), w["pending"].as_u64()),
            (Some(1), Some(0)),
            "{w}"
        );
        assert_eq!(
            w["jobs"][1],
            json!({"id": "s2", "state": "held", "code": "failed", "status": 404})
        );

        // The join's run prints what it was handed.
        api.handler(
            "join",
            json!({"method": "process", "body": "printf '%s\\n' \"$JOBSTORE_WAITED\""}),
        )
        .await;
        // Run again (due in a while), its payload fixed: s2 ends ok, and
        // j runs.
        let (s, v) = api
            .post(
                "/acme/jobs/rerun",
                json!({"ids": ["s2"], "delay_ms": 60_000}),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        let (s, v) = api
            .post(
                "/acme/jobs/edit",
                json!({"edits": [{"id": "s2", "data": "two", "run_at": "0"}]}),
            )
            .await;
        assert_eq!((s, v["edited"].clone()), (200, json!(["s2"])), "{v}");
        let job = archived(&api, "j").await;
        assert_eq!(job["result"]["code"], "ok", "{job}");
        let out = job["result"]["output"].as_str().unwrap_or("");
        let waited: Value =
            serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out:?}"));
        assert_eq!(waited["counts"]["done"]["ok"], 2, "{waited}");
        assert_eq!(waited["jobs"][1]["output"], "made two\n", "{waited}");
        assert_eq!(waited["jobs"][0]["id"], "s1", "{waited}");
        assert_eq!(waited["jobs"][0]["output"], "made one\n", "{waited}");
        assert_eq!(waited["more"], false);
        let (s, w) = api.get("/acme/jobs/j/waits?with_outputs=true").await;
        assert_eq!(s, 200, "{w}");
        assert_eq!(w["jobs"][0]["output"], "made one\n", "{w}");
        let (_, w) = api.get("/acme/jobs/j/waits").await;
        assert!(w["jobs"][0].get("output").is_none(), "{w}");

        // Held for good (its dependency deleted): the operator unblocks it.
        add_json(
            &api,
            "idle",
            json!([{"id": "x", "data": "", "delay_ms": 3_600_000}]),
        )
        .await;
        add_json(
            &api,
            "join2",
            json!([{"id": "k", "data": "", "depends_on": ["x"], "on_dependency_failure": "hold"}]),
        )
        .await;
        let (s, v) = api.post("/acme/jobs/cancel", json!({"ids": ["x"]})).await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["cancelled"], json!(["x"]), "scheduled: archived at once");
        let (_, w) = api.get("/acme/jobs/k/waits").await;
        assert_eq!(w["jobs"][0]["state"], "held", "{w}");
        let (s, v) = api
            .post(
                "/acme/jobs/unblock",
                json!({"filter": {"state": "waiting"}}),
            )
            .await;
        assert_eq!((s, field(&v)), (400, "filter.state"), "{v}");
        let (s, v) = api
            .post("/acme/jobs/unblock", json!({"ids": ["k", "j"]}))
            .await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(
            (v["done"].clone(), v["not_done"].clone()),
            (json!(["k"]), json!(["j"])),
            "{v}"
        );
        let (_, w) = api.get("/acme/jobs/k/waits").await;
        assert_eq!(
            (w["skipped"].as_u64(), w["jobs"][0]["state"].as_str()),
            (Some(1), Some("skipped")),
            "{w}"
        );
        // Free now (join2 has no handler: it is handed out, and waits for
        // one, so waiting, running or scheduled for its retry).
        assert_ne!(state_of(&api, "k").await, "blocked");

        // The command line: --on-dependency-failure hold, then unblock.
        let added = cli_json(
            &d.url,
            &[
                "add",
                "acme",
                "join2",
                "--depends-on",
                "x",
                "--on-dependency-failure",
                "hold",
                "--with-outputs",
                "payload",
            ],
        );
        let id = added["ids"][0].as_str().unwrap().to_owned();
        let job = eventually(WAIT, "the CLI's job stored", || async {
            let job = api.job(&id).await;
            (job["state"] == "blocked").then_some(job)
        })
        .await;
        assert_eq!(job["on_dependency_failure"], "hold", "{job}");
        let out = cli(&d.url, &["jobs", "unblock", "acme", "--type", "join2"]);
        assert!(out.status.success(), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("unblocked"),
            "{out:?}"
        );
        assert_ne!(state_of(&api, &id).await, "blocked");

        // A remote worker's fetch carries `waited`.
        api.handler("rjoin", json!({"method": "remote", "body": ""}))
            .await;
        add_json(
            &api,
            "rjoin",
            json!([{"id": "rw", "data": "", "depends_on": ["s1"]}]),
        )
        .await;
        let (s, v) = api
            .post("/acme/job/rjoin/get?max=1&wait=2000&worker=w1", json!({}))
            .await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["jobs"][0]["id"], "rw", "{v}");
        assert_eq!(
            v["jobs"][0]["waited"]["jobs"][0],
            json!({"id": "s1", "state": "done", "code": "ok", "status": 200}),
            "{v}"
        );
    })
}
