//! The local, append-only file journal.
//!
//! The daemon acknowledges a client's "add jobs" request only once the job
//! records are durable here: [`Journal::append`] returns after they are
//! written and fsynced, and concurrent appends share one write and one
//! fsync (group commit). An ingest loop then [`reserve`](Journal::reserve)s
//! batches, [`read`](Journal::read)s them, inserts them into the store (adds
//! are idempotent by id, so replays are harmless) and
//! [`sync`](Journal::sync)s the reservation, which moves the durable read
//! point past them. Reservations not synced within their timeout are handed
//! out again. Segment files are deleted once every record in them is synced
//! and the read point past them is durable.
//!
//! # On disk
//!
//! * Segments `<dir>/<20-digit sequence>.jnl`, each starting with the line
//!   `jobstore-journal 1`. A new segment is started (and the directory
//!   fsynced) when an append would take the current one past
//!   [`JournalOptions::segment_size`]; the records of one append always stay
//!   in one segment.
//! * One record per line:
//!   `<crc32c of body, 8 lowercase hex> <body length, decimal> <body>\n`,
//!   body `id|jobtype|priority|run_at|payload`, with the payload escaped
//!   (`\\`, `\n`, `\r`, `\xHH` for bytes that are not valid UTF-8; all else
//!   verbatim). An id or jobtype cannot contain `|` or control characters.
//! * `<dir>/cursor`: the read point (segment, offset) and its own checksum,
//!   replaced atomically (temp file, fsync, rename, directory fsync).
//! * `<dir>/lock`: locked while a [`Journal`] has the directory open, so
//!   two can never write it at once.
//!
//! # Crashes and damage
//!
//! Every acknowledged record has been fdatasynced (and its segment's
//! directory entry fsynced), so it survives `kill -9` and power loss. At
//! [`Journal::open`], every line past the read point is verified (length,
//! checksum, fields); a line that does not verify is skipped, counted and
//! logged, never returned. Whatever follows the last valid record of the
//! last segment (a torn write) is truncated, and appends go on from there.
//! A damaged cursor is reported and reading starts at the oldest segment
//! present: records may be replayed, never lost.
//!
//! The read point covers the contiguous prefix of synced records: a record
//! synced while an older one is still unsynced is handed out again after a
//! restart.

/// How long [`Journal::open`] tries a held directory lock before it gives
/// up with [`JournalError::Locked`].
pub const LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

mod reader;
mod record;
mod segment;
mod writer;

#[cfg(test)]
mod tests;

/// Test probe: for the journal directories a test watches, every point at
/// which bytes of a segment became durable (after `fdatasync`, and after a
/// new segment's directory entry was synced), in order, with the test's own
/// marks in between. A test replays it to build the disk a power loss at
/// any moment would leave: each segment cut to its last durable length.
#[cfg(test)]
pub(crate) mod probe {
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;

    /// One event in a watched directory.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) enum Event {
        /// Segment `seq` is durable up to `len` bytes.
        Synced { seq: u64, len: u64 },
        /// A mark from the test (the ids it was told are durable).
        Acked(Vec<String>),
    }

    static WATCHED: Mutex<Vec<(PathBuf, Vec<Event>)>> = Mutex::new(Vec::new());

    /// Starts recording events of `dir`.
    pub(crate) fn watch(dir: &Path) {
        WATCHED.lock().unwrap().push((dir.to_owned(), Vec::new()));
    }

    /// Records `event` if `dir` is watched.
    pub(crate) fn record(dir: &Path, event: Event) {
        let mut w = WATCHED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, events)) = w.iter_mut().find(|(d, _)| d == dir) {
            events.push(event);
        }
    }

    /// Stops watching `dir` and returns its events.
    pub(crate) fn take(dir: &Path) -> Vec<Event> {
        let mut w = WATCHED.lock().unwrap();
        let i = w.iter().position(|(d, _)| d == dir).expect("watched");
        w.remove(i).1
    }
}

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use reader::{Readiness, State, Synced};
use segment::{CursorFile, HEADER_LEN, Header, Pos, io_err};
use writer::{AppendReq, Msg, Writer};

