//! Managing jobs on the real binary: find failures, fix, run again (the
//! walk-through of the README); list with filters and cursors; cancel a
//! running job (local run and remote worker); pause and resume; delete;
//! edit; bad input. On SQLite and (required in CI) PostgreSQL and Redis.

mod support;

use std::time::{Duration, Instant};

use rstest::rstest;
use serde_json::json;
use support::admin::*;
use support::*;

const WAIT: Duration = Duration::from_secs(90);

fn runner(store: Option<&str>) -> Start<'_> {
    admin_runner(store).arg("--lease").arg("3s")
}

/// The walk-through: 1,000 jobs of which 100 fail; `jobstore failures`
/// finds them as one group; the cause is fixed; `jobstore jobs retry`
/// runs them again in batches; all end ok, and their history of failure
/// was visible in between.
#[rstest]
#[case::sqlite("sqlite")]
#[case::postgres("postgres")]
#[case::redis("redis")]
fn failures_found_fixed_and_run_again(#[case] backend: &'static str) {
    block_on(async {
        let Some(be) = Backend::new(backend).await else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let fixed = dir.path().join("fixed");
        let d = DaemonProc::start(
            dir.path(),
            &runner(be.url.as_deref()).env("FIXED", fixed.to_str().unwrap()),
        );
        let api = Api::new(&d.url);
        api.handler(
            "import",
            json!({"method": "process", "body": r#"read n
if [ -f "$FIXED" ] || [ $((n % 10)) -ne 0 ]; then echo "imported $n"; else echo "S: 404"; echo "connection refused: db:5432"; fi"#}),
        )
        .await;
        let payloads: Vec<String> = (0..1000).map(|n| n.to_string()).collect();
        let ids = api.add("import", "", &payloads).await;
        assert_eq!(ids.len(), 1000);
        eventually(WAIT, "1,000 jobs archived", || async {
            let (ok, failed) = (
                api.archived_count("import", "ok").await,
                api.archived_count("import", "failed").await,
            );
            (ok + failed == 1000).then_some(())
        })
        .await;
        assert_eq!(api.archived_count("import", "failed").await, 100);

        // Found: one group of 100, with its first line and an example.
        let f = cli_json(&d.url, &["failures", "acme"]);
        assert_eq!(f["complete"], true, "{f}");
        let groups = f["groups"].as_array().unwrap();
        assert_eq!(groups.len(), 1, "{f}");
        assert_eq!(groups[0]["count"], 100);
        assert_eq!(groups[0]["message"], "connection refused: db:5432");
        assert_eq!(groups[0]["code"], "failed");
        assert_eq!(groups[0]["status"], 404);
        let example = groups[0]["example"].as_str().unwrap().to_owned();
        let table = cli(&d.url, &["failures", "acme"]);
        let text = String::from_utf8_lossy(&table.stdout);
        assert!(text.contains("connection refused: db:5432"), "{text}");
        assert!(text.contains("100 failed jobs in 1 group,"), "{text}");

        // Listed: 100 failed jobs, newest first, in pages of 30.
        let listed = cli_json(
            &d.url,
            &[
                "jobs", "list", "acme", "--state", "archived", "--code", "failed", "--limit", "30",
                "--all",
            ],
        );
        let listed = listed.as_array().unwrap();
        assert_eq!(listed.len(), 100);
        let done: Vec<i64> = listed.iter().map(|j| j["done"].as_i64().unwrap()).collect();
        assert!(done.windows(2).all(|w| w[0] >= w[1]), "newest first");
        assert!(listed.iter().all(|j| j["data"].is_null()), "no payloads");

        // Fixed; a dry run counts, then the retry runs them in batches.
        std::fs::write(&fixed, "").unwrap();
        let dry = cli_json(
            &d.url,
            &["jobs", "retry", "acme", "--code", "failed", "--dry-run"],
        );
        assert_eq!(dry["matched"], 100, "{dry}");
        assert_eq!(
            api.archived_count("import", "failed").await,
            100,
            "a dry run changes nothing"
        );
        let out = cli(
            &d.url,
            &["jobs", "retry", "acme", "--code", "failed", "--batch", "30"],
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("100 run again"), "{text}");
        // 20 ids, then how many more
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with("run again  "))
                .count(),
            21,
            "{text}"
        );
        assert!(text.contains("… and 80 more"), "{text}");
        eventually(WAIT, "every job ok", || async {
            (api.archived_count("import", "ok").await == 1000).then_some(())
        })
        .await;
        assert_eq!(api.archived_count("import", "failed").await, 0);
        let job = api.job(&example).await;
        assert_eq!(job["result"]["code"], "ok", "{job}");
        assert_eq!(job["attempts"], 1, "attempts start over: {job}");
        let f = cli_json(&d.url, &["failures", "acme"]);
        assert!(f["groups"].as_array().unwrap().is_empty(), "{f}");
    });
}

