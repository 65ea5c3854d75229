//! Reading script and command replies: numbers, strings and bytes in
//! whatever form the server sends them, jobs from their hashes, handler
//! versions.

use std::collections::HashMap;

use jobstore_api::history::{PendingClaim, complete_history, tags_from_json, with_added};
use jobstore_api::{
    DependencyFailure, Error, FlowState, Handler, HandlerVersion, Job, JobEvent, JobResult,
    LOCK_DONE, Millis, Result, ResultCode, StoredDeps, TraceContext,
};
use redis::{FromRedisValue, Value};

use crate::error::malformed;

/// The value of a job's cancel mark (hash field `x`).
pub(crate) const MARK: &str = "1";

/// Whether a reply value is the cancel mark.
pub(crate) fn is_marked(v: &Value) -> bool {
    matches!(v, Value::BulkString(b) if b == MARK.as_bytes())
}

/// A flat reply `a1, b1, a2, b2...` as pairs.
pub(crate) fn pairs(v: Vec<String>, what: &str) -> Result<Vec<(String, String)>> {
    if !v.len().is_multiple_of(2) {
        return Err(malformed(what));
    }
    let mut it = v.into_iter();
    let mut out = Vec::new();
    while let (Some(a), Some(b)) = (it.next(), it.next()) {
        out.push((a, b));
    }
    Ok(out)
}

/// A job's history from its hash field `h` (see `lib.lua`): the event
/// count as 2 digits, then `\n` and the JSON text of each event, oldest
/// first. Absent or empty is no history.
pub(crate) fn history(h: Option<&[u8]>) -> Result<Vec<JobEvent>> {
    let Some(h) = h.filter(|h| !h.is_empty()) else {
        return Ok(Vec::new());
    };
    let text = std::str::from_utf8(h).map_err(|_| malformed("job history"))?;
    let events = text.get(2..).ok_or_else(|| malformed("job history"))?;
    let Some(events) = events.strip_prefix('\n') else {
        return Err(malformed("job history"));
    };
    events.split('\n').map(JobEvent::from_json).collect()
}

/// The claim a job keeps in its fields (see `lib.lua`): claimed at `ca`
/// (absent or empty: none) by `by` (the lock, or `cb` once archived),
/// with the job's attempts.
pub(crate) fn pending_claim(
    ca: Option<&[u8]>,
    by: &str,
    attempt: u32,
) -> Result<Option<PendingClaim>> {
    match ca.filter(|ca| !ca.is_empty()) {
        None => Ok(None),
        Some(ca) => Ok(Some(PendingClaim {
            at: parse_int(ca, "claimed at")?,
            by: by.to_owned(),
            attempt,
        })),
    }
}

/// A job's trace context from its hash field `tc` (the traceparent, then
/// a space and the tracestate if any); absent is none.
pub(crate) fn trace(tc: Option<&[u8]>) -> Result<Option<TraceContext>> {
    let Some(tc) = tc else {
        return Ok(None);
    };
    let tc = std::str::from_utf8(tc).map_err(|_| malformed("job trace context"))?;
    Ok(Some(match tc.split_once(' ') {
        None => TraceContext {
            traceparent: tc.to_owned(),
            tracestate: None,
        },
        Some((parent, state)) => TraceContext {
            traceparent: parent.to_owned(),
            tracestate: Some(state.to_owned()),
        },
    }))
}

/// A job's tags from its hash field `t` (the JSON array); absent is none.
pub(crate) fn tags(t: Option<&[u8]>) -> Result<Vec<String>> {
    match t {
        None => Ok(Vec::new()),
        Some(t) => tags_from_json(std::str::from_utf8(t).map_err(|_| malformed("job tags"))?),
    }
}

pub(crate) fn int(v: &Value, what: &str) -> Result<i64> {
    match v {
        Value::Int(n) => Ok(*n),
        Value::BulkString(b) => parse_int(b, what),
        Value::SimpleString(s) => parse_int(s.as_bytes(), what),
        _ => Err(malformed(what)),
    }
}

pub(crate) fn parse_int(b: &[u8], what: &str) -> Result<i64> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| malformed(what))
}

