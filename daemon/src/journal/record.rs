//! Record lines: encoding, payload escaping, and verification.
//!
//! A record is one line:
//!
//! ```text
//! <crc32c of body, 8 lowercase hex> <body length in bytes, decimal> <body>\n
//! ```
//!
//! where the body is `id|jobtype|priority|run_at|payload` (`run_at` empty
//! when `None`; a job with tags writes its jobtype field as
//! `jobtype#tag,tag`, which no jobtype can be; a job with a trace context
//! adds `~traceparent`, and `~tracestate` if it has one, to that field:
//! `jobtype#tag,tag~00-4bf9…-01~rojo=1`, where no jobtype, tag or
//! traceparent holds a `~`, and the tracestate has `%`, `|` and tab
//! written `%25`, `%7C` and `%09`). A job with a unique key writes its
//! priority field as `priority!<k|r><window ms>:<key>` (`k` keeps the
//! holder, `r` replaces its data; the window is empty when there is none;
//! `%` and `|` in the key are written `%25` and `%7C`). A repeating job
//! writes its run-at field as `run_at@<rule text>` (`run_at` empty when
//! `None`; the text of `Repeat::to_text`, with `%` and `|` written `%25`
//! and `%7C`). A job with dependencies writes them after the run time, before
//! any rule: `run_at^<c|r><id>,<id>` (`c` cancels it when one fails, `r` runs
//! it anyway; `%`, `,`, `^`, `@` and `|` in an id written `%25`, `%2C`,
//! `%5E`, `%40` and `%7C`). Records written before tags, trace contexts,
//! unique keys, repeat rules or dependencies existed have none of them and
//! read as they always did. The payload is escaped so that the line holds any bytes:
//! `\` → `\\`, newline → `\n`, CR → `\r`, every byte that is not part of
//! valid UTF-8 → `\xHH` (lowercase hex); everything else is copied verbatim,
//! so text payloads stay readable.

use std::io::Write as _;

use jobstore_api::{DependencyFailure, OnConflict, Repeat, TraceContext, Unique};

use super::{JournalError, Record};

/// The longest body a record line may have, in bytes (after escaping).
pub(crate) const MAX_BODY_LEN: usize = 1 << 30;

/// Most decimal digits a body length can have ([`MAX_BODY_LEN`] has 10).
const MAX_LEN_DIGITS: usize = 10;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Why a line is not a record. Static so that recording it costs nothing.
pub(crate) type Damage = &'static str;

/// Checks that an id or jobtype can be written: not empty, no `|`, no
/// control characters (which covers `\n` and `\r`).
fn check_name(field: &str, value: &str) -> Result<(), JournalError> {
    if value.is_empty() {
        return Err(JournalError::InvalidRecord {
            message: format!("{field} is empty"),
        });
    }
    if let Some(c) = value.chars().find(|&c| c == '|' || c.is_control()) {
        return Err(JournalError::InvalidRecord {
            message: format!("{field} {value:?} contains {c:?}, which the journal cannot hold"),
        });
    }
    Ok(())
}

/// Whether a decoded id or jobtype is one that [`encode_into`] could have
/// written.
fn name_ok(value: &str) -> bool {
    !value.is_empty() && !value.chars().any(|c| c == '|' || c.is_control())
}

/// The escaped length of a payload.
fn escaped_len(payload: &[u8]) -> usize {
    let mut n = 0;
    for chunk in payload.utf8_chunks() {
        let valid = chunk.valid().as_bytes();
        n += valid.len()
            + valid
                .iter()
                .filter(|&&b| matches!(b, b'\\' | b'\n' | b'\r'))
                .count();
        n += 4 * chunk.invalid().len();
    }
    n
}

/// Appends the escaped payload to `out`.
fn escape_into(payload: &[u8], out: &mut Vec<u8>) {
    for chunk in payload.utf8_chunks() {
        let valid = chunk.valid().as_bytes();
        let mut copied = 0;
        for (i, &b) in valid.iter().enumerate() {
            let escape: &[u8] = match b {
                b'\\' => b"\\\\",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                _ => continue,
            };
            out.extend_from_slice(&valid[copied..i]);
            out.extend_from_slice(escape);
            copied = i + 1;
        }
        out.extend_from_slice(&valid[copied..]);
        for &b in chunk.invalid() {
            out.extend_from_slice(&[
                b'\\',
                b'x',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]);
        }
    }
}

/// Appends the unescaped payload to `out`; fails on an escape that
/// [`escape_into`] never writes (or a raw CR, which it always escapes).
fn unescape_into(escaped: &[u8], out: &mut Vec<u8>) -> Result<(), Damage> {
    out.reserve(escaped.len());
    let mut i = 0;
    while i < escaped.len() {
        let Some(rel) = escaped[i..].iter().position(|&b| b == b'\\' || b == b'\r') else {
            out.extend_from_slice(&escaped[i..]);
            break;
        };
        out.extend_from_slice(&escaped[i..i + rel]);
        i += rel;
        if escaped[i] == b'\r' {
            return Err("raw carriage return in the payload");
        }
        match escaped.get(i + 1) {
            Some(b'\\') => {
                out.push(b'\\');
                i += 2;
            }
            Some(b'n') => {
                out.push(b'\n');
                i += 2;
            }
            Some(b'r') => {
                out.push(b'\r');
                i += 2;
            }
            Some(b'x') => {
                let (Some(hi), Some(lo)) = (
                    escaped.get(i + 2).and_then(|&b| hex_digit(b)),
                    escaped.get(i + 3).and_then(|&b| hex_digit(b)),
                ) else {
                    return Err("bad \\x escape in the payload");
                };
                out.push(hi << 4 | lo);
                i += 4;
            }
            _ => return Err("bad escape in the payload"),
        }
    }
    Ok(())
}