/// One job as journaled. Epoch milliseconds for `run_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The job's id (store id). Not empty; no `|` and no control characters.
    pub id: String,
    /// The job's jobtype (store jobtype). Not empty; no `|` and no control
    /// characters.
    pub jobtype: String,
    /// The job's priority.
    pub priority: i32,
    /// When the job may run, in epoch milliseconds; `None` for now.
    pub run_at: Option<i64>,
    /// The job's payload: any bytes.
    pub data: Vec<u8>,
    /// The job's tags (each of `A-Z a-z 0-9 _ . : -`), written after the
    /// jobtype as `jobtype#tag,tag`; records without tags read as before.
    pub tags: Vec<String>,
    /// The job's W3C trace context, written after the jobtype and tags as
    /// `~traceparent~tracestate`; records without one (all those written
    /// before trace contexts existed) read as `None`.
    pub trace: Option<jobstore_api::TraceContext>,
    /// The job's unique key, written after the priority as
    /// `priority!<k|r><window ms>:<key>` (`k` keep, `r` replace the data;
    /// the window empty when none; `%` and `|` in the key written `%25`
    /// and `%7C`); records without one read as `None`.
    pub unique: Option<jobstore_api::Unique>,
    /// The job's repeat rule, written after the run time as
    /// `run_at@<rule text>` (the text of [`jobstore_api::Repeat::to_text`],
    /// `%` and `|` written `%25` and `%7C`); records without one read as
    /// `None`.
    pub repeat: Option<jobstore_api::Repeat>,
    /// The jobs it depends on (store ids) and what a failed one does to
    /// it, written after the run time as `run_at^<c|r|h><id>,<id>...` (`c`
    /// cancel, `r` run, `h` hold; `%`, `,`, `^`, `@` and `|` in an id written
    /// `%25`, `%2C`, `%5E`, `%40` and `%7C`), before the repeat rule's
    /// `@`; records without them read as none.
    pub depends_on: Vec<String>,
    /// What a dependency that ends other than `ok` does to the job
    /// (`c`, `r` or `h` after the `^`).
    pub on_dependency_failure: jobstore_api::DependencyFailure,
    /// Its run is handed its dependencies' outputs (the policy's letter
    /// in upper case).
    pub with_outputs: bool,
}

/// Where the journal lives and how it writes.
#[derive(Debug, Clone)]
pub struct JournalOptions {
    /// The journal's directory, created if needed.
    pub dir: PathBuf,
    /// A new segment file is started when an append would take the current
    /// one past this many bytes. Default 64 MiB.
    pub segment_size: u64,
    /// Whether to fsync. Default `true`; `false` only for tests and benches
    /// that measure without the disk (nothing is durable then).
    pub fsync: bool,
    /// Whether a helper thread, pinned with the writer thread to one CPU,
    /// spins (yielding to any other runnable thread, at most 3 ms) while the
    /// writer waits in `fdatasync` for a group of one append. On virtual machines whose idle vCPUs
    /// notice I/O completions only at the next timer tick, this turns 4 ms
    /// acknowledgements into the disk's real fsync time; it uses only CPU
    /// time nothing else wanted. Default `true`; no effect without `fsync`
    /// or with a single CPU.
    pub spin_fsync: bool,
}

impl JournalOptions {
    /// The default segment size, 64 MiB.
    pub const DEFAULT_SEGMENT_SIZE: u64 = 64 << 20;

    /// Options for a journal in `dir`, with the defaults.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        JournalOptions {
            dir: dir.into(),
            segment_size: Self::DEFAULT_SEGMENT_SIZE,
            fsync: true,
            spin_fsync: true,
        }
    }

    /// Sets [`segment_size`](Self::segment_size).
    pub fn segment_size(mut self, bytes: u64) -> Self {
        self.segment_size = bytes;
        self
    }

    /// Sets [`fsync`](Self::fsync).
    pub fn fsync(mut self, fsync: bool) -> Self {
        self.fsync = fsync;
        self
    }

    /// Sets [`spin_fsync`](Self::spin_fsync).
    pub fn spin_fsync(mut self, spin: bool) -> Self {
        self.spin_fsync = spin;
        self
    }
}

