//! Job events end to end, on the real binary: the job log (`--job-log`)
//! has one line per event of each job, through a retry and across rotated
//! files; the spans (`--otlp-endpoint`) of a job added with a W3C
//! `traceparent` reach an OTLP/HTTP receiver in the producer's trace, and
//! the run continues it from its own span.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{Value, json};
use support::admin::{ADMIN, Api, admin_runner};
use support::*;

const WAIT: Duration = Duration::from_secs(60);

/// A producer's trace context.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PRODUCER_SPAN: &str = "00f067aa0ba902b7";

fn traceparent() -> String {
    format!("00-{TRACE_ID}-{PRODUCER_SPAN}-01")
}

/// A handler whose `ok` jobs succeed (asking for one more job), whose
/// `flaky` jobs answer 503 on their first run and succeed on the second,
/// and which prints the trace context it was given.
async fn set_handler(api: &Api) {
    api.handler(
        "work",
        json!({
            "method": "process",
            "body": r#"read what
echo "traceparent=$TRACEPARENT"
case "$what" in
  ok) echo fine; echo "J: work|child" ;;
  flaky) if [ "$JOBSTORE_ATTEMPT" -lt 2 ]; then echo "S: 503"; echo "try later"; else echo "better"; fi ;;
esac"#,
            "limits": {"max_attempts": 3}
        }),
    )
    .await;
}

/// Every line of the job log at `path`, oldest first: `FILE.N` .. `FILE.1`,
/// then `FILE`.
fn job_log(path: &Path) -> (Vec<Value>, Vec<PathBuf>) {
    let mut files = Vec::new();
    for n in (1..=1000).rev() {
        let rotated = PathBuf::from(format!("{}.{n}", path.display()));
        if rotated.exists() {
            files.push(rotated);
        }
    }
    files.push(path.to_owned());
    let mut lines = Vec::new();
    for f in &files {
        for line in std::fs::read_to_string(f).unwrap().lines() {
            lines.push(
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?} is not JSON: {e}")),
            );
        }
    }
    (lines, files)
}

