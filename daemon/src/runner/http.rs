//! The `http` runner: POSTs each job's payload to the handler's URL over
//! pooled connections, with the job's time limit as the request timeout.
//! The response status class is the job status; 429 and 503 count as
//! retry, honouring `Retry-After` (seconds). The response body is read like
//! process output: `J:` lines add jobs of the same client, other lines are
//! the job's output (a status comes from the HTTP status, not `S:` lines).
//!
//! Headers sent: `X-Jobstore-Job-Id`, `X-Jobstore-Jobtype`,
//! `X-Jobstore-Client`, `X-Jobstore-Attempt`, the job's W3C trace
//! context as `traceparent` (and `tracestate`) when it has one, and for a
//! job that waited for other jobs `X-Jobstore-Waited` (base64 of the JSON
//! of [`crate::executor::waited`], up to 8 KiB; longer,
//! `X-Jobstore-Waited-More: 1` and the handler reads `GET
//! /{client}/jobs/{id}/waits`, with `?with_outputs=true` for the outputs).

use std::time::Duration;

use futures::future::join_all;
use jobstore_api::Handler;
use reqwest::StatusCode;
use tokio_util::sync::CancellationToken;

use super::{Class, Finished, Outcome, OutputParser, Results, Task};

/// The longest `X-Jobstore-Waited` header (base64 of a waiter's message)
/// sent; a longer message sends `X-Jobstore-Waited-More: 1` instead.
pub const MAX_WAITED_HEADER: usize = 8 << 10;

/// Why an `http` handler's URL is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetError {
    /// Not an absolute http(s) URL.
    Invalid(String),
    /// Its host is not on the daemon's allow-list.
    NotAllowed(String),
}

impl TargetError {
    /// What is wrong, in words.
    pub fn message(&self) -> &str {
        match self {
            TargetError::Invalid(m) | TargetError::NotAllowed(m) => m,
        }
    }
}

/// An `http` handler's URL: absolute http(s), and on the allow-list when
/// one is configured (`allow` empty: any host).
pub fn check_target(allow: &[String], body: &str) -> Result<(), TargetError> {
    let url = url::Url::parse(body.trim())
        .map_err(|e| TargetError::Invalid(format!("an http handler's body must be a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(TargetError::Invalid(format!(
            "an http handler's URL must be http or https, not {:?}",
            url.scheme()
        )));
    }
    let host = url.host_str().unwrap_or_default();
    if !allow.is_empty() && !allow.iter().any(|a| a.eq_ignore_ascii_case(host)) {
        return Err(TargetError::NotAllowed(format!(
            "host {host:?} is not on this daemon's allow-list for http handlers ({})",
            allow.join(", ")
        )));
    }
    Ok(())
}

/// Most response body bytes read (the output is capped further).
const MAX_BODY: usize = 16 << 20;

/// Calls handlers over HTTP.
pub struct HttpRunner {
    client: reqwest::Client,
    allow_hosts: Vec<String>,
}

