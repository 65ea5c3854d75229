//! The writer thread: group commit.
//!
//! Appends arrive already encoded over a channel. The writer takes one,
//! drains everything else queued, writes it all with one `write` into the
//! current segment, `fdatasync`s once, indexes the new records, publishes
//! the new durable end through the watch channel, and only then answers
//! every waiter. While it is in `fdatasync`, new appends queue up and form
//! the next group, so concurrent appends share fsyncs without any waiting
//! on purpose.
//!
//! With [`JournalOptions::spin_fsync`](super::JournalOptions::spin_fsync),
//! a helper thread pinned to the writer's CPU spins (yielding to anything
//! else runnable) while the writer waits in `fdatasync`. On virtual machines
//! whose idle vCPUs notice I/O completions late (a 0.2 ms fsync then takes
//! a 4 ms timer tick), this keeps acknowledgements fast; it only uses CPU
//! time that nothing else wanted.
//!
//! After a failed write or fsync the writer stops accepting appends: what
//! the kernel did with the failed pages is unknown, so nothing written after
//! them could be trusted to be readable at recovery.

use std::fs::File;
use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::segment::{self, HEADER_LEN, io_err};
use super::{JournalError, Shared};

/// The largest group buffer kept between groups.
const KEEP_BUF: usize = 16 << 20;

/// One `append` call, encoded.
#[derive(Debug)]
pub(crate) struct AppendReq {
    /// The record lines, back to back.
    pub bytes: Vec<u8>,
    /// The length of each line, in order.
    pub lines: Vec<u32>,
    /// Answered once the lines are durable (or failed).
    pub reply: oneshot::Sender<Result<(), JournalError>>,
}

/// A message to the writer.
#[derive(Debug)]
pub(crate) enum Msg {
    /// Append these records.
    Append(AppendReq),
    /// Finish what was sent before, then stop; answered when done.
    Close(oneshot::Sender<()>),
}

/// The writer's state: the current segment and the group buffer.
pub(crate) struct Writer {
    shared: Arc<Shared>,
    file: File,
    seq: u64,
    /// The durable end of the current segment.
    len: u64,
    buf: Vec<u8>,
    /// `(offset, length)` of the lines in `buf`.
    lines: Vec<(u64, u32)>,
    waiters: Vec<oneshot::Sender<Result<(), JournalError>>>,
    /// Why appends are refused, after a failed write or fsync.
    failed: Option<String>,
    spinner: Option<Spinner>,
}

/// Longest a spinner spins for one fsync: past a timer tick, spinning no
/// longer helps.
const SPIN_LIMIT: Duration = Duration::from_millis(3);

/// A thread pinned to the writer's CPU that spins while the writer is in
/// `fdatasync`, so that the CPU is awake when the I/O completes.
struct Spinner {
    /// Odd while the writer is in `fdatasync`; one more at each start and
    /// end of one.
    epoch: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Spinner {
    /// Pins the calling (writer) thread to the CPU it is on and starts a
    /// spinner pinned there too. `None` where that is not possible (one
    /// CPU, or affinity not allowed).
    fn start() -> Option<Spinner> {
        use nix::sched::{CpuSet, sched_getaffinity, sched_getcpu, sched_setaffinity};
        use nix::unistd::Pid;
        let allowed = sched_getaffinity(Pid::from_raw(0)).ok()?;
        let cpus = (0..CpuSet::count())
            .filter(|&c| allowed.is_set(c).unwrap_or(false))
            .count();
        if cpus < 2 {
            return None;
        }
        let cpu = sched_getcpu().ok()?;
        let mut only = CpuSet::new();
        only.set(cpu).ok()?;
        sched_setaffinity(Pid::from_raw(0), &only).ok()?;
        let epoch = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (epoch, stop) = (epoch.clone(), stop.clone());
            thread::Builder::new()
                .name("journal-spin".into())
                .spawn(move || {
                    if sched_setaffinity(Pid::from_raw(0), &only).is_err() {
                        return;
                    }
                    let mut handled = 0;
                    while !stop.load(Ordering::Acquire) {
                        let e = epoch.load(Ordering::Acquire);
                        if !e.is_multiple_of(2) && e != handled {
                            handled = e;
                            let start = Instant::now();
                            while epoch.load(Ordering::Acquire) == e && start.elapsed() < SPIN_LIMIT
                            {
                                thread::yield_now();
                            }
                        } else {
                            thread::park();
                        }
                    }
                })
                .ok()?
        };
        Some(Spinner {
            epoch,
            stop,
            thread,
        })
    }

    /// Called as the writer enters and leaves `fdatasync`.
    fn syncing(&self) {
        if self.epoch.fetch_add(1, Ordering::AcqRel).is_multiple_of(2) {
            self.thread.thread().unpark();
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.thread.thread().unpark();
    }
}

impl Writer {
    /// A writer appending to segment `seq`, open at `len`.
    pub(crate) fn new(shared: Arc<Shared>, file: File, seq: u64, len: u64) -> Self {
        Writer {
            spinner: None,
            shared,
            file,
            seq,
            len,
            buf: Vec::new(),
            lines: Vec::new(),
            waiters: Vec::new(),
            failed: None,
        }
    }

