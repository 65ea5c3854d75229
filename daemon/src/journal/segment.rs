//! Segment files, the cursor file, and scanning a segment at recovery.
//!
//! Segments are `<dir>/<20-digit sequence>.jnl`, each starting with the
//! header line [`HEADER`]. The cursor, `<dir>/cursor`, holds the synced
//! position and a checksum of its own:
//!
//! ```text
//! jobstore-cursor 1 <segment sequence> <byte offset> <crc32c of "<sequence> <offset>", 8 hex>\n
//! ```
//!
//! It is replaced atomically: written to `cursor.tmp`, fsynced, renamed over
//! `cursor`, and the directory fsynced.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::JournalError;
use super::record::{self, Damage};

/// The first line of every segment.
pub(crate) const HEADER: &[u8] = b"jobstore-journal 1\n";

/// Where the first record of a segment starts.
pub(crate) const HEADER_LEN: u64 = HEADER.len() as u64;

/// The extension of segment files.
const SEGMENT_EXT: &str = ".jnl";

/// Digits of a segment's sequence number in its file name.
const SEQ_DIGITS: usize = 20;

/// The cursor file's name.
pub(crate) const CURSOR: &str = "cursor";

/// The temporary cursor file, renamed over [`CURSOR`].
const CURSOR_TMP: &str = "cursor.tmp";

/// The lock file's name.
pub(crate) const LOCK: &str = "lock";

const CURSOR_MAGIC: &str = "jobstore-cursor 1";

/// A byte position in the journal: a segment and an offset in it. Ordered
/// as the journal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(crate) struct Pos {
    /// The segment's sequence number.
    pub seq: u64,
    /// The byte offset in that segment.
    pub off: u64,
}

/// Wraps an I/O error with what was being done and to which path.
pub(crate) fn io_err(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> JournalError {
    let path = path.to_owned();
    move |source| JournalError::Io { what, path, source }
}

/// The path of segment `seq`.
pub(crate) fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:0SEQ_DIGITS$}{SEGMENT_EXT}"))
}

/// The sequence number of a segment file name, if it is one.
fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SEGMENT_EXT)?;
    if digits.len() != SEQ_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The segments in `dir`, oldest first.
pub(crate) fn list_segments(dir: &Path) -> Result<Vec<u64>, JournalError> {
    let mut seqs = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err("listing the journal directory", dir))? {
        let entry = entry.map_err(io_err("listing the journal directory", dir))?;
        if let Some(seq) = entry.file_name().to_str().and_then(parse_segment_name) {
            seqs.push(seq);
        }
    }
    seqs.sort_unstable();
    Ok(seqs)
}

/// Fsyncs a directory, so that entries created, renamed or removed in it
/// are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), JournalError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("fsyncing the journal directory", dir))
}

/// Creates segment `seq` with its header and makes it durable (file and
/// directory entry) when `fsync` is set. Returns it open for writing at the
/// end of the header.
pub(crate) fn create_segment(dir: &Path, seq: u64, fsync: bool) -> Result<File, JournalError> {
    let path = segment_path(dir, seq);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(io_err("creating a segment", &path))?;
    file.write_all(HEADER)
        .map_err(io_err("writing a segment header", &path))?;
    if fsync {
        file.sync_data()
            .map_err(io_err("fsyncing a new segment", &path))?;
        sync_dir(dir)?;
        #[cfg(test)]
        super::probe::record(
            dir,
            super::probe::Event::Synced {
                seq,
                len: HEADER_LEN,
            },
        );
    }
    Ok(file)
}