/// The value of one lowercase hex digit.
fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

/// Appends the line of `record` (with its trailing newline) to `out` and
/// returns the line's length. Leaves `out` as it was on error.
pub(crate) fn encode_into(record: &Record, out: &mut Vec<u8>) -> Result<usize, JournalError> {
    check_name("id", &record.id)?;
    check_name("jobtype", &record.jobtype)?;
    if let Some(t) = record
        .tags
        .iter()
        .find(|t| t.is_empty() || t.contains(['#', ',', '|']) || t.contains(char::is_control))
    {
        return Err(JournalError::InvalidRecord {
            message: format!("tag {t:?} cannot be journaled"),
        });
    }
    if let Some(c) = record.jobtype.chars().find(|c| matches!(c, '#' | '~')) {
        return Err(JournalError::InvalidRecord {
            message: format!("jobtype {:?} contains {c:?}", record.jobtype),
        });
    }
    if let Some(u) = &record.unique
        && (u.key.is_empty() || u.key.contains(char::is_control))
    {
        return Err(JournalError::InvalidRecord {
            message: format!("unique key {:?} cannot be journaled", u.key),
        });
    }
    if let Some(d) = record.depends_on.iter().find(|d| !name_ok(d)) {
        return Err(JournalError::InvalidRecord {
            message: format!("dependency {d:?} cannot be journaled"),
        });
    }
    if let Some(r) = &record.repeat
        && (r.rule.is_empty() || r.to_text().contains(char::is_control))
    {
        return Err(JournalError::InvalidRecord {
            message: format!("repeat rule {:?} cannot be journaled", r.rule),
        });
    }
    if let Some(t) = &record.trace {
        let parent_ok = t
            .traceparent
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b'-')
            && !t.traceparent.is_empty();
        let state_ok = t
            .tracestate
            .as_deref()
            .is_none_or(|s| !s.chars().any(|c| c.is_control() && c != '\t'));
        if !parent_ok || !state_ok {
            return Err(JournalError::InvalidRecord {
                message: format!("trace context {t:?} cannot be journaled"),
            });
        }
    }
    let start = out.len();
    let payload_len = escaped_len(&record.data);
    // The body's numeric fields are formatted straight into `out` (no
    // temporary strings); their lengths are measured from what was written.
    out.extend_from_slice(b"00000000 ");
    let len_at = out.len();
    // Reserve room for the longest length; shifted down once it is known.
    out.extend_from_slice(&[b' '; MAX_LEN_DIGITS + 1]);
    let body_at = out.len();
    out.extend_from_slice(record.id.as_bytes());
    out.push(b'|');
    out.extend_from_slice(record.jobtype.as_bytes());
    if !record.tags.is_empty() {
        out.push(b'#');
        out.extend_from_slice(record.tags.join(",").as_bytes());
    }
    if let Some(t) = &record.trace {
        out.push(b'~');
        out.extend_from_slice(t.traceparent.as_bytes());
        if let Some(state) = &t.tracestate {
            out.push(b'~');
            for b in state.bytes() {
                match b {
                    b'%' => out.extend_from_slice(b"%25"),
                    b'|' => out.extend_from_slice(b"%7C"),
                    b'\t' => out.extend_from_slice(b"%09"),
                    b => out.push(b),
                }
            }
        }
    }
    out.push(b'|');
    // Writing to a Vec cannot fail.
    let _ = write!(out, "{}", record.priority);
    if let Some(u) = &record.unique {
        out.push(b'!');
        out.push(match u.on_conflict {
            OnConflict::Keep => b'k',
            OnConflict::ReplaceData => b'r',
        });
        if let Some(w) = u.window {
            let _ = write!(out, "{}", w.as_millis());
        }
        out.push(b':');
        push_escaped(out, &u.key);
    }
    out.push(b'|');
    if let Some(run_at) = record.run_at {
        let _ = write!(out, "{run_at}");
    }
    if !record.depends_on.is_empty() {
        out.push(b'^');
        // The first letter of its name: `c`, `r` or `h`.
        let policy = record.on_dependency_failure.name().as_bytes()[0];
        // Upper case: the run is handed the dependencies' outputs.
        out.push(if record.with_outputs {
            policy.to_ascii_uppercase()
        } else {
            policy
        });
        for (i, dep) in record.depends_on.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            for b in dep.bytes() {
                match b {
                    b'%' => out.extend_from_slice(b"%25"),
                    b',' => out.extend_from_slice(b"%2C"),
                    b'^' => out.extend_from_slice(b"%5E"),
                    b'@' => out.extend_from_slice(b"%40"),
                    b'|' => out.extend_from_slice(b"%7C"),
                    b => out.push(b),
                }
            }
        }
    }
    if let Some(r) = &record.repeat {
        out.push(b'@');
        push_escaped(out, &r.to_text());
    }
    out.push(b'|');
    out.reserve(payload_len + 1);
    escape_into(&record.data, out);
    let body_len = out.len() - body_at;
    if body_too_large(body_len) {
        out.truncate(start);
        return Err(JournalError::InvalidRecord {
            message: format!(
                "record {:?} is too large: {body_len} bytes escaped, the limit is {MAX_BODY_LEN}",
                record.id
            ),
        });
    }
    let crc = crc32c::crc32c(&out[body_at..]);
    for (i, slot) in out[start..start + 8].iter_mut().enumerate() {
        *slot = HEX[((crc >> (28 - 4 * i)) & 0xf) as usize];
    }
    // Write the length, then close the gap left by the reserved room.
    let mut digits = [0u8; MAX_LEN_DIGITS];
    let mut n = body_len;
    let mut k = MAX_LEN_DIGITS;
    loop {
        k -= 1;
        digits[k] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let len_digits = &digits[k..];
    out[len_at..len_at + len_digits.len()].copy_from_slice(len_digits);
    out[len_at + len_digits.len()] = b' ';
    let gap = MAX_LEN_DIGITS + 1 - (len_digits.len() + 1);
    out.copy_within(body_at.., body_at - gap);
    out.truncate(out.len() - gap);
    out.push(b'\n');
    Ok(out.len() - start)
}

