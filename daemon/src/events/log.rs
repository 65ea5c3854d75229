//! The job log: one JSON line per job and event, written by a thread of
//! its own, to a file rotated by size or to stderr.
//!
//! ```text
//! {"time":"2026-12-04T10:15:02.318Z","event":"claimed","client":"acme","jobtype":"hello","id":"019ae4…","attempt":1,"sysid":"node-1","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"}
//! {"time":"2026-12-04T10:15:02.331Z","event":"released","client":"acme","jobtype":"hello","id":"019ae4…","attempt":1,"sysid":"node-1","release":"retry","status":500,"delay_ms":1000,"outcome":"error"}
//! ```
//!
//! Every line has `time` (RFC 3339, milliseconds, UTC), `event`, `client`,
//! `jobtype` and `id` (as the client knows them), `sysid` (this daemon),
//! `attempt` once the job was claimed, `worker` when a remote worker
//! acted, and `trace_id` when the job carries a trace. `added` has
//! `source` (`http` or `run`); `ingested` has `new`; `rejected` has
//! `error`; `finished` has `status`, `outcome` and `run_ms`; `released`
//! and `lost` have `release` (`archive`, `retry`, `unget`, `delete`),
//! `code` (an archive's result code), `status`, `delay_ms` (a retry's)
//! and `outcome`.
//!
//! A file is rotated when a line would take it past `max_bytes`: `FILE`
//! becomes `FILE.1`, `FILE.1` becomes `FILE.2`, and so on up to
//! `FILE.<keep>`, the oldest, which is removed. A write that fails is
//! counted in `jobstore_errors_total{source="job_log"}` and logged; the
//! lines are lost, the daemon goes on.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::mpsc;
use std::time::Duration;

use serde::Serialize;

use super::context::trace_id_of;
use super::{Batch, Detail, EventsError, Msg, taken};
use crate::metrics::Metrics;
use crate::tenant;

/// Where the job log goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobLogTarget {
    /// A file, rotated by size.
    File(PathBuf),
    /// The daemon's stderr (`-`), beside its own log; never rotated.
    Stderr,
}

/// The job log's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLogConfig {
    /// Where it goes.
    pub target: JobLogTarget,
    /// A file is rotated before it grows past this.
    pub max_bytes: u64,
    /// Rotated files kept (`FILE.1` newest .. `FILE.<keep>` oldest); 0
    /// keeps none (the file starts over).
    pub keep: u32,
}

impl JobLogConfig {
    /// Default largest file: 100 MiB.
    pub const DEFAULT_MAX_BYTES: u64 = 100 << 20;
    /// Default rotated files kept.
    pub const DEFAULT_KEEP: u32 = 5;

    /// `FILE`, or `-` for stderr, with the default rotation.
    pub fn new(target: &Path) -> Self {
        JobLogConfig {
            target: if target == Path::new("-") {
                JobLogTarget::Stderr
            } else {
                JobLogTarget::File(target.to_owned())
            },
            max_bytes: Self::DEFAULT_MAX_BYTES,
            keep: Self::DEFAULT_KEEP,
        }
    }
}

/// A file that rotates by size.
#[derive(Debug)]
pub struct RotatingFile {
    path: PathBuf,
    max_bytes: u64,
    keep: u32,
    file: File,
    len: u64,
}

impl RotatingFile {
    /// Opens (or creates) `path` for appending.
    pub fn open(path: &Path, max_bytes: u64, keep: u32) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let len = file.metadata()?.len();
        Ok(RotatingFile {
            path: path.to_owned(),
            max_bytes: max_bytes.max(1),
            keep,
            file,
            len,
        })
    }

    /// The name of rotated file `n` (1 is the newest).
    pub fn rotated(path: &Path, n: u32) -> PathBuf {
        let mut s = path.as_os_str().to_owned();
        s.push(format!(".{n}"));
        PathBuf::from(s)
    }

    /// Appends whole lines (`buf` ends with a newline), rotating first
    /// whenever the next line would take the file past its limit. A line
    /// longer than the limit gets a file of its own.
    pub fn write_lines(&mut self, buf: &[u8]) -> std::io::Result<()> {
        let mut rest = buf;
        while !rest.is_empty() {
            // The longest run of whole lines that fits.
            let room = self.max_bytes.saturating_sub(self.len);
            let mut take = 0;
            for (i, b) in rest.iter().enumerate() {
                if *b == b'\n' {
                    if (i + 1) as u64 <= room {
                        take = i + 1;
                    } else {
                        break;
                    }
                }
            }
            if take == 0 {
                if self.len > 0 {
                    self.rotate()?;
                    continue;
                }
                // One line longer than the limit, in an empty file.
                take = rest
                    .iter()
                    .position(|b| *b == b'\n')
                    .map_or(rest.len(), |i| i + 1);
            }
            self.file.write_all(&rest[..take])?;
            self.len += take as u64;
            rest = &rest[take..];
        }
        Ok(())
    }

    /// `FILE.<keep-1>` → `FILE.<keep>` … `FILE` → `FILE.1`, then a new
    /// `FILE`.
    pub fn rotate(&mut self) -> std::io::Result<()> {
        self.file.flush()?;
        if self.keep == 0 {
            std::fs::remove_file(&self.path)?;
        } else {
            for n in (1..self.keep).rev() {
                let from = Self::rotated(&self.path, n);
                if from.exists() {
                    std::fs::rename(&from, Self::rotated(&self.path, n + 1))?;
                }
            }
            std::fs::rename(&self.path, Self::rotated(&self.path, 1))?;
        }
        self.file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        self.len = 0;
        Ok(())
    }
}