/// Opaque handle of one reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token {
    /// Which open journal issued it (tokens of another never match).
    journal: u64,
    /// The reservation.
    id: u64,
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// A file operation failed.
    #[error("journal: {what} ({}): {source}", .path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The journal was closed: no more appends or reservations.
    #[error("journal: closed")]
    Closed,
    /// A record the format cannot hold: an empty id or jobtype, one
    /// containing `|` or a control character, or one too large.
    #[error("journal: invalid record: {message}")]
    InvalidRecord {
        /// What is wrong with it.
        message: String,
    },
    /// The token is unknown or its reservation expired.
    #[error("journal: unknown or expired reservation")]
    StaleToken,
    /// Another open [`Journal`] (in this process or another) holds the
    /// directory.
    #[error("journal: {} is in use by another journal", .dir.display())]
    Locked {
        /// The directory.
        dir: PathBuf,
    },
    /// A segment of another format version, which this build cannot read.
    #[error("journal: {} is format version {version}; this build reads version 1", .path.display())]
    Unsupported {
        /// The segment.
        path: PathBuf,
        /// Its version.
        version: String,
    },
    /// The writer stopped after a failed write or fsync (what reached the
    /// disk is unknown); the journal must be reopened.
    #[error("journal: writer stopped: {message}")]
    Failed {
        /// The failure.
        message: String,
    },
}

/// The state of the cursor file found at open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum CursorStatus {
    /// No cursor: reading started at the first segment.
    #[default]
    Missing,
    /// A valid cursor, used.
    Valid,
    /// A cursor that did not verify: reading started at the oldest segment
    /// present (records may be replayed).
    Damaged {
        /// Why it did not verify.
        reason: String,
    },
    /// A valid cursor past the end of the valid records (its segment was
    /// damaged or truncated): it was rewritten to that end.
    BeyondEnd,
}

/// What recovery found at [`Journal::open`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// Segments scanned (those at or past the read point).
    pub segments_scanned: usize,
    /// Consumed segments deleted (a crash had interrupted their deletion).
    pub segments_deleted: usize,
    /// Valid records found past the read point: readable again.
    pub records_pending: u64,
    /// Their bytes.
    pub bytes_pending: u64,
    /// Lines that did not verify, skipped (not counting a torn tail).
    pub damaged_records: u64,
    /// Segment headers that did not verify (their records were still read).
    pub damaged_headers: u64,
    /// Bytes truncated after the last valid record of the last segment: a
    /// torn write or garbage.
    pub torn_tail_bytes: u64,
    /// The cursor.
    pub cursor: CursorStatus,
}

/// Counters for health and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JournalStats {
    /// Records appended (durable) since open.
    pub appended_records: u64,
    /// Their bytes on disk.
    pub appended_bytes: u64,
    /// Data fsyncs of group writes since open (0 with `fsync` off).
    pub fsyncs: u64,
    /// Group writes since open (one write each, however many appends).
    pub group_writes: u64,
    /// Records durable and not yet synced, reserved ones included.
    pub backlog_records: u64,
    /// Their bytes on disk.
    pub backlog_bytes: u64,
    /// Records under a reservation not yet synced (expired ones not yet
    /// handed out again included).
    pub reserved_records: u64,
    /// Reservations not yet synced.
    pub reservations: u64,
    /// Reservations that expired since open.
    pub expired_reservations: u64,
    /// Damaged records skipped since open, recovery included.
    pub damaged_records: u64,
    /// Segment files present.
    pub segments: u64,
}

/// Tells open journals apart, so a token never matches another one's.
static INSTANCES: AtomicU64 = AtomicU64::new(1);