/// Whether a body of `len` escaped bytes is more than a record may hold.
fn body_too_large(len: usize) -> bool {
    len > MAX_BODY_LEN
}

/// The parsed header of a line: `(crc, offset of the body, declared body
/// length)`.
fn parse_header(line: &[u8]) -> Result<(u32, usize, usize), Damage> {
    if line.len() < 11 {
        return Err("line too short for a record");
    }
    let mut crc = 0u32;
    for &b in &line[..8] {
        let Some(d) = hex_digit(b) else {
            return Err("bad checksum field");
        };
        crc = crc << 4 | u32::from(d);
    }
    if line[8] != b' ' {
        return Err("bad checksum field");
    }
    let digits = line[9..]
        .iter()
        .take(MAX_LEN_DIGITS + 1)
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0
        || digits > MAX_LEN_DIGITS
        || (digits > 1 && line[9] == b'0')
        || line.get(9 + digits) != Some(&b' ')
    {
        return Err("bad length field");
    }
    let len = line[9..9 + digits]
        .iter()
        .fold(0usize, |n, &b| n * 10 + usize::from(b - b'0'));
    Ok((crc, 9 + digits + 1, len))
}

/// A verified record line, borrowing from it.
#[derive(Debug)]
pub(crate) struct Fields<'a> {
    id: &'a str,
    jobtype: &'a str,
    tags: &'a str,
    trace: Option<TraceContext>,
    priority: i32,
    unique: Option<Unique>,
    run_at: Option<i64>,
    repeat: Option<Repeat>,
    depends_on: Vec<String>,
    on_dependency_failure: DependencyFailure,
    with_outputs: bool,
}

/// Verifies a line (without its trailing newline): length, checksum, and
/// every field, including the payload's escapes. `scratch` is reused for
/// the unescaped payload.
pub(crate) fn parse_line<'a>(line: &'a [u8], scratch: &mut Vec<u8>) -> Result<Fields<'a>, Damage> {
    let (crc, body_at, len) = parse_header(line)?;
    let body = &line[body_at..];
    if body.len() != len {
        return Err(if body.len() > len {
            "line longer than its length field (a lost newline?)"
        } else {
            "line shorter than its length field"
        });
    }
    if crc32c::crc32c(body) != crc {
        return Err("checksum mismatch");
    }
    let mut parts = body.splitn(5, |&b| b == b'|');
    let (Some(id), Some(jobtype), Some(priority), Some(run_at), Some(payload)) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err("missing fields");
    };
    let id = std::str::from_utf8(id).map_err(|_| "id is not UTF-8")?;
    let jobtype = std::str::from_utf8(jobtype).map_err(|_| "jobtype is not UTF-8")?;
    let (jobtype, trace) = match jobtype.split_once('~') {
        None => (jobtype, None),
        Some((jobtype, trace)) => (jobtype, Some(decode_trace(trace)?)),
    };
    let (jobtype, tags) = jobtype.split_once('#').unwrap_or((jobtype, ""));
    if !name_ok(id) {
        return Err("bad id");
    }
    if !name_ok(jobtype) {
        return Err("bad jobtype");
    }
    let priority = std::str::from_utf8(priority).map_err(|_| "priority is not UTF-8")?;
    let (priority, unique) = match priority.split_once('!') {
        None => (priority, None),
        Some((priority, unique)) => (priority, Some(decode_unique(unique)?)),
    };
    let priority = priority.parse::<i32>().map_err(|_| "bad priority")?;
    let run_at = std::str::from_utf8(run_at).map_err(|_| "run_at is not UTF-8")?;
    let (run_at, repeat) = match run_at.split_once('@') {
        None => (run_at, None),
        Some((run_at, text)) => {
            let text = percent_decoded(text, "bad escape in the repeat rule")?;
            if text.is_empty() || text.contains(char::is_control) {
                return Err("bad repeat rule");
            }
            (run_at, Some(Repeat::from_text(&text)))
        }
    };
    let (run_at, depends_on, on_dependency_failure, with_outputs) = match run_at.split_once('^') {
        None => (run_at, Vec::new(), DependencyFailure::default(), false),
        Some((run_at, deps)) => {
            let (policy, with_outputs, ids) = decode_deps(deps)?;
            (run_at, ids, policy, with_outputs)
        }
    };
    let run_at = if run_at.is_empty() {
        None
    } else {
        Some(run_at.parse::<i64>().map_err(|_| "bad run_at")?)
    };
    scratch.clear();
    unescape_into(payload, scratch)?;
    Ok(Fields {
        id,
        jobtype,
        tags,
        trace,
        priority,
        unique,
        run_at,
        repeat,
        depends_on,
        on_dependency_failure,
        with_outputs,
    })
}

