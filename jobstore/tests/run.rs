//! End to end, execution side: handlers run jobs on the real binary, on
//! SQLite and (required in CI) PostgreSQL and Redis.

mod support;

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use rstest::rstest;
use serde_json::{Value, json};
use support::*;

const ADMIN: &str = "admin-token-for-tests";
const WAIT: Duration = Duration::from_secs(60);

/// A daemon that runs process handlers set by the admin, with short
/// backoffs and polls so tests do not wait.
fn runner(store: Option<&str>) -> Start<'_> {
    Start::store(store)
        .env("JOBSTORE_ADMIN_TOKEN", ADMIN)
        .arg("--allow-process-handlers")
        .arg("--backoff-base")
        .arg("50ms")
        .arg("--backoff-max")
        .arg("200ms")
        .arg("--poll")
        .arg("200ms")
}

/// [`runner`] as one of several daemons on a shared store: sysid `name`,
/// with the path handlers append their runs to in `$RAN`.
fn node<'a>(store: &'a str, ran: &Path, name: &str) -> Start<'a> {
    runner(Some(store))
        .env("RAN", ran.to_str().unwrap())
        .arg("--sysid")
        .arg(name)
}

struct Api {
    c: reqwest::Client,
    url: String,
}

impl Api {
    fn new(url: &str) -> Api {
        Api {
            c: http(),
            url: url.to_owned(),
        }
    }

    async fn handler(&self, client: &str, jobtype: &str, spec: Value) {
        let (s, v) = json(
            self.c
                .post(format!("{}/{client}/handler/add/{jobtype}/add", self.url))
                .bearer_auth(ADMIN)
                .json(&spec),
        )
        .await;
        assert_eq!(s, 200, "set handler: {v}");
    }

    async fn add(&self, client: &str, jobtype: &str, payloads: &[&str]) -> Vec<String> {
        let (s, v) = json(
            self.c
                .post(format!("{}/{client}/job/{jobtype}/add", self.url))
                .bearer_auth(ADMIN)
                .body(payloads.join("\n")),
        )
        .await;
        assert_eq!(s, 200, "add: {v}");
        ids(&v)
    }

    async fn job(&self, client: &str, id: &str) -> Value {
        let (s, v) = json(
            self.c
                .get(format!("{}/{client}/jobs/{id}", self.url))
                .bearer_auth(ADMIN),
        )
        .await;
        assert!(s == 200 || s == 404, "get job: {v}");
        v
    }

    /// Waits until every job is archived; returns them.
    async fn archived(&self, client: &str, ids: &[String]) -> Vec<Value> {
        let mut out = Vec::new();
        for id in ids {
            out.push(
                eventually(WAIT, &format!("job {id} archived"), || async {
                    let v = self.job(client, id).await;
                    (v["state"] == "archived").then_some(v)
                })
                .await,
            );
        }
        out
    }

    async fn stats(&self, client: &str) -> Value {
        json(
            self.c
                .get(format!("{}/{client}/stats", self.url))
                .bearer_auth(ADMIN),
        )
        .await
        .1
    }
}

