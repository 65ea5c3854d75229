//! BSON documents to and from the API's types. Reading accepts Int32 where
//! Int64 is written (and the other way round), so numbers survive servers
//! and tools that narrow small integers.

use jobstore_api::history::{EventKind, JobEvent};
use jobstore_api::limits::MAX_HISTORY;
use jobstore_api::{
    DependencyFailure, Error, FlowState, Handler, HandlerLimits, HandlerVersion, Job, JobResult,
    LOCK_FREE, Millis, NewJob, Result, ResultCode, StoredDeps, TraceContext,
};
use mongodb::bson::spec::BinarySubtype;
use mongodb::bson::{Binary, Bson, Document, doc};

/// Field names of the `jobs` collection.
pub(crate) mod f {
    pub const ID: &str = "_id";
    pub const JOB_ID: &str = "id";
    pub const JOBTYPE: &str = "jobtype";
    pub const DATA: &str = "data";
    pub const PRIORITY: &str = "priority";
    pub const DT: &str = "dt";
    pub const LOCK: &str = "lock";
    pub const ATTEMPTS: &str = "attempts";
    pub const CREATE_DT: &str = "create_dt";
    pub const DONE_DT: &str = "done_dt";
    pub const RESULT: &str = "result";
    pub const CLAIM_TOK: &str = "claim_tok";
    pub const OP_TOKS: &str = "op_toks";
    pub const VER: &str = "ver";
    pub const ADD_TOK: &str = "add_tok";
    pub const CANCEL: &str = "cancel";
    pub const PREV_RESULT: &str = "prev_result";
    pub const WAKE: &str = "wake";
    pub const TAGS: &str = "tags";
    pub const HISTORY: &str = "history";
    pub const TRACEPARENT: &str = "traceparent";
    pub const TRACESTATE: &str = "tracestate";
    pub const UKEY: &str = "ukey";
    pub const UKEY_DONE: &str = "ukey_done";
    pub const REPEAT: &str = "repeat";
    pub const FX: &str = "fx";
    pub const FX_AT: &str = "fx_at";
    pub const UP: &str = "up";
    pub const WAITS: &str = "waits";
    pub const WDONE: &str = "wdone";
    pub const POL: &str = "pol";
    pub const WBAD: &str = "wbad";
    pub const WHELD: &str = "wheld";
    pub const WSKIP: &str = "wskip";
    pub const WOUT: &str = "wout";
    pub const GONE: &str = "gone";
}

/// The `lock` of a job whose add is still making its edges: read as
/// absent, never claimed, counted or listed.
pub(crate) const LOCK_STAGED: &str = "__staged";

/// Whether `lock` keeps `dt` as `BLOCKED_BASE_MS + not_before`.
pub(crate) fn offset_lock(lock: &str) -> bool {
    lock == jobstore_api::LOCK_BLOCKED || lock == LOCK_STAGED
}

/// One ended edge as stored in `wdone`: `"<code>|<status>|<target>"`.
pub(crate) fn done_edge(target: &str, code: ResultCode, status: u16) -> String {
    format!("{}|{status}|{target}", code.as_str())
}

/// An ended edge of `wdone`: its target, code and status.
pub(crate) fn parse_done_edge(s: &str) -> Result<(String, ResultCode, u16)> {
    let mut parts = s.splitn(3, '|');
    let (Some(code), Some(status), Some(target)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed("job", f::WDONE));
    };
    Ok((
        target.to_owned(),
        code.parse().map_err(|_| malformed("job", f::WDONE))?,
        status.parse().map_err(|_| malformed("job", f::WDONE))?,
    ))
}

/// The strings of an array field (absent or null: none).
pub(crate) fn str_array(d: &Document, field: &str) -> Result<Vec<String>> {
    match d.get(field) {
        None | Some(Bson::Null) => Ok(Vec::new()),
        Some(Bson::Array(a)) => a
            .iter()
            .map(|b| b.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| malformed("job", field)),
        Some(_) => Err(malformed("job", field)),
    }
}

/// Bytes as BSON binary, subtype 0 (generic).
pub(crate) fn binary(bytes: &[u8]) -> Bson {
    Bson::Binary(Binary {
        subtype: BinarySubtype::Generic,
        bytes: bytes.to_vec(),
    })
}