/// The dependencies of a run-at field, after its `^`: the policy (`c`
/// cancel, `r` run, `h` hold; upper case with outputs) then ids
/// separated by `,`, each with `%25`, `%2C`, `%5E`, `%40`, `%7C` for `%`,
/// `,`, `^`, `@`, `|`.
fn decode_deps(field: &str) -> Result<(DependencyFailure, bool, Vec<String>), Damage> {
    let first = field.as_bytes().first().copied().unwrap_or(0);
    let policy = match first.to_ascii_lowercase() {
        b'c' => DependencyFailure::Cancel,
        b'r' => DependencyFailure::Run,
        b'h' => DependencyFailure::Hold,
        _ => return Err("bad dependency policy"),
    };
    let with_outputs = first.is_ascii_uppercase();
    let mut ids = Vec::new();
    for escaped in field[1..].split(',') {
        let mut id = String::with_capacity(escaped.len());
        let mut rest = escaped;
        while let Some(at) = rest.find('%') {
            id.push_str(&rest[..at]);
            id.push(match rest.get(at + 1..at + 3) {
                Some("25") => '%',
                Some("2C") => ',',
                Some("5E") => '^',
                Some("40") => '@',
                Some("7C") => '|',
                _ => return Err("bad escape in a dependency"),
            });
            rest = &rest[at + 3..];
        }
        id.push_str(rest);
        if !name_ok(&id) {
            return Err("bad dependency");
        }
        ids.push(id);
    }
    Ok((policy, with_outputs, ids))
}

/// The unique key of a priority field, after its `!`:
/// `<k|r><window ms>:<key>` with `%25` and `%7C` for `%` and `|`.
fn decode_unique(field: &str) -> Result<Unique, Damage> {
    let on_conflict = match field.as_bytes().first() {
        Some(b'k') => OnConflict::Keep,
        Some(b'r') => OnConflict::ReplaceData,
        _ => return Err("bad unique key conflict mode"),
    };
    let (window, escaped) = field[1..].split_once(':').ok_or("bad unique key")?;
    let window = if window.is_empty() {
        None
    } else {
        let ms: u64 = window.parse().map_err(|_| "bad unique key window")?;
        Some(std::time::Duration::from_millis(ms))
    };
    let key = percent_decoded(escaped, "bad escape in the unique key")?;
    if key.is_empty() || key.contains(char::is_control) {
        return Err("bad unique key");
    }
    let mut unique = Unique::new(key).on_conflict(on_conflict);
    unique.window = window;
    Ok(unique)
}

/// Appends `s` with `%` and `|` written `%25` and `%7C`.
fn push_escaped(out: &mut Vec<u8>, s: &str) {
    for b in s.bytes() {
        match b {
            b'%' => out.extend_from_slice(b"%25"),
            b'|' => out.extend_from_slice(b"%7C"),
            b => out.push(b),
        }
    }
}

/// The text [`push_escaped`] wrote; any other `%` escape is `damage`.
fn percent_decoded(escaped: &str, damage: Damage) -> Result<String, Damage> {
    let mut text = String::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some(at) = rest.find('%') {
        text.push_str(&rest[..at]);
        text.push(match rest.get(at + 1..at + 3) {
            Some("25") => '%',
            Some("7C") => '|',
            _ => return Err(damage),
        });
        rest = &rest[at + 3..];
    }
    text.push_str(rest);
    Ok(text)
}

/// The trace context of a jobtype field, after its first `~`:
/// `traceparent`, or `traceparent~tracestate` with `%25`, `%7C`, `%09`
/// for `%`, `|`, tab; and valid as W3C Trace Context says (as the HTTP
/// API checked it before journaling it).
fn decode_trace(field: &str) -> Result<TraceContext, Damage> {
    let (parent, state) = match field.split_once('~') {
        None => (field, None),
        Some((parent, escaped)) => {
            let mut state = String::with_capacity(escaped.len());
            let mut rest = escaped;
            while let Some(at) = rest.find('%') {
                state.push_str(&rest[..at]);
                let c = match rest.get(at + 1..at + 3) {
                    Some("25") => '%',
                    Some("7C") => '|',
                    Some("09") => '\t',
                    _ => return Err("bad escape in the tracestate"),
                };
                state.push(c);
                rest = &rest[at + 3..];
            }
            state.push_str(rest);
            (parent, Some(state))
        }
    };
    TraceContext::parse(parent, state.as_deref()).map_err(|_| "bad trace context")
}

/// Decodes a line (without its trailing newline) into a record.
pub(crate) fn decode_line(line: &[u8]) -> Result<Record, Damage> {
    let mut data = Vec::new();
    let fields = parse_line(line, &mut data)?;
    Ok(Record {
        id: fields.id.to_owned(),
        jobtype: fields.jobtype.to_owned(),
        priority: fields.priority,
        run_at: fields.run_at,
        data,
        tags: if fields.tags.is_empty() {
            Vec::new()
        } else {
            fields.tags.split(',').map(str::to_owned).collect()
        },
        trace: fields.trace,
        unique: fields.unique,
        repeat: fields.repeat,
        depends_on: fields.depends_on,
        on_dependency_failure: fields.on_dependency_failure,
        with_outputs: fields.with_outputs,
    })
}

