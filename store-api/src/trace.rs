//! [`TraceContext`]: the W3C Trace Context a job is added with.
//!
//! A producer that traces its work passes the context of its add (the
//! `traceparent` header, and `tracestate` if it has one) and the job keeps
//! it for life: the run continues the producer's trace, however much later
//! and on whichever daemon it happens. Stores keep the two strings as they
//! were given; [`crate::validate::trace`] decides which are valid.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::limits::{MAX_TRACEPARENT_LEN, MAX_TRACESTATE_LEN, MAX_TRACESTATE_MEMBERS};

/// A W3C Trace Context (<https://www.w3.org/TR/trace-context/>): a
/// `traceparent` and an optional `tracestate`, both as they travel in HTTP
/// headers.
///
/// Build one with [`TraceContext::parse`], which validates; the fields are
/// public so that stores can rebuild it from what they read, and every
/// store checks a new job's context with [`crate::validate::trace`] before
/// it keeps it.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TraceContext {
    /// `version-traceid-parentid-flags`, e.g.
    /// `00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01`: lowercase
    /// hex and dashes, 55 bytes for version `00`, at most
    /// [`MAX_TRACEPARENT_LEN`] for a later version.
    pub traceparent: String,
    /// Vendor entries, `key=value` comma-separated, as the producer sent
    /// them (at most [`MAX_TRACESTATE_LEN`] bytes and
    /// [`MAX_TRACESTATE_MEMBERS`] entries); `None` when it sent none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// A context of a valid `traceparent` and, if given, a valid
    /// `tracestate`; `InvalidInput` naming the field otherwise.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Result<Self> {
        let ctx = TraceContext {
            traceparent: traceparent.to_owned(),
            tracestate: tracestate.map(str::to_owned),
        };
        check(&ctx)?;
        Ok(ctx)
    }

    /// The trace id: 32 lowercase hex digits (of a valid context).
    pub fn trace_id(&self) -> &str {
        self.traceparent.get(3..35).unwrap_or_default()
    }

    /// The parent (span) id: 16 lowercase hex digits (of a valid context).
    pub fn parent_id(&self) -> &str {
        self.traceparent.get(36..52).unwrap_or_default()
    }

    /// The trace flags: 2 lowercase hex digits (of a valid context).
    pub fn flags(&self) -> &str {
        self.traceparent.get(53..55).unwrap_or_default()
    }

    /// Whether the producer sampled its trace (flag bit 0).
    pub fn sampled(&self) -> bool {
        u8::from_str_radix(self.flags(), 16).is_ok_and(|f| f & 1 == 1)
    }
}

impl fmt::Debug for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("TraceContext");
        s.field("traceparent", &self.traceparent);
        if let Some(state) = &self.tracestate {
            s.field("tracestate", state);
        }
        s.finish()
    }
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn invalid_parent(value: &str, why: &str) -> Error {
    Error::invalid(format!(
        "traceparent {value:?} is not a W3C traceparent: {why}"
    ))
}

fn invalid_state(why: String) -> Error {
    Error::invalid(format!("tracestate is not a W3C tracestate: {why}"))
}

/// Checks a context (see [`crate::validate::trace`]).
pub(crate) fn check(ctx: &TraceContext) -> Result<()> {
    traceparent(&ctx.traceparent)?;
    if let Some(state) = &ctx.tracestate {
        tracestate(state)?;
    }
    Ok(())
}