/// The document of a new job.
pub(crate) fn new_job_doc(job: &NewJob, now: Millis) -> Document {
    let mut d = doc! {
        f::ID: &job.id,
        f::JOB_ID: &job.id,
        f::JOBTYPE: &job.jobtype,
        f::DATA: binary(&job.data),
        f::PRIORITY: job.priority,
        f::DT: job.run_at.unwrap_or(now),
        f::LOCK: LOCK_FREE,
        f::ATTEMPTS: 0_i64,
        f::CREATE_DT: now,
        f::VER: 0_i64,
        f::HISTORY: [event_doc(now, "", Some(0), &EventKind::Added)],
    };
    if !job.tags.is_empty() {
        d.insert(f::TAGS, &job.tags);
    }
    if let Some(u) = job.unique_key() {
        d.insert(f::UKEY, ukey(&job.jobtype, &u.key));
    }
    if let Some(r) = job.repeat_rule() {
        d.insert(f::REPEAT, r.to_text());
    }
    if let Some(t) = &job.trace {
        d.insert(f::TRACEPARENT, &t.traceparent);
        if let Some(state) = &t.tracestate {
            d.insert(f::TRACESTATE, state);
        }
    }
    d
}

/// An event as stored in `history`: `{at, by?, attempt?, event, ...}`.
/// `attempt` is written only when the writer knows it (adds and runs
/// again: 0); other events take it from their neighbours and the job's
/// attempts when read (see [`history_from_doc`]).
pub(crate) fn event_doc(at: Millis, by: &str, attempt: Option<u32>, what: &EventKind) -> Document {
    let mut d = doc! { "at": at };
    if !by.is_empty() {
        d.insert("by", by);
    }
    if let Some(a) = attempt {
        d.insert("attempt", i64::from(a));
    }
    let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    match what {
        EventKind::Added => d.insert("event", "added"),
        EventKind::Claimed => d.insert("event", "claimed"),
        EventKind::Retried { delay_ms, status } => {
            d.insert("event", "retried");
            d.insert("delay_ms", ms(*delay_ms));
            if let Some(s) = status {
                d.insert("status", i32::from(*s));
            }
            None
        }
        EventKind::HandedBack => d.insert("event", "handed_back"),
        EventKind::Archived { code, status } => {
            d.insert("event", "archived");
            d.insert("code", code.as_str());
            d.insert("status", i32::from(*status))
        }
        EventKind::CancelRequested => d.insert("event", "cancel_requested"),
        EventKind::Cancelled => d.insert("event", "cancelled"),
        EventKind::Rerun { delay_ms } => {
            d.insert("event", "rerun");
            d.insert("delay_ms", ms(*delay_ms))
        }
        EventKind::Edited => d.insert("event", "edited"),
        EventKind::Unblocked => d.insert("event", "unblocked"),
        EventKind::Repeated {
            code,
            status,
            next_ms,
        } => {
            d.insert("event", "repeated");
            d.insert("code", code.as_str());
            d.insert("status", i32::from(*status));
            d.insert("next_ms", *next_ms)
        }
    };
    d
}

/// The `$push` value appending `event` to `history`, keeping the newest
/// [`MAX_HISTORY`].
pub(crate) fn push_event(event: Document) -> Bson {
    let kept = -i32::try_from(MAX_HISTORY).unwrap_or(i32::MAX);
    Bson::Document(doc! { "$each": [event], "$slice": kept })
}

/// A stored event's attempts before it, where its writer kept them (a run
/// again's: `attempts_before`, the attempts it reset).
const ATTEMPTS_BEFORE: &str = "attempts_before";

/// One stored event, whether it was written with its attempt, and the
/// attempts before it when kept ([`ATTEMPTS_BEFORE`]).
fn event_from_bson(b: &Bson) -> Result<(JobEvent, bool, Option<u32>)> {
    const W: &str = "job event";
    let (event, fixed) = event_only(b)?;
    let before = match b {
        Bson::Document(d) => opt_i64(d, ATTEMPTS_BEFORE, W)?,
        Bson::String(text) => json_int_field(text, ATTEMPTS_BEFORE),
        _ => None,
    };
    let before = before
        .map(|a| u32::try_from(a).map_err(|_| malformed(W, ATTEMPTS_BEFORE)))
        .transpose()?;
    Ok((event, fixed, before))
}

/// The integer value of field `name` in an event's JSON text (the events
/// hold no nested object with such a field), if it has one.
fn json_int_field(text: &str, name: &str) -> Option<i64> {
    let at = text.find(&format!("\"{name}\":"))? + name.len() + 3;
    let rest = text[at..].trim_start();
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '-'))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// [`event_doc`] with the attempts the change reset kept beside (see
/// [`history_from_doc`]).
pub(crate) fn with_attempts_before(mut event: Document, before: i64) -> Document {
    event.insert(ATTEMPTS_BEFORE, before);
    event
}