/// The job log of a daemon that ran one job to ok (which asked for a
/// child), and one that failed once and ran again: every event of each,
/// in order, with its attempt, status, retry delay and release, across
/// files rotated at 2,000 bytes; the last lines are written at shutdown.
#[test]
fn the_job_log_has_a_line_per_event_of_each_job() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("jobs.log");
        let mut d = DaemonProc::start(
            &dir.path().join("data"),
            &admin_runner(None)
                .arg("--sysid")
                .arg("node-1")
                .arg("--job-log")
                .arg(log.to_str().unwrap())
                .arg("--job-log-max-bytes")
                .arg("2000")
                .arg("--job-log-keep")
                .arg("100")
                .arg("--backoff-base")
                .arg("50ms")
                .arg("--backoff-max")
                .arg("50ms"),
        );
        let api = Api::new(&d.url);
        set_handler(&api).await;
        let ids = api
            .add("work", "", &["ok".to_owned(), "flaky".to_owned()])
            .await;
        eventually(WAIT, "both jobs and the child archived as ok", || async {
            (api.archived_count("work", "ok").await == 3).then_some(())
        })
        .await;
        // A remote worker fetches a job and reports a 404.
        api.handler("pull", json!({"method": "remote", "body": ""}))
            .await;
        let pulled = api.add("pull", "", &["x".to_owned()]).await.remove(0);
        let fetched = eventually(WAIT, "the remote job fetched", || async {
            let (s, v) = api
                .post("/acme/job/pull/get?max=1&wait=1000&worker=w1", json!({}))
                .await;
            assert_eq!(s, 200, "{v}");
            (!v["jobs"].as_array().unwrap().is_empty()).then_some(v)
        })
        .await;
        let (s, v) = api
            .post(
                "/acme/jobs/finish",
                json!({"lease": fetched["lease"], "jobs": [{"id": pulled, "status": 404, "output": "no such thing"}]}),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        assert!(d.terminate().success());

        let (lines, files) = job_log(&log);
        assert!(
            files.len() > 1,
            "2,000 bytes hold fewer than {} lines: the log rotated",
            lines.len()
        );
        for f in &files {
            let len = std::fs::metadata(f).unwrap().len();
            assert!(len <= 2000, "{} has {len} bytes", f.display());
        }
        let mut text = String::new();
        for l in &lines {
            text += &format!("{l}\n");
            for key in ["time", "event", "client", "jobtype", "id", "sysid"] {
                assert!(l[key].is_string(), "{key} missing: {l}");
            }
            assert_eq!(l["client"], "acme");
            assert_eq!(l["sysid"], "node-1");
        }
        report(format!(
            "--- the job log ({} lines in {} files) ---\n{text}",
            lines.len(),
            files.len()
        ));
        let of = |id: &str| -> Vec<&Value> { lines.iter().filter(|l| l["id"] == id).collect() };
        let events = |id: &str| -> Vec<String> {
            let mut e: Vec<String> = of(id)
                .iter()
                .map(|l| l["event"].as_str().unwrap().to_owned())
                .collect();
            // Intake and ingest run side by side: a job's `added` line may
            // come just after its `ingested` one.
            if e.len() > 1 && e[0] == "ingested" && e[1] == "added" {
                e.swap(0, 1);
            }
            e
        };

        // The job that ran once.
        let ok = &ids[0];
        assert_eq!(
            events(ok),
            [
                "added", "ingested", "claimed", "started", "finished", "released"
            ],
            "{ok}"
        );
        let l = of(ok);
        let by = |e: &str| *l.iter().find(|l| l["event"] == e).unwrap();
        assert_eq!(by("added")["source"], "http");
        assert_eq!(by("ingested")["new"], true);
        assert_eq!(by("claimed")["attempt"], 1);
        assert_eq!(by("finished")["status"], 200);
        assert_eq!(by("finished")["outcome"], "ok");
        assert!(by("finished")["run_ms"].is_u64());
        let released = by("released");
        assert_eq!(released["release"], "archive");
        assert_eq!(released["code"], "ok");
        assert_eq!(released["status"], 200);
        assert_eq!(released["attempt"], 1);

        // The job that failed, then ran again.
        let flaky = &ids[1];
        assert_eq!(
            events(flaky),
            [
                "added", "ingested", "claimed", "started", "finished", "released", "claimed",
                "started", "finished", "released"
            ],
            "{flaky}"
        );
        let l = of(flaky);
        let (first, second) = l.split_at(6);
        assert_eq!(first[4]["status"], 503);
        assert_eq!(first[4]["outcome"], "error");
        assert_eq!(first[5]["release"], "retry");
        assert_eq!(first[5]["status"], 503);
        assert_eq!(first[5]["attempt"], 1);
        assert!(
            first[5]["delay_ms"].as_u64().is_some_and(|d| d <= 50),
            "{}",
            first[5]
        );
        assert!(first[5].get("code").is_none());
        assert_eq!(second[0]["attempt"], 2);
        assert_eq!(second[2]["status"], 200);
        assert_eq!(second[3]["release"], "archive");
        assert_eq!(second[3]["code"], "ok");
        assert_eq!(second[3]["attempt"], 2);

        // The child the first job asked for: added by the run.
        let child: Vec<&Value> = lines
            .iter()
            .filter(|l| l["event"] == "added" && l["source"] == "run")
            .collect();
        assert_eq!(child.len(), 1, "one child");
        let child_id = child[0]["id"].as_str().unwrap();
        assert_eq!(
            events(child_id),
            [
                "added", "ingested", "claimed", "started", "finished", "released"
            ]
        );
        // The remote worker's job: claimed, finished and released by it.
        assert_eq!(
            events(&pulled),
            ["added", "ingested", "claimed", "finished", "released"]
        );
        for l in of(&pulled) {
            assert_eq!(l["jobtype"], "pull");
            let by_worker = !matches!(l["event"].as_str(), Some("added" | "ingested"));
            assert_eq!(l.get("worker").is_some(), by_worker, "{l}");
            if by_worker {
                assert_eq!(l["worker"], "w1");
            }
        }
        let released = of(&pulled).pop().unwrap();
        assert_eq!(released["release"], "archive");
        assert_eq!(released["code"], "failed");
        assert_eq!(released["status"], 404);
        assert_eq!(of(&pulled)[3]["status"], 404);
        assert_eq!(of(&pulled)[3]["outcome"], "failed");

        // No trace context was given, and none is exported: no trace ids.
        assert!(lines.iter().all(|l| l.get("trace_id").is_none()));
    });
}