/// What the writer thread, blocking tasks and handles share.
pub(crate) struct Shared {
    dir: PathBuf,
    options: JournalOptions,
    state: Mutex<State>,
    /// The durable record count; also nudged (unchanged) when something
    /// else may make records readable, for [`Journal::readable`].
    wake: watch::Sender<u64>,
    closed: AtomicBool,
    /// The persisted read point; held while the cursor is written.
    cursor: Mutex<Option<Pos>>,
    /// Holds the directory's lock while anything uses the journal.
    _lock: File,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Persists the current read point if it is past the persisted one, then
    /// deletes the segments wholly behind it. Blocking.
    fn persist_cursor(&self) -> Result<(), JournalError> {
        let mut persisted = self.cursor.lock().unwrap_or_else(PoisonError::into_inner);
        let (target, doomed) = {
            let st = self.lock();
            let target = st.read_point();
            let doomed: Vec<u64> = st
                .files
                .iter()
                .copied()
                .take_while(|&s| s < target.seq)
                .collect();
            (target, doomed)
        };
        if persisted.is_some_and(|p| target <= p) {
            return Ok(());
        }
        segment::write_cursor(&self.dir, target, self.options.fsync)?;
        *persisted = Some(target);
        for &seq in &doomed {
            let path = segment::segment_path(&self.dir, seq);
            match fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    tracing::warn!(segment = %path.display(), error = %e, "journal: could not delete a consumed segment; retried at next open");
                }
                _ => {
                    tracing::debug!(segment = %path.display(), "journal: consumed segment deleted")
                }
            }
        }
        if !doomed.is_empty() {
            self.lock().files.retain(|&s| s >= target.seq);
        }
        Ok(())
    }

    fn nudge(&self) {
        self.wake.send_modify(|_| {});
    }
}

struct Inner {
    shared: Arc<Shared>,
    /// `None` only while dropping.
    tx: Option<mpsc::Sender<Msg>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    instance: u64,
    recovery: RecoveryReport,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The writer stops once its channel is gone; wait for it so that the
        // directory lock is released when the last handle is dropped.
        self.tx.take();
        let handle = self
            .thread
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }
}

/// The journal. Cheap to clone (all clones are the same journal); `Send`
/// and `Sync`. The directory stays locked until every clone is dropped.
#[derive(Clone)]
pub struct Journal {
    inner: Arc<Inner>,
}

impl fmt::Debug for Journal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Journal")
            .field("dir", &self.inner.shared.dir)
            .field("closed", &self.inner.shared.closed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Gives a reservation back if `reserve` is cancelled or fails before it
/// returns its token.
struct ReleaseOnDrop<'a> {
    shared: &'a Shared,
    id: Option<u64>,
}

impl Drop for ReleaseOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id
            && self.shared.lock().release(id)
        {
            self.shared.nudge();
        }
    }
}

fn join_error(e: tokio::task::JoinError) -> JournalError {
    JournalError::Failed {
        message: format!("a blocking journal task failed: {e}"),
    }
}