fn archived_count(stats: &Value, jobtype: &str, code: &str) -> u64 {
    stats["jobtypes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["type"] == jobtype)
        .and_then(|j| j["archived"][code].as_u64())
        .unwrap_or(0)
}

/// `J:` chains run to their end; every status class ends as specified;
/// a run past its time limit is killed and retried; a client's `J:` lines
/// make jobs of that client only.
#[rstest]
#[case::sqlite("sqlite")]
#[case::postgres("postgres")]
#[case::redis("redis")]
fn handlers_run_jobs_to_their_end(#[case] backend: &'static str) {
    block_on(async {
        let Some(be) = Backend::new(backend).await else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let d = DaemonProc::start(dir.path(), &runner(be.url.as_deref()));
        let api = Api::new(&d.url);

        // A chain: N asks for N-1, down to 0.
        api.handler(
            "acme",
            "chain",
            json!({"method": "process", "body": r#"read n; echo "at $n"; if [ "$n" -gt 0 ]; then echo "J: chain|$((n - 1))"; fi"#}),
        )
        .await;
        // Status classes.
        api.handler(
            "acme",
            "status",
            json!({
                "method": "process",
                "body": r#"read what
case "$what" in
  ok) echo fine ;;
  failed) echo "S: 404"; echo "no such thing" ;;
  flaky) if [ "$JOBSTORE_ATTEMPT" -lt 2 ]; then echo "S: 102"; else echo "second time lucky"; fi ;;
  broken) echo "always broken" >&2; exit 3 ;;
  slow) if [ "$JOBSTORE_ATTEMPT" -lt 2 ]; then sleep 30; fi; echo "fast the second time" ;;
esac"#,
                "limits": {"max_attempts": 3, "time_limit_ms": 700}
            }),
        )
        .await;
        // A J: line can only name this client's jobtypes.
        api.handler(
            "acme",
            "sneaky",
            json!({"method": "process", "body": "echo 'J: globex-report|stolen'; echo 'J: ../etc|x'; echo 'J: report|mine'"}),
        )
        .await;

        let chain = api.add("acme", "chain", &["5"]).await;
        let status = api
            .add(
                "acme",
                "status",
                &["ok", "failed", "flaky", "broken", "slow"],
            )
            .await;
        let sneaky = api.add("acme", "sneaky", &["go"]).await;

        let done = api.archived("acme", &status).await;
        let by: HashMap<&str, &Value> = ["ok", "failed", "flaky", "broken", "slow"]
            .into_iter()
            .zip(&done)
            .collect();
        assert_eq!(by["ok"]["result"]["code"], "ok");
        assert_eq!(by["ok"]["result"]["status"], 200);
        assert_eq!(by["ok"]["result"]["output"], "fine\n");
        assert_eq!(by["failed"]["result"]["code"], "failed");
        assert_eq!(by["failed"]["result"]["status"], 404);
        assert_eq!(by["failed"]["attempts"], 1, "failed is not retried");
        assert_eq!(by["flaky"]["result"]["code"], "ok", "{}", by["flaky"]);
        assert_eq!(by["flaky"]["attempts"], 2, "retry, then ok");
        assert_eq!(
            by["broken"]["result"]["code"], "timeout",
            "{}",
            by["broken"]
        );
        assert_eq!(by["broken"]["result"]["status"], 500);
        assert_eq!(
            by["broken"]["attempts"], 3,
            "errors until the attempt limit"
        );
        assert!(
            by["broken"]["result"]["output"]
                .as_str()
                .unwrap()
                .contains("always broken")
        );
        assert_eq!(by["slow"]["result"]["code"], "ok", "{}", by["slow"]);
        assert_eq!(
            by["slow"]["attempts"], 2,
            "killed at the time limit, then retried"
        );

        api.archived("acme", &chain).await;
        api.archived("acme", &sneaky).await;
        let stats = eventually(WAIT, "the chain's end", || async {
            let s = api.stats("acme").await;
            (archived_count(&s, "chain", "ok") == 6).then_some(s)
        })
        .await;
        assert_eq!(archived_count(&stats, "chain", "ok"), 6, "5, 4, 3, 2, 1, 0");

        // The sneaky job's children are acme's; globex has nothing.
        let acme_types: Vec<String> = eventually(WAIT, "children ingested", || async {
            let s = api.stats("acme").await;
            let types: Vec<String> = s["jobtypes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["type"].as_str().unwrap().to_owned())
                .collect();
            (types.contains(&"report".to_owned()) && types.contains(&"globex-report".to_owned()))
                .then_some(types)
        })
        .await;
        assert!(
            !acme_types.iter().any(|t| t.contains("etc")),
            "{acme_types:?}"
        );
        let globex = api.stats("globex").await;
        assert_eq!(globex["jobtypes"], json!([]), "no job of another client");
        let sneaky_job = api.job("acme", &sneaky[0]).await;
        assert!(
            sneaky_job["result"]["output"]
                .as_str()
                .unwrap()
                .contains("[jobstore] new job 2 dropped: "),
            "{sneaky_job}"
        );
    });
}

/// A jobtype with no handler is released as retry until it times out.
#[test]
fn jobs_without_a_handler_time_out() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let d = DaemonProc::start(dir.path(), &runner(None).arg("--max-attempts").arg("3"));
        let api = Api::new(&d.url);
        let ids = api.add("acme", "nobody", &["x"]).await;
        let done = api.archived("acme", &ids).await;
        assert_eq!(done[0]["result"]["code"], "timeout");
        assert_eq!(done[0]["attempts"], 3);
        assert!(
            done[0]["result"]["output"]
                .as_str()
                .unwrap()
                .contains("no handler")
        );
    });
}

const COUNTING_WORKER: &str = r#"
n=0
while IFS= read -r line; do
  case "$line" in
    *'"op":"before"'*) echo before >> "$MARKER"; echo "D: 200" ;;
    *'"op":"job"'*) n=$((n + 1)); echo "pid $$ job $n"; echo "D: 200" ;;
    *) echo "D: 200" ;;
  esac
done
"#;

