//! Reading a job's output, line by line, the same for every runner:
//!
//! - `S: NNN` sets the job's status (1xx retry, 2xx ok, 4xx failed, 5xx
//!   error); the last one wins;
//! - `J: type|payload` asks for a new job of the same client: `type` is the
//!   client's jobtype (no client prefix: a runner cannot add jobs for
//!   another client), `payload` the rest of the line;
//! - `U: payload` sets the payload of the job's next run when it repeats
//!   (the last one wins), with `\\`, `\n`, `\r`, `\t` and `\xHH` escapes so
//!   that it can hold any bytes; a job that does not repeat ignores it;
//! - every other line is a log line, kept as the job's output up to a cap
//!   (the start is kept; a note says how much was cut).

use jobstore_api::limits::MAX_OUTPUT;

/// A job a runner asked for with a `J:` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Child {
    /// The client's jobtype, as written (validated when journaled).
    pub jobtype: String,
    /// The payload.
    pub data: Vec<u8>,
    /// Tags, as written after the jobtype (`J: type#tag,tag|payload`;
    /// validated when journaled).
    pub tags: Vec<String>,
    /// Its own W3C trace context (a remote worker's new job may carry
    /// one, checked by the API); `None`: the run's
    /// ([`crate::runner::Task::trace`]).
    pub trace: Option<jobstore_api::TraceContext>,
}

/// Most `J:` lines one job may write.
pub const MAX_CHILDREN: usize = 10_000;

/// Collects one job's output.
#[derive(Debug)]
pub struct OutputParser {
    output: Vec<u8>,
    cap: usize,
    dropped: u64,
    status: Option<u16>,
    children: Vec<Child>,
    data: Option<Vec<u8>>,
    errors: Vec<String>,
}

impl Default for OutputParser {
    fn default() -> Self {
        OutputParser::new(MAX_OUTPUT)
    }
}

/// What a job's output said.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// The status of the last `S:` line, if any.
    pub status: Option<u16>,
    /// The log lines, capped.
    pub output: Vec<u8>,
    /// The `J:` lines.
    pub children: Vec<Child>,
    /// The payload of the last `U:` line, unescaped.
    pub data: Option<Vec<u8>>,
    /// Malformed `S:`/`J:`/`U:` lines (also kept in the output).
    pub errors: Vec<String>,
}

impl OutputParser {
    /// Keeps at most `cap` bytes of log output.
    pub fn new(cap: usize) -> Self {
        OutputParser {
            output: Vec::new(),
            cap,
            dropped: 0,
            status: None,
            children: Vec::new(),
            data: None,
            errors: Vec::new(),
        }
    }

    /// Takes one line (without its newline; a trailing CR is dropped).
    pub fn line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(rest) = line.strip_prefix(b"S:") {
            match parse_status(rest) {
                Some(s) => self.status = Some(s),
                None => self.error(format!(
                    "malformed status line {:?}: want S: NNN with NNN in 100..=599",
                    String::from_utf8_lossy(line)
                )),
            }
            return;
        }
        if let Some(rest) = line.strip_prefix(b"J:") {
            let rest = rest.strip_prefix(b" ").unwrap_or(rest);
            match rest.iter().position(|b| *b == b'|') {
                Some(bar) if self.children.len() < MAX_CHILDREN => {
                    let head = String::from_utf8_lossy(&rest[..bar]).trim().to_owned();
                    let (jobtype, tags) = match head.split_once('#') {
                        Some((jt, tags)) => (
                            jt.trim().to_owned(),
                            tags.split(',').map(|t| t.trim().to_owned()).collect(),
                        ),
                        None => (head, Vec::new()),
                    };
                    self.children.push(Child {
                        jobtype,
                        data: rest[bar + 1..].to_vec(),
                        tags,
                        trace: None,
                    });
                }
                Some(_) => self.error(format!(
                    "more than {MAX_CHILDREN} J: lines; the rest are ignored"
                )),
                None => self.error(format!(
                    "malformed job line {:?}: want J: type|payload",
                    String::from_utf8_lossy(line)
                )),
            }
            return;
        }
        if let Some(rest) = line.strip_prefix(b"U:") {
            let rest = rest.strip_prefix(b" ").unwrap_or(rest);
            match unescape(rest) {
                Some(data) => self.data = Some(data),
                None => self.error(format!(
                    "malformed payload line {:?}: want U: payload, with \\\\, \\n, \\r, \\t or \\xHH escapes",
                    String::from_utf8_lossy(line)
                )),
            }
            return;
        }
        self.log(line);
    }

    fn error(&mut self, message: String) {
        self.log(message.as_bytes());
        if self.errors.len() < 100 {
            self.errors.push(message);
        }
    }

    fn log(&mut self, line: &[u8]) {
        let need = line.len() + 1;
        if self.output.len() + need <= self.cap {
            self.output.extend_from_slice(line);
            self.output.push(b'\n');
        } else {
            self.dropped += need as u64;
        }
    }

    /// Appends a note to the output (runner messages such as a timeout).
    pub fn note(&mut self, note: &str) {
        self.log(format!("[jobstore] {note}").as_bytes());
    }

    /// The status of the last `S:` line so far.
    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// Ends the job's output.
    pub fn finish(mut self) -> Parsed {
        if self.dropped > 0 {
            let note = format!(
                "[jobstore] {} more bytes of output were dropped\n",
                self.dropped
            );
            let keep = self.cap.saturating_sub(note.len());
            self.output.truncate(keep);
            self.output.extend_from_slice(note.as_bytes());
            self.output.truncate(self.cap);
        }
        Parsed {
            status: self.status,
            output: self.output,
            children: self.children,
            data: self.data,
            errors: self.errors,
        }
    }
}