/// One line of the job log.
#[derive(Debug, Serialize)]
struct Line<'a> {
    time: &'a str,
    event: &'static str,
    client: &'a str,
    jobtype: &'a str,
    id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    attempt: Option<u32>,
    sysid: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    worker: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    trace_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    new: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    release: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delay_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    outcome: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    run_ms: Option<u64>,
}

/// Appends the lines of `batch` to `out`.
pub fn write_batch(out: &mut Vec<u8>, batch: &Batch, sysid: &str) {
    let time = humantime::format_rfc3339_millis(batch.end).to_string();
    for e in &batch.jobs {
        let mut line = Line {
            time: &time,
            event: batch.kind.as_str(),
            client: tenant::tenant_of(&e.jobtype),
            jobtype: tenant::local_of(&e.jobtype),
            id: tenant::local_of(&e.id),
            attempt: (e.attempt > 0).then_some(e.attempt),
            sysid,
            worker: batch.worker.as_deref(),
            trace_id: e.trace.as_deref().and_then(trace_id_of),
            source: None,
            new: None,
            error: None,
            release: None,
            code: None,
            status: None,
            delay_ms: None,
            outcome: None,
            run_ms: None,
        };
        match &e.detail {
            Detail::None | Detail::Started(_) => {}
            Detail::Added(source) => line.source = Some(source.as_str()),
            Detail::Ingested { new } => line.new = Some(*new),
            Detail::Rejected(error) => line.error = Some(error),
            Detail::Finished(end) => {
                line.status = (end.status > 0).then_some(end.status);
                line.outcome = Some(end.outcome);
                line.run_ms = Some(millis(
                    batch.end.duration_since(end.began).unwrap_or_default(),
                ));
            }
            Detail::Released(r) => {
                line.release = Some(r.release);
                line.code = r.code;
                line.status = r.status;
                line.delay_ms = r.delay.map(millis);
                line.outcome = Some(r.outcome);
            }
        }
        // Writing into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, &line);
        out.push(b'\n');
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

enum Output {
    File(RotatingFile),
    Stderr,
}

impl Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Output::File(f) => f.write_lines(buf),
            Output::Stderr => {
                let mut e = std::io::stderr().lock();
                e.write_all(buf)?;
                e.flush()
            }
        }
    }
}