    /// Serves the channel until a `Close` or until every sender is gone.
    pub(crate) fn run(mut self, rx: Receiver<Msg>) {
        let options = &self.shared.options;
        if options.fsync && options.spin_fsync {
            self.spinner = Spinner::start();
        }
        let mut batch = Vec::new();
        let mut closers = Vec::new();
        while let Ok(first) = rx.recv() {
            batch.push(first);
            while let Ok(more) = rx.try_recv() {
                batch.push(more);
            }
            for msg in batch.drain(..) {
                match msg {
                    Msg::Append(req) if closers.is_empty() => self.add(req),
                    Msg::Append(req) => {
                        let _ = req.reply.send(Err(JournalError::Closed));
                    }
                    Msg::Close(reply) => closers.push(reply),
                }
            }
            self.flush();
            if !closers.is_empty() {
                break;
            }
        }
        for reply in closers {
            let _ = reply.send(());
        }
    }

    /// Adds one append to the group, first writing out the group and
    /// rotating when the append would take the segment past its size.
    fn add(&mut self, req: AppendReq) {
        if let Some(why) = &self.failed {
            let _ = req.reply.send(Err(JournalError::Failed {
                message: why.clone(),
            }));
            return;
        }
        let end = self.len + self.buf.len() as u64;
        if end > HEADER_LEN && end + req.bytes.len() as u64 > self.shared.options.segment_size {
            self.flush();
            if let Err(e) = self.rotate() {
                self.fail(&e);
            }
            if let Some(why) = &self.failed {
                let _ = req.reply.send(Err(JournalError::Failed {
                    message: why.clone(),
                }));
                return;
            }
        }
        let mut off = self.len + self.buf.len() as u64;
        for &len in &req.lines {
            self.lines.push((off, len));
            off += u64::from(len);
        }
        self.buf.extend_from_slice(&req.bytes);
        self.waiters.push(req.reply);
    }

    /// Writes the group, fsyncs, indexes and publishes it, and answers its
    /// waiters.
    fn flush(&mut self) {
        if self.waiters.is_empty() {
            return;
        }
        let result = self.write_group();
        match result {
            Ok(()) => {
                let bytes = self.buf.len() as u64;
                self.len += bytes;
                let count = {
                    let mut st = self.shared.lock();
                    for &(off, len) in &self.lines {
                        st.push(self.seq, off, len);
                    }
                    st.durable = segment::Pos {
                        seq: self.seq,
                        off: self.len,
                    };
                    st.appended_records += self.lines.len() as u64;
                    st.appended_bytes += bytes;
                    st.group_writes += 1;
                    if self.shared.options.fsync {
                        st.fsyncs += 1;
                    }
                    st.durable_count()
                };
                self.shared.wake.send_replace(count);
                for w in self.waiters.drain(..) {
                    let _ = w.send(Ok(()));
                }
            }
            Err(e) => {
                let message = e.to_string();
                tracing::error!(error = %message, "journal: a group write failed; appends are refused from now on");
                let kind = match &e {
                    JournalError::Io { source, .. } => source.kind(),
                    _ => io::ErrorKind::Other,
                };
                for w in self.waiters.drain(..) {
                    let _ = w.send(Err(JournalError::Io {
                        what: "writing a group of records",
                        path: segment::segment_path(&self.shared.dir, self.seq),
                        source: io::Error::new(kind, message.clone()),
                    }));
                }
                self.fail(&e);
            }
        }
        self.lines.clear();
        self.buf.clear();
        if self.buf.capacity() > KEEP_BUF {
            self.buf = Vec::new();
        }
    }

    fn write_group(&mut self) -> Result<(), JournalError> {
        let path = || segment::segment_path(&self.shared.dir, self.seq);
        self.file
            .write_all(&self.buf)
            .map_err(|e| io_err("writing records", &path())(e))?;
        if self.shared.options.fsync {
            if let Some(s) = &self.spinner {
                s.syncing();
            }
            let synced = self.file.sync_data();
            if let Some(s) = &self.spinner {
                s.syncing();
            }
            synced.map_err(|e| io_err("fsyncing records", &path())(e))?;
            #[cfg(test)]
            super::probe::record(
                &self.shared.dir,
                super::probe::Event::Synced {
                    seq: self.seq,
                    len: self.len + self.buf.len() as u64,
                },
            );
        }
        Ok(())
    }

    /// Starts the next segment (the current one is durable: `flush` came
    /// first).
    fn rotate(&mut self) -> Result<(), JournalError> {
        let seq = self.seq + 1;
        self.file = segment::create_segment(&self.shared.dir, seq, self.shared.options.fsync)?;
        self.seq = seq;
        self.len = HEADER_LEN;
        self.shared.lock().files.push_back(seq);
        Ok(())
    }

    fn fail(&mut self, e: &JournalError) {
        if self.failed.is_none() {
            self.failed = Some(format!("an earlier write failed: {e}"));
        }
    }
}