/// A score as Redis prints it (`%.17g`); ours are integers.
pub(crate) fn parse_score(b: &[u8], what: &str) -> Result<i64> {
    let s = std::str::from_utf8(b).map_err(|_| malformed(what))?;
    if let Ok(n) = s.parse::<i64>() {
        return Ok(n);
    }
    let f: f64 = s.parse().map_err(|_| malformed(what))?;
    if f.fract() != 0.0 || !f.is_finite() {
        return Err(malformed(what));
    }
    Ok(f as i64)
}

pub(crate) fn bytes(v: Value, what: &str) -> Result<Vec<u8>> {
    match v {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.into_bytes()),
        Value::Int(n) => Ok(n.to_string().into_bytes()),
        _ => Err(malformed(what)),
    }
}

pub(crate) fn string(v: Value, what: &str) -> Result<String> {
    String::from_utf8(bytes(v, what)?).map_err(|_| malformed(what))
}

pub(crate) fn from_value<T: FromRedisValue>(v: Value, what: &str) -> Result<T> {
    T::from_redis_value(v).map_err(|_| malformed(what))
}

fn result_code(code: &[u8]) -> Result<ResultCode> {
    std::str::from_utf8(code)
        .ok()
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| malformed("result code"))
}

/// An archived job's result as one hash field `r` (`result_field` of
/// `lib.lua`): `<code> <status> <done_dt> <owner>\n<output>`, the owner
/// that of the claim its archive ended while pending, empty for none.
#[derive(Debug, PartialEq)]
pub(crate) struct ResultField {
    pub result: JobResult,
    pub done_dt: Millis,
    pub by: Vec<u8>,
}

impl ResultField {
    pub(crate) fn parse(mut r: Vec<u8>) -> Result<Self> {
        let bad = || malformed("result field");
        let nl = r.iter().position(|&b| b == b'\n').ok_or_else(bad)?;
        let output = r.split_off(nl + 1);
        r.truncate(nl);
        let mut head = r.splitn(4, |&b| b == b' ');
        let (code, status, done_dt, by) = (
            head.next().ok_or_else(bad)?,
            head.next().ok_or_else(bad)?,
            head.next().ok_or_else(bad)?,
            head.next().ok_or_else(bad)?,
        );
        let status =
            u16::try_from(parse_int(status, "status")?).map_err(|_| malformed("status"))?;
        Ok(Self {
            result: JobResult {
                code: result_code(code)?,
                status,
                output,
            },
            done_dt: parse_int(done_dt, "done_dt")?,
            by: by.to_vec(),
        })
    }
}

/// A job from its hash (`HGETALL`).
pub(crate) fn job_from_hash(
    id: &str,
    jobtype: &str,
    mut h: HashMap<String, Vec<u8>>,
) -> Result<Job> {
    let mut take = |f: &str| h.remove(f);
    let num = |v: Option<Vec<u8>>, f: &str| -> Result<i64> {
        parse_int(&v.ok_or_else(|| malformed(f))?, f)
    };
    let data = take("d").ok_or_else(|| malformed("job data"))?;
    let priority = num(take("p"), "priority")?;
    let dt = num(take("dt"), "dt")?;
    let lock = String::from_utf8(take("l").ok_or_else(|| malformed("lock"))?)
        .map_err(|_| malformed("lock"))?;
    let attempts = num(take("a"), "attempts")?;
    let create_dt = num(take("c"), "create_dt")?;
    let cancel_requested = take("x").is_some_and(|x| x == MARK.as_bytes());
    let stored = history(take("h").as_deref())?;
    let tags = tags(take("t").as_deref())?;
    let trace = trace(take("tc").as_deref())?;
    let claimed_at = take("ca");
    let flow = job_flow(take("uk"), take("rp"), take("dp"))?;
    let attempts = u32::try_from(attempts).map_err(|_| malformed("attempts"))?;
    let archived = lock == LOCK_DONE;
    // The result in one field, or in the fields of a hash archived before
    // it (whose `dd` a run again deletes: a free job has no done_dt).
    let (result, done_dt, claimed_by) = match take("r") {
        Some(r) => {
            let r = ResultField::parse(r)?;
            (Some(r.result), archived.then_some(r.done_dt), Some(r.by))
        }
        None => {
            let result = match take("rc") {
                None => None,
                Some(code) => Some(JobResult {
                    code: result_code(&code)?,
                    status: u16::try_from(num(take("rs"), "status")?)
                        .map_err(|_| malformed("status"))?,
                    output: take("ro").unwrap_or_default(),
                }),
            };
            let done_dt = take("dd").map(|v| parse_int(&v, "done_dt")).transpose()?;
            (result, done_dt, take("cb"))
        }
    };
    let by = if archived {
        String::from_utf8(claimed_by.unwrap_or_default()).map_err(|_| malformed("claimed by"))?
    } else {
        lock.clone()
    };
    let claim = pending_claim(claimed_at.as_deref(), &by, attempts)?;
    let archive = match (archived, done_dt, &result) {
        (true, Some(at), Some(r)) => Some((at, r.code, r.status)),
        _ => None,
    };
    let history = complete_history(with_added(stored, create_dt), claim, archive);
    Ok(Job {
        id: id.to_owned(),
        jobtype: jobtype.to_owned(),
        data,
        priority: i32::try_from(priority).map_err(|_| malformed("priority"))?,
        dt,
        lock,
        attempts,
        create_dt,
        done_dt,
        result,
        cancel_requested,
        tags,
        history,
        claimed_due: None,
        flow,
        trace,
    })
}