/// A long-lived worker serves many jobs, `before` runs once per worker.
#[rstest]
#[case::sqlite("sqlite")]
#[case::postgres("postgres")]
#[case::redis("redis")]
fn a_long_lived_worker_serves_many_jobs(#[case] backend: &'static str) {
    block_on(async {
        let Some(be) = Backend::new(backend).await else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("before.log");
        let d = DaemonProc::start(
            dir.path(),
            &runner(be.url.as_deref()).env("MARKER", marker.to_str().unwrap()),
        );
        let api = Api::new(&d.url);
        api.handler(
            "acme",
            "noop",
            json!({"method": "process", "eid": "noop", "body": COUNTING_WORKER, "before": "setup", "limits": {"concurrency": 1}}),
        )
        .await;
        let payloads: Vec<String> = (0..200).map(|i| i.to_string()).collect();
        let refs: Vec<&str> = payloads.iter().map(String::as_str).collect();
        let ids = api.add("acme", "noop", &refs).await;
        let done = api.archived("acme", &ids).await;
        let pids: std::collections::HashSet<String> = done
            .iter()
            .map(|j| {
                assert_eq!(j["result"]["code"], "ok", "{j}");
                j["result"]["output"]
                    .as_str()
                    .unwrap()
                    .split_whitespace()
                    .nth(1)
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(
            pids.len(),
            1,
            "one worker process served every job: {pids:?}"
        );
        let befores = std::fs::read_to_string(&marker).unwrap();
        assert_eq!(befores.lines().count(), 1, "before ran once");
        let max_n = done
            .iter()
            .map(|j| {
                j["result"]["output"]
                    .as_str()
                    .unwrap()
                    .split_whitespace()
                    .nth(3)
                    .unwrap()
                    .parse::<u32>()
                    .unwrap()
            })
            .max()
            .unwrap();
        assert_eq!(
            max_n, 200,
            "the worker kept its state across jobs and batches"
        );
    });
}

/// SIGTERM mid-run: running jobs finish, unstarted ones go back, the
/// process exits 0, and after a restart every job completes once.
#[test]
fn sigterm_mid_run_loses_nothing() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("ran.log");
        let how = runner(None)
            .env("RAN", log.to_str().unwrap())
            .arg("--max-running")
            .arg("4");
        let mut d = DaemonProc::start(dir.path(), &how);
        let api = Api::new(&d.url);
        api.handler(
            "acme",
            "slow",
            json!({"method": "process", "body": "sleep 0.5; echo \"$JOBSTORE_JOB_ID\" >> \"$RAN\""}),
        )
        .await;
        let payloads: Vec<String> = (0..20).map(|i| i.to_string()).collect();
        let refs: Vec<&str> = payloads.iter().map(String::as_str).collect();
        let ids = api.add("acme", "slow", &refs).await;
        eventually(WAIT, "jobs running", || async {
            let s = api.stats("acme").await;
            (s["jobtypes"][0]["running"].as_u64().unwrap_or(0) > 0).then_some(())
        })
        .await;
        let (status, text) = tokio::task::spawn_blocking(move || {
            let s = d.terminate();
            (s, d.log())
        })
        .await
        .unwrap();
        assert!(status.success(), "{text}");
        let ran_before = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count();
        assert!(
            ran_before > 0 && ran_before < 20,
            "stopped mid-run: {ran_before} ran"
        );

        let d = DaemonProc::start(dir.path(), &how);
        let api = Api::new(&d.url);
        let done = api.archived("acme", &ids).await;
        assert!(done.iter().all(|j| j["result"]["code"] == "ok"));
        let ran = std::fs::read_to_string(&log).unwrap();
        let mut seen = std::collections::HashSet::new();
        for id in ran.lines() {
            assert!(
                seen.insert(id.to_owned()),
                "job {id} ran twice across a clean stop"
            );
        }
        assert_eq!(seen.len(), 20);
        let unstarted_went_back = done.iter().all(|j| j["attempts"] == 1);
        assert!(unstarted_went_back, "no job was counted twice: {done:?}");
    });
}