/// Cancelling a running job stops its process and archives it as
/// `cancelled` well before it would have finished; a remote worker learns
/// through its heartbeat and its late finish is refused.
#[rstest]
#[case::sqlite("sqlite")]
#[case::postgres("postgres")]
#[case::redis("redis")]
fn running_jobs_are_cancelled(#[case] backend: &'static str) {
    block_on(async {
        let Some(be) = Backend::new(backend).await else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let d = DaemonProc::start(dir.path(), &runner(be.url.as_deref()));
        let api = Api::new(&d.url);
        api.handler(
            "slow",
            json!({"method": "process", "body": "echo started; sleep 60; echo finished"}),
        )
        .await;
        let id = api.add("slow", "", &["x".to_owned()]).await.remove(0);
        eventually(WAIT, "the job runs", || async {
            (api.job(&id).await["state"] == "running").then_some(())
        })
        .await;
        let (s, running) = api.get("/acme/jobs?state=running").await;
        assert_eq!(s, 200, "{running}");
        assert_eq!(running["jobs"][0]["id"], id.as_str());
        let t = Instant::now();
        let out = cli(&d.url, &["cancel", "acme", &id]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("cancelling"), "{text}");
        assert_eq!(api.job(&id).await["cancelling"], true);
        let job = eventually(WAIT, "the cancelled run archived", || async {
            let j = api.job(&id).await;
            (j["state"] == "archived").then_some(j)
        })
        .await;
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "stopped, not waited for"
        );
        assert_eq!(job["result"]["code"], "cancelled", "{job}");
        let output = job["result"]["output"].as_str().unwrap_or_default();
        assert!(output.contains("cancelled while running"), "{job}");
        assert!(!output.contains("finished"), "{job}");

        // A remote worker.
        api.handler("pull", json!({"method": "remote", "body": ""}))
            .await;
        let id = api.add("pull", "", &["y".to_owned()]).await.remove(0);
        let (s, got) = api
            .post("/acme/job/pull/get?worker=w1&wait=5000", json!({}))
            .await;
        assert_eq!(s, 200, "{got}");
        assert_eq!(got["jobs"][0]["id"], id.as_str(), "{got}");
        let lease = got["lease"].as_str().unwrap().to_owned();
        let (s, v) = api.post("/acme/jobs/cancel", json!({"ids": [id]})).await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["cancelling"], json!([id]), "{v}");
        let (s, beat) = api
            .post("/acme/jobs/heartbeat", json!({"lease": lease, "ids": [id]}))
            .await;
        assert_eq!(s, 200, "{beat}");
        assert_eq!(beat["cancelled"], json!([id]), "{beat}");
        assert_eq!(beat["held"], json!([]), "{beat}");
        let (s, v) = api
            .post(
                "/acme/jobs/finish",
                json!({"lease": lease, "jobs": [{"id": id, "status": 200, "output": "late"}]}),
            )
            .await;
        assert_eq!(s, 409, "the late finish is refused: {v}");
        let job = api.job(&id).await;
        assert_eq!(job["result"]["code"], "cancelled", "{job}");
    });
}