/// A job's flow from its hash fields `uk` (its unique key, only on a
/// keyed job; see README, "Unique keys"), `rp` (its repeat rule's text,
/// only on a repeating job; see README, "Repeating jobs") and `dp` (its
/// pending count and policy, only on a job added with dependencies; see
/// README, "Dependencies"); all absent is a plain job.
pub(crate) fn job_flow(
    uk: Option<Vec<u8>>,
    rp: Option<Vec<u8>>,
    dp: Option<Vec<u8>>,
) -> Result<Option<Box<FlowState>>> {
    if uk.is_none() && rp.is_none() && dp.is_none() {
        return Ok(None);
    }
    let deps = dp.map(|dp| dep_state(&dp)).transpose()?;
    let key = uk
        .map(|uk| String::from_utf8(uk).map_err(|_| malformed("unique key")))
        .transpose()?;
    let rule = rp
        .map(|rp| String::from_utf8(rp).map_err(|_| malformed("repeat rule")))
        .transpose()?;
    Ok(FlowState::from_stored(key, rule.as_deref(), deps))
}

/// The open count, policy and outputs flag of a `dp` field:
/// `"<open> <c|r|h>[ o]"`.
pub(crate) fn dep_state(dp: &[u8]) -> Result<StoredDeps> {
    let bad = || malformed("dependency state");
    let text = std::str::from_utf8(dp).map_err(|_| bad())?;
    let (n, rest) = text.split_once(' ').ok_or_else(bad)?;
    let n: u32 = n.parse().map_err(|_| bad())?;
    let (policy, outputs) = match rest.split_once(' ') {
        Some((p, "o")) => (p, true),
        None => (rest, false),
        Some(_) => return Err(bad()),
    };
    let policy = match policy {
        "c" => DependencyFailure::Cancel,
        "r" => DependencyFailure::Run,
        "h" => DependencyFailure::Hold,
        _ => return Err(bad()),
    };
    Ok(StoredDeps::new(n, policy).with_outputs(outputs))
}

pub(crate) fn handler_version(
    jobtype: String,
    id: Value,
    dt: Value,
    json: Value,
) -> Result<HandlerVersion> {
    let id: String = from_value(id, "handler version id")?;
    let dt = parse_score(&bytes(dt, "handler dt")?, "handler dt")?;
    let json = bytes(json, "handler")?;
    let handler: Handler = serde_json::from_slice(&json)
        .map_err(|e| Error::backend("redis: stored handler is not valid JSON", e))?;
    Ok(HandlerVersion {
        id,
        jobtype,
        dt,
        handler,
    })
}

#[cfg(test)]
mod tests {
    use super::{ResultField, bytes, handler_version, int, parse_score, string};
    use jobstore_api::{Handler, HandlerLimits, JobResult, ResultCode};
    use redis::Value;

