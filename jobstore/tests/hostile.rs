//! Hostile input against the real binary: a table of hand-written requests
//! (oversized bodies, bad names, path traversal, invalid UTF-8, bad tokens,
//! slow clients), each with the answer it must get, and the daemon healthy
//! after every one; tenant isolation through every route of `/openapi.json`
//! and through a runner's `J:` lines; and the guard on handlers that run
//! commands.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(20);
const ADMIN: &str = "admin-secret-token-0123456789";
const ACME: &str = "acme-secret-token";
const GLOBEX: &str = "globex-secret-token";

/// What a raw request got: the status (none when the server closed the
/// connection without answering) and the body.
#[derive(Debug)]
struct Answer {
    status: Option<u16>,
    body: String,
    elapsed: Duration,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    fn kind(&self) -> String {
        self.json()["error"]["kind"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    fn message(&self) -> String {
        self.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

/// A request as bytes: `Connection: close`, the token if any, and a
/// `Content-Length` for the body unless `headers` give the framing.
fn request(
    method: &str,
    target: &[u8],
    token: Option<&str>,
    headers: &[&str],
    body: &[u8],
) -> Vec<u8> {
    let mut r = Vec::new();
    r.extend_from_slice(method.as_bytes());
    r.push(b' ');
    r.extend_from_slice(target);
    r.extend_from_slice(b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    if let Some(t) = token {
        r.extend_from_slice(format!("Authorization: Bearer {t}\r\n").as_bytes());
    }
    for h in headers {
        r.extend_from_slice(h.as_bytes());
        r.extend_from_slice(b"\r\n");
    }
    if !headers
        .iter()
        .any(|h| h.to_ascii_lowercase().starts_with("transfer-encoding"))
    {
        r.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    r.extend_from_slice(b"\r\n");
    r.extend_from_slice(body);
    r
}

/// Sends `parts` with `gap` between them (a slow client when the gap is
/// long) while reading the answer, until the server closes.
async fn send(addr: &str, parts: &[Vec<u8>], gap: Duration) -> Answer {
    let start = Instant::now();
    let s = TcpStream::connect(addr).await.expect("connect");
    let (mut rd, mut wr) = s.into_split();
    let parts = parts.to_vec();
    let writer = tokio::spawn(async move {
        for (i, p) in parts.iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(gap).await;
            }
            if wr.write_all(p).await.is_err() {
                return; // the server closed on us
            }
        }
        // Keep the write side open: closing it would end a slow request
        // early.
        tokio::time::sleep(Duration::from_secs(60)).await;
    });
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let read = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match rd.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    let elapsed = start.elapsed();
    writer.abort();
    assert!(read.is_ok(), "no answer and no close within 30 s");
    parse(&buf, elapsed)
}

fn parse(raw: &[u8], elapsed: Duration) -> Answer {
    let text = String::from_utf8_lossy(raw);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return Answer {
            status: None,
            body: text.into_owned(),
            elapsed,
        };
    };
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok());
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        let mut out = String::new();
        let mut rest = body;
        while let Some((len, after)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(len.trim(), 16).unwrap_or(0);
            if n == 0 || after.len() < n {
                break;
            }
            out.push_str(&after[..n]);
            rest = after[n..].trim_start_matches("\r\n");
        }
        out
    } else {
        body.to_owned()
    };
    Answer {
        status,
        body,
        elapsed,
    }
}

/// What a case must get.
#[derive(Clone, Copy)]
enum Want {
    /// This status from the API, with an error body of this kind and a
    /// message (`""`: a success answer).
    Api(u16, &'static str),
    /// This status from the HTTP layer, before the API sees the request
    /// (a request line or headers that are not HTTP).
    Http(u16),
    /// The connection closed without an answer (headers too slow).
    Closed,
}

impl std::fmt::Display for Want {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Want::Api(s, "") => write!(f, "{s}"),
            Want::Api(s, k) => write!(f, "{s} {k}"),
            Want::Http(s) => write!(f, "{s} (http)"),
            Want::Closed => write!(f, "closed"),
        }
    }
}

struct Case {
    name: String,
    parts: Vec<Vec<u8>>,
    gap: Duration,
    want: Want,
}

fn case(name: impl Into<String>, req: Vec<u8>, want: Want) -> Case {
    Case {
        name: name.into(),
        parts: vec![req],
        gap: Duration::ZERO,
        want,
    }
}

fn post(target: &str, token: Option<&str>, body: &[u8]) -> Vec<u8> {
    request("POST", target.as_bytes(), token, &[], body)
}

fn post_json(target: &str, token: Option<&str>, body: &[u8]) -> Vec<u8> {
    request(
        "POST",
        target.as_bytes(),
        token,
        &["Content-Type: application/json"],
        body,
    )
}

fn get(target: &str, token: Option<&str>) -> Vec<u8> {
    request("GET", target.as_bytes(), token, &[], b"")
}

fn hostile_config(dir: &std::path::Path, extra: &str) -> std::path::PathBuf {
    token_config(
        &dir.join("jobstore.toml"),
        extra,
        Some(ADMIN),
        &[("acme", ACME), ("globex", GLOBEX)],
    )
}

