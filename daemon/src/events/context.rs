//! Trace contexts of jobs: which trace a job's spans belong to, and which
//! span they are children of.
//!
//! A job stored with a W3C `traceparent` (`00-<trace id>-<span id>-<flags>`)
//! belongs to that trace: its spans are children of the producer's span.
//! A job stored without one, or with one that does not parse, gets a
//! trace of its own, derived from its store id (the first 16 bytes of the
//! id's SHA-256), whose root is the job's `add` span (the next 8 bytes):
//! every daemon derives the same ids, so a job's spans form one trace
//! however many daemons it passes through. A producer's `traceparent`
//! whose sampled flag is off is respected: its jobs export no span.

use opentelemetry::trace::{SpanId, TraceFlags, TraceId};
use sha2::{Digest, Sha256};

/// A parsed W3C `traceparent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace.
    pub trace_id: TraceId,
    /// The parent span.
    pub span_id: SpanId,
    /// The trace flags.
    pub flags: TraceFlags,
}

impl TraceParent {
    /// Parses `00-<32 hex>-<16 hex>-<2 hex>` (a later version's longer
    /// value is read by its first four fields, as the W3C spec asks). All
    /// zero ids, upper-case hex and version `ff` are refused.
    pub fn parse(s: &str) -> Option<TraceParent> {
        let mut parts = s.split('-');
        let version = parts.next()?;
        let trace = parts.next()?;
        let span = parts.next()?;
        let flags = parts.next()?;
        let rest = parts.next();
        let hex = |p: &str, n: usize| {
            p.len() == n
                && p.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if !hex(version, 2)
            || version == "ff"
            || !hex(trace, 32)
            || !hex(span, 16)
            || !hex(flags, 2)
        {
            return None;
        }
        if version == "00" && rest.is_some() {
            return None;
        }
        let trace_id = TraceId::from_hex(trace).ok()?;
        let span_id = SpanId::from_hex(span).ok()?;
        if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
            return None;
        }
        let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()?);
        Some(TraceParent {
            trace_id,
            span_id,
            flags,
        })
    }

    /// The `traceparent` text (version 00).
    pub fn format(&self) -> String {
        format!(
            "00-{:032x}-{:016x}-{:02x}",
            self.trace_id,
            self.span_id,
            self.flags.to_u8()
        )
    }
}

/// The trace a job's spans belong to, and their parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobContext {
    /// The job's trace.
    pub trace_id: TraceId,
    /// The span every span of the job but `add` is a child of: the
    /// producer's span, or the job's own `add` span.
    pub parent: SpanId,
    /// Whether `parent` is the producer's (a remote parent).
    pub remote: bool,
    /// For a job without a producer's trace: the id of its `add` span, the
    /// root of its trace.
    pub add_span: Option<SpanId>,
}

impl JobContext {
    /// The context of job `id` stored with `trace`; `None` when the
    /// producer's trace is not sampled.
    pub fn of(id: &str, trace: Option<&str>) -> Option<JobContext> {
        match trace.and_then(TraceParent::parse) {
            Some(tp) if tp.flags.is_sampled() => Some(JobContext {
                trace_id: tp.trace_id,
                parent: tp.span_id,
                remote: true,
                add_span: None,
            }),
            Some(_) => None,
            None => {
                let h = Sha256::digest(id.as_bytes());
                let mut trace = [0u8; 16];
                trace.copy_from_slice(&h[..16]);
                let mut span = [0u8; 8];
                span.copy_from_slice(&h[16..24]);
                let add = SpanId::from_bytes(span);
                Some(JobContext {
                    trace_id: TraceId::from_bytes(trace),
                    parent: add,
                    remote: false,
                    add_span: Some(add),
                })
            }
        }
    }

    /// A new span of the job: a child of its parent, with a random id.
    pub fn run(&self) -> RunContext {
        RunContext {
            trace_id: self.trace_id,
            span_id: new_span_id(),
            parent: self.parent,
        }
    }
}

/// The span of one run of a job: what the runner gets as its
/// `traceparent` while spans are exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunContext {
    /// The job's trace.
    pub trace_id: TraceId,
    /// The run's span.
    pub span_id: SpanId,
    /// The run span's parent.
    pub parent: SpanId,
}

impl RunContext {
    /// The `traceparent` a run continues the trace with: the run span,
    /// sampled.
    pub fn traceparent(&self) -> String {
        TraceParent {
            trace_id: self.trace_id,
            span_id: self.span_id,
            flags: TraceFlags::SAMPLED,
        }
        .format()
    }
}

/// A random span id, never the invalid (zero) one.
pub fn new_span_id() -> SpanId {
    loop {
        let id: u64 = rand::random();
        if id != 0 {
            return SpanId::from(id);
        }
    }
}

/// The trace id of a stored `traceparent`, as 32 hex digits.
pub fn trace_id_of(trace: &str) -> Option<String> {
    TraceParent::parse(trace).map(|tp| format!("{:032x}", tp.trace_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn traceparents_parse_as_the_w3c_spec_says() {
        let tp = TraceParent::parse(TP).unwrap();
        assert_eq!(
            format!("{:032x}", tp.trace_id),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(format!("{:016x}", tp.span_id), "00f067aa0ba902b7");
        assert!(tp.flags.is_sampled());
        assert_eq!(tp.format(), TP);
        // A later version may add fields; version 00 may not.
        assert!(TraceParent::parse(&format!("01{}-extra", &TP[2..])).is_some());
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            &format!("{TP}-extra"),
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bx-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_job_with_a_producer_trace_is_its_child() {
        let c = JobContext::of("acme-1", Some(TP)).unwrap();
        assert_eq!(
            format!("{:032x}", c.trace_id),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(format!("{:016x}", c.parent), "00f067aa0ba902b7");
        assert!(c.remote && c.add_span.is_none());
        let run = c.run();
        assert_eq!(run.trace_id, c.trace_id);
        assert_eq!(run.parent, c.parent);
        assert_ne!(run.span_id, c.run().span_id);
        let tp = TraceParent::parse(&run.traceparent()).unwrap();
        assert_eq!(tp.span_id, run.span_id);
        assert!(tp.flags.is_sampled());
    }

    #[test]
    fn an_unsampled_producer_trace_exports_nothing() {
        let unsampled = TP.replace("-01", "-00");
        assert_eq!(JobContext::of("acme-1", Some(&unsampled)), None);
    }

    #[test]
    fn a_job_without_a_trace_gets_one_derived_from_its_id() {
        let a = JobContext::of("acme-1", None).unwrap();
        assert_eq!(a, JobContext::of("acme-1", None).unwrap());
        assert_eq!(a, JobContext::of("acme-1", Some("garbage")).unwrap());
        assert_ne!(a.trace_id, JobContext::of("acme-2", None).unwrap().trace_id);
        assert_eq!(a.add_span, Some(a.parent));
        assert!(!a.remote);
    }
}