/// Opens the existing segment `seq` for writing at `end`, truncating
/// whatever follows `end`. When the file is shorter than its header (a crash
/// while it was created) or `rewrite_header` is set, the header is written
/// anew and the file truncated after it.
pub(crate) fn reopen_segment(
    dir: &Path,
    seq: u64,
    end: u64,
    rewrite_header: bool,
    fsync: bool,
) -> Result<File, JournalError> {
    let path = segment_path(dir, seq);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(io_err("opening the last segment", &path))?;
    let len = file
        .metadata()
        .map_err(io_err("reading the last segment's size", &path))?
        .len();
    let mut changed = false;
    if rewrite_header || len < HEADER_LEN {
        file.set_len(0)
            .map_err(io_err("truncating the last segment", &path))?;
        file.write_all(HEADER)
            .map_err(io_err("writing a segment header", &path))?;
        changed = true;
    } else if len != end {
        file.set_len(end).map_err(io_err(
            "truncating the torn tail of the last segment",
            &path,
        ))?;
        changed = true;
    }
    let end = if rewrite_header || len < HEADER_LEN {
        HEADER_LEN
    } else {
        end
    };
    file.seek(SeekFrom::Start(end))
        .map_err(io_err("seeking in the last segment", &path))?;
    if changed && fsync {
        file.sync_all()
            .map_err(io_err("fsyncing the last segment", &path))?;
    }
    Ok(file)
}

/// What the cursor file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CursorFile {
    /// No cursor file: nothing was ever synced.
    Missing,
    /// A verified cursor.
    Valid(Pos),
    /// A cursor that does not verify, and why.
    Damaged(String),
}

fn cursor_crc(pos: Pos) -> u32 {
    crc32c::crc32c(format!("{} {}", pos.seq, pos.off).as_bytes())
}

/// The cursor file's content for `pos`.
pub(crate) fn cursor_text(pos: Pos) -> String {
    format!(
        "{CURSOR_MAGIC} {} {} {:08x}\n",
        pos.seq,
        pos.off,
        cursor_crc(pos)
    )
}

/// Parses the cursor file's content.
fn parse_cursor(bytes: &[u8]) -> Result<Pos, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_owned())?;
    let line = text
        .strip_suffix('\n')
        .ok_or_else(|| "no final newline".to_owned())?;
    let rest = line
        .strip_prefix(CURSOR_MAGIC)
        .and_then(|r| r.strip_prefix(' '))
        .ok_or_else(|| "bad magic".to_owned())?;
    let fields: Vec<&str> = rest.split(' ').collect();
    let [seq, off, crc] = fields[..] else {
        return Err(format!("{} fields instead of 3", fields.len()));
    };
    let canonical = |s: &str| {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
    };
    if !canonical(seq) || !canonical(off) {
        return Err("bad position".to_owned());
    }
    let pos = Pos {
        seq: seq.parse().map_err(|_| "bad segment".to_owned())?,
        off: off.parse().map_err(|_| "bad offset".to_owned())?,
    };
    if crc.len() != 8 || crc != format!("{:08x}", cursor_crc(pos)) {
        return Err("checksum mismatch".to_owned());
    }
    Ok(pos)
}

/// Reads the cursor file.
pub(crate) fn read_cursor(dir: &Path) -> Result<CursorFile, JournalError> {
    let path = dir.join(CURSOR);
    match fs::read(&path) {
        Ok(bytes) => Ok(match parse_cursor(&bytes) {
            Ok(pos) => CursorFile::Valid(pos),
            Err(reason) => CursorFile::Damaged(reason),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(CursorFile::Missing),
        Err(e) => Err(io_err("reading the cursor", &path)(e)),
    }
}

/// Replaces the cursor atomically with `pos`: temp file, fsync, rename,
/// fsync of the directory (the fsyncs only when `fsync`).
pub(crate) fn write_cursor(dir: &Path, pos: Pos, fsync: bool) -> Result<(), JournalError> {
    let tmp = dir.join(CURSOR_TMP);
    let mut file = File::create(&tmp).map_err(io_err("creating the cursor", &tmp))?;
    file.write_all(cursor_text(pos).as_bytes())
        .map_err(io_err("writing the cursor", &tmp))?;
    if fsync {
        file.sync_all()
            .map_err(io_err("fsyncing the cursor", &tmp))?;
    }
    drop(file);
    let path = dir.join(CURSOR);
    fs::rename(&tmp, &path).map_err(io_err("renaming the cursor into place", &path))?;
    if fsync {
        sync_dir(dir)?;
    }
    Ok(())
}

/// Removes a leftover temporary cursor (a crash while writing it).
pub(crate) fn remove_cursor_tmp(dir: &Path) -> Result<(), JournalError> {
    let tmp = dir.join(CURSOR_TMP);
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(io_err("removing the temporary cursor", &tmp)(e))
        }
        _ => Ok(()),
    }
}

