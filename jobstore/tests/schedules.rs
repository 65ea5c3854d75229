//! Schedules on the real binary: three daemons on one store fire a
//! per-second schedule, one is killed and restarted, then all three stop
//! and start again; every slot gets exactly one job, none is skipped and
//! none doubled (SQLite file, and in CI PostgreSQL and Redis). And the
//! command line: set (with its next slots), list, show, pause, resume,
//! trigger, delete, bad input naming the field, and a scheduled job that
//! runs.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use jobstore_api::{JobQuery, JobState, JobStore, Millis, now_millis};
use jobstore_daemon::schedules::rule::rfc3339;
use rstest::rstest;
use serde_json::{Value, json};
use support::admin::*;
use support::*;

const SEC: Millis = 1_000;

async fn put(url: &str, path: &str, body: Value) -> (u16, Value) {
    json(
        http()
            .put(format!("{url}{path}"))
            .bearer_auth(ADMIN)
            .json(&body),
    )
    .await
}

/// Every id of `jobtype`'s waiting and scheduled jobs.
async fn job_ids(store: &dyn JobStore, jobtype: &str) -> Vec<String> {
    let mut out = Vec::new();
    for state in [JobState::Waiting, JobState::Scheduled] {
        let mut q = JobQuery::new(state).jobtypes([jobtype]).limit(1_000);
        loop {
            let page = store.list_jobs(&q, now_millis()).await.unwrap();
            out.extend(page.jobs.iter().map(|j| j.id.clone()));
            match page.next {
                Some(c) => q = q.after(Some(c)),
                None => break,
            }
        }
    }
    out
}

fn daemon(dir: &std::path::Path, store: Option<&str>) -> DaemonProc {
    DaemonProc::start(
        dir,
        &admin_runner(store)
            .arg("--no-execute")
            .arg("--schedule-tick")
            .arg("300ms"),
    )
}

/// Three daemons, one per-second schedule with catch-up `all`: daemon 0 is
/// SIGKILLed after 6 s and started again 4 s later; at 16 s all three stop
/// for 5 s, then start again. Every second from the first slot to the
/// watermark has exactly one job, the schedule counts each fired once and
/// none skipped, and no job of the jobtype is anything but a slot.
#[rstest]
#[case::sqlite("sqlite")]
#[case::postgres("postgres")]
#[case::redis("redis")]
fn three_daemons_fire_every_slot_once_through_a_kill_and_an_outage(#[case] backend: &'static str) {
    block_on(async {
        let Some(be) = Backend::new(backend).await else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        // SQLite: one file that the three daemons share.
        let url = match &be.url {
            Some(u) => u.clone(),
            None => format!("sqlite://{}", dir.path().join("shared.db").display()),
        };
        let dirs: Vec<_> = (0..3).map(|i| dir.path().join(format!("d{i}"))).collect();
        let mut daemons: Vec<DaemonProc> = dirs.iter().map(|d| daemon(d, Some(&url))).collect();
        let set_at = now_millis();
        let (s, v) = put(
            &daemons[1].url,
            "/acme/schedules/tick",
            json!({"rule": "* * * * * *", "type": "tick", "catch_up": "all", "catch_up_window_ms": 600_000}),
        )
        .await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["next"].as_array().unwrap().len(), 5, "{v}");
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        tokio::time::sleep_until(at(6).into()).await;
        daemons[0].kill9();
        tokio::time::sleep_until(at(10).into()).await;
        daemons[0] = daemon(&dirs[0], Some(&url));
        tokio::time::sleep_until(at(16).into()).await;
        for d in &mut daemons {
            d.terminate();
        }
        tokio::time::sleep_until(at(21).into()).await;
        let down_until = now_millis();
        daemons = dirs.iter().map(|d| daemon(d, Some(&url))).collect();
        // Caught up: the watermark passes the end of the outage.
        let store = jobstore_daemon::factory::open(Some(&url), &dir.path().join("reader"))
            .await
            .expect("open the shared store");
        let rec = eventually(Duration::from_secs(30), "the schedule caught up", || {
            let store = store.clone();
            async move {
                let rec = store.get_schedule("acme-tick").await.unwrap().unwrap();
                (rec.fired_through.unwrap_or(0) > down_until + 2 * SEC).then_some(rec)
            }
        })
        .await;
        for d in &mut daemons {
            d.terminate();
        }
        let through = rec.fired_through.unwrap();
        // The first slot is the first second after the schedule was created
        // (by the daemon, a moment after `set_at`).
        assert!(rec.created_dt >= set_at);
        let first = (rec.created_dt / SEC + 1) * SEC;
        let want: BTreeSet<String> = (0..)
            .map(|i| first + i * SEC)
            .take_while(|&t| t <= through)
            .map(|t| format!("acme-tick@{}", rfc3339(t)))
            .collect();
        let ids = job_ids(&*store, "acme-tick").await;
        let all: BTreeSet<String> = ids.iter().cloned().collect();
        assert_eq!(all.len(), ids.len(), "an id listed twice");
        let upto: BTreeSet<String> = all
            .iter()
            .filter(|id| {
                let t = id.trim_start_matches("acme-tick@");
                want.contains(*id) || t > rfc3339(through).as_str()
            })
            .cloned()
            .collect();
        assert_eq!(upto, all, "jobs that are no slot of the schedule");
        let missing: Vec<&String> = want.difference(&all).collect();
        assert!(missing.is_empty(), "slots without a job: {missing:?}");
        assert_eq!(rec.fired, want.len() as u64, "each slot counted fired once");
        assert_eq!(rec.skipped, 0);
        report(format!(
            "{backend}: {} slots over {:.0} s, each fired once, through a SIGKILL and an outage of all three daemons",
            want.len(),
            (through - first) as f64 / 1000.0
        ));
    });
}