/// Pause holds a jobtype on the daemon (adds land, nothing runs) until
/// resumed; delete and edit act on waiting and scheduled jobs.
#[rstest]
#[case::sqlite("sqlite")]
#[case::postgres("postgres")]
#[case::redis("redis")]
fn pause_delete_and_edit(#[case] backend: &'static str) {
    block_on(async {
        let Some(be) = Backend::new(backend).await else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let d = DaemonProc::start(dir.path(), &runner(be.url.as_deref()));
        let api = Api::new(&d.url);
        api.handler("quick", json!({"method": "process", "body": "echo ok"}))
            .await;
        let v = cli_json(&d.url, &["pause", "acme", "quick"]);
        assert_eq!(
            (v["paused"].clone(), v["changed"].clone()),
            (json!(true), json!(true))
        );
        let (_, paused) = api.get("/acme/paused").await;
        assert_eq!(paused["paused"], json!(["quick"]));
        // The counts show it, with no job yet.
        let (_, stats) = api.get("/acme/stats").await;
        assert_eq!(
            stats["jobtypes"],
            json!([{"type": "quick", "waiting": 0, "scheduled": 0, "running": 0, "blocked": 0, "archived": {}, "paused": true}])
        );
        let table = cli(&d.url, &["stats", "acme"]);
        let text = String::from_utf8_lossy(&table.stdout);
        assert!(
            text.lines()
                .any(|l| l.contains("quick") && l.contains("paused")),
            "{text}"
        );
        let held = api
            .add("quick", "", &["a".to_owned(), "b".to_owned()])
            .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        for id in &held {
            assert_eq!(api.job(id).await["state"], "waiting", "paused: not run");
        }
        let v = cli_json(&d.url, &["resume", "acme", "quick"]);
        assert_eq!(v["changed"], true);
        for id in &held {
            eventually(WAIT, "resumed jobs run", || async {
                (api.job(id).await["state"] == "archived").then_some(())
            })
            .await;
        }

        // Delete a scheduled job; edit another to run now.
        let later = api
            .add(
                "quick",
                "delay_ms=3600000",
                &["c".to_owned(), "d".to_owned()],
            )
            .await;
        for id in &later {
            eventually(WAIT, "the jobs stored", || async {
                (api.job(id).await["state"] == "scheduled").then_some(())
            })
            .await;
        }
        let out = cli(&d.url, &["jobs", "delete", "acme", &later[0]]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("1 deleted"), "{text}");
        let again = cli(&d.url, &["jobs", "delete", "acme", &later[0]]);
        assert_eq!(again.status.code(), Some(3), "nothing left to delete");
        let (s, _) = api.get(&format!("/acme/jobs/{}", later[0])).await;
        assert_eq!(s, 404, "deleted");
        let out = cli(
            &d.url,
            &[
                "jobs",
                "edit",
                "acme",
                &later[1],
                "--run-at",
                "0",
                "--priority",
                "5",
            ],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        eventually(WAIT, "the edited job runs", || async {
            (api.job(&later[1]).await["state"] == "archived").then_some(())
        })
        .await;
        assert_eq!(api.job(&later[1]).await["priority"], 5);
    });
}

/// Bad input to every management route is a 400 naming the field, and
/// nothing changes.
#[test]
fn bad_management_input_names_the_field() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let d = DaemonProc::start(dir.path(), &runner(None));
        let api = Api::new(&d.url);
        api.handler("t", json!({"method": "process", "body": "echo ok"}))
            .await;
        let ids = api
            .add("t", "delay_ms=3600000", &["a".to_owned(), "b".to_owned()])
            .await;
        // Adds reach the store from the journal: wait for both.
        let cursor = eventually(WAIT, "both jobs stored", || async {
            let (_, first) = api.get("/acme/jobs?state=scheduled&limit=1").await;
            first["next"].as_str().map(str::to_owned)
        })
        .await;
        for (path, field) in [
            ("/acme/jobs", "state"),
            ("/acme/jobs?state=done", "state"),
            ("/acme/jobs?state=archived&code=nope", "code"),
            ("/acme/jobs?state=waiting&code=failed", "code"),
            ("/acme/jobs?state=waiting&limit=1001", "limit"),
            ("/acme/jobs?state=waiting&limit=0", "limit"),
            ("/acme/jobs?state=waiting&cursor=zz", "cursor"),
            (
                &format!("/acme/jobs?state=archived&cursor={cursor}"),
                "cursor",
            ),
            (
                "/acme/jobs?state=archived&archived_from=10&archived_to=5",
                "archived",
            ),
            (
                "/acme/jobs?state=waiting&created_from=yesterday",
                "created_from",
            ),
            ("/acme/jobs?state=waiting&type=a/b", "type"),
            ("/acme/failures?scan=0", "scan"),
        ] {
            let (s, v) = api.get(path).await;
            assert_eq!(s, 400, "{path}: {v}");
            assert_eq!(v["error"]["field"], field, "{path}: {v}");
        }
        for (path, body, field) in [
            ("/acme/jobs/rerun", json!({}), "filter"),
            ("/acme/jobs/delete", json!({"dry_run": true}), "filter"),
            ("/acme/jobs/rerun", json!({"filter": {}}), "filter.state"),
            (
                "/acme/jobs/rerun",
                json!({"filter": {"state": "waiting"}}),
                "filter.state",
            ),
            (
                "/acme/jobs/delete",
                json!({"filter": {"state": "running"}}),
                "filter.state",
            ),
            (
                "/acme/jobs/cancel",
                json!({"filter": {"state": "archived"}}),
                "filter.state",
            ),
            (
                "/acme/jobs/rerun",
                json!({"ids": ids, "filter": {"state": "archived"}}),
                "filter",
            ),
            (
                "/acme/jobs/delete",
                json!({"ids": ids, "delay_ms": 5}),
                "delay_ms",
            ),
            (
                "/acme/jobs/delete",
                json!({"filter": {"state": "waiting"}, "limit": 5000}),
                "filter.limit",
            ),
            ("/acme/jobs/edit", json!({"edits": []}), "edits"),
        ] {
            let (s, v) = api.post(path, body.clone()).await;
            assert_eq!(s, 400, "{path} {body}: {v}");
            assert_eq!(v["error"]["field"], field, "{path} {body}: {v}");
        }
        let (s, v) = api
            .post("/acme/jobs/edit", json!({"edits": [{"id": ids[0]}]}))
            .await;
        assert_eq!(s, 400, "an edit that changes nothing: {v}");
        for id in &ids {
            assert_eq!(api.job(id).await["state"], "scheduled", "nothing changed");
        }
        // The command line refuses a bulk action without ids or a filter.
        let out = cli(&d.url, &["jobs", "delete", "acme"]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

/// Tags set at add (line form, JSON, the command line, `J:` lines) filter
/// lists; a job's view shows its history, event by event.
#[rstest]
#[case::sqlite("sqlite")]
#[case::postgres("postgres")]
#[case::redis("redis")]
fn tags_and_history(#[case] backend: &'static str) {
    block_on(async {
        let Some(be) = Backend::new(backend).await else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let d = DaemonProc::start(dir.path(), &runner(be.url.as_deref()));
        let api = Api::new(&d.url);
        api.handler(
            "tagged",
            json!({"method": "process", "body": r#"read what
case "$what" in
  parent) echo "J: tagged#customer-42,child|child" ;;
  bad) echo "S: 404" ;;
  *) echo fine ;;
esac"#}),
        )
        .await;
        let line = api
            .add("tagged", "tags=customer-42,eu", &["bad".to_owned()])
            .await;
        let (s, v) = api
            .post(
                "/acme/job/tagged/add",
                json!([{"data": "parent", "tags": ["customer-7"]}, {"data": "x"}]),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        let json_ids = ids(&v);
        let out = cli(
            &d.url,
            &["add", "acme", "tagged", "--tag", "customer-42", "bad"],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (s, v) = api
            .post(
                "/acme/job/tagged/add",
                json!([{"data": "x", "tags": ["a b"]}]),
            )
            .await;
        assert_eq!(
            (s, v["error"]["field"].as_str()),
            (400, Some("tags")),
            "{v}"
        );
        eventually(WAIT, "five jobs archived (with the child)", || async {
            let ok = api.archived_count("tagged", "ok").await;
            let failed = api.archived_count("tagged", "failed").await;
            (ok + failed == 5).then_some(())
        })
        .await;
        let failed_42 = cli_json(
            &d.url,
            &[
                "jobs",
                "list",
                "acme",
                "--state",
                "archived",
                "--code",
                "failed",
                "--tag",
                "customer-42",
                "--all",
            ],
        );
        assert_eq!(failed_42.as_array().unwrap().len(), 2, "{failed_42}");
        let all_42 = cli_json(
            &d.url,
            &[
                "jobs",
                "list",
                "acme",
                "--state",
                "archived",
                "--tag",
                "customer-42",
                "--all",
            ],
        );
        let all_42 = all_42.as_array().unwrap();
        assert_eq!(all_42.len(), 3, "two failed and the child: {all_42:?}");
        assert!(
            all_42
                .iter()
                .any(|j| j["tags"] == json!(["customer-42", "child"]))
        );
        let job = api.job(&line[0]).await;
        assert_eq!(job["tags"], json!(["customer-42", "eu"]));
        let events: Vec<&str> = job["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event"].as_str().unwrap())
            .collect();
        assert_eq!(events, ["added", "claimed", "archived"], "{job}");
        assert_eq!(job["history"][2]["code"], "failed");
        assert_eq!(job["history"][1]["attempt"], 1);
        assert!(
            job["history"][1]["by"]
                .as_str()
                .is_some_and(|b| !b.is_empty())
        );
        let shown = cli(&d.url, &["job", "acme", &json_ids[0]]);
        let text = String::from_utf8_lossy(&shown.stdout);
        assert!(
            text.contains("claimed by") && text.contains("customer-7"),
            "{text}"
        );
    });
}