/// `version-traceid-parentid-flags` as W3C Trace Context defines it:
/// version 2 hex digits, not `ff`; trace id 32 and parent id 16 hex digits,
/// not all zeros; flags 2 hex digits; all lowercase. Version `00` is exactly
/// 55 bytes; a later version may go on after a `-`, in lowercase hex and
/// dashes, up to [`MAX_TRACEPARENT_LEN`] bytes.
fn traceparent(value: &str) -> Result<()> {
    if value.len() > MAX_TRACEPARENT_LEN {
        return Err(Error::invalid(format!(
            "traceparent is {} bytes long, the limit is {MAX_TRACEPARENT_LEN}",
            value.len()
        )));
    }
    if !value.is_ascii() || value.len() < 55 {
        return Err(invalid_parent(
            value,
            "expected version-traceid-parentid-flags, 55 characters",
        ));
    }
    let (version, trace_id, parent_id, flags) =
        (&value[0..2], &value[3..35], &value[36..52], &value[53..55]);
    let dashes = [2, 35, 52].iter().all(|&i| value.as_bytes()[i] == b'-');
    if !dashes
        || ![version, trace_id, parent_id, flags]
            .into_iter()
            .all(is_lower_hex)
    {
        return Err(invalid_parent(
            value,
            "expected version-traceid-parentid-flags in lowercase hex",
        ));
    }
    if version == "ff" {
        return Err(invalid_parent(value, "version ff is forbidden"));
    }
    if trace_id.bytes().all(|b| b == b'0') {
        return Err(invalid_parent(value, "the trace id is all zeros"));
    }
    if parent_id.bytes().all(|b| b == b'0') {
        return Err(invalid_parent(value, "the parent id is all zeros"));
    }
    let rest = &value[55..];
    if version == "00" && !rest.is_empty() {
        return Err(invalid_parent(value, "version 00 is exactly 55 characters"));
    }
    if !rest.is_empty()
        && (!rest.starts_with('-') || !rest.bytes().all(|b| b == b'-' || is_lower_hex_byte(b)))
    {
        return Err(invalid_parent(
            value,
            "what follows the flags must be '-' and more lowercase hex and dashes",
        ));
    }
    Ok(())
}

fn is_lower_hex_byte(b: u8) -> bool {
    matches!(b, b'0'..=b'9' | b'a'..=b'f')
}

/// A `tracestate` as W3C Trace Context defines it: at most
/// [`MAX_TRACESTATE_MEMBERS`] comma-separated `key=value` entries (spaces
/// and tabs around commas allowed, empty entries ignored), each key once;
/// keys `[a-z][a-z0-9_*/-]{0,255}` or `tenant@system`; values up to 256
/// printable ASCII characters other than `,` and `=`, not ending in a
/// space. At most [`MAX_TRACESTATE_LEN`] bytes, and not empty.
fn tracestate(value: &str) -> Result<()> {
    if value.len() > MAX_TRACESTATE_LEN {
        return Err(Error::invalid(format!(
            "tracestate is {} bytes long, the limit is {MAX_TRACESTATE_LEN}",
            value.len()
        )));
    }
    let mut keys: Vec<&str> = Vec::new();
    for member in value.split(',') {
        let member = member.trim_matches([' ', '\t']);
        if member.is_empty() {
            continue;
        }
        let Some((key, val)) = member.split_once('=') else {
            return Err(invalid_state(format!("entry {member:?} has no '='")));
        };
        if !state_key_ok(key) {
            return Err(invalid_state(format!(
                "key {key:?} is not lowercase [a-z][a-z0-9_*/-]* or tenant@system"
            )));
        }
        if val.is_empty()
            || val.len() > 256
            || val.ends_with(' ')
            || !val
                .bytes()
                .all(|b| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=')
        {
            return Err(invalid_state(format!(
                "the value of {key:?} is not 1 to 256 printable characters without ',' or '='"
            )));
        }
        if keys.contains(&key) {
            return Err(invalid_state(format!("key {key:?} appears twice")));
        }
        keys.push(key);
    }
    if keys.is_empty() {
        return Err(invalid_state(
            "it holds no entry (leave it unset instead)".to_owned(),
        ));
    }
    if keys.len() > MAX_TRACESTATE_MEMBERS {
        return Err(invalid_state(format!(
            "it holds {} entries, the limit is {MAX_TRACESTATE_MEMBERS}",
            keys.len()
        )));
    }
    Ok(())
}

fn key_char_ok(b: u8) -> bool {
    matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'*' | b'/')
}

