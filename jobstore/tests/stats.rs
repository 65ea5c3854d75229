//! Timing stats on the real binary: wait and run times per jobtype, per
//! minute and per day, from local runs and a remote worker, read over HTTP
//! and with `jobstore stats --history`; kept across a restart; bad input.
//! On SQLite and (required in CI) PostgreSQL and Redis.

mod support;

use std::time::Duration;

use rstest::rstest;
use serde_json::{Value, json};
use support::admin::*;
use support::*;

const WAIT: Duration = Duration::from_secs(60);

fn runner(store: Option<&str>) -> Start<'_> {
    admin_runner(store).arg("--stats-every").arg("200ms")
}

/// The one bucket of `jobtype` in a stats history, if any.
fn bucket<'a>(history: &'a Value, jobtype: &str) -> Option<&'a Value> {
    let jt = history["jobtypes"]
        .as_array()?
        .iter()
        .find(|j| j["type"] == jobtype)?;
    let buckets = jt["buckets"].as_array()?;
    // The runs of a test fit in one day, and usually in one minute; sum
    // the minutes when they straddle one.
    (buckets.len() == 1).then(|| &buckets[0])
}

/// Summed over every bucket of `jobtype`: (wait count, run count, run sum).
fn totals(history: &Value, jobtype: &str) -> (u64, u64, u64) {
    let mut t = (0, 0, 0);
    for jt in history["jobtypes"].as_array().into_iter().flatten() {
        if jt["type"] != jobtype {
            continue;
        }
        for b in jt["buckets"].as_array().into_iter().flatten() {
            t.0 += b["wait"]["count"].as_u64().unwrap();
            t.1 += b["run"]["count"].as_u64().unwrap();
            t.2 += b["run"]["sum_ms"].as_u64().unwrap();
        }
    }
    t
}

