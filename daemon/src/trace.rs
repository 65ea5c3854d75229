//! W3C trace context, from add to run.
//!
//! An add carries the producer's trace context (a `traceparent` header,
//! and `tracestate`; or per job in a JSON add); the journal and the store
//! keep it with the job ([`jobstore_api::TraceContext`]); the run passes
//! on the context of [`run_trace`]: `TRACEPARENT`/`TRACESTATE` in a
//! process's environment, `traceparent`/`tracestate` in a long-lived
//! worker's job line, in the headers of an `http` handler's request and in
//! a remote worker's fetch answer. Jobs a run adds (`J:` lines, a remote
//! worker's new jobs without a context of their own) are added with it too.

use axum::http::HeaderMap;
use jobstore_api::{Job, TraceContext};

use crate::events::RunStart;

/// The trace context a run of `job` continues: the one the job was added
/// with, or, while spans are exported, the run's own span (`run`, made
/// when the run was handed out, a child of the job's context: see
/// [`crate::events::context`]) with the job's `tracestate`. Every runner,
/// the remote workers' fetch and the jobs a run adds take it from here.
pub fn run_trace(job: &Job, run: Option<&RunStart>) -> Option<TraceContext> {
    match run.and_then(|r| r.run) {
        Some(span) => Some(TraceContext {
            traceparent: span.traceparent(),
            tracestate: job.trace.as_ref().and_then(|t| t.tracestate.clone()),
        }),
        None => job.trace.clone(),
    }
}

/// What an HTTP add's headers say of its trace context.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FromHeaders {
    /// The context the jobs are added with.
    pub context: Option<TraceContext>,
    /// The header that was ignored for being malformed, if one was.
    pub ignored: Option<&'static str>,
}

/// The trace context of an HTTP add's headers, read as W3C Trace Context
/// tells a receiver to: one valid `traceparent` header, else none (a
/// malformed or repeated one is ignored, and `tracestate` with it); the
/// `tracestate` headers joined by commas, dropped (keeping the
/// traceparent) if they are not valid. A job is never refused for its
/// trace context here: the header is the tracing system's, not the
/// producer's data (a JSON add's per-job fields are, and are checked as
/// such).
pub fn from_headers(headers: &HeaderMap) -> FromHeaders {
    let ignored = |what| FromHeaders {
        context: None,
        ignored: Some(what),
    };
    let mut parents = headers.get_all("traceparent").iter();
    let parent = match (parents.next(), parents.next()) {
        (None, _) => return FromHeaders::default(),
        (Some(p), None) => p,
        (Some(_), Some(_)) => return ignored("traceparent"),
    };
    let Some(ctx) = parent
        .to_str()
        .ok()
        .and_then(|p| TraceContext::parse(p.trim_matches([' ', '\t']), None).ok())
    else {
        return ignored("traceparent");
    };
    let states: Option<Vec<&str>> = headers
        .get_all("tracestate")
        .iter()
        .map(|v| v.to_str().ok())
        .collect();
    let state = states.map(|v| v.join(","));
    match state {
        Some(s) if s.trim_matches([' ', '\t', ',']).is_empty() => FromHeaders {
            context: Some(ctx),
            ignored: None,
        },
        Some(s) if TraceContext::parse(&ctx.traceparent, Some(&s)).is_ok() => FromHeaders {
            context: Some(TraceContext {
                tracestate: Some(s),
                ..ctx
            }),
            ignored: None,
        },
        _ => FromHeaders {
            context: Some(ctx),
            ignored: Some("tracestate"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn headers(pairs: &[(&str, &[u8])]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                axum::http::HeaderValue::from_bytes(v).unwrap(),
            );
        }
        h
    }

    fn ctx(state: Option<&str>) -> Option<TraceContext> {
        Some(TraceContext::parse(TP, state).unwrap())
    }

    #[test]
    fn a_run_continues_its_own_span_while_spans_are_exported() {
        let job = Job {
            id: "acme-1".into(),
            jobtype: "acme-t".into(),
            data: Vec::new(),
            priority: 0,
            dt: 0,
            lock: String::new(),
            attempts: 1,
            create_dt: 0,
            done_dt: None,
            result: None,
            cancel_requested: false,
            tags: Vec::new(),
            history: Vec::new(),
            claimed_due: None,
            flow: None,
            trace: ctx(Some("a=1")),
        };
        assert_eq!(run_trace(&job, None), job.trace);
        let no_span = RunStart {
            began: std::time::SystemTime::now(),
            trace: Some(TP.into()),
            run: None,
        };
        assert_eq!(run_trace(&job, Some(&no_span)), job.trace);
        let span = crate::events::JobContext::of(&job.id, Some(TP))
            .unwrap()
            .run();
        let with_span = RunStart {
            run: Some(span),
            ..no_span
        };
        let got = run_trace(&job, Some(&with_span)).unwrap();
        assert_eq!(got.traceparent, span.traceparent());
        assert_eq!(got.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_ne!(got.parent_id(), "00f067aa0ba902b7");
        assert_eq!(got.tracestate.as_deref(), Some("a=1"));
    }

    #[test]
    fn headers_are_read_as_w3c_says() {
        let none = FromHeaders::default();
        assert_eq!(from_headers(&headers(&[])), none);
        assert_eq!(from_headers(&headers(&[("tracestate", b"a=1")])), none);
        let got = from_headers(&headers(&[("traceparent", TP.as_bytes())]));
        assert_eq!(
            got,
            FromHeaders {
                context: ctx(None),
                ignored: None
            }
        );
        let padded = format!(" {TP}\t");
        let got = from_headers(&headers(&[("traceparent", padded.as_bytes())]));
        assert_eq!(got.context, ctx(None));
        // Several tracestate headers are one list.
        let got = from_headers(&headers(&[
            ("traceparent", TP.as_bytes()),
            ("tracestate", b"a=1"),
            ("tracestate", b"b=2 "),
        ]));
        assert_eq!(
            got,
            FromHeaders {
                context: ctx(Some("a=1,b=2 ")),
                ignored: None
            }
        );
        let got = from_headers(&headers(&[
            ("traceparent", TP.as_bytes()),
            ("tracestate", b""),
        ]));
        assert_eq!(
            got,
            FromHeaders {
                context: ctx(None),
                ignored: None
            }
        );
    }

    #[test]
    fn malformed_headers_are_ignored_and_said_so() {
        let upper = TP.to_uppercase();
        for bad in [&b"garbage"[..], upper.as_bytes(), b"\xff\xfe"] {
            let got = from_headers(&headers(&[("traceparent", bad), ("tracestate", b"a=1")]));
            assert_eq!(
                got,
                FromHeaders {
                    context: None,
                    ignored: Some("traceparent")
                }
            );
        }
        let twice = headers(&[
            ("traceparent", TP.as_bytes()),
            ("traceparent", TP.as_bytes()),
        ]);
        assert_eq!(from_headers(&twice).ignored, Some("traceparent"));
        assert_eq!(from_headers(&twice).context, None);
        for bad in [&b"A=1"[..], b"a=1,a=2", b"\xff=1"] {
            let got = from_headers(&headers(&[
                ("traceparent", TP.as_bytes()),
                ("tracestate", bad),
            ]));
            assert_eq!(
                got,
                FromHeaders {
                    context: ctx(None),
                    ignored: Some("tracestate")
                }
            );
        }
    }
}