/// One stored event, its attempt when it was written with one.
fn event_only(b: &Bson) -> Result<(JobEvent, bool)> {
    const W: &str = "job event";
    match b {
        Bson::Document(d) => {
            let attempt = opt_i64(d, "attempt", W)?;
            let what = match get_str(d, "event", W)?.as_str() {
                "added" => EventKind::Added,
                "claimed" => EventKind::Claimed,
                "retried" => EventKind::Retried {
                    delay_ms: get_int(d, "delay_ms", W)?,
                    status: opt_i64(d, "status", W)?
                        .map(|s| u16::try_from(s).map_err(|_| malformed(W, "status")))
                        .transpose()?,
                },
                "handed_back" => EventKind::HandedBack,
                "archived" => EventKind::Archived {
                    code: get_str(d, "code", W)?
                        .parse::<ResultCode>()
                        .map_err(|_| malformed(W, "code"))?,
                    status: get_int(d, "status", W)?,
                },
                "cancel_requested" => EventKind::CancelRequested,
                "cancelled" => EventKind::Cancelled,
                "rerun" => EventKind::Rerun {
                    delay_ms: get_int(d, "delay_ms", W)?,
                },
                "edited" => EventKind::Edited,
                "unblocked" => EventKind::Unblocked,
                "repeated" => EventKind::Repeated {
                    code: get_str(d, "code", W)?
                        .parse::<ResultCode>()
                        .map_err(|_| malformed(W, "code"))?,
                    status: get_int(d, "status", W)?,
                    next_ms: get_int(d, "next_ms", W)?,
                },
                _ => return Err(malformed(W, "event")),
            };
            let attempt = attempt
                .map(|a| u32::try_from(a).map_err(|_| malformed(W, "attempt")))
                .transpose()?;
            let by = opt_str(d, "by", W)?.unwrap_or_default();
            Ok((
                JobEvent::new(get_i64(d, "at", W)?, by, attempt.unwrap_or(0), what),
                attempt.is_some(),
            ))
        }
        // Servers and emulators that keep array elements as JSON text.
        Bson::String(text) => {
            if text.contains("\"attempt\":") {
                Ok((JobEvent::from_json(text)?, true))
            } else {
                let body = text.trim_start().strip_prefix('{').unwrap_or(text);
                Ok((
                    JobEvent::from_json(&format!("{{\"attempt\":0,{body}"))?,
                    false,
                ))
            }
        }
        _ => Err(malformed("job", f::HISTORY)),
    }
}

/// The job's history from its document (absent: empty), oldest first.
///
/// Events written without an attempt take it from the others: the
/// attempts after a claim are one more than before it, after a hand-back
/// one less, after any other event the same as before it; an event
/// written with its attempt (an add, a run again) fixes the count from
/// there on, and a repeat (`repeated`, whose own attempt is its run's)
/// starts it again at 0 after it; the events after the last of these end
/// at the job's `attempts`, which no change leaves without an event.
/// Events before the first of them count back from it: from the attempts
/// a run again reset, which its event keeps, once `added` has left the
/// newest [`MAX_HISTORY`](jobstore_api::limits::MAX_HISTORY); from a
/// repeat, whose writer does not know its run's attempt, by the claims
/// and hand-backs of that run still kept (at least one: a repeat ends a
/// claimed run), which is exact unless the run's first claims have left
/// the newest events.
pub(crate) fn history_from_doc(d: &Document, attempts: u32) -> Result<Vec<jobstore_api::JobEvent>> {
    let items = match d.get(f::HISTORY) {
        None | Some(Bson::Null) => return Ok(Vec::new()),
        Some(Bson::Array(a)) => a,
        Some(_) => return Err(malformed("job", f::HISTORY)),
    };
    let mut events = items
        .iter()
        .map(event_from_bson)
        .collect::<Result<Vec<(JobEvent, bool, Option<u32>)>>>()?;
    // The first event that anchors the count: written with its attempt,
    // or a repeat (0 after it).
    let anchor = events
        .iter()
        .position(|(e, fixed, _)| *fixed || resets(&e.what));
    // Forward from it.
    if let Some(start) = anchor {
        let first = &events[start].0;
        let mut cur = if resets(&first.what) {
            0
        } else {
            first.attempt
        };
        for (e, fixed, _) in events.iter_mut().skip(start + 1) {
            if *fixed {
                cur = e.attempt;
            } else {
                cur = after(cur, &e.what);
                e.attempt = cur;
            }
            if resets(&e.what) {
                cur = 0;
            }
        }
    }
    // Backward before it (or over the whole history; with a repeat that
    // is not written with its attempt, from that repeat on): from the
    // job's attempts, or from the count before the first anchor.
    let (end, mut cur) = match anchor {
        None => (events.len(), attempts),
        Some(i) => match (&events[i], events[i].2) {
            // a run again that kept the attempts it reset
            ((_, true, _), Some(before)) => (i, before),
            ((e, true, _), None) => (
                i,
                match e.what {
                    EventKind::Claimed => e.attempt.saturating_sub(1),
                    EventKind::HandedBack => e.attempt.saturating_add(1),
                    _ => e.attempt,
                },
            ),
            // a repeat: its run's claims and hand-backs kept before it,
            // counted from the least start that keeps every count at 0
            // or more, and at least 1
            ((_, false, _), _) => {
                let (mut net, mut least) = (0_i64, 0_i64);
                for (e, _, _) in &events[..i] {
                    net = match e.what {
                        EventKind::Claimed => net + 1,
                        EventKind::HandedBack => net - 1,
                        _ => net,
                    };
                    least = least.min(net);
                }
                let run = (net - least).max(1);
                (i + 1, u32::try_from(run).unwrap_or(u32::MAX))
            }
        },
    };
    for (e, _, _) in events[..end].iter_mut().rev() {
        e.attempt = cur;
        cur = match e.what {
            EventKind::Claimed => cur.saturating_sub(1),
            EventKind::HandedBack => cur.saturating_add(1),
            _ => cur,
        };
    }
    Ok(events.into_iter().map(|(e, _, _)| e).collect())
}