/// An OTLP/HTTP receiver: every span it was sent, with its service.
#[derive(Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<(String, Span)>>>,
    requests: Arc<Mutex<u64>>,
}

impl Receiver {
    async fn start(&self) -> SocketAddr {
        let me = self.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let me = me.clone();
                async move {
                    let req = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                    *me.requests.lock().unwrap() += 1;
                    let mut spans = me.spans.lock().unwrap();
                    for rs in req.resource_spans {
                        let service = rs
                            .resource
                            .iter()
                            .flat_map(|r| &r.attributes)
                            .find(|a| a.key == "service.name")
                            .and_then(|a| match a.value.as_ref()?.value.as_ref()? {
                                AnyValue::StringValue(s) => Some(s.clone()),
                                _ => None,
                            })
                            .unwrap_or_default();
                        for ss in rs.scope_spans {
                            for s in ss.spans {
                                spans.push((service.clone(), s));
                            }
                        }
                    }
                    (
                        [("content-type", "application/x-protobuf")],
                        ExportTraceServiceResponse::default().encode_to_vec(),
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        addr
    }

    /// The spans of job `id` (by its `jobstore.job.id`), by name.
    fn of_job(&self, id: &str) -> BTreeMap<String, Vec<Span>> {
        let mut out: BTreeMap<String, Vec<Span>> = BTreeMap::new();
        for (_, s) in self.spans.lock().unwrap().iter() {
            if attr(s, "jobstore.job.id").as_deref() == Some(id) {
                out.entry(s.name.clone()).or_default().push(s.clone());
            }
        }
        out
    }
}

fn attr(s: &Span, key: &str) -> Option<String> {
    s.attributes.iter().find(|a| a.key == key).and_then(|a| {
        match a.value.as_ref()?.value.as_ref()? {
            AnyValue::StringValue(v) => Some(v.clone()),
            AnyValue::IntValue(v) => Some(v.to_string()),
            AnyValue::BoolValue(v) => Some(v.to_string()),
            _ => None,
        }
    })
}

/// The spans of a job as a table: name, span id, parent, start (ms after
/// the first span's start) and length.
fn table(title: &str, spans: &[&Span]) -> String {
    let t0 = spans
        .iter()
        .map(|s| s.start_time_unix_nano)
        .min()
        .unwrap_or(0);
    let mut out = format!(
        "--- {title} ---\ntrace {}\n{:<8} {:<16} {:<16} {:>10} {:>10}  attributes\n",
        spans
            .first()
            .map_or(String::new(), |s| hex::encode(&s.trace_id)),
        "span",
        "id",
        "parent",
        "start ms",
        "ms"
    );
    for s in spans {
        let attrs: Vec<String> = s
            .attributes
            .iter()
            .filter(|a| a.key != "jobstore.client" && a.key != "jobstore.jobtype")
            .map(|a| format!("{}={}", a.key, attr(s, &a.key).unwrap_or_default()))
            .collect();
        out += &format!(
            "{:<8} {:<16} {:<16} {:>10.3} {:>10.3}  {}\n",
            s.name,
            hex::encode(&s.span_id),
            if s.parent_span_id.is_empty() {
                "(root)".to_owned()
            } else {
                hex::encode(&s.parent_span_id)
            },
            (s.start_time_unix_nano - t0) as f64 / 1e6,
            (s.end_time_unix_nano - s.start_time_unix_nano) as f64 / 1e6,
            attrs.join(" ")
        );
    }
    out
}

const NAMES: [&str; 5] = ["add", "ingest", "claim", "run", "release"];

/// Waits until the receiver has every span of job `id`, once each.
async fn spans_of(r: &Receiver, id: &str) -> BTreeMap<String, Vec<Span>> {
    eventually(WAIT, &format!("the spans of job {id}"), || async {
        let got = r.of_job(id);
        NAMES
            .iter()
            .all(|n| got.get(*n).is_some_and(|v| !v.is_empty()))
            .then_some(got)
    })
    .await
}

/// A job added with a producer's `traceparent`: its spans `add`,
/// `ingest`, `claim`, `run` and `release` reach the receiver in the
/// producer's trace, each a child of the producer's span, in time order;
/// the process that ran it got the run span's context as `TRACEPARENT`.
/// A job added without one gets a trace of its own, rooted at its `add`
/// span.
#[test]
fn spans_reach_an_otlp_receiver_in_the_producers_trace() {
    block_on(async {
        let receiver = Receiver::default();
        let addr = receiver.start().await;
        let dir = tempfile::tempdir().unwrap();
        let mut d = DaemonProc::start(
            dir.path(),
            &admin_runner(None)
                .arg("--otlp-endpoint")
                .arg(format!("http://{addr}"))
                .env("OTEL_SERVICE_NAME", "jobstore-under-test"),
        );
        let api = Api::new(&d.url);
        set_handler(&api).await;

        let c = http();
        let (s, v) = json(
            c.post(format!("{}/acme/job/work/add", d.url))
                .bearer_auth(ADMIN)
                .header("traceparent", traceparent())
                .body("ok"),
        )
        .await;
        assert_eq!(s, 200, "{v}");
        let traced = ids(&v).remove(0);
        let plain = api.add("work", "", &["ok".to_owned()]).await.remove(0);
        eventually(WAIT, "the jobs archived", || async {
            (api.archived_count("work", "ok").await >= 2).then_some(())
        })
        .await;

        let got = spans_of(&receiver, &traced).await;
        let spans: Vec<&Span> = NAMES.iter().map(|n| &got[*n][0]).collect();
        report(table(
            &format!("job {traced}, added with traceparent {}", traceparent()),
            &spans,
        ));
        for (n, s) in NAMES.iter().zip(&spans) {
            assert_eq!(got[*n].len(), 1, "one {n} span");
            assert_eq!(
                hex::encode(&s.trace_id),
                TRACE_ID,
                "{n} in the producer's trace"
            );
            assert_eq!(
                hex::encode(&s.parent_span_id),
                PRODUCER_SPAN,
                "{n} a child of the producer's span"
            );
            assert!(s.start_time_unix_nano <= s.end_time_unix_nano, "{n}");
            assert_eq!(attr(s, "jobstore.client").as_deref(), Some("acme"));
            assert_eq!(attr(s, "jobstore.jobtype").as_deref(), Some("work"));
        }
        let [add, ingest, claim, run, release] = spans[..] else {
            unreachable!()
        };
        // In time order: acknowledged, stored, claimed, run, released.
        assert!(add.end_time_unix_nano <= ingest.end_time_unix_nano);
        assert!(ingest.end_time_unix_nano <= claim.end_time_unix_nano);
        assert!(claim.end_time_unix_nano <= run.start_time_unix_nano);
        assert!(run.end_time_unix_nano <= release.start_time_unix_nano);
        assert_eq!(attr(run, "jobstore.status").as_deref(), Some("200"));
        assert_eq!(attr(release, "jobstore.code").as_deref(), Some("ok"));
        // The run continued the trace from the run span.
        let job = api.job(&traced).await;
        let output = job["result"]["output"].as_str().unwrap_or_default();
        assert!(
            output.contains(&format!(
                "traceparent=00-{TRACE_ID}-{}-01",
                hex::encode(&run.span_id)
            )),
            "the run's TRACEPARENT is its span: {output}"
        );

        // The job its run asked for (a `J:` line) continues the trace
        // from the run span: its spans are children of it.
        let child = eventually(WAIT, "the child's spans", || async {
            let spans = receiver.spans.lock().unwrap();
            let id = spans.iter().find_map(|(_, s)| {
                (s.name == "add"
                    && attr(s, "jobstore.source").as_deref() == Some("run")
                    && hex::encode(&s.trace_id) == TRACE_ID)
                    .then(|| attr(s, "jobstore.job.id"))
                    .flatten()
            });
            drop(spans);
            id
        })
        .await;
        let got = spans_of(&receiver, &child).await;
        let spans: Vec<&Span> = NAMES.iter().map(|n| &got[*n][0]).collect();
        report(table(
            &format!("job {child}, asked for by the run of {traced}"),
            &spans,
        ));
        for s in &spans {
            assert_eq!(hex::encode(&s.trace_id), TRACE_ID, "{}", s.name);
            assert_eq!(
                s.parent_span_id, run.span_id,
                "{} a child of the run",
                s.name
            );
        }

        // A remote worker gets the run span's context in its fetch, and
        // the run span ends with its finish.
        api.handler("pull", json!({"method": "remote", "body": ""}))
            .await;
        let (s, v) = json(
            c.post(format!("{}/acme/job/pull/add", d.url))
                .bearer_auth(ADMIN)
                .header("traceparent", traceparent())
                .header("tracestate", "vendor=1")
                .body("x"),
        )
        .await;
        assert_eq!(s, 200, "{v}");
        let pulled = ids(&v).remove(0);
        let fetched = eventually(WAIT, "the remote job fetched", || async {
            let (s, v) = api
                .post("/acme/job/pull/get?max=1&wait=1000&worker=w1", json!({}))
                .await;
            assert_eq!(s, 200, "{v}");
            (!v["jobs"].as_array().unwrap().is_empty()).then_some(v)
        })
        .await;
        let given = fetched["jobs"][0]["traceparent"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(fetched["jobs"][0]["tracestate"], "vendor=1");
        let (s, v) = api
            .post(
                "/acme/jobs/finish",
                json!({"lease": fetched["lease"], "jobs": [{"id": pulled, "status": 200}]}),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        let got = spans_of(&receiver, &pulled).await;
        let spans: Vec<&Span> = NAMES.iter().map(|n| &got[*n][0]).collect();
        report(table(
            &format!("job {pulled}, run by remote worker w1 (given traceparent {given})"),
            &spans,
        ));
        let run = &got["run"][0];
        assert_eq!(
            given,
            format!("00-{TRACE_ID}-{}-01", hex::encode(&run.span_id)),
            "the fetch hands out the run span's context"
        );
        for s in &spans {
            assert_eq!(hex::encode(&s.trace_id), TRACE_ID, "{}", s.name);
            assert_eq!(hex::encode(&s.parent_span_id), PRODUCER_SPAN, "{}", s.name);
        }
        for name in ["claim", "run", "release"] {
            assert_eq!(
                attr(&got[name][0], "jobstore.worker").as_deref(),
                Some("w1")
            );
        }

        // A job without a trace: its own, rooted at its add span.
        let got = spans_of(&receiver, &plain).await;
        let spans: Vec<&Span> = NAMES.iter().map(|n| &got[*n][0]).collect();
        report(table(
            &format!("job {plain}, added without a traceparent"),
            &spans,
        ));
        let add = spans[0];
        assert!(add.parent_span_id.is_empty(), "the add span is the root");
        assert_ne!(hex::encode(&add.trace_id), TRACE_ID);
        for s in &spans[1..] {
            assert_eq!(s.trace_id, add.trace_id, "{}", s.name);
            assert_eq!(s.parent_span_id, add.span_id, "{} a child of add", s.name);
        }

        // The service, and the export counted in the metrics.
        assert!(
            receiver
                .spans
                .lock()
                .unwrap()
                .iter()
                .all(|(service, _)| service == "jobstore-under-test")
        );
        let (_, metrics) = api.get("/metrics").await;
        let metrics = metrics.as_str().unwrap_or_default().to_owned();
        assert!(
            metrics.contains("jobstore_spans_exported_total"),
            "{metrics}"
        );
        assert!(d.terminate().success());
        let by_name: HashMap<String, usize> =
            receiver
                .spans
                .lock()
                .unwrap()
                .iter()
                .fold(HashMap::new(), |mut m, (_, s)| {
                    *m.entry(s.name.clone()).or_default() += 1;
                    m
                });
        report(format!(
            "spans received: {by_name:?} in {} requests",
            receiver.requests.lock().unwrap()
        ));
    });
}

/// A job log that cannot be opened, or an endpoint that is not an
/// OTLP/HTTP URL, stops the daemon at start with a message naming it.
#[test]
fn bad_sinks_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no/such/dir/jobs.log");
    let err = DaemonProc::try_start(
        &dir.path().join("a"),
        &Start::store(None)
            .arg("--job-log")
            .arg(missing.to_str().unwrap()),
    )
    .err()
    .expect("refused");
    assert!(
        err.contains("job log") && err.contains("no/such/dir"),
        "{err}"
    );
    let err = DaemonProc::try_start(
        &dir.path().join("b"),
        &Start::store(None)
            .arg("--otlp-endpoint")
            .arg("grpc://127.0.0.1:4317"),
    )
    .err()
    .expect("refused");
    assert!(err.contains("otlp_endpoint"), "{err}");
}
