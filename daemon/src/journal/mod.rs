//! The local, append-only file journal.
//!
//! In-memory stand-in with the journal's API (no file, no durability),
//! replaced by the file journal.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// One job as journaled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Store job id.
    pub id: String,
    /// Store jobtype.
    pub jobtype: String,
    /// Priority.
    pub priority: i32,
    /// Epoch milliseconds.
    pub run_at: Option<i64>,
    /// Payload.
    pub data: Vec<u8>,
}

/// Options.
#[derive(Debug, Clone)]
pub struct JournalOptions {
    /// Directory.
    pub dir: PathBuf,
    /// Segment size.
    pub segment_size: u64,
    /// Fsync.
    pub fsync: bool,
}

impl JournalOptions {
    /// Defaults for `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        JournalOptions {
            dir: dir.into(),
            segment_size: 64 << 20,
            fsync: true,
        }
    }

    /// Segment size.
    pub fn segment_size(mut self, bytes: u64) -> Self {
        self.segment_size = bytes;
        self
    }

    /// Fsync.
    pub fn fsync(mut self, fsync: bool) -> Self {
        self.fsync = fsync;
        self
    }
}

/// A reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token(u64);

/// Errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// Closed.
    #[error("the journal is closed")]
    Closed,
    /// Stale token.
    #[error("stale token")]
    StaleToken,
}

/// Recovery report.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    /// Torn bytes.
    pub truncated_bytes: u64,
    /// Damaged records.
    pub damaged_records: u64,
    /// Pending records.
    pub pending_records: u64,
}

/// Stats.
#[derive(Debug, Clone, Default)]
pub struct JournalStats {
    /// Records appended.
    pub appended_records: u64,
    /// Bytes appended.
    pub appended_bytes: u64,
    /// Fsyncs.
    pub fsyncs: u64,
    /// Backlog records.
    pub backlog_records: u64,
    /// Backlog bytes.
    pub backlog_bytes: u64,
    /// Damaged records.
    pub damaged_records: u64,
    /// Segments.
    pub segments: u64,
}

#[derive(Debug, Default)]
struct State {
    records: BTreeMap<u64, Record>,
    next: u64,
    reserved: BTreeMap<u64, (Vec<u64>, Instant)>,
    taken: std::collections::HashSet<u64>,
    next_token: u64,
    closed: bool,
    stats: JournalStats,
}

/// The journal.
#[derive(Debug, Clone)]
pub struct Journal {
    state: Arc<Mutex<State>>,
    notify: Arc<Notify>,
    report: Arc<RecoveryReport>,
}

impl Journal {
    /// Opens.
    pub fn open(_options: JournalOptions) -> Result<Journal, JournalError> {
        Ok(Journal {
            state: Arc::default(),
            notify: Arc::default(),
            report: Arc::default(),
        })
    }

    /// Recovery report.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.report
    }

    /// Appends.
    pub async fn append(&self, records: Vec<Record>) -> Result<(), JournalError> {
        let mut s = self.state.lock().unwrap();
        if s.closed {
            return Err(JournalError::Closed);
        }
        for r in records {
            let n = s.next;
            s.next += 1;
            s.stats.appended_records += 1;
            s.stats.backlog_records += 1;
            s.records.insert(n, r);
        }
        drop(s);
        self.notify.notify_waiters();
        Ok(())
    }

    /// Reserves.
    pub async fn reserve(
        &self,
        count: usize,
        timeout: Duration,
    ) -> Result<Option<Token>, JournalError> {
        let mut s = self.state.lock().unwrap();
        let now = Instant::now();
        let expired: Vec<u64> = s
            .reserved
            .iter()
            .filter(|(_, (_, d))| *d <= now)
            .map(|(t, _)| *t)
            .collect();
        for t in expired {
            let (positions, _) = s.reserved.remove(&t).unwrap();
            for p in positions {
                s.taken.remove(&p);
            }
        }
        let picked: Vec<u64> = s
            .records
            .keys()
            .filter(|p| !s.taken.contains(p))
            .take(count)
            .copied()
            .collect();
        if picked.is_empty() {
            return Ok(None);
        }
        for p in &picked {
            s.taken.insert(*p);
        }
        s.next_token += 1;
        let t = s.next_token;
        s.reserved.insert(t, (picked, now + timeout));
        Ok(Some(Token(t)))
    }

    /// Waits until readable.
    pub async fn readable(&self) {
        let notified = self.notify.notified();
        {
            let s = self.state.lock().unwrap();
            if s.records.keys().any(|p| !s.taken.contains(p)) {
                return;
            }
        }
        tokio::select! {
            _ = notified => {}
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }

    /// Reads.
    pub fn read(&self, token: Token) -> Result<Vec<Record>, JournalError> {
        let s = self.state.lock().unwrap();
        let (positions, _) = s.reserved.get(&token.0).ok_or(JournalError::StaleToken)?;
        Ok(positions.iter().map(|p| s.records[p].clone()).collect())
    }

    /// Syncs.
    pub async fn sync(&self, token: Token) -> Result<bool, JournalError> {
        let mut s = self.state.lock().unwrap();
        let Some((positions, _)) = s.reserved.remove(&token.0) else {
            return Ok(false);
        };
        for p in positions {
            s.records.remove(&p);
            s.taken.remove(&p);
            s.stats.backlog_records -= 1;
        }
        Ok(true)
    }

    /// Stats.
    pub fn stats(&self) -> JournalStats {
        self.state.lock().unwrap().stats.clone()
    }

    /// Closes.
    pub async fn close(&self) -> Result<(), JournalError> {
        self.state.lock().unwrap().closed = true;
        Ok(())
    }
}