/// Whether the count of attempts starts again at 0 after `what`: a
/// repeat sets the job's attempts back to 0.
fn resets(what: &EventKind) -> bool {
    matches!(what, EventKind::Repeated { .. })
}

/// The attempts after an event `what` written without its attempt, from
/// those before it.
fn after(cur: u32, what: &EventKind) -> u32 {
    match what {
        EventKind::Claimed => cur.saturating_add(1),
        EventKind::HandedBack => cur.saturating_sub(1),
        _ => cur,
    }
}

/// The job's trace context from its document: `traceparent` and, if
/// present, `tracestate` (absent `traceparent`: none).
fn trace_from_doc(d: &Document) -> Result<Option<TraceContext>> {
    let text = |field: &str| match d.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(malformed("job", field)),
    };
    Ok(match text(f::TRACEPARENT)? {
        None => None,
        Some(traceparent) => Some(TraceContext {
            traceparent,
            tracestate: text(f::TRACESTATE)?,
        }),
    })
}

/// The job's tags from its document (absent: none).
fn tags_from_doc(d: &Document) -> Result<Vec<String>> {
    match d.get(f::TAGS) {
        None | Some(Bson::Null) => Ok(Vec::new()),
        Some(Bson::Array(a)) => a
            .iter()
            .map(|t| match t {
                Bson::String(s) => Ok(s.clone()),
                _ => Err(malformed("job", f::TAGS)),
            })
            .collect(),
        Some(_) => Err(malformed("job", f::TAGS)),
    }
}

/// The `result` subdocument of an archived job.
pub(crate) fn result_doc(result: &JobResult) -> Document {
    doc! {
        "code": result.code.as_str(),
        "status": i32::from(result.status),
        "output": binary(&result.output),
    }
}

fn malformed(what: &str, field: &str) -> Error {
    Error::backend_msg(format!(
        "malformed {what} document in MongoDB: field {field:?} is missing or of the wrong type"
    ))
}

pub(crate) fn get_str(d: &Document, field: &str, what: &str) -> Result<String> {
    match d.get(field) {
        Some(Bson::String(s)) => Ok(s.clone()),
        _ => Err(malformed(what, field)),
    }
}

pub(crate) fn opt_str(d: &Document, field: &str, what: &str) -> Result<Option<String>> {
    match d.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::String(s)) => Ok(Some(s.clone())),
        _ => Err(malformed(what, field)),
    }
}

pub(crate) fn get_i64(d: &Document, field: &str, what: &str) -> Result<i64> {
    match d.get(field) {
        Some(Bson::Int64(v)) => Ok(*v),
        Some(Bson::Int32(v)) => Ok(i64::from(*v)),
        // What the shell and JavaScript tools write for any number.
        Some(Bson::Double(v)) if v.fract() == 0.0 && v.abs() <= MAX_EXACT_DOUBLE => Ok(*v as i64),
        _ => Err(malformed(what, field)),
    }
}

/// The largest integer every smaller one of which a double holds exactly.
const MAX_EXACT_DOUBLE: f64 = 9_007_199_254_740_992.0;