/// Jobs that run about 300 ms and a job that waited for a scheduled time
/// show in the stats with their counts and times; a remote worker's run
/// counts too; the CLI prints them; a restarted daemon still reads them.
#[rstest]
#[case::sqlite("sqlite")]
#[case::postgres("postgres")]
#[case::redis("redis")]
fn wait_and_run_times_per_jobtype(#[case] backend: &'static str) {
    block_on(async {
        let Some(be) = Backend::new(backend).await else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let mut d = DaemonProc::start(dir.path(), &runner(be.url.as_deref()));
        let api = Api::new(&d.url);
        api.handler(
            "resize",
            json!({"method": "process", "body": "sleep 0.3; echo resized"}),
        )
        .await;
        let payloads: Vec<String> = (0..4).map(|n| n.to_string()).collect();
        api.add("resize", "", &payloads).await;
        // A remote worker's job: handed out, held 400 ms, finished.
        api.handler("pull", json!({"method": "remote", "body": ""}))
            .await;
        let id = api.add("pull", "", &["x".to_owned()]).await.remove(0);
        let (s, got) = api
            .post("/acme/job/pull/get?worker=w1&wait=5000", json!({}))
            .await;
        assert_eq!(s, 200, "{got}");
        let lease = got["lease"].as_str().unwrap().to_owned();
        tokio::time::sleep(Duration::from_millis(400)).await;
        let (s, v) = api
            .post(
                "/acme/jobs/finish",
                json!({"lease": lease, "jobs": [{"id": id, "status": 200, "output": "ok"}]}),
            )
            .await;
        assert_eq!(s, 200, "{v}");

        let minutes = eventually(WAIT, "the runs in the minute stats", || async {
            let (s, v) = api.get("/acme/stats/history?resolution=minute").await;
            assert_eq!(s, 200, "{v}");
            let (waits, runs, _) = totals(&v, "resize");
            (waits == 4 && runs == 4 && totals(&v, "pull").1 == 1).then_some(v)
        })
        .await;
        assert_eq!(minutes["resolution"], "minute");
        assert_eq!(minutes["bucket_ms"], 60_000);
        assert_eq!(minutes["bounds_ms"].as_array().unwrap().len(), 16);
        let (_, _, run_sum) = totals(&minutes, "resize");
        assert!(
            (4 * 300..4 * 10_000).contains(&run_sum),
            "four runs of about 300 ms: {run_sum} ms"
        );
        let (_, pulled, pull_ms) = totals(&minutes, "pull");
        assert_eq!(pulled, 1);
        assert!(pull_ms >= 400, "the remote run took {pull_ms} ms");

        let days = api.get("/acme/stats/history").await.1;
        assert_eq!(days["resolution"], "day", "{days}");
        let day = bucket(&days, "resize").expect("one day bucket");
        assert_eq!(day["wait"]["count"], 4);
        assert_eq!(day["run"]["count"], 4);
        let histogram: u64 = day["run"]["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_u64().unwrap())
            .sum();
        assert_eq!(histogram, 4, "{day}");
        assert!(day["run"]["mean_ms"].as_f64().unwrap() >= 300.0, "{day}");
        assert!(day["run"]["stddev_ms"].as_f64().is_some(), "{day}");
        let only = api.get("/acme/stats/history?type=pull").await.1;
        let types: Vec<&Value> = only["jobtypes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| &j["type"])
            .collect();
        assert_eq!(types, vec!["pull"], "{only}");

        // The command line: a table per day and per minute, and JSON.
        let out = cli(&d.url, &["stats", "acme", "--history"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        assert!(
            text.contains("resize") && text.contains("run mean") && text.contains("day"),
            "{text}"
        );
        let out = cli(
            &d.url,
            &["stats", "acme", "--history", "minute", "--type", "resize"],
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("minute") && !text.contains("pull"), "{text}");
        let v = cli_json(&d.url, &["stats", "acme", "--history"]);
        assert_eq!(totals(&v, "resize").1, 4, "{v}");

        // A scheduled job's wait counts from its due time, not its add.
        let due = jobstore_api::now_millis() + 1_500;
        api.add("resize", &format!("run_at={due}"), &["late".to_owned()])
            .await;
        let v = eventually(WAIT, "the scheduled job's wait", || async {
            let v = api.get("/acme/stats/history?resolution=minute").await.1;
            (totals(&v, "resize").0 == 5).then_some(v)
        })
        .await;
        let wait_max: u64 = v["jobtypes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|j| j["type"] == "resize")
            .flat_map(|j| j["buckets"].as_array().unwrap())
            .map(|b| b["wait"]["sum_ms"].as_u64().unwrap())
            .sum();
        assert!(wait_max < 5 * 1_500, "waits count from due times: {v}");

        // A restart loses nothing sent.
        assert!(d.terminate().success());
        let d = DaemonProc::start(dir.path(), &runner(be.url.as_deref()));
        let api = Api::new(&d.url);
        let v = api.get("/acme/stats/history?resolution=minute").await.1;
        assert_eq!(totals(&v, "resize").1, 5, "{v}");
        let (s, v) = api.get("/other/stats/history").await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["jobtypes"], json!([]), "another client sees none: {v}");
    });
}

/// Bad input names the field; nothing is read.
#[test]
fn bad_stats_input_names_the_field() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let d = DaemonProc::start(dir.path(), &runner(None));
        let api = Api::new(&d.url);
        for (query, field) in [
            ("resolution=hour", "resolution"),
            ("type=a%20b", "type"),
            ("type=,", "type"),
            ("color=red", ""),
        ] {
            let (s, v) = api.get(&format!("/acme/stats/history?{query}")).await;
            assert_eq!(s, 400, "{query}: {v}");
            if !field.is_empty() {
                assert_eq!(v["error"]["field"], field, "{query}: {v}");
            }
        }
        let out = cli(&d.url, &["stats", "--history"]);
        assert!(!out.status.success(), "--history needs a client");
        let bad = DaemonProc::try_start(
            &dir.path().join("zero"),
            &runner(None).arg("--stats-every").arg("0s"),
        );
        assert!(bad.is_err(), "--stats-every 0s is refused");
    });
}