fn state_key_ok(key: &str) -> bool {
    let b = key.as_bytes();
    match key.split_once('@') {
        None => {
            (1..=256).contains(&b.len())
                && b[0].is_ascii_lowercase()
                && b.iter().all(|&c| key_char_ok(c))
        }
        Some((tenant, system)) => {
            let (t, s) = (tenant.as_bytes(), system.as_bytes());
            (1..=241).contains(&t.len())
                && (t[0].is_ascii_lowercase() || t[0].is_ascii_digit())
                && t.iter().all(|&c| key_char_ok(c))
                && (1..=14).contains(&s.len())
                && s[0].is_ascii_lowercase()
                && s.iter().all(|&c| key_char_ok(c))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn bad_parent(tp: &str) -> String {
        let e = TraceContext::parse(tp, None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{tp:?}");
        e.to_string()
    }

    fn bad_state(ts: &str) -> String {
        let e = TraceContext::parse(TP, Some(ts)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{ts:?}");
        e.to_string()
    }

    #[test]
    fn the_spec_example_parses() {
        let ctx = TraceContext::parse(TP, Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")).unwrap();
        assert_eq!(ctx.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(ctx.parent_id(), "00f067aa0ba902b7");
        assert_eq!(ctx.flags(), "01");
        assert!(ctx.sampled());
        let unsampled = TraceContext::parse(&TP.replace("-01", "-00"), None).unwrap();
        assert!(!unsampled.sampled());
        assert_eq!(unsampled.tracestate, None);
    }

    #[test]
    fn later_versions_may_go_on() {
        let later = format!("cc{}-0a0b", &TP[2..]);
        TraceContext::parse(&later, None).unwrap();
        TraceContext::parse(&format!("cc{}", &TP[2..]), None).unwrap();
        assert!(bad_parent(&format!("cc{}x", &TP[2..])).contains("must be '-'"));
        assert!(bad_parent(&format!("cc{}-A", &TP[2..])).contains("must be '-'"));
        let long = format!("cc{}-{}", &TP[2..], "a".repeat(MAX_TRACEPARENT_LEN));
        assert!(bad_parent(&long).contains("limit"));
    }

    #[test]
    fn malformed_traceparents_name_the_field() {
        for tp in [
            "",
            "00",
            "garbage",
            &TP.to_uppercase(),
            &TP.replace('-', "_"),
            &format!("{TP}-"),
            &format!("{TP}0"),
            &TP[..54],
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",
            "0é-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(
                bad_parent(tp).starts_with("invalid input: traceparent"),
                "{tp:?}"
            );
        }
        assert!(bad_parent(&format!("ff{}", &TP[2..])).contains("version ff"));
        assert!(
            bad_parent("00-00000000000000000000000000000000-00f067aa0ba902b7-01")
                .contains("trace id is all zeros")
        );
        assert!(
            bad_parent("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01")
                .contains("parent id is all zeros")
        );
    }

    #[test]
    fn tracestates() {
        for ok in [
            "a=1",
            "rojo=00f067aa0ba902b7, congo=t61rcWkgMzE",
            " a=1 ,\t,b=2 ",
            "tenant@sys=x y",
            "0t@s=v",
            "k/*_-=!\"#$%&'()*+-./:;<>?@[\\]^_`{|}~",
        ] {
            TraceContext::parse(TP, Some(ok)).unwrap_or_else(|e| panic!("{ok:?}: {e}"));
        }
        let many = (0..MAX_TRACESTATE_MEMBERS)
            .map(|i| format!("k{i}=v"))
            .collect::<Vec<_>>();
        TraceContext::parse(TP, Some(&many.join(","))).unwrap();
        let too_many = (0..=MAX_TRACESTATE_MEMBERS)
            .map(|i| format!("k{i}=v"))
            .collect::<Vec<_>>();
        assert!(bad_state(&too_many.join(",")).contains("entries"));
        assert!(bad_state(&format!("a={}", "v".repeat(MAX_TRACESTATE_LEN))).contains("limit"));
        for (bad, why) in [
            ("", "no entry"),
            (" , ", "no entry"),
            ("a", "no '='"),
            ("A=1", "key"),
            ("1a=1", "key"),
            ("a@=1", "key"),
            ("@s=1", "key"),
            ("t@S=1", "key"),
            ("t@s12345678901234=1", "key"),
            ("a=", "value"),
            ("a=x=y", "value"),
            ("a=é", "value"),
            ("a=\u{7f}", "value"),
            ("a=1,a=2", "twice"),
        ] {
            let msg = bad_state(bad);
            assert!(
                msg.starts_with("invalid input: tracestate"),
                "{bad:?}: {msg}"
            );
            assert!(msg.contains(why), "{bad:?}: {msg}");
        }
    }
}