pub(crate) fn opt_i64(d: &Document, field: &str, what: &str) -> Result<Option<i64>> {
    match d.get(field) {
        None | Some(Bson::Null) => Ok(None),
        _ => get_i64(d, field, what).map(Some),
    }
}

pub(crate) fn get_bytes(d: &Document, field: &str, what: &str) -> Result<Vec<u8>> {
    match d.get(field) {
        Some(Bson::Binary(b)) => Ok(b.bytes.clone()),
        _ => Err(malformed(what, field)),
    }
}

pub(crate) fn get_int<T: TryFrom<i64>>(d: &Document, field: &str, what: &str) -> Result<T> {
    T::try_from(get_i64(d, field, what)?).map_err(|_| malformed(what, field))
}

/// A stored job.
pub(crate) fn job_from_doc(d: &Document) -> Result<Job> {
    const W: &str = "job";
    // A job run again keeps its last result under `prev_result` until it
    // is archived again.
    let result = match d.get(f::RESULT).or_else(|| d.get(f::PREV_RESULT)) {
        None | Some(Bson::Null) => None,
        Some(Bson::Document(r)) => Some(JobResult {
            code: get_str(r, "code", "job result")?
                .parse::<ResultCode>()
                .map_err(|_| malformed("job result", "code"))?,
            status: get_int(r, "status", "job result")?,
            output: get_bytes(r, "output", "job result")?,
        }),
        Some(_) => return Err(malformed(W, f::RESULT)),
    };
    let attempts: u32 = get_int(d, f::ATTEMPTS, W)?;
    let lock = get_str(d, f::LOCK, W)?;
    let mut dt = get_i64(d, f::DT, W)?;
    if offset_lock(&lock) {
        dt -= jobstore_api::BLOCKED_BASE_MS;
    }
    Ok(Job {
        id: get_str(d, f::ID, W)?,
        jobtype: get_str(d, f::JOBTYPE, W)?,
        data: get_bytes(d, f::DATA, W)?,
        priority: get_int(d, f::PRIORITY, W)?,
        dt,
        lock,
        attempts,
        create_dt: get_i64(d, f::CREATE_DT, W)?,
        done_dt: opt_i64(d, f::DONE_DT, W)?,
        result,
        cancel_requested: get_flag(d, f::CANCEL, W)?,
        tags: tags_from_doc(d)?,
        history: history_from_doc(d, attempts)?,
        claimed_due: None,
        flow: flow_from_doc(d)?,
        trace: trace_from_doc(d)?,
    })
}

/// The separator of a stored unique key, `"<jobtype>/<key>"`: no jobtype
/// holds it, so the first one ends the jobtype.
const UKEY_SEP: char = '/';

/// The stored form of `jobtype`'s unique key `key` (`ukey`, `ukey_done`).
pub(crate) fn ukey(jobtype: &str, key: &str) -> String {
    format!("{jobtype}{UKEY_SEP}{key}")
}

/// A job's flow: its unique key, from `ukey` (live) or `ukey_done`
/// (archived), and its repeat rule, from `repeat` (`Repeat::to_text`);
/// none when it has neither (or null ones).
fn flow_from_doc(d: &Document) -> Result<Option<Box<FlowState>>> {
    let stored = [f::UKEY, f::UKEY_DONE]
        .into_iter()
        .find_map(|field| match d.get(field) {
            None | Some(Bson::Null) => None,
            Some(v) => Some((field, v)),
        });
    let key = stored
        .map(|(field, value)| {
            value
                .as_str()
                .and_then(|s| s.split_once(UKEY_SEP))
                .map(|(_, key)| key.to_owned())
                .ok_or_else(|| malformed("job", field))
        })
        .transpose()?;
    let repeat = opt_str(d, f::REPEAT, "job")?;
    let deps = match opt_str(d, f::POL, "job")? {
        None => None,
        Some(pol) => {
            let pol = pol
                .parse::<DependencyFailure>()
                .map_err(|_| malformed("job", f::POL))?;
            let pending = u32::try_from(str_array(d, f::WAITS)?.len()).unwrap_or(u32::MAX);
            Some(StoredDeps::new(pending, pol).with_outputs(get_flag(d, f::WOUT, "job")?))
        }
    };
    Ok(FlowState::from_stored(key, repeat.as_deref(), deps))
}