/// Opens the job log and starts its thread.
pub(super) fn start(
    config: &JobLogConfig,
    sysid: &str,
    queued: Arc<AtomicUsize>,
    metrics: Arc<Metrics>,
) -> Result<(mpsc::Sender<Msg>, std::thread::JoinHandle<()>), EventsError> {
    let mut out = match &config.target {
        JobLogTarget::Stderr => Output::Stderr,
        JobLogTarget::File(path) => Output::File(
            RotatingFile::open(path, config.max_bytes, config.keep).map_err(|source| {
                EventsError::JobLog {
                    path: path.display().to_string(),
                    source,
                }
            })?,
        ),
    };
    let (tx, rx) = mpsc::channel::<Msg>();
    let sysid = sysid.to_owned();
    let handle = std::thread::Builder::new()
        .name("jobstore-job-log".into())
        .spawn(move || {
            let mut buf = Vec::with_capacity(64 << 10);
            let mut failing = false;
            let mut stop = None;
            while let Ok(first) = rx.recv() {
                // Everything queued now goes out in one write.
                let mut next = Some(first);
                while let Some(msg) = next {
                    match msg {
                        Msg::Batch(b) => {
                            write_batch(&mut buf, &b, &sysid);
                            taken(&queued, &b);
                        }
                        Msg::Stop(ack) => stop = Some(ack),
                    }
                    next = if stop.is_some() || buf.len() >= 1 << 20 {
                        None
                    } else {
                        rx.try_recv().ok()
                    };
                }
                if !buf.is_empty() {
                    match out.write(&buf) {
                        Ok(()) => failing = false,
                        Err(e) => {
                            metrics.error("job_log", "write");
                            if !failing {
                                tracing::error!(error = %e, "cannot write the job log; its lines are lost until it can");
                            }
                            failing = true;
                        }
                    }
                    buf.clear();
                }
                if let Some(ack) = stop.take() {
                    let _ = ack.send(());
                    return;
                }
            }
        })
        .map_err(|source| EventsError::JobLog {
            path: "(thread)".into(),
            source,
        })?;
    Ok((tx, handle))
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::events::{Entry, JobRef, Kind, ReleaseEnd, RunEnd, Source};

    fn lines(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn a_file_rotates_before_a_line_would_take_it_past_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.log");
        let mut f = RotatingFile::open(&path, 20, 2).unwrap();
        // 10 bytes a line: two fit in a file.
        f.write_lines(b"line-0001\nline-0002\n").unwrap();
        assert_eq!(lines(&path), ["line-0001", "line-0002"]);
        f.write_lines(b"line-0003\n").unwrap();
        assert_eq!(lines(&path), ["line-0003"]);
        assert_eq!(
            lines(&RotatingFile::rotated(&path, 1)),
            ["line-0001", "line-0002"]
        );
        // Lines of one write are split where the limit falls.
        f.write_lines(b"line-0004\nline-0005\nline-0006\n").unwrap();
        assert_eq!(lines(&path), ["line-0005", "line-0006"]);
        assert_eq!(
            lines(&RotatingFile::rotated(&path, 1)),
            ["line-0003", "line-0004"]
        );
        assert_eq!(
            lines(&RotatingFile::rotated(&path, 2)),
            ["line-0001", "line-0002"]
        );
        assert!(!line_3_exists(&path));
        // The oldest is dropped past `keep`.
        f.write_lines(b"line-0007\nline-0008\n").unwrap();
        assert_eq!(lines(&path), ["line-0007", "line-0008"]);
        assert_eq!(
            lines(&RotatingFile::rotated(&path, 1)),
            ["line-0005", "line-0006"]
        );
        assert_eq!(
            lines(&RotatingFile::rotated(&path, 2)),
            ["line-0003", "line-0004"]
        );
        assert!(!line_3_exists(&path));
    }

    fn line_3_exists(path: &Path) -> bool {
        RotatingFile::rotated(path, 3).exists()
    }

    #[test]
    fn an_existing_file_counts_and_a_long_line_gets_a_file_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.log");
        std::fs::write(&path, b"old-line-1\n").unwrap();
        let mut f = RotatingFile::open(&path, 20, 1).unwrap();
        f.write_lines(b"a-line-that-is-longer-than-twenty\nshort\n")
            .unwrap();
        assert_eq!(
            lines(&RotatingFile::rotated(&path, 1)),
            ["a-line-that-is-longer-than-twenty"]
        );
        assert_eq!(lines(&path), ["short"]);
        assert!(!RotatingFile::rotated(&path, 2).exists());
    }

    #[test]
    fn keep_zero_starts_the_file_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.log");
        let mut f = RotatingFile::open(&path, 12, 0).unwrap();
        f.write_lines(b"first-line\nsecond-line\n").unwrap();
        assert_eq!(lines(&path), ["second-line"]);
        assert!(!RotatingFile::rotated(&path, 1).exists());
    }

    #[test]
    fn lines_name_the_job_as_its_client_knows_it() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let job = |id| JobRef {
            id,
            jobtype: "acme-mail",
            attempt: 2,
            trace: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        };
        let mut out = Vec::new();
        let release = ReleaseEnd::of(
            &jobstore_api::Release::Retry {
                delay: Duration::from_millis(1500),
            },
            Some(503),
            "error",
        );
        write_batch(
            &mut out,
            &Batch {
                kind: Kind::Released,
                start: t0,
                end: t0 + Duration::from_millis(7),
                worker: Some("py-1".into()),
                jobs: vec![Entry::new(job("acme-1"), Detail::Released(release))],
            },
            "node-1",
        );
        write_batch(
            &mut out,
            &Batch {
                kind: Kind::Finished,
                start: t0,
                end: t0 + Duration::from_millis(250),
                worker: None,
                jobs: vec![Entry::new(
                    job("acme-2"),
                    Detail::Finished(RunEnd {
                        status: 200,
                        outcome: "ok",
                        began: t0,
                        run: None,
                    }),
                )],
            },
            "node-1",
        );
        write_batch(
            &mut out,
            &Batch {
                kind: Kind::Added,
                start: t0,
                end: t0,
                worker: None,
                jobs: vec![Entry::new(
                    JobRef {
                        attempt: 0,
                        trace: None,
                        ..job("acme-3")
                    },
                    Detail::Added(Source::Run),
                )],
            },
            "node-1",
        );
        let text = String::from_utf8(out).unwrap();
        let l: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            l[0],
            serde_json::json!({
                "time": "2027-01-15T08:00:00.007Z", "event": "released", "client": "acme",
                "jobtype": "mail", "id": "1", "attempt": 2, "sysid": "node-1", "worker": "py-1",
                "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "release": "retry",
                "status": 503, "delay_ms": 1500, "outcome": "error"
            })
        );
        assert_eq!(l[1]["event"], "finished");
        assert_eq!(l[1]["run_ms"], 250);
        assert_eq!(l[1]["status"], 200);
        assert_eq!(
            l[2],
            serde_json::json!({
                "time": "2027-01-15T08:00:00.000Z", "event": "added", "client": "acme",
                "jobtype": "mail", "id": "3", "sysid": "node-1", "source": "run"
            })
        );
    }
}