/// The table: each hostile request gets its 4xx with a message, and
/// `/health` answers 200 `ok` after every one.
#[test]
fn hostile_requests_get_4xx_and_the_daemon_stays_healthy() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let cfg = hostile_config(dir.path(), "");
        let d = DaemonProc::start(
            &dir.path().join("data"),
            &Start::intake(None)
                .arg("--config")
                .arg(cfg.to_str().unwrap())
                .arg("--max-body-bytes")
                .arg("4096")
                .arg("--header-read-timeout")
                .arg("1s")
                .arg("--body-read-timeout")
                .arg("1s"),
        );
        let addr = d.url.trim_start_matches("http://").to_owned();
        let a = Some(ACME);
        let g = Some(GLOBEX);
        let long = "x".repeat(300);
        let mut cases = vec![
            // Sizes.
            case(
                "body over --max-body-bytes (Content-Length)",
                post("/acme/job/t/add", a, &vec![b'x'; 5000]),
                Want::Api(413, "too_large"),
            ),
            case(
                "body over --max-body-bytes (chunked, no length)",
                request(
                    "POST",
                    b"/acme/job/t/add",
                    a,
                    &["Transfer-Encoding: chunked"],
                    format!("1000\r\n{0}\r\n1000\r\n{0}\r\n0\r\n\r\n", "y".repeat(4096)).as_bytes(),
                ),
                Want::Api(413, "too_large"),
            ),
            case(
                "JSON body over the limit",
                post_json(
                    "/acme/job/t/add",
                    a,
                    format!("[{{\"data\":\"{}\"}}]", "z".repeat(5000)).as_bytes(),
                ),
                Want::Api(413, "too_large"),
            ),
            case(
                "heartbeat body over the limit",
                post_json("/acme/jobs/heartbeat", a, &vec![b' '; 5000]),
                Want::Api(413, "too_large"),
            ),
            case(
                "a 512 KiB header",
                request(
                    "GET",
                    b"/health",
                    None,
                    &[&format!("X-Big: {}", "h".repeat(512 << 10))],
                    b"",
                ),
                Want::Http(431),
            ),
            // Jobtypes.
            case(
                "jobtype starting with '-'",
                post("/acme/job/-t/add", a, b"x"),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "jobtype with '|'",
                post("/acme/job/a%7Cb/add", a, b"x"),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "jobtype with a space",
                post("/acme/job/a%20b/add", a, b"x"),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "jobtype with a newline",
                post("/acme/job/a%0Ab/add", a, b"x"),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "jobtype of 300 bytes",
                post(&format!("/acme/job/{long}/add"), a, b"x"),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "fetch with one bad jobtype in the list",
                post("/acme/job/ok,-bad/get", a, b""),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "handler for a bad jobtype",
                post("/acme/handler/add/a%7Cb/add?method=remote", a, b""),
                Want::Api(400, "invalid_input"),
            ),
            // Ids.
            case(
                "id with '|'",
                get("/acme/jobs/a%7Cb", a),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "id of 300 bytes",
                get(&format!("/acme/jobs/{long}"), a),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "id with a control character",
                get("/acme/jobs/a%07b", a),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "JSON id with '/'",
                post_json("/acme/job/t/add", a, br#"[{"data":"x","id":"a/b"}]"#),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "cancel with a bad id",
                post_json("/acme/jobs/cancel", a, br#"{"ids":["ok","a|b"]}"#),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "update of a bad id",
                post_json("/acme/jobs/a%7Cb/update", a, br#"{"lease":"x","data":"y"}"#),
                Want::Api(400, "invalid_input"),
            ),
            // Client names.
            case(
                "client with '-'",
                post("/a-b/job/t/add", Some(ADMIN), b"x"),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "client with a non-ASCII letter",
                post("/%C3%A9/job/t/add", Some(ADMIN), b"x"),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "client of 65 bytes",
                get(&format!("/{}/stats", "c".repeat(65)), Some(ADMIN)),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "client starting with '_'",
                get("/_acme/stats", Some(ADMIN)),
                Want::Api(400, "invalid_input"),
            ),
            // Path traversal.
            case(
                "'..' segment in the path",
                post("/acme/../globex/job/t/add", a, b"x"),
                Want::Api(404, "not_found"),
            ),
            case(
                "'..' as the client",
                post("/../job/t/add", Some(ADMIN), b"x"),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "'%2e%2e' as the client",
                post("/%2e%2e/job/t/add", Some(ADMIN), b"x"),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "'%2e%2e' as the jobtype",
                post("/acme/job/%2e%2e/add", a, b"x"),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "'..%2fglobex' as the jobtype",
                post("/acme/job/..%2fglobex%2fjob%2ft/add", a, b"x"),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "'%2f' in the client",
                post("/acme%2fglobex/job/t/add", Some(ADMIN), b"x"),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "'..%2f' in a job id",
                get("/acme/jobs/..%2fglobex%2fjobs%2fx", a),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "'%2e%2e' as a job id (a plain name: not found)",
                get("/acme/jobs/%2e%2e", a),
                Want::Api(404, "not_found"),
            ),
            case(
                "'/' in a handler's jobtype",
                get("/acme/handler/get/..%2F..%2Fetc%2Fpasswd", a),
                Want::Api(400, "invalid_input"),
            ),
            // Invalid UTF-8.
            case(
                "percent-encoded 0xFF in the client",
                post("/%FF/job/t/add", Some(ADMIN), b"x"),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "percent-encoded 0xC3 0x28 in the jobtype",
                post("/acme/job/%C3%28/add", a, b"x"),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "raw 0xFF byte in the request line",
                request("POST", b"/acme/job/\xFF/add", a, &[], b"x"),
                Want::Http(400),
            ),
            case(
                "raw 0xFF byte in the query string",
                request("POST", b"/acme/job/t/add?priority=\xFF", a, &[], b"x"),
                Want::Http(400),
            ),
            case(
                "percent-encoded 0xFF in the query string",
                post("/acme/job/t/add?run_at=%FF", a, b"x"),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "JSON body that is not UTF-8",
                post_json("/acme/job/t/add", a, b"[{\"data\":\"\xFF\xFE\"}]"),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "heartbeat body that is not UTF-8",
                post_json(
                    "/acme/jobs/heartbeat",
                    a,
                    b"{\"lease\":\"\xFF\",\"ids\":[]}",
                ),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "cancel lines that are not UTF-8",
                post("/acme/jobs/cancel", a, b"id-1\n\xFF\xFE\n"),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "handler body that is not UTF-8",
                post("/acme/handler/add/t/add?method=http", a, b"http://\xFF/"),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "Authorization header with non-ASCII bytes",
                request(
                    "GET",
                    b"/acme/stats",
                    None,
                    &["Authorization: Bearer \u{ff}\u{fe}"],
                    b"",
                ),
                Want::Api(400, "invalid_input"),
            ),
            // Tokens.
            case(
                "no token",
                post("/acme/job/t/add", None, b"x"),
                Want::Api(401, "unauthenticated"),
            ),
            case(
                "unknown token",
                post("/acme/job/t/add", Some("not-a-token"), b"x"),
                Want::Api(401, "unauthenticated"),
            ),
            case(
                "empty bearer token",
                request(
                    "POST",
                    b"/acme/job/t/add",
                    None,
                    &["Authorization: Bearer "],
                    b"x",
                ),
                Want::Api(401, "unauthenticated"),
            ),
            case(
                "Basic instead of Bearer",
                request(
                    "GET",
                    b"/acme/stats",
                    None,
                    &["Authorization: Basic YWNtZTphY21l"],
                    b"",
                ),
                Want::Api(401, "unauthenticated"),
            ),
            case(
                "another client's token: add",
                post("/acme/job/t/add", g, b"x"),
                Want::Api(403, "forbidden"),
            ),
            case(
                "another client's token: get a job",
                get("/acme/jobs/x", g),
                Want::Api(403, "forbidden"),
            ),
            case(
                "another client's token: set a handler",
                post("/acme/handler/add/t/add?method=remote", g, b""),
                Want::Api(403, "forbidden"),
            ),
            case(
                "another client's token: fetch jobs",
                post("/acme/job/t/get", g, b""),
                Want::Api(403, "forbidden"),
            ),
            case(
                "a client's token on the admin stats",
                get("/stats", a),
                Want::Api(403, "forbidden"),
            ),
            case(
                "a client's token on metrics",
                get("/metrics", a),
                Want::Api(403, "forbidden"),
            ),
            case(
                "no token on metrics",
                get("/metrics", None),
                Want::Api(401, "unauthenticated"),
            ),
            // Malformed bodies and parameters.
            case(
                "heartbeat body that is not JSON",
                post("/acme/jobs/heartbeat", a, b"lease=x"),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "finish with a field of the wrong type",
                post_json(
                    "/acme/jobs/finish",
                    a,
                    br#"{"lease":"x","jobs":[{"id":"j","status":"ok"}]}"#,
                ),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "finish with an unknown field",
                post_json("/acme/jobs/finish", a, br#"{"lease":"x","jobs":[],"x":1}"#),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "a JSON bomb of nested arrays",
                post_json("/acme/job/t/add", a, "[".repeat(4000).as_bytes()),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "priority not a number",
                post("/acme/job/t/add?priority=high", a, b"x"),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "delay_ms above the maximum",
                post("/acme/job/t/add?delay_ms=99999999999999", a, b"x"),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "fetch max=0",
                post("/acme/job/t/get?max=0", a, b""),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "fetch with a forged lease",
                post("/acme/job/t/get?lease=forged", a, b""),
                Want::Api(400, "invalid_input"),
            ),
            case(
                "unknown method on a route",
                request("PUT", b"/acme/job/t/add", a, &[], b"x"),
                Want::Api(405, "method_not_allowed"),
            ),
            case(
                "unknown route",
                get("/acme/secrets", a),
                Want::Api(404, "not_found"),
            ),
            case(
                "binary line payload (stored byte for byte)",
                post("/acme/job/bin/add", a, b"\xFF\x00\xFE\r\n"),
                Want::Api(200, ""),
            ),
        ];
        // Slow clients: headers one byte at a time, a body that stops short.
        let slow_head: Vec<Vec<u8>> =
            b"POST /acme/job/t/add HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1234567890\r\n\r\n"
                .iter()
                .map(|b| vec![*b])
                .collect();
        cases.push(Case {
            name: "headers trickled a byte per 200 ms (--header-read-timeout 1s)".into(),
            parts: slow_head,
            gap: Duration::from_millis(200),
            want: Want::Closed,
        });
        let mut slow_body = vec![
            format!(
                "POST /acme/job/t/add HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
                 Authorization: Bearer {ACME}\r\nContent-Length: 40\r\n\r\n"
            )
            .into_bytes(),
        ];
        slow_body.extend((0..20).map(|_| b"x".to_vec()));
        cases.push(Case {
            name: "body trickled a byte per 200 ms (--body-read-timeout 1s)".into(),
            parts: slow_body,
            gap: Duration::from_millis(200),
            want: Want::Api(408, "timeout"),
        });
        let stalled = format!(
            "POST /acme/jobs/heartbeat HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
             Authorization: Bearer {ACME}\r\nContent-Type: application/json\r\n\
             Content-Length: 1000\r\n\r\n{{\"lease\":"
        )
        .into_bytes();
        cases.push(Case {
            name: "JSON body that stops half way".into(),
            parts: vec![stalled, b"\"x\"".to_vec()],
            gap: Duration::from_millis(100),
            want: Want::Api(408, "timeout"),
        });

        let mut rows = Vec::new();
        let mut failures = Vec::new();
        for c in &cases {
            let got = send(&addr, &c.parts, c.gap).await;
            let ok = match c.want {
                Want::Api(s, kind) => {
                    got.status == Some(s)
                        && (kind.is_empty() || (got.kind() == kind && !got.message().is_empty()))
                }
                Want::Http(s) => got.status == Some(s),
                Want::Closed => got.status.is_none() && got.elapsed < Duration::from_secs(5),
            };
            let health = send(&addr, &[get("/health", None)], Duration::ZERO).await;
            let healthy = health.status == Some(200) && health.json()["status"] == "ok";
            let answer = match got.status {
                Some(s) => format!("{s} {}", got.kind()),
                None => format!("closed after {:.1} s", got.elapsed.as_secs_f64()),
            };
            let mut message = got.message();
            if message.len() > 70 {
                let mut cut = 70;
                while !message.is_char_boundary(cut) {
                    cut -= 1;
                }
                message.truncate(cut);
                message.push('…');
            }
            rows.push(format!(
                "| {} | {} | {} | {} | {} |",
                c.name,
                c.want,
                answer.trim(),
                message,
                if healthy { "200 ok" } else { "UNHEALTHY" }
            ));
            if !ok || !healthy {
                failures.push(format!(
                    "{}: want {}, got {:?} {} (health {:?})",
                    c.name, c.want, got.status, got.body, health.status
                ));
            }
        }
        // The slow bodies were cut by the body read timeout, not by the
        // (longer) request timeout.
        for r in rows.iter().filter(|r| r.contains("408")) {
            assert!(r.contains("body read timeout"), "{r}");
        }
        report(format!(
            "\n| case | want | answer | message | /health after |\n|---|---|---|---|---|\n{}\n{} cases, {} failed",
            rows.join("\n"),
            cases.len(),
            failures.len()
        ));
        assert!(failures.is_empty(), "{}", failures.join("\n"));

        // The binary payload was stored byte for byte; nothing else was.
        let c = http();
        let u = &d.url;
        let (s, v) = eventually(WAIT, "the binary job in the store", || {
            let c = c.clone();
            let url = format!("{u}/acme/stats");
            async move {
                let (s, v) = json(c.get(url).bearer_auth(ACME)).await;
                (v["jobtypes"].as_array().map(Vec::len) == Some(1)).then_some((s, v))
            }
        })
        .await;
        assert_eq!(s, 200);
        assert_eq!(
            v["jobtypes"],
            json!([{"type": "bin", "waiting": 1, "scheduled": 0, "running": 0, "blocked": 0, "archived": {}, "paused": false}])
        );
        let (_, v) = json(c.get(format!("{u}/stats")).bearer_auth(ADMIN)).await;
        assert_eq!(v["clients"].as_array().unwrap().len(), 1, "{v}");
        assert!(!d.log().contains("panicked"), "{}", d.log());
    });
}

/// A request for `method` and `path` of `/openapi.json`, with the path's
/// parameters filled in (`client` as given, `type` and `id` naming the
/// victim's jobtype and job) and a body that names the victim's things.
fn route_request(
    c: &reqwest::Client,
    base: &str,
    method: &str,
    path: &str,
    client: &str,
    lease: &str,
) -> reqwest::RequestBuilder {
    let url = format!(
        "{base}{}",
        path.replace("{client}", client)
            .replace("{type}", "r")
            .replace("{id}", "r-1")
            .replace("{name}", "nightly")
    );
    let m = reqwest::Method::from_bytes(method.to_ascii_uppercase().as_bytes()).unwrap();
    let r = c.request(m, url);
    match path {
        "/{client}/jobs/heartbeat" => r.json(&json!({"lease": lease, "ids": ["r-1"]})),
        "/{client}/jobs/finish" => {
            r.json(&json!({"lease": lease, "jobs": [{"id": "r-1", "status": 200}]}))
        }
        "/{client}/jobs/{id}/update" => r.json(&json!({"lease": lease, "data": "pwned"})),
        "/{client}/jobs/cancel" => r.json(&json!({"ids": ["secret-1", "r-1"]})),
        "/{client}/jobs/rerun" | "/{client}/jobs/delete" => {
            r.json(&json!({"ids": ["secret-1", "r-1"]}))
        }
        "/{client}/jobs/edit" => r.json(&json!({"edits": [{"id": "secret-1", "priority": 9}]})),
        "/{client}/jobs" => r.query(&[("state", "scheduled")]),
        "/{client}/job/{type}/add" => r.body("pwned"),
        "/{client}/handler/add/{type}/add" => r.json(&json!({"method": "remote", "body": ""})),
        "/{client}/schedules/{name}" if method == "put" => {
            r.json(&json!({"rule": "* * * * * *", "type": "r", "data": "pwned"}))
        }
        _ => r,
    }
}

/// With tokens configured a client reaches none of another client's jobs,
/// handlers or workers: through every route of `/openapi.json` with the
/// other client's name (403), through its own paths naming the other's
/// ids, jobtypes and lease (404, 409 or nothing), and through a runner's
/// `J:` lines (they add jobs of the runner's own client only).
#[test]
fn a_client_reaches_nothing_of_another_client() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let cfg = hostile_config(dir.path(), "allow_process_handlers = true");
        let d = DaemonProc::start(
            &dir.path().join("data"),
            &Start::store(None)
                .arg("--config")
                .arg(cfg.to_str().unwrap())
                .arg("--poll")
                .arg("100ms"),
        );
        let c = http();
        let u = &d.url;
        let acme = |r: reqwest::RequestBuilder| r.bearer_auth(ACME);
        let globex = |r: reqwest::RequestBuilder| r.bearer_auth(GLOBEX);
        let admin = |r: reqwest::RequestBuilder| r.bearer_auth(ADMIN);

        // acme's things: a scheduled job, an http handler, a remote jobtype
        // with one job held by acme's worker and one waiting.
        let (s, v) = json(acme(c.post(format!("{u}/acme/job/t/add")).json(
            &json!([{"id": "secret-1", "data": "acme secret", "delay_ms": 600000}]),
        )))
        .await;
        assert_eq!(s, 200, "{v}");
        let (s, v) = json(acme(
            c.post(format!("{u}/acme/handler/add/h/add?method=http"))
                .body("http://127.0.0.1:1/acme"),
        ))
        .await;
        assert_eq!(s, 200, "{v}");
        let (s, v) = json(acme(
            c.post(format!("{u}/acme/handler/add/r/add?method=remote"))
                .body(""),
        ))
        .await;
        assert_eq!(s, 200, "{v}");
        let (s, v) = json(acme(
            c.post(format!("{u}/acme/job/r/add"))
                .json(&json!([{"id": "r-1", "data": "acme r-1"}])),
        ))
        .await;
        assert_eq!(s, 200, "{v}");
        let (s, got) = json(acme(
            c.post(format!("{u}/acme/job/r/get?max=1&wait=10000&worker=acme-w")),
        ))
        .await;
        assert_eq!(s, 200, "{got}");
        assert_eq!(got["jobs"][0]["id"], "r-1", "{got}");
        let lease = got["lease"].as_str().unwrap().to_owned();
        let (s, v) = json(acme(
            c.post(format!("{u}/acme/job/r/add"))
                .json(&json!([{"id": "r-2", "data": "acme r-2"}])),
        ))
        .await;
        assert_eq!(s, 200, "{v}");
        eventually(WAIT, "acme's jobs in the store", || {
            let c = c.clone();
            let url = format!("{u}/acme/stats");
            async move {
                let (_, v) = json(c.get(url).bearer_auth(ACME)).await;
                let waiting: u64 = v["jobtypes"]
                    .as_array()?
                    .iter()
                    .map(|t| {
                        t["waiting"].as_u64().unwrap_or(0) + t["scheduled"].as_u64().unwrap_or(0)
                    })
                    .sum();
                (waiting == 2).then_some(v)
            }
        })
        .await;

        // 1. Every route of the API, as globex with acme's name, and
        //    without a token. Routes without a client are admin-only or
        //    public, and must be listed here: a new one fails until it is.
        let (s, api) = json(c.get(format!("{u}/openapi.json"))).await;
        assert_eq!(s, 200);
        let public = ["/health", "/openapi.json"];
        let admin_only = ["/stats", "/metrics", "/jobs"];
        // Answers any valid token about that token only.
        let own = ["/whoami"];
        let mut table = Vec::new();
        let mut routes = 0;
        for (path, item) in api["paths"].as_object().unwrap() {
            for method in item.as_object().unwrap().keys() {
                if !["get", "post", "put", "delete", "patch"].contains(&method.as_str()) {
                    continue;
                }
                routes += 1;
                if path.contains("{client}") {
                    let (s, v) =
                        json(globex(route_request(&c, u, method, path, "acme", &lease))).await;
                    assert_eq!(
                        (s, v["error"]["kind"].as_str()),
                        (403, Some("forbidden")),
                        "{method} {path} with another client's token: {v}"
                    );
                    let (s2, v2) = json(route_request(&c, u, method, path, "acme", &lease)).await;
                    assert_eq!(s2, 401, "{method} {path} without a token: {v2}");
                    table.push(format!("| {method} {path} | {s} | {s2} |"));
                } else if admin_only.contains(&path.as_str()) {
                    let (s, v) = json(globex(route_request(&c, u, method, path, "", ""))).await;
                    assert_eq!(s, 403, "{method} {path} with a client token: {v}");
                    let (s2, _) = json(route_request(&c, u, method, path, "", "")).await;
                    assert_eq!(s2, 401, "{method} {path} without a token");
                    table.push(format!("| {method} {path} (admin) | {s} | {s2} |"));
                } else if own.contains(&path.as_str()) {
                    let (s, v) = json(globex(route_request(&c, u, method, path, "", ""))).await;
                    assert_eq!(s, 200, "{method} {path} with a client token: {v}");
                    assert_eq!(v["client"], "globex", "{method} {path}: {v}");
                    assert_eq!(v["admin"], false, "{method} {path}: {v}");
                    assert!(
                        !v.to_string().contains("acme"),
                        "{path} names another client: {v}"
                    );
                    let (s2, _) = json(route_request(&c, u, method, path, "", "")).await;
                    assert_eq!(s2, 401, "{method} {path} without a token");
                    table.push(format!("| {method} {path} (own) | {s} | {s2} |"));
                } else {
                    assert!(
                        public.contains(&path.as_str()),
                        "{method} {path} names no client and is neither admin-only nor \
                         public: decide who may call it, and list it in this test"
                    );
                    let (s, v) = json(route_request(&c, u, method, path, "", "")).await;
                    assert_eq!(s, 200);
                    assert!(
                        !v.to_string().contains("secret"),
                        "{path} shows client data"
                    );
                    table.push(format!("| {method} {path} (public) | {s} | {s} |"));
                }
            }
        }
        report(format!(
            "\n| route, as globex on acme's path | globex token | no token |\n|---|---|---|\n{}\n{routes} routes checked",
            table.join("\n")
        ));
        assert!(routes >= 18, "only {routes} routes in /openapi.json");

        // 2. globex on its own paths, naming acme's ids, jobtypes and lease.
        for id in ["secret-1", "acme-secret-1", "r-1", "acme-r-1"] {
            let (s, v) = json(globex(c.get(format!("{u}/globex/jobs/{id}")))).await;
            assert_eq!(s, 404, "globex reads acme's {id}: {v}");
        }
        let (s, v) = json(globex(
            c.post(format!("{u}/globex/jobs/cancel"))
                .json(&json!({"ids": ["secret-1", "acme-secret-1", "r-2", "acme-r-2"]})),
        ))
        .await;
        assert_eq!((s, v["cancelled"].clone()), (200, json!([])), "{v}");
        for jt in ["h", "acme-h"] {
            let (s, _) = json(globex(c.get(format!("{u}/globex/handler/get/{jt}")))).await;
            assert_eq!(s, 404, "globex reads acme's handler {jt}");
            let (s, _) = json(globex(
                c.delete(format!("{u}/globex/handler/del/{jt}/delete")),
            ))
            .await;
            assert_eq!(s, 404, "globex deletes acme's handler {jt}");
        }
        let (s, v) = json(globex(
            c.post(format!("{u}/globex/handler/add/h/add?method=remote"))
                .body(""),
        ))
        .await;
        assert_eq!(s, 200, "globex sets its own h: {v}");
        // acme's schedule: globex's paths never reach it, by either name.
        let (s, v) = json(acme(
            c.put(format!("{u}/acme/schedules/nightly"))
                .json(&json!({"rule": "0 6 * * *", "type": "r", "data": "acme nightly"})),
        ))
        .await;
        assert_eq!(s, 200, "{v}");
        let (s, v) = json(globex(c.get(format!("{u}/globex/schedules")))).await;
        assert_eq!((s, v["schedules"].clone()), (200, json!([])), "{v}");
        // acme's unique key: globex's add with the same key and jobtype
        // name is its own job, never a duplicate naming acme's.
        let (s, v) = json(acme(c.post(format!("{u}/acme/job/t/add")).json(
            &json!([{"id": "keyed", "data": "acme", "delay_ms": 600000, "unique": {"key": "k"}}]),
        )))
        .await;
        assert_eq!((s, v.get("duplicates")), (200, None), "{v}");
        let (s, v) = json(globex(c.post(format!("{u}/globex/job/t/add")).json(
            &json!([{"id": "keyed2", "data": "globex", "delay_ms": 600000,
                     "unique": {"key": "k", "window_ms": 600000, "on_conflict": "replace_data"}}]),
        )))
        .await;
        assert_eq!((s, v.get("duplicates")), (200, None), "{v}");
        let (s, v) = json(acme(c.get(format!("{u}/acme/jobs/keyed")))).await;
        assert_eq!((s, v["data"].as_str()), (200, Some("acme")), "{v}");
        for name in ["nightly", "acme-nightly"] {
            for (method, tail) in [
                ("GET", ""),
                ("POST", "/pause"),
                ("POST", "/resume"),
                ("POST", "/trigger"),
            ] {
                let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
                let (s, v) = json(globex(
                    c.request(m, format!("{u}/globex/schedules/{name}{tail}")),
                ))
                .await;
                assert_eq!(s, 404, "globex {method} {name}{tail}: {v}");
            }
            let (s, v) = json(globex(c.delete(format!("{u}/globex/schedules/{name}")))).await;
            assert_eq!((s, v["deleted"].as_bool()), (200, Some(false)), "{v}");
        }
        let (s, v) = json(acme(c.get(format!("{u}/acme/schedules/nightly")))).await;
        assert_eq!(
            (s, v["paused"].as_bool(), v["version"].as_u64()),
            (200, Some(false), Some(1)),
            "{v}"
        );
        for (what, path, body) in [
            (
                "heartbeat",
                "/globex/jobs/heartbeat",
                json!({"lease": lease, "ids": ["r-1"]}),
            ),
            (
                "heartbeat",
                "/globex/jobs/heartbeat",
                json!({"lease": lease, "ids": ["acme-r-1"]}),
            ),
            (
                "finish",
                "/globex/jobs/finish",
                json!({"lease": lease, "jobs": [{"id": "r-1", "status": 200, "jobs": [{"type": "t", "data": "x"}]}]}),
            ),
            (
                "update",
                "/globex/jobs/r-1/update",
                json!({"lease": lease, "data": "pwned"}),
            ),
            (
                "update",
                "/globex/jobs/acme-r-1/update",
                json!({"lease": lease, "data": "pwned"}),
            ),
        ] {
            let (s, v) = json(globex(c.post(format!("{u}{path}")).json(&body))).await;
            assert_eq!(
                (s, v["error"]["field"].as_str()),
                (403, Some("lease")),
                "globex {what} of acme's job with acme's lease: {v}"
            );
        }
        for types in ["r", "acme-r", "r,acme-r"] {
            let (s, v) = json(globex(
                c.post(format!("{u}/globex/job/{types}/get?max=10&worker=globex-w")),
            ))
            .await;
            assert_eq!((s, v["jobs"].clone()), (200, json!([])), "{v}");
        }
        let (s, v) = json(globex(c.post(format!(
            "{u}/globex/job/r/get?max=10&lease={}",
            urlencode(&lease)
        ))))
        .await;
        assert_eq!(
            (s, v["error"]["field"].as_str()),
            (403, Some("lease")),
            "fetch with acme's lease: {v}"
        );
        let (s, v) = json(globex(
            c.post(format!("{u}/globex/job/t/add"))
                .json(&json!([{"id": "secret-1", "data": "globex data"}])),
        ))
        .await;
        assert_eq!((s, v["existing"].clone()), (200, json!([])), "{v}");
        let (_, v) = json(globex(c.get(format!("{u}/globex/workers")))).await;
        assert!(!v.to_string().contains("acme"), "{v}");
        let (_, v) = json(globex(c.get(format!("{u}/globex/handlers")))).await;
        assert_eq!(v["handlers"].as_array().unwrap().len(), 1, "{v}");
        let (_, v) = json(globex(c.get(format!("{u}/globex/stats")))).await;
        assert!(!v.to_string().contains("acme"), "{v}");
        // The management routes on globex's own paths: acme's jobs are
        // neither listed, run again, deleted, edited nor paused.
        for state in ["waiting", "scheduled", "running", "archived"] {
            let (s, v) = json(globex(
                c.get(format!("{u}/globex/jobs?state={state}&data=true")),
            ))
            .await;
            assert_eq!(s, 200, "{v}");
            assert!(!v.to_string().contains("acme"), "globex lists {state}: {v}");
        }
        // (globex has a `secret-1` of its own: acme's ids as globex could
        // spell them.)
        let acme_ids = json!({"ids": ["acme-secret-1", "r-2", "acme-r-2", "acme-r-1"]});
        for action in ["rerun", "delete"] {
            let (s, v) = json(globex(
                c.post(format!("{u}/globex/jobs/{action}")).json(&acme_ids),
            ))
            .await;
            assert_eq!(
                (s, v["done"].clone()),
                (200, json!([])),
                "globex {action}: {v}"
            );
            let filter = json!({"filter": {"state": "running"}, "dry_run": true});
            let (s, v) = json(globex(
                c.post(format!("{u}/globex/jobs/cancel")).json(&filter),
            ))
            .await;
            assert_eq!(
                (s, v["matched"].clone()),
                (200, json!(0)),
                "acme's running job is not globex's: {v}"
            );
        }
        let (s, v) = json(globex(c.post(format!("{u}/globex/jobs/edit")).json(
            &json!({"edits": [{"id": "r-2", "priority": 9}, {"id": "acme-secret-1", "data": "pwned"}]}),
        )))
        .await;
        assert_eq!((s, v["edited"].clone()), (200, json!([])), "{v}");
        let (s, v) = json(globex(c.post(format!("{u}/globex/jobtypes/t/pause")))).await;
        assert_eq!(s, 200, "globex pauses its own t: {v}");
        let (_, v) = json(acme(c.get(format!("{u}/acme/paused")))).await;
        assert_eq!(v["paused"], json!([]), "acme's t is not paused: {v}");
        let (_, v) = json(globex(c.get(format!("{u}/globex/failures")))).await;
        assert!(!v.to_string().contains("acme"), "{v}");

        // acme's things are as they were.
        let (s, v) = json(acme(c.get(format!("{u}/acme/jobs/secret-1")))).await;
        assert_eq!(
            (s, v["state"].as_str(), v["data"].as_str()),
            (200, Some("scheduled"), Some("acme secret")),
            "{v}"
        );
        let (s, v) = json(acme(c.get(format!("{u}/acme/handler/get/h")))).await;
        assert_eq!((s, v["method"].as_str()), (200, Some("http")), "{v}");
        let (s, v) = json(acme(c.get(format!("{u}/acme/jobs/r-1")))).await;
        assert_eq!(
            (s, v["state"].as_str(), v["data"].as_str()),
            (200, Some("running"), Some("acme r-1")),
            "{v}"
        );
        let (s, v) = json(acme(
            c.post(format!("{u}/acme/jobs/heartbeat"))
                .json(&json!({"lease": lease, "ids": ["r-1"]})),
        ))
        .await;
        assert_eq!((s, v["held"].clone()), (200, json!(["r-1"])), "{v}");
        let (_, v) = json(acme(c.get(format!("{u}/acme/workers")))).await;
        assert_eq!(v["workers"][0]["worker"], "acme-w", "{v}");
        assert_eq!(v["workers"][0]["fetched"], 1, "{v}");
        assert!(!v.to_string().contains("globex"), "{v}");
        let (s, v) = json(acme(
            c.post(format!("{u}/acme/jobs/finish"))
                .json(&json!({"lease": lease, "jobs": [{"id": "r-1", "status": 200}]})),
        ))
        .await;
        assert_eq!((s, v["finished"].clone()), (200, json!(["r-1"])), "{v}");
        let (s, v) = json(acme(c.post(format!("{u}/acme/job/r/get?max=10")))).await;
        assert_eq!(s, 200);
        assert_eq!(
            v["jobs"][0]["id"], "r-2",
            "acme's waiting job is still there: {v}"
        );

        // 3. J: lines: a runner of acme's naming globex's jobtypes adds
        //    jobs of acme (or none), never of globex.
        let (s, v) = json(admin(
            c.post(format!("{u}/acme/handler/add/spawn/add?method=process"))
                .body(
                    "printf 'J: globex-x|a\\nJ: globex|b\\nJ: ../globex/x|c\\nJ: -globex-x|d\\nJ: globex/x|e\\nJ: x|f\\n'",
                ),
        ))
        .await;
        assert_eq!(s, 200, "{v}");
        let (s, v) = json(acme(
            c.post(format!("{u}/acme/job/spawn/add"))
                .json(&json!([{"id": "spawner", "data": "go"}])),
        ))
        .await;
        assert_eq!(s, 200, "{v}");
        let job = eventually(WAIT, "the spawner archived", || {
            let c = c.clone();
            let url = format!("{u}/acme/jobs/spawner");
            async move {
                let (_, v) = json(c.get(url).bearer_auth(ACME)).await;
                (v["state"] == "archived").then_some(v)
            }
        })
        .await;
        assert_eq!(job["result"]["code"], "ok", "{job}");
        let output = job["result"]["output"].as_str().unwrap_or_default();
        assert_eq!(output.matches("[jobstore] new job ").count(), 3, "{output}");
        assert_eq!(output.matches(" dropped: ").count(), 3, "{output}");
        let stats = eventually(WAIT, "acme's J: jobs in the store", || {
            let c = c.clone();
            let url = format!("{u}/stats");
            async move {
                let (_, v) = json(c.get(url).bearer_auth(ADMIN)).await;
                let acme = v["clients"]
                    .as_array()?
                    .iter()
                    .find(|c| c["client"] == "acme")?
                    .clone();
                let types: Vec<&str> = acme["jobtypes"]
                    .as_array()?
                    .iter()
                    .filter_map(|t| t["type"].as_str())
                    .collect();
                ["globex-x", "globex", "x"]
                    .iter()
                    .all(|t| types.contains(t))
                    .then_some(v.clone())
            }
        })
        .await;
        for client in stats["clients"].as_array().unwrap() {
            let types: Vec<&str> = client["jobtypes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["type"].as_str().unwrap())
                .collect();
            println!("{}: {types:?}", client["client"]);
            if client["client"] == "globex" {
                assert_eq!(types, ["t"], "J: lines reached globex: {stats}");
            } else {
                assert_eq!(client["client"], "acme", "{stats}");
                for t in ["globex-x", "globex", "x"] {
                    assert!(types.contains(&t), "acme lacks {t}: {stats}");
                }
            }
        }
    });
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// How a caller tries to make the daemon run `touch MARKER`.
fn attempts(marker: &std::path::Path) -> Vec<(&'static str, &'static str, Value)> {
    let cmd = format!("touch {}", marker.display());
    vec![
        ("query form", "process", json!(cmd)),
        ("JSON", "process", json!({"method": "process", "body": cmd})),
        (
            "JSON, lang alias",
            "process",
            json!({"lang": "process", "body": cmd}),
        ),
        (
            "JSON, long-lived worker (eid)",
            "process",
            json!({"method": "process", "body": cmd, "eid": "ctx"}),
        ),
        (
            "JSON, 'Process'",
            "process",
            json!({"method": "Process", "body": cmd}),
        ),
        (
            "JSON, ' process'",
            "process",
            json!({"method": " process", "body": cmd}),
        ),
        (
            "JSON, 'sh'",
            "process",
            json!({"method": "sh", "body": cmd}),
        ),
        (
            "http handler with before/before_each/after_each commands",
            "http",
            json!({"method": "http", "body": "http://127.0.0.1:1/", "before": cmd, "before_each": cmd, "after_each": cmd}),
        ),
        (
            "remote handler with before commands",
            "remote",
            json!({"method": "remote", "body": cmd, "before": cmd, "before_each": cmd}),
        ),
    ]
}

/// A non-admin, or anyone while process handlers are disabled, cannot make
/// the daemon run a command: no way of setting a handler gets a `process`
/// handler stored, and jobs of the jobtypes tried never run one. The admin
/// with `--allow-process-handlers` can (the control that shows the marker
/// files would appear).
#[test]
fn only_the_admin_runs_commands_and_only_when_allowed() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let markers = dir.path().join("markers");
        std::fs::create_dir_all(&markers).unwrap();
        let c = http();
        // (daemon, process handlers allowed, tokens configured)
        let setups = [
            ("tokens, process handlers off", false, true),
            ("tokens, process handlers on", true, true),
            ("no tokens, process handlers on", true, false),
        ];
        let mut table = Vec::new();
        let mut ran_ok = 0;
        for (n, (name, allow, tokens)) in setups.iter().enumerate() {
            let ddir = dir.path().join(format!("d{n}"));
            std::fs::create_dir_all(&ddir).unwrap();
            let extra = format!("allow_process_handlers = {allow}");
            let mut start = Start::store(None).arg("--poll").arg("100ms");
            let cfg;
            if *tokens {
                cfg = hostile_config(&ddir, &extra);
            } else {
                cfg = ddir.join("jobstore.toml");
                std::fs::write(&cfg, &extra).unwrap();
            }
            start = start.arg("--config").arg(cfg.to_str().unwrap());
            let d = DaemonProc::start(&ddir.join("data"), &start);
            let u = &d.url;
            let callers: Vec<(&str, Option<&str>)> = if *tokens {
                vec![
                    ("no token", None),
                    ("wrong token", Some("wrong-token")),
                    ("acme", Some(ACME)),
                    ("globex", Some(GLOBEX)),
                    ("admin", Some(ADMIN)),
                ]
            } else {
                vec![("anyone", None)]
            };
            let mut k = 0;
            let mut expect_run = Vec::new();
            let mut expect_none = Vec::new();
            for (caller, token) in &callers {
                let marker_base = markers.join(format!("d{n}"));
                for (how, kind, spec) in attempts(&marker_base) {
                    k += 1;
                    let jt = format!("cmd{k}");
                    let marker = markers.join(format!("d{n}-{k}"));
                    let spec_text = spec.to_string().replace(
                        &marker_base.display().to_string(),
                        &marker.display().to_string(),
                    );
                    let mut r = if how == "query form" {
                        let cmd: String = serde_json::from_str(&spec_text).unwrap();
                        c.post(format!("{u}/acme/handler/add/{jt}/add?method=process"))
                            .body(cmd)
                    } else {
                        c.post(format!("{u}/acme/handler/add/{jt}/add"))
                            .header("content-type", "application/json")
                            .body(spec_text)
                    };
                    if let Some(t) = token {
                        r = r.bearer_auth(t);
                    }
                    let (s, v) = json(r).await;
                    let may =
                        kind == "process" && *allow && *caller == "admin" && !how.contains('\'');
                    if kind == "process" {
                        if may {
                            assert_eq!(s, 200, "{name}: {caller} {how}: {v}");
                            expect_run.push((jt.clone(), marker.clone()));
                        } else {
                            assert!(
                                (400..500).contains(&s),
                                "{name}: {caller} {how} got {s}: {v}"
                            );
                            assert!(v["error"]["message"].as_str().is_some(), "{v}");
                            expect_none.push((jt.clone(), marker.clone()));
                        }
                    } else {
                        // http and remote handlers are not commands: their
                        // command fields are refused, named, and never run.
                        let unauthorized = *tokens && !matches!(*caller, "acme" | "admin");
                        if unauthorized {
                            assert!((400..500).contains(&s), "{name}: {caller} {how}: {v}");
                        } else {
                            assert_eq!(
                                (s, v["error"]["field"].as_str()),
                                (400, Some("before")),
                                "{name}: {caller} {how}: {v}"
                            );
                        }
                        expect_none.push((jt.clone(), marker.clone()));
                    }
                    table.push(format!(
                        "| {name} | {caller} | {how} | {s} {} |",
                        v["error"]["kind"].as_str().unwrap_or("")
                    ));
                }
            }
            // A stored handler of a jobtype refused above is never a
            // process handler.
            for (jt, _) in &expect_none {
                let (s, v) = json(
                    c.get(format!("{u}/acme/handler/get/{jt}"))
                        .bearer_auth(ADMIN),
                )
                .await;
                assert!(
                    s == 404 || (s == 200 && v["method"] != "process"),
                    "{name}: {jt} has {v}"
                );
            }
            // A job for every jobtype tried; wait until each was handed
            // out (so its handler, if any, ran), or archived.
            for (jt, _) in expect_run.iter().chain(&expect_none) {
                let (s, v) = json(
                    c.post(format!("{u}/acme/job/{jt}/add"))
                        .bearer_auth(ADMIN)
                        .json(&json!([{"id": format!("{jt}-job"), "data": "x"}])),
                )
                .await;
                assert_eq!(s, 200, "{v}");
            }
            for (jt, _) in expect_run.iter().chain(&expect_none) {
                let remote = c
                    .get(format!("{u}/acme/handler/get/{jt}"))
                    .bearer_auth(ADMIN)
                    .send()
                    .await
                    .unwrap()
                    .json::<Value>()
                    .await
                    .unwrap_or(Value::Null)["method"]
                    == "remote";
                if remote {
                    continue; // the daemon never runs remote jobtypes itself
                }
                eventually(WAIT, "the job handed out", || {
                    let c = c.clone();
                    let url = format!("{u}/acme/jobs/{jt}-job");
                    async move {
                        let (_, v) = json(c.get(url).bearer_auth(ADMIN)).await;
                        (v["attempts"].as_u64().unwrap_or(0) >= 1 && v["state"] != "running")
                            .then_some(())
                    }
                })
                .await;
            }
            for (jt, m) in &expect_run {
                assert!(m.exists(), "{name}: the admin's {jt} did not run");
                ran_ok += 1;
            }
            for (jt, m) in &expect_none {
                assert!(!m.exists(), "{name}: {jt} ran a command");
            }
            table.push(format!(
                "| {name} | | commands run: {} of {} tries | |",
                expect_run.len(),
                expect_run.len() + expect_none.len()
            ));
        }
        report(format!(
            "\n| daemon | caller | how | answer |\n|---|---|---|---|\n{}",
            table.join("\n")
        ));
        assert_eq!(
            ran_ok, 4,
            "the admin's four valid forms ran on the allowing daemon"
        );
    });
}