/// A flag: absent (or null) is `false`; a boolean, or an integer (what
/// some tools and emulators store for `true`), non-zero being `true`.
pub(crate) fn get_flag(d: &Document, field: &str, what: &str) -> Result<bool> {
    match d.get(field) {
        None | Some(Bson::Null) => Ok(false),
        Some(Bson::Boolean(b)) => Ok(*b),
        Some(Bson::Int32(v)) => Ok(*v != 0),
        Some(Bson::Int64(v)) => Ok(*v != 0),
        _ => Err(malformed(what, field)),
    }
}

/// The document of a handler version.
pub(crate) fn handler_doc(jobtype: &str, h: &Handler, seq: i64, now: Millis) -> Document {
    let mut d = doc! {
        "seq": seq,
        "jobtype": jobtype,
        "dt": now,
        "lang": &h.method,
        "body": &h.body,
    };
    for (k, v) in [
        ("eid", &h.eid),
        ("before", &h.before),
        ("before_each", &h.before_each),
        ("after_each", &h.after_each),
    ] {
        if let Some(v) = v {
            d.insert(k, v);
        }
    }
    d.insert("limits", limits_doc(&h.limits));
    d
}

/// The `limits` subdocument of a handler version: the fields that are
/// set, as Int64 (validated limits fit); an unset limit has no field.
fn limits_doc(l: &HandlerLimits) -> Document {
    let mut d = Document::new();
    let fields = [
        ("max_attempts", l.max_attempts.map(u64::from)),
        ("max_age_ms", l.max_age_ms),
        ("time_limit_ms", l.time_limit_ms),
        ("concurrency", l.concurrency.map(u64::from)),
        ("backoff_base_ms", l.backoff_base_ms),
        ("backoff_max_ms", l.backoff_max_ms),
    ];
    for (k, v) in fields {
        if let Some(v) = v {
            d.insert(k, i64::try_from(v).unwrap_or(i64::MAX));
        }
    }
    d
}

/// A handler's limits from its document: no `limits` field (a version
/// stored before limits existed) or no field for a limit means unset.
fn limits_from_doc(d: &Document) -> Result<HandlerLimits> {
    const W: &str = "handler limits";
    let l = match d.get("limits") {
        None | Some(Bson::Null) => return Ok(HandlerLimits::default()),
        Some(Bson::Document(l)) => l,
        Some(_) => return Err(malformed("handler", "limits")),
    };
    fn limit<T: TryFrom<i64>>(l: &Document, field: &str) -> Result<Option<T>> {
        opt_i64(l, field, W)?
            .map(|v| T::try_from(v).map_err(|_| malformed(W, field)))
            .transpose()
    }
    Ok(HandlerLimits {
        max_attempts: limit(l, "max_attempts")?,
        max_age_ms: limit(l, "max_age_ms")?,
        time_limit_ms: limit(l, "time_limit_ms")?,
        concurrency: limit(l, "concurrency")?,
        backoff_base_ms: limit(l, "backoff_base_ms")?,
        backoff_max_ms: limit(l, "backoff_max_ms")?,
    })
}