/// The command line and the API on one daemon (embedded SQLite): a
/// schedule is set with its next five slots shown, listed, shown, paused
/// and resumed, triggered, deleted; bad input is a 400 naming the field
/// and stores nothing; a per-second schedule's job runs and is archived ok.
#[test]
fn schedules_from_the_command_line() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let d = DaemonProc::start(
            dir.path(),
            &admin_runner(None).arg("--schedule-tick").arg("200ms"),
        );
        let set = cli_json(
            &d.url,
            &[
                "schedule",
                "set",
                "acme",
                "nightly",
                "--rule",
                "0 6 * * *",
                "--time-zone",
                "Europe/Berlin",
                "--type",
                "report",
                "--data",
                "full",
                "--catch-up",
                "none",
            ],
        );
        assert_eq!(set["name"], "nightly");
        assert_eq!(set["version"], 1);
        let next: Vec<&str> = set["next"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        assert_eq!(next.len(), 5);
        // 06:00 in Berlin is 05:00 or 04:00 UTC, a day apart.
        for t in &next {
            assert!(
                t.ends_with(":00:00Z") && (t.contains("T05:") || t.contains("T04:")),
                "{next:?}"
            );
        }
        let table = cli(&d.url, &["schedule", "show", "acme", "nightly"]);
        let text = String::from_utf8_lossy(&table.stdout);
        assert!(
            table.status.success() && text.contains("Europe/Berlin") && text.contains(next[0]),
            "{text}"
        );

        let list = cli_json(&d.url, &["schedule", "list", "acme"]);
        assert_eq!(list["schedules"].as_array().unwrap().len(), 1);
        let paused = cli_json(&d.url, &["schedule", "pause", "acme", "nightly"]);
        assert_eq!(
            (paused["paused"].as_bool(), paused["changed"].as_bool()),
            (Some(true), Some(true))
        );
        let again = cli_json(&d.url, &["schedule", "pause", "acme", "nightly"]);
        assert_eq!(again["changed"], false);
        let shown = cli_json(&d.url, &["schedule", "show", "acme", "nightly"]);
        assert_eq!(shown["paused"], true);
        let resumed = cli_json(&d.url, &["schedule", "resume", "acme", "nightly"]);
        assert_eq!(resumed["changed"], true);

        // A handler, then a trigger: its job runs now, outside the slots.
        let api = Api::new(&d.url);
        api.handler("report", json!({"method": "process", "body": "cat"}))
            .await;
        let trig = cli_json(&d.url, &["schedule", "trigger", "acme", "nightly"]);
        let id = trig["id"].as_str().unwrap().to_owned();
        assert!(id.starts_with("nightly@trigger-"), "{id}");
        let job = eventually(
            Duration::from_secs(60),
            "the triggered job archived",
            || {
                let api = &api;
                let id = id.clone();
                async move {
                    let j = api.job(&id).await;
                    (j["state"] == "archived").then_some(j)
                }
            },
        )
        .await;
        assert_eq!(job["result"]["output"], "full\n", "{job}");
        let after = cli_json(&d.url, &["schedule", "show", "acme", "nightly"]);
        assert_eq!(
            (after["fired"].as_u64(), after["fired_through"].as_i64()),
            (Some(0), None)
        );

        // A per-second schedule on the same jobtype runs on its slots.
        let (s, v) = put(
            &d.url,
            "/acme/schedules/every",
            json!({"rule": "* * * * * *", "type": "report", "data": "tick"}),
        )
        .await;
        assert_eq!(s, 200, "{v}");
        eventually(Duration::from_secs(60), "a slot's job archived ok", || {
            let api = &api;
            async move {
                let (_, rec) = api.get("/acme/schedules/every").await;
                let last = rec["last_job"].as_str()?.to_owned();
                let j = api.job(&last).await;
                (j["state"] == "archived" && j["result"]["code"] == "ok").then_some(())
            }
        })
        .await;
        let deleted = cli_json(&d.url, &["schedule", "delete", "acme", "every"]);
        assert_eq!(deleted["deleted"], true);
        let gone = cli(&d.url, &["schedule", "show", "acme", "every"]);
        assert!(!gone.status.success());

        // Bad input: a 400 naming the field; nothing stored.
        let bad = [
            (json!({"rule": "0 0 30 2 *", "type": "t"}), "rule"),
            (json!({"rule": "0 61 * * *", "type": "t"}), "rule"),
            (json!({"rule": "FINISHED, -1 DAY", "type": "t"}), "rule"),
            (
                json!({"rule": "* * * * *", "type": "t", "time_zone": "Mars/Olympus"}),
                "time_zone",
            ),
            (
                json!({"rule": "* * * * *", "type": "t", "end_at": "2001-01-01T00:00:00Z"}),
                "end_at",
            ),
            (json!({"rule": "* * * * *", "type": "no spaces"}), "type"),
            (
                json!({"rule": "* * * * *", "type": "t", "catch_up": "some"}),
                "catch_up",
            ),
            (
                json!({"rule": "* * * * *", "type": "t", "overlap": "queue"}),
                "overlap",
            ),
            (
                json!({"rule": "* * * * *", "type": "t", "data": "a", "data_base64": "YQ=="}),
                "data",
            ),
            (
                json!({"rule": "* * * * *", "type": "t", "start_at": "soon"}),
                "start_at",
            ),
        ];
        for (body, field) in bad {
            let (s, v) = put(&d.url, "/acme/schedules/bad", body.clone()).await;
            assert_eq!(s, 400, "{body}: {v}");
            assert_eq!(v["error"]["field"], field, "{body}: {v}");
        }
        let (s, v) = put(
            &d.url,
            "/acme/schedules/a%20b",
            json!({"rule": "* * * * *", "type": "t"}),
        )
        .await;
        assert_eq!(
            (s, v["error"]["field"].as_str()),
            (400, Some("name")),
            "{v}"
        );
        let (s, v) = put(
            &d.url,
            &format!("/acme/schedules/{}", "n".repeat(160)),
            json!({"rule": "* * * * *", "type": "t"}),
        )
        .await;
        assert_eq!(
            (s, v["error"]["field"].as_str()),
            (400, Some("name")),
            "{v}"
        );
        let list = cli_json(&d.url, &["schedule", "list", "acme"]);
        let names: Vec<&str> = list["schedules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["nightly"]);
    });
}