/// A `U:` line's payload: `\\`, `\n`, `\r`, `\t` and `\xHH` (any byte)
/// unescaped, every other byte as it is; `None` for any other escape.
fn unescape(escaped: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(escaped.len());
    let mut bytes = escaped.iter().copied();
    while let Some(b) = bytes.next() {
        if b != b'\\' {
            out.push(b);
            continue;
        }
        out.push(match bytes.next()? {
            b'\\' => b'\\',
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'x' => {
                let hex = [bytes.next()?, bytes.next()?];
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?
            }
            _ => return None,
        });
    }
    Some(out)
}

fn parse_status(rest: &[u8]) -> Option<u16> {
    let s = std::str::from_utf8(rest).ok()?.trim();
    let n: u16 = s.parse().ok()?;
    (100..=599).contains(&n).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_children_and_logs() {
        let mut p = OutputParser::new(1000);
        for l in [
            &b"hello"[..],
            b"S: 404",
            b"J: next|{\"a\":1}|x",
            b"J:bare|",
            b"J: tagged#customer-42, eu|x",
            b"S: 201\r",
            b"J: no bar",
            b"S: 99",
            b"S: abc",
        ] {
            p.line(l);
        }
        let out = p.finish();
        assert_eq!(out.status, Some(201));
        assert_eq!(
            out.children,
            vec![
                Child {
                    jobtype: "next".into(),
                    data: b"{\"a\":1}|x".to_vec(),
                    tags: vec![],
                    trace: None,
                },
                Child {
                    jobtype: "bare".into(),
                    data: vec![],
                    tags: vec![],
                    trace: None,
                },
                Child {
                    jobtype: "tagged".into(),
                    data: b"x".to_vec(),
                    tags: vec!["customer-42".into(), "eu".into()],
                    trace: None,
                },
            ]
        );
        assert_eq!(out.errors.len(), 3);
        let text = String::from_utf8(out.output).unwrap();
        assert!(text.starts_with("hello\n"), "{text}");
        assert!(text.contains("malformed job line"));
    }

    #[test]
    fn payload_lines_set_the_next_runs_payload_the_last_one_wins() {
        let mut p = OutputParser::new(1000);
        for line in [
            &b"U: first"[..],
            b"log",
            b"U:{\"n\":2}\\n\\\\x\\x00\\xff\\t\\r",
            b"U: bad \\q escape",
            b"U: short \\x4",
            b"U: sign \\x+1",
        ] {
            p.line(line);
        }
        let parsed = p.finish();
        assert_eq!(
            parsed.data.as_deref(),
            Some(&b"{\"n\":2}\n\\x\x00\xff\t\r"[..])
        );
        assert_eq!(parsed.errors.len(), 3, "{:?}", parsed.errors);
        let out = String::from_utf8(parsed.output).unwrap();
        assert!(out.starts_with("log\nmalformed payload line"), "{out}");
        assert_eq!(OutputParser::new(10).finish().data, None);
        let mut p = OutputParser::new(10);
        p.line(b"U:");
        assert_eq!(
            p.finish().data.as_deref(),
            Some(&b""[..]),
            "an empty payload"
        );
    }

    #[test]
    fn output_is_capped_with_a_note() {
        let mut p = OutputParser::new(100);
        for _ in 0..50 {
            p.line(b"0123456789");
        }
        let out = p.finish();
        assert!(out.output.len() <= 100);
        let text = String::from_utf8(out.output).unwrap();
        assert!(text.starts_with("0123456789\n"));
        assert!(text.contains("more bytes of output were dropped"), "{text}");
    }
}