/// A stored handler version.
pub(crate) fn handler_from_doc(d: &Document) -> Result<HandlerVersion> {
    const W: &str = "handler";
    Ok(HandlerVersion {
        id: get_i64(d, "seq", W)?.to_string(),
        jobtype: get_str(d, "jobtype", W)?,
        dt: get_i64(d, "dt", W)?,
        handler: Handler {
            method: get_str(d, "lang", W)?,
            body: get_str(d, "body", W)?,
            eid: opt_str(d, "eid", W)?,
            before: opt_str(d, "before", W)?,
            before_each: opt_str(d, "before_each", W)?,
            after_each: opt_str(d, "after_each", W)?,
            limits: limits_from_doc(d)?,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_round_trips_through_bson() {
        let new = NewJob::new("a", "t", vec![0u8, 255, 10]).priority(-4);
        let mut d = new_job_doc(&new, 42);
        let job = job_from_doc(&d).unwrap();
        assert_eq!(
            (job.id.as_str(), job.data.as_slice(), job.priority, job.dt),
            ("a", &[0u8, 255, 10][..], -4, 42)
        );
        let r = JobResult::from_status(503).with_output(b"x\x00".to_vec());
        d.insert(f::RESULT, result_doc(&r));
        d.insert(f::DONE_DT, 7_i32);
        let job = job_from_doc(&d).unwrap();
        assert_eq!((job.result, job.done_dt), (Some(r), Some(7)));
    }

    #[test]
    fn marks_and_kept_results_are_read() {
        let mut d = new_job_doc(&NewJob::new("a", "t", ""), 1);
        assert!(
            !job_from_doc(&d).unwrap().cancel_requested,
            "absent: unmarked"
        );
        for (mark, want) in [
            (Bson::Boolean(true), true),
            (Bson::Boolean(false), false),
            (Bson::Int32(1), true),
            (Bson::Int64(0), false),
        ] {
            d.insert(f::CANCEL, mark);
            assert_eq!(job_from_doc(&d).unwrap().cancel_requested, want);
        }
        d.insert(f::CANCEL, "yes");
        assert!(job_from_doc(&d).is_err());
        d.remove(f::CANCEL);
        // A job run again reads its last result from `prev_result`; an
        // archived one from `result`.
        let old = JobResult::from_status(404);
        d.insert(f::PREV_RESULT, result_doc(&old));
        assert_eq!(job_from_doc(&d).unwrap().result, Some(old));
        let new = JobResult::from_status(200);
        d.insert(f::RESULT, result_doc(&new));
        assert_eq!(job_from_doc(&d).unwrap().result, Some(new));
    }

    #[test]
    fn unique_keys_are_stored_by_jobtype_and_read_from_either_field() {
        use jobstore_api::Unique;
        let key = |d: &Document| job_from_doc(d).unwrap().flow.and_then(|f| f.unique_key);
        let plain = new_job_doc(&NewJob::new("a", "t", ""), 1);
        assert!(!plain.contains_key(f::UKEY));
        assert_eq!(key(&plain), None);
        // A key may hold the separator: the first one ends the jobtype.
        let mut d = new_job_doc(&NewJob::new("a", "t.x", "").unique(Unique::new("k/1")), 1);
        assert_eq!(d.get_str(f::UKEY).unwrap(), "t.x/k/1");
        assert_eq!(key(&d).as_deref(), Some("k/1"));
        let live = d.remove(f::UKEY).unwrap();
        d.insert(f::UKEY_DONE, live);
        assert_eq!(key(&d).as_deref(), Some("k/1"), "archived");
        d.insert(f::UKEY_DONE, Bson::Null);
        assert_eq!(key(&d), None, "a null (the emulator's $rename of nothing)");
        d.insert(f::UKEY_DONE, 3_i32);
        assert!(job_from_doc(&d).is_err());
    }

    #[test]
    fn malformed_documents_are_backend_errors() {
        let mut d = new_job_doc(&NewJob::new("a", "t", ""), 1);
        d.insert(f::ATTEMPTS, -1_i64);
        assert_eq!(
            job_from_doc(&d).unwrap_err().kind(),
            jobstore_api::ErrorKind::Backend
        );
        d.insert(f::ATTEMPTS, 0_i64);
        d.insert(f::DATA, "not binary");
        assert!(job_from_doc(&d).is_err());
    }

    #[test]
    fn integral_doubles_are_read_as_integers() {
        let mut d = new_job_doc(&NewJob::new("a", "t", ""), 1);
        d.insert(f::PRIORITY, 3.0_f64);
        d.insert(f::ATTEMPTS, 2.0_f64);
        d.insert(f::DT, 1_700_000_000_000.0_f64);
        let job = job_from_doc(&d).unwrap();
        assert_eq!(
            (job.priority, job.attempts, job.dt),
            (3, 2, 1_700_000_000_000)
        );
        for bad in [2.5_f64, f64::NAN, f64::INFINITY, 1e300] {
            d.insert(f::ATTEMPTS, bad);
            assert!(job_from_doc(&d).is_err(), "{bad}");
        }
    }

    #[test]
    fn handler_round_trips_through_bson() {
        let h = Handler {
            before_each: Some(String::new()),
            ..Handler::new("process", "cat")
        };
        let v = handler_from_doc(&handler_doc("t", &h, 9, 5)).unwrap();
        assert_eq!((v.id.as_str(), v.dt, v.handler), ("9", 5, h.clone()));
        let limits = HandlerLimits {
            max_attempts: Some(u32::MAX),
            max_age_ms: Some(3_153_600_000_000),
            concurrency: Some(1),
            ..HandlerLimits::default()
        };
        let limited = h.limits(limits);
        let d = handler_doc("t", &limited, 10, 6);
        assert_eq!(
            d.get_document("limits").unwrap().len(),
            3,
            "only the limits that are set are stored"
        );
        assert_eq!(handler_from_doc(&d).unwrap().handler, limited);
    }

    #[test]
    fn handlers_stored_before_limits_read_back_without_limits() {
        let mut d = handler_doc("t", &Handler::new("process", "cat"), 1, 2);
        d.remove("limits");
        let v = handler_from_doc(&d).unwrap();
        assert_eq!(v.handler.limits, HandlerLimits::default());
        // Int32 as some tools write small numbers; negative is malformed.
        d.insert("limits", doc! { "concurrency": 4_i32 });
        assert_eq!(
            handler_from_doc(&d).unwrap().handler.limits.concurrency,
            Some(4)
        );
        d.insert("limits", doc! { "concurrency": -1_i64 });
        assert!(handler_from_doc(&d).is_err());
    }

    #[test]
    fn repeat_rules_are_stored_as_text_and_read_into_the_flow() {
        use jobstore_api::{Repeat, Unique};
        let plain = new_job_doc(&NewJob::new("a", "t", ""), 1);
        assert!(!plain.contains_key(f::REPEAT), "plain jobs carry no rule");
        let rule = Repeat::new("0 6 * * *").time_zone("Europe/Paris");
        let mut d = new_job_doc(&NewJob::new("a", "t", "").repeat(rule.clone()), 1);
        assert_eq!(d.get_str(f::REPEAT), Ok("TZ=Europe/Paris 0 6 * * *"));
        let flow = job_from_doc(&d).unwrap().flow.unwrap();
        assert_eq!(
            (flow.repeat.as_ref(), flow.unique_key.as_deref()),
            (Some(&rule), None)
        );
        let keyed = NewJob::new("a", "t", "")
            .repeat(Repeat::new("@daily"))
            .unique(Unique::new("k"));
        let mut both = new_job_doc(&keyed, 1);
        let flow = job_from_doc(&both).unwrap().flow.unwrap();
        assert_eq!(flow.unique_key.as_deref(), Some("k"));
        assert_eq!(flow.repeat, Some(Repeat::new("@daily")));
        // Archived: the key under `ukey_done`, the rule where it was.
        let key = both.remove(f::UKEY).unwrap();
        both.insert(f::UKEY_DONE, key);
        let flow = job_from_doc(&both).unwrap().flow.unwrap();
        assert_eq!(flow.unique_key.as_deref(), Some("k"));
        assert_eq!(flow.repeat, Some(Repeat::new("@daily")));
        d.insert(f::REPEAT, Bson::Null);
        assert_eq!(job_from_doc(&d).unwrap().flow, None);
        d.insert(f::REPEAT, 5_i64);
        let err = job_from_doc(&d).unwrap_err();
        assert_eq!(err.kind(), jobstore_api::ErrorKind::Backend);
    }

    /// The attempts read for `events` (each a kind and whether it was
    /// written with an attempt, 0 for `added`) of a job with `attempts`.
    fn attempts_read(events: &[EventKind], attempts: u32) -> Vec<u32> {
        let history: Vec<Document> = events
            .iter()
            .map(|what| {
                let fixed = matches!(what, EventKind::Added).then_some(0);
                event_doc(1, "o", fixed, what)
            })
            .collect();
        let d = doc! { f::HISTORY: history };
        history_from_doc(&d, attempts)
            .unwrap()
            .iter()
            .map(|e| e.attempt)
            .collect()
    }

    #[test]
    fn a_repeat_keeps_its_runs_attempt_and_counting_starts_again_after_it() {
        use EventKind::{Added, Claimed, HandedBack};
        let repeated = EventKind::Repeated {
            code: ResultCode::Ok,
            status: 200,
            next_ms: 5,
        };
        let retried = EventKind::Retried {
            delay_ms: 1,
            status: None,
        };
        let r = || repeated.clone();
        let t = || retried.clone();
        // From `added`, forward.
        assert_eq!(attempts_read(&[Added, Claimed, r()], 0), [0, 1, 1]);
        assert_eq!(
            attempts_read(&[Added, Claimed, t(), Claimed, r(), Claimed, HandedBack], 0),
            [0, 1, 1, 2, 2, 1, 0]
        );
        assert_eq!(
            attempts_read(
                &[Added, Claimed, r(), Claimed, t(), Claimed, r(), Claimed],
                1
            ),
            [0, 1, 1, 1, 1, 2, 2, 1]
        );
        // `added` gone: runs of one claim read exactly.
        assert_eq!(
            attempts_read(&[Claimed, r(), Claimed, r(), Claimed], 1),
            [1, 1, 1, 1, 1]
        );
        assert_eq!(attempts_read(&[r(), Claimed, r()], 0), [1, 1, 1]);
        // A run of two claims whose first left the history: its oldest
        // events read one short (1, 2, 2 as they happened).
        assert_eq!(
            attempts_read(&[t(), Claimed, r(), Claimed], 1),
            [0, 1, 1, 1]
        );
        // Without a repeat, as before: back from the job's attempts.
        assert_eq!(attempts_read(&[t(), Claimed, t()], 2), [1, 2, 2]);
    }
}