impl Journal {
    /// Opens the journal in `options.dir` (creating the directory if needed)
    /// and recovers: deletes segments a crash left behind the read point,
    /// scans everything past it, skips and counts damaged records, truncates
    /// a torn or garbage tail of the last segment (after its last valid
    /// record). Then starts the writer thread.
    ///
    /// Blocking: call it at startup or from `spawn_blocking`.
    pub fn open(options: JournalOptions) -> Result<Journal, JournalError> {
        let dir = options.dir.clone();
        fs::create_dir_all(&dir).map_err(io_err("creating the journal directory", &dir))?;
        let lock_path = dir.join(segment::LOCK);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_err("opening the lock file", &lock_path))?;
        // A lock can outlive its journal for an instant: a process forked
        // (to run a job) while the lock file was open holds a copy of it
        // until it execs. So a lock held is tried again for a short while
        // before the directory counts as in use.
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        loop {
            match lock.try_lock() {
                Ok(()) => break,
                Err(fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(fs::TryLockError::WouldBlock) => return Err(JournalError::Locked { dir }),
                Err(fs::TryLockError::Error(e)) => {
                    return Err(io_err("locking the journal directory", &lock_path)(e));
                }
            }
        }
        segment::remove_cursor_tmp(&dir)?;
        let Recovered {
            mut state,
            report,
            file,
            seq,
            len,
            persisted,
        } = recover(&dir, &options)?;
        state.damaged_records = report.damaged_records;
        let durable = state.durable_count();
        let (wake, _) = watch::channel(durable);
        let shared = Arc::new(Shared {
            dir,
            options,
            state: Mutex::new(state),
            wake,
            closed: AtomicBool::new(false),
            cursor: Mutex::new(persisted),
            _lock: lock,
        });
        let (tx, rx) = mpsc::channel();
        let writer = Writer::new(shared.clone(), file, seq, len);
        let thread = std::thread::Builder::new()
            .name("journal-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(io_err("starting the writer thread", &shared.dir))?;
        Ok(Journal {
            inner: Arc::new(Inner {
                shared,
                tx: Some(tx),
                thread: Mutex::new(Some(thread)),
                instance: INSTANCES.fetch_add(1, Ordering::Relaxed),
                recovery: report,
            }),
        })
    }

    /// What recovery found at open.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.inner.recovery
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    /// Writes the records and returns once they are durable (fsynced).
    /// Concurrent appends share one write and one fsync. The records of one
    /// call are contiguous and in order. An empty `records` returns `Ok` at
    /// once. Fails with [`JournalError::InvalidRecord`] (nothing written)
    /// if any record cannot be journaled.
    ///
    /// Cancelling the future does not withdraw the records: they may still
    /// be written, unacknowledged.
    pub async fn append(&self, records: Vec<Record>) -> Result<(), JournalError> {
        if records.is_empty() {
            return Ok(());
        }
        if self.shared().closed.load(Ordering::Acquire) {
            return Err(JournalError::Closed);
        }
        let estimate: usize = records
            .iter()
            .map(|r| r.id.len() + r.jobtype.len() + r.data.len() + 64)
            .sum();
        let mut bytes = Vec::with_capacity(estimate);
        let mut lines = Vec::with_capacity(records.len());
        for r in &records {
            let len = record::encode_into(r, &mut bytes)?;
            // Bounded by MAX_BODY_LEN plus a short header.
            lines.push(len as u32);
        }
        let (reply, answer) = oneshot::channel();
        let tx = self.inner.tx.as_ref().ok_or(JournalError::Closed)?;
        tx.send(Msg::Append(AppendReq {
            bytes,
            lines,
            reply,
        }))
        .map_err(|_| JournalError::Closed)?;
        answer.await.map_err(|_| JournalError::Closed)?
    }

    /// Reserves up to `count` readable records (durable, not synced, not
    /// under a live reservation) for `timeout`, oldest first; the records of
    /// expired reservations are handed out again first. `None` when nothing
    /// is readable now (or `count` is 0). Fails with
    /// [`JournalError::Closed`] after [`close`](Self::close).
    pub async fn reserve(
        &self,
        count: usize,
        timeout: Duration,
    ) -> Result<Option<Token>, JournalError> {
        loop {
            if self.shared().closed.load(Ordering::Acquire) {
                return Err(JournalError::Closed);
            }
            if count == 0 {
                return Ok(None);
            }
            let now = Instant::now();
            let deadline = now
                .checked_add(timeout)
                .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400));
            let Some((id, plan)) = self.shared().lock().reserve(count, now, deadline) else {
                return Ok(None);
            };
            let mut guard = ReleaseOnDrop {
                shared: self.shared(),
                id: Some(id),
            };
            let shared = self.shared().clone();
            let (records, damaged) = if plan.is_empty() {
                (Vec::new(), Vec::new())
            } else {
                tokio::task::spawn_blocking(move || reader::read_plan(&shared.dir, &plan))
                    .await
                    .map_err(join_error)??
            };
            let empty = records.is_empty();
            let mut st = self.shared().lock();
            st.loaded(id, records, &damaged);
            if empty {
                // Every record in it was found damaged: done with them.
                st.release(id);
                drop(st);
                guard.id = None;
                continue;
            }
            drop(st);
            guard.id = None;
            return Ok(Some(Token {
                journal: self.inner.instance,
                id,
            }));
        }
    }

    /// Resolves when [`reserve`](Self::reserve) may find something: durable
    /// records past the reservations, or a reservation that expired (and at
    /// once after [`close`](Self::close)). For the ingest loop to sleep on.
    /// Cancel-safe.
    pub async fn readable(&self) {
        let mut wake = self.shared().wake.subscribe();
        loop {
            wake.borrow_and_update();
            if self.shared().closed.load(Ordering::Acquire) {
                return;
            }
            let readiness = self.shared().lock().readiness(Instant::now());
            let changed = match readiness {
                Readiness::Now => return,
                Readiness::Wait(None) => wake.changed().await,
                Readiness::Wait(Some(deadline)) => tokio::select! {
                    changed = wake.changed() => changed,
                    () = tokio::time::sleep_until(deadline) => Ok(()),
                },
            };
            if changed.is_err() {
                return;
            }
        }
    }

    /// The records of a live reservation, in journal order. Fails with
    /// [`JournalError::StaleToken`] if the token is unknown, synced or
    /// expired.
    pub fn read(&self, token: Token) -> Result<Vec<Record>, JournalError> {
        if token.journal != self.inner.instance {
            return Err(JournalError::StaleToken);
        }
        let records = self
            .shared()
            .lock()
            .records(token.id, Instant::now())
            .ok_or(JournalError::StaleToken)?;
        Ok(records.as_ref().clone())
    }

    /// Marks the reservation consumed. Returns `false` if the token is
    /// unknown or expired (its records are, or will be, handed out again).
    /// The read point advances over the contiguous prefix of synced records
    /// and is persisted before this returns; segments wholly behind it are
    /// then deleted. Works after [`close`](Self::close) too, so that an
    /// ingest loop can finish its batch.
    pub async fn sync(&self, token: Token) -> Result<bool, JournalError> {
        if token.journal != self.inner.instance {
            return Ok(false);
        }
        let outcome = self.shared().lock().sync(token.id, Instant::now());
        match outcome {
            Synced::Unknown => Ok(false),
            Synced::Expired => {
                self.shared().nudge();
                Ok(false)
            }
            Synced::Done { moved } => {
                if moved {
                    let shared = self.shared().clone();
                    tokio::task::spawn_blocking(move || shared.persist_cursor())
                        .await
                        .map_err(join_error)??;
                }
                Ok(true)
            }
        }
    }

    /// Counters for health and metrics.
    pub fn stats(&self) -> JournalStats {
        let st = self.shared().lock();
        JournalStats {
            appended_records: st.appended_records,
            appended_bytes: st.appended_bytes,
            fsyncs: st.fsyncs,
            group_writes: st.group_writes,
            backlog_records: st.backlog_records,
            backlog_bytes: st.backlog_bytes,
            reserved_records: st.reserved_records(),
            reservations: st.reservations() as u64,
            expired_reservations: st.expired_reservations,
            damaged_records: st.damaged_records,
            segments: st.files.len() as u64,
        }
    }

    /// Flushes pending appends and stops the writer; later appends and
    /// reservations fail with [`JournalError::Closed`], and
    /// [`readable`](Self::readable) resolves at once. [`read`](Self::read)
    /// and [`sync`](Self::sync) keep working for reservations already made.
    /// Idempotent.
    pub async fn close(&self) -> Result<(), JournalError> {
        self.shared().closed.store(true, Ordering::Release);
        self.shared().nudge();
        let (reply, done) = oneshot::channel();
        if let Some(tx) = &self.inner.tx
            && tx.send(Msg::Close(reply)).is_ok()
        {
            // An error means the writer was already gone: closed before.
            let _ = done.await;
        }
        let handle = self
            .inner
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(handle) = handle {
            let joined = tokio::task::spawn_blocking(move || handle.join())
                .await
                .map_err(join_error)?;
            if joined.is_err() {
                return Err(JournalError::Failed {
                    message: "the writer thread panicked".into(),
                });
            }
        }
        Ok(())
    }
}