/// Three daemons share one store; one is killed with SIGKILL mid-run. Every
/// job completes; only jobs the killed daemon held (running, or finished with
/// their release not yet stored) may run twice, first there and then once on
/// a survivor.
#[rstest]
#[case::sqlite("sqlite")]
#[case::postgres("postgres")]
#[case::redis("redis")]
fn three_daemons_one_killed(#[case] backend: &'static str) {
    block_on(async {
        let Some(be) = Backend::new(backend).await else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let shared_db;
        let store = match &be.url {
            Some(u) => u.clone(),
            None => {
                shared_db = dir.path().join("shared.db");
                format!("sqlite://{}", shared_db.display())
            }
        };
        let log = dir.path().join("ran.log");
        let start = |name: &str| {
            DaemonProc::start(
                &dir.path().join(name),
                &node(&store, &log, name)
                    .env("NODE", name)
                    .arg("--lease")
                    .arg("2s")
                    .arg("--max-running")
                    .arg("8"),
            )
        };
        let mut daemons = [start("node-a"), start("node-b"), start("node-c")];
        let api = Api::new(&daemons[0].url);
        api.handler(
            "acme",
            "work",
            json!({"method": "process", "body": "sleep 0.05; echo \"$JOBSTORE_JOB_ID $NODE\" >> \"$RAN\""}),
        )
        .await;
        let payloads: Vec<String> = (0..300).map(|i| i.to_string()).collect();
        let refs: Vec<&str> = payloads.iter().map(String::as_str).collect();
        let ids = api.add("acme", "work", &refs).await;
        eventually(WAIT, "some jobs ran", || async {
            let n = std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .count();
            (n >= 30).then_some(())
        })
        .await;
        let killed_at = Instant::now();
        daemons[2].kill9();
        let survivor = Api::new(&daemons[1].url);
        let done = survivor.archived("acme", &ids).await;
        assert!(
            done.iter().all(|j| j["result"]["code"] == "ok"),
            "every job completed"
        );
        // The log is appended in the order runs ended: per job, the nodes
        // that ran it, in order.
        let ran = std::fs::read_to_string(&log).unwrap();
        let mut runs: HashMap<&str, Vec<&str>> = HashMap::new();
        for line in ran.lines() {
            let (id, node) = line.split_once(' ').expect("id and node");
            runs.entry(id).or_default().push(node);
        }
        let twice: Vec<_> = runs.iter().filter(|(_, n)| n.len() > 1).collect();
        let on_killed = runs.values().filter(|n| n[0] == "node-c").count();
        eprintln!(
            "{backend}: 300 jobs on 3 daemons, one killed; all done {:?} after the kill; \
             {} ran twice, of the {on_killed} the killed daemon ran",
            killed_at.elapsed(),
            twice.len()
        );
        assert_eq!(runs.len(), 300);
        for (id, nodes) in &twice {
            assert!(
                nodes.len() == 2 && nodes[0] == "node-c" && nodes[1] != "node-c",
                "only a job the killed daemon held may run again, once, on a survivor: {id} ran on {nodes:?}"
            );
        }
        for d in &mut daemons[..2] {
            assert!(d.terminate().success());
        }
    });
}

/// A daemon started without `--allow-process-handlers` never runs a process
/// handler, not even one set through another daemon on the same store: it
/// takes the jobs in, and a daemon that allows process handlers runs them.
#[test]
fn process_handlers_run_only_where_allowed() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let store = format!("sqlite://{}", dir.path().join("shared.db").display());
        let log = dir.path().join("ran.log");
        let allowed =
            |name: &str| DaemonProc::start(&dir.path().join(name), &node(&store, &log, name));
        let mut first = allowed("node-a");
        Api::new(&first.url)
            .handler(
                "acme",
                "cmd",
                json!({"method": "process", "body": "echo \"$JOBSTORE_JOB_ID\" >> \"$RAN\""}),
            )
            .await;
        assert!(first.terminate().success());

        // Same store, same environment, process handlers not allowed.
        let mut guarded = DaemonProc::start(
            &dir.path().join("node-b"),
            &Start::store(Some(&store))
                .env("JOBSTORE_ADMIN_TOKEN", ADMIN)
                .env("RAN", log.to_str().unwrap())
                .arg("--sysid")
                .arg("node-b")
                .arg("--poll")
                .arg("200ms"),
        );
        let api = Api::new(&guarded.url);
        let ids = api.add("acme", "cmd", &["1", "2", "3"]).await;
        // Well past several claim rounds and handler reads.
        tokio::time::sleep(Duration::from_secs(3)).await;
        for id in &ids {
            let job = api.job("acme", id).await;
            assert_eq!(job["state"], "waiting", "left alone: {job}");
            assert_eq!(job["attempts"], 0, "never claimed: {job}");
        }
        assert!(!log.exists(), "no command ran on the guarded daemon");

        // A daemon that allows them runs the jobs the guarded one took in.
        let mut second = allowed("node-c");
        let done = Api::new(&second.url).archived("acme", &ids).await;
        assert!(done.iter().all(|j| j["result"]["code"] == "ok"), "{done:?}");
        let ran = std::fs::read_to_string(&log).unwrap();
        assert_eq!(ran.lines().count(), 3);
        assert!(guarded.terminate().success());
        assert!(second.terminate().success());
    });
}