impl HttpRunner {
    /// A runner whose handlers may only call `allow_hosts` (empty: any).
    pub fn new(allow_hosts: Vec<String>) -> Self {
        let client = crate::http_client::builder()
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(64)
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("jobstore/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_default();
        HttpRunner {
            client,
            allow_hosts,
        }
    }

    /// Runs a batch's jobs at once.
    pub async fn run_batch(
        &self,
        handler: &Handler,
        tasks: Vec<Task>,
        stop: &CancellationToken,
        results: &Results,
    ) {
        join_all(tasks.into_iter().map(|t| async {
            if stop.is_cancelled() {
                let _ = results.send((t, Finished::NotStarted));
                return;
            }
            let f = self.run_one(handler.body.trim(), &t).await;
            let _ = results.send((t, f));
        }))
        .await;
    }

    async fn run_one(&self, url: &str, t: &Task) -> Finished {
        if let Err(e) = check_target(&self.allow_hosts, url) {
            return Finished::Done(Outcome::error(e.message()));
        }
        let mut request = self
            .client
            .post(url)
            .timeout(t.time_limit)
            .header("X-Jobstore-Job-Id", &t.local_id)
            .header("X-Jobstore-Jobtype", &t.local_type)
            .header("X-Jobstore-Client", &t.client)
            .header("X-Jobstore-Attempt", t.attempt.to_string())
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(t.data.clone());
        if let Some(waited) = &t.waited {
            // Base64 JSON up to MAX_WAITED_HEADER; longer, the handler
            // reads GET /{client}/jobs/{id}/waits.
            use base64::Engine;
            let encoded = base64::engine::general_purpose::STANDARD.encode(waited.as_bytes());
            request = if encoded.len() <= MAX_WAITED_HEADER {
                request.header("X-Jobstore-Waited", encoded)
            } else {
                request.header("X-Jobstore-Waited-More", "1")
            };
        }
        if let Some(trace) = &t.trace {
            request = request.header("traceparent", &trace.traceparent);
            if let Some(state) = &trace.tracestate {
                request = request.header("tracestate", state);
            }
        }
        let call = async {
            let response = request.send().await?;
            let status = response.status();
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let mut body = Vec::new();
            let mut response = response;
            while let Some(chunk) = response.chunk().await? {
                let room = MAX_BODY.saturating_sub(body.len());
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok::<_, reqwest::Error>((status, retry_after, body))
        };
        let answer = tokio::select! {
            a = call => a,
            _ = t.lost.cancelled() => return Finished::Lost,
        };
        match answer {
            Ok((status, retry_after, body)) => {
                let mut parser = OutputParser::default();
                let text = body.strip_suffix(b"\n").unwrap_or(&body);
                if !text.is_empty() {
                    for line in text.split(|b| *b == b'\n') {
                        if !line.starts_with(b"S:") {
                            parser.line(line);
                        }
                    }
                }
                let mut outcome = Outcome::new(status.as_u16(), parser.finish());
                if status == StatusCode::TOO_MANY_REQUESTS
                    || status == StatusCode::SERVICE_UNAVAILABLE
                {
                    outcome.class = Class::Retry;
                    outcome.retry_after = retry_after;
                }
                Finished::Done(outcome)
            }
            Err(e) if e.is_timeout() => Finished::Done(Outcome::error(&format!(
                "the handler did not answer within the time limit of {:?}",
                t.time_limit
            ))),
            Err(e) => Finished::Done(Outcome::error(&format!("calling the handler: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::http::{HeaderMap, StatusCode as Code};
    use axum::routing::post;

    async fn hook(headers: HeaderMap, body: String) -> (Code, HeaderMap, String) {
        let mut out = HeaderMap::new();
        let attempt = headers["x-jobstore-attempt"].to_str().unwrap().to_owned();
        match body.as_str() {
            "ok" => (
                Code::OK,
                out,
                format!("fine on attempt {attempt}\nJ: next|{attempt}\nS: 404\n"),
            ),
            "missing" => (Code::NOT_FOUND, out, "no such thing".into()),
            "busy" => {
                out.insert("retry-after", "7".parse().unwrap());
                (Code::SERVICE_UNAVAILABLE, out, String::new())
            }
            "slow" => {
                tokio::time::sleep(Duration::from_secs(5)).await;
                (Code::OK, out, String::new())
            }
            "trace" => {
                let header = |name: &str| {
                    headers
                        .get(name)
                        .map_or("none".to_owned(), |v| v.to_str().unwrap().to_owned())
                };
                let text = format!("{} {}", header("traceparent"), header("tracestate"));
                (Code::OK, out, text)
            }
            _ => (Code::INTERNAL_SERVER_ERROR, out, "boom".into()),
        }
    }

    async fn server() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, Router::new().route("/hook", post(hook)))
                .await
                .unwrap()
        });
        format!("http://{addr}/hook")
    }

    fn task(data: &str) -> Task {
        Task {
            id: "acme-1".into(),
            local_id: "1".into(),
            jobtype: "acme-t".into(),
            local_type: "t".into(),
            client: "acme".into(),
            attempt: 3,
            data: data.as_bytes().to_vec(),
            time_limit: Duration::from_millis(500),
            lost: CancellationToken::new(),
            waited: None,
            trace: None,
        }
    }

    async fn run(r: &HttpRunner, url: &str, data: &str) -> Outcome {
        match r.run_one(url, &task(data)).await {
            Finished::Done(o) => o,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn status_classes_retry_after_and_body_lines() {
        let url = server().await;
        let r = HttpRunner::new(Vec::new());
        let o = run(&r, &url, "ok").await;
        assert_eq!(
            (o.status, o.class),
            (200, Class::Ok),
            "S: lines do not override HTTP"
        );
        assert_eq!(String::from_utf8_lossy(&o.output), "fine on attempt 3\n");
        assert_eq!(o.children.len(), 1);
        assert_eq!(o.children[0].data, b"3");
        let o = run(&r, &url, "missing").await;
        assert_eq!((o.status, o.class), (404, Class::Failed));
        let o = run(&r, &url, "busy").await;
        assert_eq!((o.status, o.class), (503, Class::Retry));
        assert_eq!(o.retry_after, Some(Duration::from_secs(7)));
        let o = run(&r, &url, "other").await;
        assert_eq!((o.status, o.class), (500, Class::Error));
        let o = run(&r, &url, "slow").await;
        assert_eq!(o.status, 500);
        assert!(String::from_utf8_lossy(&o.output).contains("time limit"));
        let o = run(&r, "http://127.0.0.1:1/nothing", "ok").await;
        assert_eq!(o.class, Class::Error, "connection refused is an error");
    }

    /// The run's trace context goes in `traceparent` and `tracestate`
    /// headers; a job without one sends neither.
    #[tokio::test]
    async fn the_trace_context_is_in_the_headers() {
        let url = server().await;
        let r = HttpRunner::new(Vec::new());
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let o = run(&r, &url, "trace").await;
        assert_eq!(String::from_utf8_lossy(&o.output), "none none\n");
        let mut t = task("trace");
        t.trace = Some(jobstore_api::TraceContext::parse(tp, Some("a=1,b=2")).unwrap());
        let Finished::Done(o) = r.run_one(&url, &t).await else {
            panic!("not done")
        };
        assert_eq!(
            String::from_utf8_lossy(&o.output),
            format!("{tp} a=1,b=2\n")
        );
    }

    #[tokio::test]
    async fn hosts_off_the_allow_list_are_not_called() {
        let url = server().await;
        let r = HttpRunner::new(vec!["example.com".into()]);
        let o = run(&r, &url, "ok").await;
        assert_eq!(o.class, Class::Error);
        assert!(String::from_utf8_lossy(&o.output).contains("allow-list"));
    }
}