/// What recovery hands to [`Journal::open`].
struct Recovered {
    state: State,
    report: RecoveryReport,
    /// The segment to append to, open at `len`.
    file: File,
    seq: u64,
    len: u64,
    /// The cursor on disk, if valid.
    persisted: Option<Pos>,
}

fn recover(dir: &Path, options: &JournalOptions) -> Result<Recovered, JournalError> {
    let mut report = RecoveryReport::default();
    let mut segs = segment::list_segments(dir)?;
    let start = match segment::read_cursor(dir)? {
        CursorFile::Valid(pos) => {
            report.cursor = CursorStatus::Valid;
            Some(pos)
        }
        CursorFile::Missing => None,
        CursorFile::Damaged(reason) => {
            tracing::warn!(dir = %dir.display(), %reason, "journal: the cursor is damaged; reading from the oldest segment (records may be replayed)");
            report.cursor = CursorStatus::Damaged { reason };
            None
        }
    };
    if let Some(pos) = start {
        for &seq in segs.iter().filter(|&&s| s < pos.seq) {
            let path = segment::segment_path(dir, seq);
            match fs::remove_file(&path) {
                Ok(()) => report.segments_deleted += 1,
                Err(e) => {
                    tracing::warn!(segment = %path.display(), error = %e, "journal: could not delete a consumed segment");
                }
            }
        }
        segs.retain(|&s| s >= pos.seq);
    }
    let mut state = State::new(Pos::default(), segs.iter().copied().collect());
    let mut write = None;
    for (i, &seq) in segs.iter().enumerate() {
        let is_last = i + 1 == segs.len();
        let from = match start {
            Some(pos) if pos.seq == seq => pos.off,
            _ => HEADER_LEN,
        };
        let scan = segment::scan_segment(dir, seq, from)?;
        let path = segment::segment_path(dir, seq);
        report.segments_scanned += 1;
        match &scan.header {
            Some(Header::Ok) => {}
            Some(Header::OtherVersion(version)) if scan.records.is_empty() => {
                return Err(JournalError::Unsupported {
                    path,
                    version: version.clone(),
                });
            }
            None | Some(Header::Short) if is_last => {}
            header => {
                tracing::warn!(segment = %path.display(), ?header, "journal: damaged segment header; reading its records anyway");
                report.damaged_headers += 1;
            }
        }
        // In the last segment, what follows the last valid record is a torn
        // tail, truncated below rather than counted.
        let tail_at = if is_last { scan.valid_end } else { u64::MAX };
        for d in scan.damaged.iter().filter(|d| d.off < tail_at) {
            tracing::warn!(segment = %path.display(), offset = d.off, length = d.len, reason = d.reason, "journal: damaged record skipped");
            report.damaged_records += 1;
        }
        for &(off, len) in &scan.records {
            state.push(seq, off, len);
        }
        if is_last {
            let rewrite = scan.records.is_empty() && scan.header != Some(Header::Ok);
            let end = if rewrite { HEADER_LEN } else { scan.valid_end };
            let torn = if rewrite {
                scan.file_len
            } else {
                scan.file_len.saturating_sub(scan.valid_end)
            };
            if torn > 0 && !(rewrite && scan.file_len == 0) {
                tracing::warn!(segment = %path.display(), offset = end, bytes = torn, "journal: truncating a torn or damaged tail");
            }
            report.torn_tail_bytes += torn;
            write = Some((seq, end, rewrite));
        }
    }
    report.records_pending = state.backlog_records;
    report.bytes_pending = state.backlog_bytes;
    let (file, seq, len) = match write {
        Some((seq, end, rewrite)) => (
            segment::reopen_segment(dir, seq, end, rewrite, options.fsync)?,
            seq,
            end,
        ),
        None => {
            let seq = start.map_or(1, |p| p.seq + 1);
            let file = segment::create_segment(dir, seq, options.fsync)?;
            state.files.push_back(seq);
            (file, seq, HEADER_LEN)
        }
    };
    state.durable = Pos { seq, off: len };
    let mut persisted = start;
    if let Some(pos) = start
        && pos > state.durable
    {
        tracing::warn!(dir = %dir.display(), cursor = ?pos, end = ?state.durable, "journal: the cursor is past the valid records; moving it back to their end");
        segment::write_cursor(dir, state.durable, options.fsync)?;
        report.cursor = CursorStatus::BeyondEnd;
        persisted = Some(state.durable);
    }
    if report != RecoveryReport::default() {
        tracing::info!(dir = %dir.display(), ?report, "journal: recovered");
    }
    Ok(Recovered {
        state,
        report,
        file,
        seq,
        len,
        persisted,
    })
}