    /// A result field splits at its first newline and its first three
    /// spaces: the owner keeps its spaces, the output its newlines; any
    /// part missing or unreadable is a malformed reply.
    #[test]
    fn result_fields_read_back_whole() {
        let r =
            ResultField::parse(b"failed 404 001700000000002 w 1\nboom\n at 2".to_vec()).unwrap();
        let mut result = JobResult::new(ResultCode::Failed, 404);
        result.output = b"boom\n at 2".to_vec();
        let want = ResultField {
            result,
            done_dt: 1_700_000_000_002,
            by: b"w 1".to_vec(),
        };
        assert_eq!(r, want);
        let r = ResultField::parse(b"cancelled 0 5 \n".to_vec()).unwrap();
        assert_eq!(
            (r.result.code, r.result.status, r.done_dt),
            (ResultCode::Cancelled, 0, 5)
        );
        assert!(r.by.is_empty() && r.result.output.is_empty());
        for bad in [
            &b"ok 200 5 w"[..],
            b"ok 200 5\n",
            b"ok 200\n",
            b"okay 200 5 w\n",
            b"ok 70000 5 w\n",
            b"ok 200 x w\n",
            b"ok x 5 w\n",
        ] {
            assert!(
                ResultField::parse(bad.to_vec()).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    /// Replies are read as what they mean, whatever string or number form
    /// the server sends them in; anything else is a malformed reply.
    #[test]
    fn replies_decode_from_every_form_they_come_in() {
        assert_eq!(
            bytes(Value::BulkString(b"a\0b".to_vec()), "x").unwrap(),
            b"a\0b"
        );
        assert_eq!(bytes(Value::SimpleString("OK".into()), "x").unwrap(), b"OK");
        assert_eq!(bytes(Value::Int(-12), "x").unwrap(), b"-12");
        assert!(bytes(Value::Nil, "x").is_err());
        assert_eq!(
            string(Value::BulkString(b"id-1".to_vec()), "x").unwrap(),
            "id-1"
        );
        assert!(string(Value::BulkString(vec![0xff]), "x").is_err());
        assert_eq!(int(&Value::Int(7), "x").unwrap(), 7);
        assert_eq!(int(&Value::BulkString(b"-3".to_vec()), "x").unwrap(), -3);
        assert_eq!(int(&Value::SimpleString("42".into()), "x").unwrap(), 42);
        assert!(int(&Value::BulkString(b"4x".to_vec()), "x").is_err());
        assert!(int(&Value::Nil, "x").is_err());
        assert_eq!(
            parse_score(b"1700000000000", "x").unwrap(),
            1_700_000_000_000
        );
        assert_eq!(parse_score(b"1.7e+12", "x").unwrap(), 1_700_000_000_000);
        assert!(parse_score(b"1.5", "x").is_err());
        assert!(parse_score(b"inf", "x").is_err());
    }

    /// The packed history field reads back as its events; a hash without
    /// it (or without tags) reads as none; anything else is malformed.
    #[test]
    fn histories_and_tags_decode_from_their_fields() {
        use jobstore_api::{EventKind, JobEvent};
        let one = JobEvent::new(1, "", 0, EventKind::Added).to_json();
        let two = JobEvent::new(2, "s\"x", 1, EventKind::Claimed).to_json();
        let h = format!("02\n{one}\n{two}");
        let got = super::history(Some(h.as_bytes())).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].by, "s\"x");
        assert!(super::history(None).unwrap().is_empty());
        assert!(super::history(Some(&b""[..])).unwrap().is_empty());
        assert!(super::history(Some(&b"01{}"[..])).is_err());
        assert!(super::history(Some(&b"01\n{"[..])).is_err());
        assert!(super::tags(None).unwrap().is_empty());
        assert_eq!(super::tags(Some(&br#"["a","b"]"#[..])).unwrap(), ["a", "b"]);
        assert!(super::tags(Some(&b"[1"[..])).is_err());
    }

    #[test]
    fn handlers_stored_before_limits_read_back_without_limits() {
        let old = br#"{"lang":"process","body":"cat","eid":null,"before":null,"before_each":null,"after_each":null}"#;
        let v = handler_version(
            "t".into(),
            Value::BulkString(b"v00000000000000000001".to_vec()),
            Value::BulkString(b"5".to_vec()),
            Value::BulkString(old.to_vec()),
        )
        .unwrap();
        assert_eq!(v.handler, Handler::new("process", "cat"));
        assert_eq!(v.handler.limits, HandlerLimits::default());
    }
}