/// Where, in a damaged line, the next record may start when the line is two
/// lines whose newline was lost: just past the body that the line's own
/// header declares, if that is inside the line. Only that one place is
/// tried, so text inside a payload is never taken for a record.
pub(crate) fn resync_offset(line: &[u8]) -> Option<usize> {
    let (_, body_at, len) = parse_header(line).ok()?;
    let next = body_at.checked_add(len)?.checked_add(1)?;
    (next < line.len()).then_some(next)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn rec(id: &str, data: &[u8]) -> Record {
        Record {
            id: id.to_owned(),
            jobtype: "mail".to_owned(),
            priority: 5,
            run_at: None,
            data: data.to_vec(),
            tags: Vec::new(),
            trace: None,
            unique: None,
            repeat: None,
            depends_on: Vec::new(),
            on_dependency_failure: Default::default(),
            with_outputs: false,
        }
    }

    fn line_of(r: &Record) -> Vec<u8> {
        let mut out = Vec::new();
        let n = encode_into(r, &mut out).unwrap();
        assert_eq!(n, out.len());
        // The room reserved for the payload is exactly its escaped length.
        let mut escaped = Vec::new();
        escape_into(&r.data, &mut escaped);
        assert_eq!(escaped_len(&r.data), escaped.len());
        out
    }

    fn round_trip(r: &Record) {
        let line = line_of(r);
        assert_eq!(line.last(), Some(&b'\n'));
        assert_eq!(
            line.iter().filter(|&&b| b == b'\n').count(),
            1,
            "one record is one line"
        );
        assert!(!line.contains(&b'\r'));
        let back = decode_line(&line[..line.len() - 1]).unwrap();
        assert_eq!(&back, r);
    }

    #[test]
    fn exact_format() {
        let r = Record {
            id: "j1".into(),
            jobtype: "mail".into(),
            priority: -3,
            run_at: Some(1_700_000_000_000),
            data: b"a\\b\nc\rd\xffe|f".to_vec(),
            tags: Vec::new(),
            trace: None,
            unique: None,
            repeat: None,
            depends_on: Vec::new(),
            on_dependency_failure: Default::default(),
            with_outputs: false,
        };
        let line = line_of(&r);
        let body = b"j1|mail|-3|1700000000000|a\\\\b\\nc\\rd\\xffe|f";
        let expected = format!(
            "{:08x} {} {}\n",
            crc32c::crc32c(body),
            body.len(),
            std::str::from_utf8(body).unwrap()
        );
        assert_eq!(std::str::from_utf8(&line).unwrap(), expected);
        round_trip(&r);
    }

    /// A trace context follows the jobtype and tags: `~traceparent`, then
    /// `~tracestate` with `%`, `|` and tab escaped; records without one
    /// are exactly as before.
    #[test]
    fn trace_context_format() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let mut r = rec("j1", b"x");
        r.tags = vec!["eu".into()];
        r.trace = Some(TraceContext::parse(tp, Some("a=1|%\t, b=~2")).unwrap());
        let line = line_of(&r);
        let text = std::str::from_utf8(&line).unwrap();
        assert!(
            text.ends_with(&format!(" j1|mail#eu~{tp}~a=1%7C%25%09, b=~2|5||x\n")),
            "{text:?}"
        );
        round_trip(&r);
        r.trace = Some(TraceContext::parse(tp, None).unwrap());
        r.tags.clear();
        let text = String::from_utf8(line_of(&r)).unwrap();
        assert!(text.ends_with(&format!(" j1|mail~{tp}|5||x\n")), "{text:?}");
        round_trip(&r);
        r.trace = None;
        let text = String::from_utf8(line_of(&r)).unwrap();
        assert!(text.ends_with(" j1|mail|5||x\n"), "{text:?}");
        round_trip(&r);
    }

    /// A trace context that the HTTP API would not have let through, or a
    /// bad escape in its tracestate, is damage; one the journal cannot
    /// write is refused.
    #[test]
    fn bad_trace_contexts_are_damage_or_refused() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let with = |body: String| {
            format!(
                "{:08x} {} {body}",
                crc32c::crc32c(body.as_bytes()),
                body.len()
            )
            .into_bytes()
        };
        let ok = with(format!("id|mail~{tp}~a=1%7Cb|1||p"));
        assert_eq!(
            decode_line(&ok)
                .unwrap()
                .trace
                .unwrap()
                .tracestate
                .as_deref(),
            Some("a=1|b")
        );
        for (body, why) in [
            (format!("id|mail~{}|1||p", &tp[..54]), "bad trace context"),
            (
                format!("id|mail~{}|1||p", tp.to_uppercase()),
                "bad trace context",
            ),
            ("id|mail~|1||p".to_owned(), "bad trace context"),
            (format!("id|mail~{tp}~|1||p"), "bad trace context"),
            (format!("id|mail~{tp}~A=1|1||p"), "bad trace context"),
            (
                format!("id|mail~{tp}~a=1%7c|1||p"),
                "bad escape in the tracestate",
            ),
            (
                format!("id|mail~{tp}~a=1%2|1||p"),
                "bad escape in the tracestate",
            ),
            (
                format!("id|mail~{tp}~a=%41|1||p"),
                "bad escape in the tracestate",
            ),
        ] {
            assert_eq!(decode_line(&with(body.clone())).unwrap_err(), why, "{body}");
        }
        for trace in [
            TraceContext {
                traceparent: "00|x".into(),
                tracestate: None,
            },
            TraceContext {
                traceparent: format!("{tp}~"),
                tracestate: None,
            },
            TraceContext {
                traceparent: tp.into(),
                tracestate: Some("a=\n".into()),
            },
        ] {
            let mut r = rec("id", b"p");
            r.trace = Some(trace);
            let mut out = b"keep".to_vec();
            assert!(matches!(
                encode_into(&r, &mut out),
                Err(JournalError::InvalidRecord { .. })
            ));
            assert_eq!(out, b"keep");
        }
        let mut r = rec("id", b"p");
        r.jobtype = "a~b".into();
        assert!(
            encode_into(&r, &mut Vec::new()).is_err(),
            "a jobtype holds no '~'"
        );
    }

    #[test]
    fn run_at_none_is_empty_and_text_is_verbatim() {
        let r = rec("x", "héllo wörld ✓ \t\0".as_bytes());
        let line = line_of(&r);
        let text = std::str::from_utf8(&line).unwrap();
        assert!(
            text.ends_with(" x|mail|5||héllo wörld ✓ \t\0\n"),
            "{text:?}"
        );
        round_trip(&r);
    }

    #[test]
    fn every_byte_value_and_edge_payloads() {
        let all: Vec<u8> = (0..=255u8).collect();
        round_trip(&rec("all", &all));
        round_trip(&rec("empty", b""));
        round_trip(&rec("nl", b"\n\n\r\n\\\\n\\x41"));
        round_trip(&rec(
            "bad-utf8",
            b"\xc3\x28\xa0\xa1\xe2\x28\xa1\xf0\x90\x28\xbc",
        ));
        round_trip(&rec("truncated-utf8", "✓".as_bytes().split_at(2).0));
        let big: Vec<u8> = (0..1u64 << 20).map(|i| (i * 7919 % 251) as u8).collect();
        round_trip(&rec("big", &big));
    }

    #[test]
    fn extreme_numbers() {
        for (priority, run_at) in [
            (i32::MIN, Some(i64::MIN)),
            (i32::MAX, Some(i64::MAX)),
            (0, Some(0)),
            (0, None),
        ] {
            round_trip(&Record {
                id: "n".into(),
                jobtype: "t".into(),
                priority,
                run_at,
                data: vec![],
                tags: Vec::new(),
                trace: None,
                unique: None,
                repeat: None,
                depends_on: Vec::new(),
                on_dependency_failure: Default::default(),
                with_outputs: false,
            });
        }
    }

    #[test]
    fn unique_keys_round_trip_and_bad_ones_are_damage() {
        let keyed = |key: &str, window: Option<u64>, on_conflict| {
            let mut u = Unique::new(key).on_conflict(on_conflict);
            u.window = window.map(std::time::Duration::from_millis);
            Record {
                unique: Some(u),
                ..rec("k", b"payload|with|bars")
            }
        };
        for r in [
            keyed("invoice-4711", None, OnConflict::Keep),
            keyed("a|b%7C%25c", Some(600_000), OnConflict::ReplaceData),
            keyed("!k:0:", Some(0), OnConflict::Keep),
            keyed("ключ 🔑", None, OnConflict::ReplaceData),
        ] {
            round_trip(&r);
        }
        let line = line_of(&keyed("a|b", Some(5), OnConflict::ReplaceData));
        let text = String::from_utf8(line.clone()).unwrap();
        assert!(text.contains("|5!r5:a%7Cb|"), "{text}");
        // Damaged unique fields are damage, never a different key.
        for field in [
            "x5:k",
            "k",
            "k5",
            "kx:k",
            "k5:",
            "k:%7",
            "k:%41",
            "k:a\u{1}b",
            "k-1:k",
        ] {
            let body = format!("id|t|0!{field}||data");
            let line = format!(
                "{:08x} {} {body}",
                crc32c::crc32c(body.as_bytes()),
                body.len()
            );
            assert!(decode_line(line.as_bytes()).is_err(), "{field:?} decoded");
        }
        // A key the journal cannot hold is refused before writing.
        for key in ["", "a\nb", "tab\there"] {
            let mut out = b"keep".to_vec();
            assert!(encode_into(&keyed(key, None, OnConflict::Keep), &mut out).is_err());
            assert_eq!(out, b"keep");
        }
    }

    #[test]
    fn repeat_rules_round_trip_and_bad_ones_are_damage() {
        let repeating = |rule: Repeat, run_at: Option<i64>| Record {
            repeat: Some(rule),
            run_at,
            ..rec("r", b"payload|with|bars")
        };
        for r in [
            repeating(Repeat::new("0 6 * * *"), None),
            repeating(Repeat::new("@daily").time_zone("Europe/Paris"), Some(17)),
            repeating(Repeat::new("a|b%7C%25c @ x"), Some(-5)),
            repeating(Repeat::new("FINISHED, +1 DAY, WEEKDAY 1"), None),
        ] {
            round_trip(&r);
        }
        let line = line_of(&repeating(
            Repeat::new("* | %").time_zone("Etc/GMT+5"),
            Some(9),
        ));
        let text = String::from_utf8(line).unwrap();
        assert!(text.contains("|9@TZ=Etc/GMT+5 * %7C %25|"), "{text}");
        // Damaged repeat fields are damage, never another rule or time.
        for field in ["@", "x@HOURLY", "5@a%7", "5@a%41", "5@a\u{1}b", "5@@"] {
            let body = format!("id|t|0|{field}|data");
            let line = format!(
                "{:08x} {} {body}",
                crc32c::crc32c(body.as_bytes()),
                body.len()
            );
            let got = decode_line(line.as_bytes());
            if field == "5@@" {
                // A rule may hold an `@` (`@daily`): this one is "@".
                assert_eq!(got.unwrap().repeat, Some(Repeat::new("@")));
            } else {
                assert!(got.is_err(), "{field:?} decoded");
            }
        }
        // A rule the journal cannot hold is refused before writing.
        for rule in ["", "a\nb"] {
            let mut out = b"keep".to_vec();
            assert!(encode_into(&repeating(Repeat::new(rule), None), &mut out).is_err());
            assert_eq!(out, b"keep");
        }
    }

    #[test]
    fn dependencies_round_trip_and_bad_ones_are_damage() {
        let waiting = |deps: &[&str], policy, repeat: Option<Repeat>| Record {
            depends_on: deps.iter().map(|d| (*d).to_owned()).collect(),
            on_dependency_failure: policy,
            repeat,
            run_at: Some(5),
            ..rec("w", b"payload")
        };
        for r in [
            waiting(&["a"], DependencyFailure::Cancel, None),
            waiting(&["a,b", "c^d", "e@f", "g%2C"], DependencyFailure::Run, None),
            waiting(&["x"], DependencyFailure::Run, Some(Repeat::new("@daily"))),
            waiting(&["h"], DependencyFailure::Hold, None),
            Record {
                with_outputs: true,
                ..waiting(&["o", "p"], DependencyFailure::Hold, None)
            },
        ] {
            round_trip(&r);
        }
        let line = line_of(&waiting(&["a,b", "c"], DependencyFailure::Run, None));
        let text = String::from_utf8(line).unwrap();
        assert!(text.contains("|5^ra%2Cb,c|"), "{text}");
        let line = line_of(&Record {
            with_outputs: true,
            ..waiting(&["a"], DependencyFailure::Hold, None)
        });
        let text = String::from_utf8(line).unwrap();
        assert!(text.contains("|5^Ha|"), "{text}");
        for field in ["5^", "5^x", "5^c", "5^ca,", "5^c%41", "5^c%2", "5^ca\u{1}"] {
            let body = format!("id|t|0|{field}|data");
            let line = format!(
                "{:08x} {} {body}",
                crc32c::crc32c(body.as_bytes()),
                body.len()
            );
            assert!(decode_line(line.as_bytes()).is_err(), "{field:?} decoded");
        }
        let mut out = b"keep".to_vec();
        let bad = waiting(&["a\nb"], DependencyFailure::Cancel, None);
        assert!(encode_into(&bad, &mut out).is_err());
        assert_eq!(out, b"keep");
    }

    #[test]
    fn invalid_names_are_refused() {
        for (id, jobtype) in [
            ("", "t"),
            ("a", ""),
            ("a|b", "t"),
            ("a", "t|u"),
            ("a\nb", "t"),
            ("a", "t\r"),
            ("a\u{1}", "t"),
            ("a", "t\u{7f}"),
            ("a\u{85}", "t"),
        ] {
            let r = Record {
                id: id.into(),
                jobtype: jobtype.into(),
                priority: 0,
                run_at: None,
                data: vec![],
                tags: Vec::new(),
                trace: None,
                unique: None,
                repeat: None,
                depends_on: Vec::new(),
                on_dependency_failure: Default::default(),
                with_outputs: false,
            };
            let mut out = b"keep".to_vec();
            let err = encode_into(&r, &mut out).unwrap_err();
            assert!(
                matches!(err, JournalError::InvalidRecord { .. }),
                "{id:?} {jobtype:?}: {err}"
            );
            assert_eq!(out, b"keep", "nothing written on error");
        }
    }

    #[test]
    fn damaged_lines_are_refused() {
        let r = rec("id", b"payload");
        let line = line_of(&r);
        let line = &line[..line.len() - 1];
        let text = std::str::from_utf8(line).unwrap();
        let with = |body: &str| {
            format!(
                "{:08x} {} {body}",
                crc32c::crc32c(body.as_bytes()),
                body.len()
            )
            .into_bytes()
        };
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"".to_vec(), "empty"),
            (line[..line.len() - 1].to_vec(), "short"),
            ([line, b"x"].concat(), "long"),
            (text.replacen(&text[..8], "00000000", 1).into_bytes(), "crc"),
            (text.to_uppercase().into_bytes(), "upper hex"),
            (with("id|mail|5|"), "fields missing"),
            (with("id|mail|x||p"), "priority"),
            (with("id|mail|1|y|p"), "run_at"),
            (with("|mail|1||p"), "empty id"),
            (with("id||1||p"), "empty jobtype"),
            (with("id|mail|1||a\\qb"), "bad escape"),
            (with("id|mail|1||a\\x4"), "short hex escape"),
            (with("id|mail|1||a\\xAB"), "uppercase hex escape"),
            (with("id|mail|1||a\\"), "trailing backslash"),
            (with("id|mail|1||a\rb"), "raw CR"),
            (with("i\u{1}d|mail|1||p"), "control char in id"),
        ];
        for (bad, what) in cases {
            assert!(
                decode_line(&bad).is_err(),
                "{what}: {:?}",
                String::from_utf8_lossy(&bad)
            );
        }
        // A line shorter or longer than its length field says which.
        assert_eq!(
            decode_line(&line[..line.len() - 1]).unwrap_err(),
            "line shorter than its length field"
        );
        assert_eq!(
            decode_line(&[line, b"x"].concat()).unwrap_err(),
            "line longer than its length field (a lost newline?)"
        );
        // Leading zeros in the length are not canonical.
        let zero = format!("{} 0{}", &text[..8], &text[9..]);
        assert!(decode_line(zero.as_bytes()).is_err());
        assert_eq!(decode_line(line).unwrap(), r, "the original still decodes");
        // A body containing `|` in the payload is fine.
        assert_eq!(
            decode_line(&with("id|mail|1||a|b|c")).unwrap().data,
            b"a|b|c"
        );
    }

    /// A body may hold exactly [`MAX_BODY_LEN`] bytes, whose length has
    /// ten digits; an eleventh digit is damage.
    #[test]
    fn lengths_reach_the_limit_and_no_further() {
        assert!(!body_too_large(MAX_BODY_LEN));
        assert!(body_too_large(MAX_BODY_LEN + 1));
        let header = format!("0000000a {MAX_BODY_LEN} ");
        assert_eq!(
            parse_header(header.as_bytes()),
            Ok((10, header.len(), MAX_BODY_LEN))
        );
        assert_eq!(
            parse_header(b"0000000a 10000000000 "),
            Err("bad length field")
        );
        // The shortest line with a header: an empty body, whose checksum
        // is 0, so only its missing fields are wrong.
        assert_eq!(decode_line(b"00000000 0 ").unwrap_err(), "missing fields");
        assert_eq!(
            decode_line(b"00000000 0").unwrap_err(),
            "line too short for a record"
        );
    }

    #[test]
    fn resync_finds_the_second_of_two_merged_lines() {
        let a = line_of(&rec("a", b"first"));
        let b = line_of(&rec("b", b"second"));
        let mut merged = a.clone();
        *merged.last_mut().unwrap() = b'N';
        merged.extend_from_slice(&b[..b.len() - 1]);
        assert!(decode_line(&merged).is_err());
        let at = resync_offset(&merged).unwrap();
        assert_eq!(at, a.len());
        assert_eq!(decode_line(&merged[at..]).unwrap().id, "b");
        assert_eq!(resync_offset(&b[..b.len() - 1]), None);
    }

    fn name() -> impl Strategy<Value = String> {
        "[^|\\p{Cc}]{1,40}"
    }

    /// A jobtype as the journal holds one: a name without `#` or `~`.
    fn jobtype_name() -> impl Strategy<Value = String> {
        "[^|#~\\p{Cc}]{1,40}"
    }

    /// A valid trace context, or none: any ids and flags, sometimes a
    /// later version going on, sometimes a tracestate of any characters
    /// W3C allows.
    fn trace() -> impl Strategy<Value = Option<TraceContext>> {
        let member = (
            "[a-z][a-z0-9_*/-]{0,8}(@[a-z][a-z0-9]{0,5})?",
            "[ -+--<>-~]{0,12}[!-+--<>-~]",
        )
            .prop_map(|(k, v)| format!("{k}={v}"));
        let state = proptest::collection::vec(member, 1..5).prop_map(|m| m.join(" ,\t"));
        proptest::option::of(
            (
                "[0-9a-e][0-9a-f]",
                "[0-9a-f]{32}",
                "[0-9a-f]{16}",
                "[0-9a-f]{2}",
                proptest::option::of(state),
            )
                .prop_filter_map("a valid trace context", |(v, t, p, f, state)| {
                    let tail = if v == "00" { "" } else { "-0a" };
                    TraceContext::parse(&format!("{v}-{t}-{p}-{f}{tail}"), state.as_deref()).ok()
                }),
        )
    }

    /// Unique keys of any characters but control ones (`|`, `%`, `!`, `:`
    /// and `~` among them), with and without a window, both conflict modes.
    fn unique() -> impl Strategy<Value = Option<Unique>> {
        proptest::option::of(
            (
                "[^\\p{Cc}]{1,40}|[|%!:~#]{1,6}",
                proptest::option::of(0u64..=3_153_600_000_000),
                any::<bool>(),
            )
                .prop_map(|(key, window, replace)| {
                    let mut u = Unique::new(key).on_conflict(if replace {
                        OnConflict::ReplaceData
                    } else {
                        OnConflict::Keep
                    });
                    u.window = window.map(std::time::Duration::from_millis);
                    u
                }),
        )
    }

    fn deps() -> impl Strategy<Value = (Vec<String>, DependencyFailure, bool)> {
        (
            proptest::collection::vec("[^|\\p{Cc}]{1,12}|[%,^@]{1,4}", 0..5),
            proptest::sample::select(vec![
                DependencyFailure::Cancel,
                DependencyFailure::Run,
                DependencyFailure::Hold,
            ]),
            any::<bool>(),
        )
    }

    fn repeat() -> impl Strategy<Value = Option<Repeat>> {
        proptest::option::of(
            ("[^\\p{Cc}]{1,40}|[|%@ ,*]{1,6}", "UTC|[A-Za-z/_+-]{1,20}")
                .prop_filter("a rule naming its zone is refused", |(rule, _)| {
                    !rule.starts_with("TZ=")
                })
                .prop_map(|(rule, zone)| Repeat::new(rule).time_zone(zone)),
        )
    }

    fn tag_list() -> impl Strategy<Value = Vec<String>> {
        proptest::collection::vec("[A-Za-z0-9_.:-]{1,64}", 0..9)
    }

    proptest! {
        // No regression files: they would land outside this module.
        #![proptest_config(ProptestConfig {
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn arbitrary_records_round_trip(
            id in name(),
            jobtype in jobtype_name(),
            priority in any::<i32>(),
            run_at in any::<Option<i64>>(),
            data in proptest::collection::vec(any::<u8>(), 0..600),
            tags in tag_list(),
            trace in trace(),
            unique in unique(),
            repeat in repeat(),
            (depends_on, policy, outputs) in deps(),
        ) {
            // A policy without dependencies is not journaled.
            let (on_dependency_failure, with_outputs) = if depends_on.is_empty() {
                (DependencyFailure::Cancel, false)
            } else {
                (policy, outputs)
            };
            let r = Record {
                id, jobtype, priority, run_at, data, tags, trace, unique, repeat,
                depends_on, on_dependency_failure, with_outputs,
            };
            let line = line_of(&r);
            prop_assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
            prop_assert!(!line.contains(&b'\r'));
            prop_assert_eq!(decode_line(&line[..line.len() - 1]).unwrap(), r);
        }

        #[test]
        fn text_payloads_stay_readable(text in "\\PC{0,200}") {
            let r = rec("t", text.as_bytes());
            let line = line_of(&r);
            let shown = std::str::from_utf8(&line).unwrap();
            let expected = text.replace('\\', "\\\\").replace('\n', "\\n").replace('\r', "\\r");
            let tail = format!("|{expected}\n");
            prop_assert!(shown.ends_with(&tail));
        }

        #[test]
        fn arbitrary_lines_never_panic(line in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_line(&line);
            let _ = resync_offset(&line);
        }

        #[test]
        fn any_single_byte_change_is_caught(
            data in proptest::collection::vec(any::<u8>(), 0..100),
            at in any::<prop::sample::Index>(),
            xor in 1..=255u8,
        ) {
            let line = line_of(&rec("p", &data));
            let mut bad = line[..line.len() - 1].to_vec();
            let i = at.index(bad.len());
            bad[i] ^= xor;
            prop_assert!(decode_line(&bad).is_err());
        }
    }
}