/// Only the admin sets process handlers, and only where they are enabled.
#[test]
fn process_handlers_need_the_admin_and_the_flag() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let cfg = token_config(
            &dir.path().join("c.toml"),
            "",
            Some(ADMIN),
            &[("acme", "acme-token")],
        );
        let c = http();
        // Enabled: the client is refused, the admin allowed.
        let d = DaemonProc::start(
            &dir.path().join("on"),
            &Start::store(None)
                .arg("--config")
                .arg(cfg.to_str().unwrap())
                .arg("--allow-process-handlers"),
        );
        let set = |token: &str, url: &str| {
            c.post(format!("{url}/acme/handler/add/t/add?method=process"))
                .bearer_auth(token)
                .body("touch /tmp/pwned")
        };
        assert_eq!(json(set("acme-token", &d.url)).await.0, 403);
        assert_eq!(json(set(ADMIN, &d.url)).await.0, 200);
        // Disabled: nobody, not even the admin.
        let off = DaemonProc::start(
            &dir.path().join("off"),
            &Start::store(None)
                .arg("--config")
                .arg(cfg.to_str().unwrap()),
        );
        assert_eq!(json(set(ADMIN, &off.url)).await.0, 403);
        assert_eq!(json(set("acme-token", &off.url)).await.0, 403);
    });
}

/// A daemon frozen past its lease loses its job to another daemon; once it
/// runs again, its renewal finds the job lost, kills the run and releases
/// nothing, so the new owner's result stands.
#[test]
fn a_lost_lease_stops_the_run_and_releases_nothing() {
    block_on(async {
        use nix::sys::signal::{Signal, kill};
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("shared.db");
        let store = format!("sqlite://{}", db.display());
        let ran = dir.path().join("ran.log");
        let start = |name: &str| {
            DaemonProc::start(
                &dir.path().join(name),
                &node(&store, &ran, name).arg("--lease").arg("1s"),
            )
        };
        let a = start("node-a");
        let api = Api::new(&a.url);
        api.handler(
            "acme",
            "long",
            json!({"method": "process", "body": "echo \"start $JOBSTORE_ATTEMPT\" >> \"$RAN\"; sleep 6; echo \"end $JOBSTORE_ATTEMPT\" >> \"$RAN\"; echo done"}),
        )
        .await;
        let ids = api.add("acme", "long", &["x"]).await;
        eventually(WAIT, "node-a runs the job", || async {
            let v = api.job("acme", &ids[0]).await;
            (v["state"] == "running" && v["locked_by"] == "node-a").then_some(())
        })
        .await;
        kill(a.pid(), Signal::SIGSTOP).unwrap();
        let b = start("node-b");
        let api_b = Api::new(&b.url);
        eventually(WAIT, "node-b takes the job over", || async {
            let v = api_b.job("acme", &ids[0]).await;
            (v["locked_by"] == "node-b").then_some(())
        })
        .await;
        kill(a.pid(), Signal::SIGCONT).unwrap();
        let done = api_b.archived("acme", &ids).await;
        assert_eq!(done[0]["result"]["code"], "ok");
        assert_eq!(done[0]["attempts"], 2);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let log = std::fs::read_to_string(&ran).unwrap();
        assert!(
            log.contains("start 1") && log.contains("start 2") && log.contains("end 2"),
            "{log}"
        );
        assert!(
            !log.contains("end 1"),
            "node-a's run was killed when its lease was lost: {log}"
        );
        assert!(a.log().contains("lease lost"), "{}", a.log());
    });
}

/// With a retention of zero, ok jobs are deleted at completion; failed
/// ones are archived.
#[test]
fn retention_zero_deletes_ok_jobs() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let d = DaemonProc::start(dir.path(), &runner(None).arg("--retention").arg("0s"));
        let api = Api::new(&d.url);
        api.handler(
            "acme",
            "t",
            json!({"method": "process", "body": "read x; [ \"$x\" = bad ] && echo 'S: 400'; true"}),
        )
        .await;
        let ids = api.add("acme", "t", &["good", "bad"]).await;
        let failed = api.archived("acme", &ids[1..]).await;
        assert_eq!(failed[0]["result"]["code"], "failed");
        eventually(WAIT, "the ok job deleted", || async {
            let v = api.job("acme", &ids[0]).await;
            (v["error"]["kind"] == "not_found").then_some(())
        })
        .await;
        let stats = api.stats("acme").await;
        assert_eq!(archived_count(&stats, "t", "ok"), 0);
        assert_eq!(archived_count(&stats, "t", "failed"), 1);
    });
}
