//! Unique keys on the real binary: a JSON add and a line-form add with a
//! key, a duplicate naming the job that holds it (with and without
//! replacing its payload), the key freed once the holder has run, a window
//! after the archive, the command line's `--unique-key`, and bad keys
//! answered with a 400 naming the field and nothing added. On the embedded
//! SQLite store, and in CI on PostgreSQL and Redis too.

mod support;

use std::time::Duration;

use rstest::rstest;
use serde_json::{Value, json};
use support::admin::*;
use support::*;

async fn add_json(api: &Api, jobtype: &str, items: Value) -> (u16, Value) {
    api.post(&format!("/acme/job/{jobtype}/add"), items).await
}

fn field(v: &Value) -> &str {
    v["error"]["field"].as_str().unwrap_or("")
}

#[rstest]
#[case::sqlite("sqlite")]
#[case::postgres("postgres")]
#[case::redis("redis")]
#[test]
fn unique_keys_over_http_and_the_command_line(#[case] backend: &'static str) {
    block_on(async {
        let Some(be) = Backend::new(backend).await else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let d = DaemonProc::start(dir.path(), &admin_runner(be.url.as_deref()));
        let api = Api::new(&d.url);

        // The holder: scheduled an hour ahead, so it stays live.
        let (s, v) = add_json(
            &api,
            "report",
            json!([{"id": "r-1", "data": "first", "delay_ms": 3_600_000,
                    "unique": {"key": "daily-2026-11-28"}}]),
        )
        .await;
        assert_eq!((s, ids(&v)), (200, vec!["r-1".to_owned()]), "{v}");
        assert!(v.get("duplicates").is_none(), "{v}");
        let job = api.job("r-1").await;
        assert_eq!(job["unique_key"], "daily-2026-11-28", "{job}");

        // A second add with the key (another id, or none): nothing added,
        // the holder named; replace_data gives the holder the payload.
        let (s, v) = add_json(
            &api,
            "report",
            json!([
                {"id": "r-2", "data": "second", "unique": {"key": "daily-2026-11-28"}},
                {"data": "third", "unique": {"key": "daily-2026-11-28", "on_conflict": "replace_data"}},
                {"id": "other-key", "data": "x", "unique": {"key": "daily-2026-11-29"}}
            ]),
        )
        .await;
        assert_eq!(s, 200, "{v}");
        let dups = v["duplicates"].as_array().unwrap();
        assert_eq!(dups.len(), 2, "{v}");
        assert_eq!(
            dups[0],
            json!({"id": "r-2", "existing": "r-1", "replaced": false})
        );
        assert_eq!(dups[1]["existing"], "r-1");
        assert_eq!(dups[1]["replaced"], true);
        assert_eq!(dups[1]["id"], ids(&v)[1]);
        let (s, _) = api.get("/acme/jobs/r-2").await;
        assert_eq!(s, 404, "nothing was added for the duplicate");
        assert_eq!(api.job("r-1").await["data"], "third");
        assert_eq!(api.job("other-key").await["unique_key"], "daily-2026-11-29");

        // The command line: the holder's id is printed for a duplicate.
        let out = cli(
            &d.url,
            &[
                "add",
                "acme",
                "report",
                "--unique-key",
                "daily-2026-11-28",
                "again",
            ],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "r-1");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("job r-1 holds the unique key"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Several lines with one key: the first is added, the rest name it.
        let added = cli_json(
            &d.url,
            &[
                "add",
                "acme",
                "mail",
                "--unique-key",
                "k",
                "--replace-data",
                "a",
                "b",
            ],
        );
        let dups = added["duplicates"].as_array().unwrap();
        assert_eq!(dups.len(), 1, "{added}");
        assert_eq!(dups[0]["existing"], added["ids"][0]);
        assert_eq!(dups[0]["replaced"], true);
        let first = added["ids"][0].as_str().unwrap();
        assert_eq!(api.job(first).await["data"], "b");

        // Bad input: a 400 naming the field, nothing added.
        let long = "k".repeat(257);
        let bad = [
            (json!({"data": "x", "unique": {"key": ""}}), "unique.key"),
            (json!({"data": "x", "unique": {"key": long}}), "unique.key"),
            (
                json!({"data": "x", "unique": {"key": "a\u{7}b"}}),
                "unique.key",
            ),
            (
                json!({"data": "x", "unique": {"key": "k", "window_ms": 3_153_600_000_001u64}}),
                "unique.window_ms",
            ),
            (
                json!({"data": "x", "unique": {"key": "k", "on_conflict": "overwrite"}}),
                "unique.on_conflict",
            ),
        ];
        for (item, want) in bad {
            let (s, v) = add_json(&api, "bad", json!([{"id": "fine", "data": "ok"}, item])).await;
            assert_eq!((s, field(&v)), (400, want), "{v}");
        }
        let (s, v) = json(
            http()
                .post(format!("{}/acme/job/bad/add?on_conflict=keep", d.url))
                .bearer_auth(ADMIN)
                .body("x"),
        )
        .await;
        assert_eq!((s, field(&v)), (400, "unique_key"), "{v}");
        let (s, _) = api.get("/acme/jobs/fine").await;
        assert_eq!(s, 404, "nothing of a refused request was added");
        let out = cli(
            &d.url,
            &["add", "acme", "bad", "--unique-window", "1h", "x"],
        );
        assert!(!out.status.success());

        // The key is freed when its job has run: a handler runs "now" jobs;
        // with a window, an add inside it names the archived job.
        api.handler("ping", json!({"method": "process", "body": "cat"}))
            .await;
        let (s, v) = add_json(
            &api,
            "ping",
            json!([{"id": "p-1", "data": "1", "unique": {"key": "once"}}]),
        )
        .await;
        assert_eq!(s, 200, "{v}");
        eventually(Duration::from_secs(60), "p-1 archived", || async {
            (api.job("p-1").await["state"] == "archived").then_some(())
        })
        .await;
        assert_eq!(api.job("p-1").await["unique_key"], "once");
        let (_, v) = add_json(
            &api,
            "ping",
            json!([{"id": "p-2", "data": "2", "unique": {"key": "once", "window_ms": 3_600_000}}]),
        )
        .await;
        assert_eq!(
            v["duplicates"],
            json!([{"id": "p-2", "existing": "p-1", "replaced": false}]),
            "inside the window"
        );
        let (_, v) = add_json(
            &api,
            "ping",
            json!([{"id": "p-3", "data": "3", "unique": {"key": "once"}}]),
        )
        .await;
        assert!(v.get("duplicates").is_none(), "the key is free: {v}");
        eventually(Duration::from_secs(60), "p-3 archived", || async {
            (api.job("p-3").await["state"] == "archived").then_some(())
        })
        .await;
        drop(d);
    });
}