/// What a segment's first line is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Header {
    /// [`HEADER`].
    Ok,
    /// Shorter than the header (a crash while the segment was created, or a
    /// truncation).
    Short,
    /// `jobstore-journal <n>` for another version `n`.
    OtherVersion(String),
    /// Anything else.
    Damaged,
}

fn check_header(first: &[u8]) -> Header {
    if first.starts_with(HEADER) {
        return Header::Ok;
    }
    if first.len() < HEADER.len() {
        return Header::Short;
    }
    let line = first.split(|&b| b == b'\n').next().unwrap_or_default();
    if first.len() > line.len()
        && let Some(version) = line.strip_prefix(b"jobstore-journal ")
        && !version.is_empty()
        && version.iter().all(u8::is_ascii_digit)
    {
        return Header::OtherVersion(String::from_utf8_lossy(version).into_owned());
    }
    Header::Damaged
}

/// A line that is not a record, found by [`scan_segment`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DamagedLine {
    /// Where it starts.
    pub off: u64,
    /// How long it is, with its newline if it has one.
    pub len: u64,
    /// Why it is not a record.
    pub reason: Damage,
}

/// What a segment holds past a start offset.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// The header's state, `None` for an empty file.
    pub header: Option<Header>,
    /// The valid records, as `(offset, line length with newline)`, in order.
    pub records: Vec<(u64, u32)>,
    /// The lines that are not records, in order (including any after the
    /// last valid record, and a final partial line).
    pub damaged: Vec<DamagedLine>,
    /// The end of the last valid record, or where scanning started when
    /// there is none.
    pub valid_end: u64,
    /// The file's length.
    pub file_len: u64,
}

