//! Repeating jobs on the real binary: a job added with a per-second rule
//! runs again and again, each run handing the next its payload (`U:`
//! lines) and leaving its result and a `repeated` event; a failed run
//! archives it and it stops; a `FINISHED` rule counts from the run's end
//! in the rule's zone; a remote worker's finish passes `data` on; the
//! command line's `--repeat`; and bad rules answered with a 400 naming the
//! field, nothing added. On the embedded SQLite store, and in CI on
//! PostgreSQL and Redis too.

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

fn repeated(job: &Value) -> Vec<Value> {
    job["history"]
        .as_array()
        .map(|h| {
            h.iter()
                .filter(|e| e["event"] == "repeated")
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

#[rstest]
#[case::sqlite("sqlite")]
#[case::postgres("postgres")]
#[case::redis("redis")]
#[test]
fn repeating_jobs_run_again_with_the_payload_their_run_left(#[case] backend: &'static str) {
    block_on(async {
        let Some(be) = Backend::new(backend).await else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let d = DaemonProc::start(dir.path(), &admin_runner(be.url.as_deref()));
        let api = Api::new(&d.url);

        // Each run reads its counter, says so, and leaves the next one.
        api.handler(
            "tick",
            json!({"method": "process",
                   "body": "read n; echo \"ran $n\"; echo \"U: $((n+1))\""}),
        )
        .await;
        let (s, v) = add_json(
            &api,
            "tick",
            json!([{"id": "counter", "data": "1", "repeat": {"rule": "* * * * * *"}}]),
        )
        .await;
        assert_eq!((s, ids(&v)), (200, vec!["counter".to_owned()]), "{v}");
        let job = eventually(WAIT, "three runs of the counter", || async {
            let job = api.job("counter").await;
            (repeated(&job).len() >= 3).then_some(job)
        })
        .await;
        assert_eq!(
            job["repeat"],
            json!({"rule": "* * * * * *", "time_zone": "UTC"})
        );
        assert_ne!(job["state"], "archived", "{job}");
        let runs = repeated(&job);
        let n: u64 = job["data"].as_str().unwrap().parse().unwrap();
        assert!(n >= 4, "the payload counts the runs: {job}");
        for (i, e) in runs.iter().enumerate() {
            assert_eq!(
                (&e["code"], &e["status"]),
                (&json!("ok"), &json!(200)),
                "{e}"
            );
            let (at, next) = (e["at"].as_i64().unwrap(), e["next_ms"].as_i64().unwrap());
            assert!(next > at && next <= at + 1_000, "next second: {e}");
            if let Some(later) = runs.get(i + 1) {
                assert!(later["at"].as_i64().unwrap() >= next, "not before its time");
            }
        }
        // Its last result while it waits for the next run.
        let out = job["result"]["output"].as_str().unwrap_or("");
        assert!(out.starts_with("ran "), "{job}");
        assert_eq!(
            api.archived_count("tick", "ok").await,
            0,
            "a repeat is never archived"
        );

        // A run that fails archives it: the rule stops.
        api.handler(
            "flaky",
            json!({"method": "process",
                   "body": "read n; if [ \"$n\" = 2 ]; then echo 'S: 404'; fi; echo \"U: $((n+1))\""}),
        )
        .await;
        add_json(
            &api,
            "flaky",
            json!([{"id": "once", "data": "1", "repeat": {"rule": "* * * * * *"}}]),
        )
        .await;
        let job = eventually(WAIT, "the failed run archived", || async {
            let job = api.job("once").await;
            (job["state"] == "archived").then_some(job)
        })
        .await;
        assert_eq!(job["result"]["code"], "failed", "{job}");
        assert_eq!(job["data"], "2", "a failed run leaves no payload: {job}");
        assert_eq!(repeated(&job).len(), 1, "{job}");
        assert_eq!(
            job["repeat"]["rule"], "* * * * * *",
            "the rule stays on the record"
        );

        // FINISHED counts from the run's end; a zone is kept.
        api.handler("later", json!({"method": "process", "body": "cat"}))
            .await;
        add_json(
            &api,
            "later",
            json!([{"id": "hourly", "data": "x",
                    "repeat": {"rule": "FINISHED, +1 HOUR", "time_zone": "Europe/Paris"}}]),
        )
        .await;
        let job = eventually(WAIT, "the FINISHED job ran once", || async {
            let job = api.job("hourly").await;
            (repeated(&job).len() == 1 && job["state"] == "scheduled").then_some(job)
        })
        .await;
        let e = &repeated(&job)[0];
        // The hour counts from the run's end, a moment before the release
        // the event is stamped with.
        let gap = e["next_ms"].as_i64().unwrap() - e["at"].as_i64().unwrap();
        assert!((3_595_000..=3_600_000).contains(&gap), "{e}");
        assert_eq!(job["run_at"], e["next_ms"], "{job}");
        assert_eq!(job["attempts"], 0, "each run starts its attempts again");
        assert_eq!(job["repeat"]["time_zone"], "Europe/Paris");

        // A remote worker's finish passes the next run's payload on.
        let (s, v) = api
            .post(
                "/acme/handler/add/pull/add",
                json!({"method": "remote", "body": ""}),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        add_json(
            &api,
            "pull",
            json!([{"id": "remote", "data": "v1", "repeat": {"rule": "* * * * * *"}}]),
        )
        .await;
        let fetched = eventually(WAIT, "a worker gets the job", || async {
            let (s, v) = api
                .post("/acme/job/pull/get?worker=w&wait=500", json!(null))
                .await;
            (s == 200 && v["jobs"].as_array().is_some_and(|j| !j.is_empty())).then_some(v)
        })
        .await;
        let lease = fetched["lease"].as_str().unwrap();
        assert_eq!(fetched["jobs"][0]["data"], "v1", "{fetched}");
        let (s, v) = api
            .post(
                "/acme/jobs/finish",
                json!({"lease": lease, "jobs": [{"id": "remote", "status": 200,
                        "output": "done", "data": {"v": 2}}]}),
            )
            .await;
        assert_eq!((s, &v["finished"]), (200, &json!(["remote"])), "{v}");
        let job = api.job("remote").await;
        assert_eq!(job["data"], "{\"v\":2}", "{job}");
        assert_ne!(job["state"], "archived");
        assert_eq!(repeated(&job).len(), 1, "{job}");
        let (s, v) = api
            .post(
                "/acme/jobs/finish",
                json!({"lease": lease, "jobs": [{"id": "remote", "status": 200,
                        "data": "a", "data_base64": "YQ=="}]}),
            )
            .await;
        assert_eq!((s, field(&v)), (400, "data"), "{v}");

        // The command line.
        let added = cli_json(
            &d.url,
            &[
                "add",
                "acme",
                "report",
                "--repeat",
                "0 6 * * MON",
                "--repeat-tz",
                "Europe/Paris",
                "payload",
            ],
        );
        let id = added["ids"][0].as_str().unwrap();
        let job = eventually(WAIT, "the CLI's job stored", || async {
            let job = api.job(id).await;
            (job["state"] == "waiting").then_some(job)
        })
        .await;
        assert_eq!(
            job["repeat"],
            json!({"rule": "0 6 * * MON", "time_zone": "Europe/Paris"})
        );
        let out = cli(&d.url, &["job", "acme", id]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("0 6 * * MON (Europe/Paris)"), "{text}");
        let out = cli(
            &d.url,
            &["add", "acme", "report", "--repeat-tz", "UTC", "x"],
        );
        assert!(!out.status.success(), "--repeat-tz without --repeat");

        // Bad rules: a 400 naming the field, nothing of the request added.
        let bad = [
            (json!({"rule": ""}), "repeat.rule"),
            (json!({"rule": "61 * * * *"}), "repeat.rule"),
            (json!({"rule": "0 0 30 2 *"}), "repeat.rule"),
            (json!({"rule": "SCHEDULED, -1 HOUR"}), "repeat.rule"),
            (json!({"rule": "x".repeat(257)}), "repeat.rule"),
            (
                json!({"rule": "HOURLY", "time_zone": "Mars/Olympus"}),
                "repeat.time_zone",
            ),
            (
                json!({"rule": "HOURLY", "time_zone": "Europe Paris"}),
                "repeat.time_zone",
            ),
            (json!({"rule": "TZ=Europe/Paris HOURLY"}), "repeat.rule"),
            (json!({"every": "hour"}), ""),
        ];
        for (rule, want) in bad {
            let (s, v) = add_json(
                &api,
                "bad",
                json!([{"id": "fine", "data": "ok"}, {"data": "x", "repeat": rule}]),
            )
            .await;
            assert_eq!(s, 400, "{rule}: {v}");
            if !want.is_empty() {
                assert_eq!(field(&v), want, "{rule}: {v}");
            }
        }
        for (query, want) in [("repeat=nope", "repeat"), ("repeat_tz=UTC", "repeat")] {
            let (s, v) = json(
                http()
                    .post(format!("{}/acme/job/bad/add?{query}", d.url))
                    .bearer_auth(ADMIN)
                    .body("x"),
            )
            .await;
            assert_eq!((s, field(&v)), (400, want), "{query}: {v}");
        }
        let (s, _) = api.get("/acme/jobs/fine").await;
        assert_eq!(s, 404, "nothing of a refused request was added");
        drop(d);
    });
}