/// Scans segment `seq` from `start` (at least [`HEADER_LEN`]): checks the
/// header and verifies every line, splitting it into records and damaged
/// lines. A `start` past the end of the file scans nothing.
pub(crate) fn scan_segment(dir: &Path, seq: u64, start: u64) -> Result<Scan, JournalError> {
    let path = segment_path(dir, seq);
    let file = File::open(&path).map_err(io_err("opening a segment", &path))?;
    let file_len = file
        .metadata()
        .map_err(io_err("reading a segment's size", &path))?
        .len();
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut scan = Scan {
        file_len,
        ..Scan::default()
    };
    // The header: the first line, read without trusting where its newline
    // is (records start at HEADER_LEN whatever the header holds).
    let mut first = Vec::with_capacity(64);
    (&mut reader)
        .take(64)
        .read_to_end(&mut first)
        .map_err(io_err("reading a segment", &path))?;
    if !first.is_empty() {
        scan.header = Some(check_header(&first));
    }
    let start = start.max(HEADER_LEN);
    scan.valid_end = start.min(file_len.max(HEADER_LEN));
    if start >= file_len {
        return Ok(scan);
    }
    reader
        .seek(SeekFrom::Start(start))
        .map_err(io_err("reading a segment", &path))?;
    let mut line = Vec::new();
    let mut scratch = Vec::new();
    let mut off = start;
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(io_err("reading a segment", &path))?;
        if n == 0 {
            break;
        }
        let line_off = off;
        off += n as u64;
        let Some(body) = line.strip_suffix(b"\n") else {
            scan.damaged.push(DamagedLine {
                off: line_off,
                len: n as u64,
                reason: "partial line at the end of the segment",
            });
            break;
        };
        // A damaged line may be two lines whose newline was lost: try the
        // second one where the first one's length says it starts.
        let mut at = 0usize;
        loop {
            let rest = &body[at..];
            match record::parse_line(rest, &mut scratch) {
                Ok(_) => {
                    scan.records.push((line_off + at as u64, (n - at) as u32));
                    scan.valid_end = off;
                    break;
                }
                Err(reason) => {
                    let next = record::resync_offset(rest);
                    scan.damaged.push(DamagedLine {
                        off: line_off + at as u64,
                        len: next.map_or((n - at) as u64, |k| k as u64),
                        reason,
                    });
                    match next {
                        Some(k) => at += k,
                        None => break,
                    }
                }
            }
        }
    }
    Ok(scan)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The last segment gets a fresh header when asked to (its header is
    /// damaged) or when it is shorter than one (a crash while it was
    /// created); otherwise it is cut back to `end`.
    #[test]
    fn reopening_rewrites_a_damaged_or_short_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = segment_path(dir.path(), 1);
        let reopened = |contents: &[u8], end: u64, rewrite: bool| {
            std::fs::write(&path, contents).unwrap();
            let mut f = reopen_segment(dir.path(), 1, end, rewrite, false).unwrap();
            f.write_all(b"next\n").unwrap();
            std::fs::read(&path).unwrap()
        };
        let damaged = b"jobstore-journal X\nold\n";
        assert_eq!(
            reopened(damaged, HEADER_LEN, true),
            b"jobstore-journal 1\nnext\n"
        );
        // Short: the header is written anew whatever `end` says.
        assert_eq!(
            reopened(&HEADER[..5], 0, false),
            b"jobstore-journal 1\nnext\n"
        );
        let torn = b"jobstore-journal 1\nab\ncd";
        assert_eq!(
            reopened(torn, HEADER_LEN + 3, false),
            b"jobstore-journal 1\nab\nnext\n"
        );
    }

    /// A leftover temporary cursor is removed; none there is fine; one
    /// that cannot be removed is an error, not ignored.
    #[test]
    fn leftover_temporary_cursors_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join(CURSOR_TMP);
        std::fs::write(&tmp, b"half a cursor").unwrap();
        remove_cursor_tmp(dir.path()).unwrap();
        assert!(!tmp.exists());
        remove_cursor_tmp(dir.path()).unwrap();
        // A directory in its place cannot be removed as a file.
        std::fs::create_dir(&tmp).unwrap();
        std::fs::write(tmp.join("inside"), b"x").unwrap();
        let err = remove_cursor_tmp(dir.path()).unwrap_err();
        assert!(
            err.to_string().contains("removing the temporary cursor"),
            "{err}"
        );
    }

    /// Each damaged line is reported once, where it lies and with its
    /// length: a line one byte longer than its record, and two lines
    /// whose newline was lost, the second of them not a record either.
    #[test]
    fn damaged_lines_are_reported_with_their_places_and_lengths() {
        let line = |id: &str| {
            let r = super::super::Record {
                id: id.to_owned(),
                jobtype: "t".to_owned(),
                priority: 0,
                run_at: None,
                data: b"payload".to_vec(),
                tags: Vec::new(),
                trace: None,
                unique: None,
                repeat: None,
                depends_on: Vec::new(),
                on_dependency_failure: Default::default(),
                with_outputs: false,
            };
            let mut out = Vec::new();
            record::encode_into(&r, &mut out).unwrap();
            out
        };
        let (a, b, c, d) = (line("a"), line("b"), line("c"), line("d"));
        let mut longer = b.clone();
        longer.insert(b.len() - 1, b'x');
        let mut merged = c.clone();
        *merged.last_mut().unwrap() = b'N';
        merged.extend_from_slice(b"garbage\n");
        let dir = tempfile::tempdir().unwrap();
        let body = [&a[..], &longer, &merged, &d].concat();
        fs::write(segment_path(dir.path(), 1), [HEADER, &body[..]].concat()).unwrap();
        let scan = scan_segment(dir.path(), 1, 0).unwrap();
        let at = |k: usize| HEADER_LEN + k as u64;
        let (l_at, m_at) = (a.len(), a.len() + longer.len());
        assert_eq!(
            scan.damaged,
            [
                DamagedLine {
                    off: at(l_at),
                    len: longer.len() as u64,
                    reason: "line longer than its length field (a lost newline?)",
                },
                DamagedLine {
                    off: at(m_at),
                    len: c.len() as u64,
                    reason: "line longer than its length field (a lost newline?)",
                },
                DamagedLine {
                    off: at(m_at + c.len()),
                    len: 8,
                    reason: "line too short for a record",
                },
            ]
        );
        let d_at = m_at + merged.len();
        assert_eq!(
            scan.records,
            [(at(0), a.len() as u32), (at(d_at), d.len() as u32)]
        );
        assert_eq!(scan.valid_end, at(body.len()));
    }

    #[test]
    fn names() {
        let dir = Path::new("/j");
        assert_eq!(
            segment_path(dir, 42),
            Path::new("/j/00000000000000000042.jnl")
        );
        assert_eq!(parse_segment_name("00000000000000000042.jnl"), Some(42));
        assert_eq!(parse_segment_name("0000000000000000042.jnl"), None);
        assert_eq!(parse_segment_name("00000000000000000042.jnl.tmp"), None);
        assert_eq!(parse_segment_name("0000000000000000004x.jnl"), None);
        assert_eq!(parse_segment_name("cursor"), None);
    }

    #[test]
    fn cursor_round_trip_and_damage() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_cursor(dir.path()).unwrap(), CursorFile::Missing);
        let pos = Pos { seq: 7, off: 12345 };
        write_cursor(dir.path(), pos, true).unwrap();
        assert_eq!(read_cursor(dir.path()).unwrap(), CursorFile::Valid(pos));
        assert!(!dir.path().join(CURSOR_TMP).exists());
        let good = cursor_text(pos).into_bytes();
        // Every truncation and every bit flip is either caught or (for the
        // flips) impossible to confuse with another position.
        for cut in 0..good.len() {
            assert!(parse_cursor(&good[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..good.len() {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[i] ^= 1 << bit;
                assert!(parse_cursor(&bad).is_err(), "flip {i}:{bit}");
            }
        }
        fs::write(dir.path().join(CURSOR), b"garbage").unwrap();
        assert!(matches!(
            read_cursor(dir.path()).unwrap(),
            CursorFile::Damaged(_)
        ));
        // Only canonical numbers: a sign or a leading zero is refused even
        // when the checksum matches the position it parses to.
        let crc = format!("{:08x}", cursor_crc(pos));
        for (seq, off) in [("+7", "12345"), ("7", "012345"), ("07", "12345")] {
            let text = format!("{CURSOR_MAGIC} {seq} {off} {crc}\n");
            assert_eq!(
                parse_cursor(text.as_bytes()),
                Err("bad position".to_owned())
            );
        }
        let text = format!("{CURSOR_MAGIC} 7 12345 {crc}\n");
        assert_eq!(parse_cursor(text.as_bytes()), Ok(pos));
        // A cursor that cannot be read is an error, not a missing cursor.
        fs::remove_file(dir.path().join(CURSOR)).unwrap();
        fs::create_dir(dir.path().join(CURSOR)).unwrap();
        assert!(read_cursor(dir.path()).is_err());
    }

    #[test]
    fn headers() {
        assert_eq!(check_header(b"jobstore-journal 1\nabc"), Header::Ok);
        assert_eq!(check_header(b"jobstore-jour"), Header::Short);
        assert_eq!(
            check_header(b"jobstore-journal 2\n"),
            Header::OtherVersion("2".into())
        );
        assert_eq!(
            check_header(b"jobstore-journal 12\nxx"),
            Header::OtherVersion("12".into())
        );
        assert_eq!(check_header(b"jobstore-journal 1x"), Header::Damaged);
        assert_eq!(check_header(b"jobstore-journal 12"), Header::Damaged);
        assert_eq!(check_header(b"Jobstore-journal 1\n"), Header::Damaged);
    }
}
