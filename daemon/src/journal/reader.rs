//! The in-memory index of durable, unsynced records, and reservations.
//!
//! Every durable record not yet behind the read point has an [`Entry`]
//! (where its line is, whether it is done), numbered by a global index that
//! grows by one per record. Records below `frontier` have been handed out
//! at least once; those of expired reservations are `requeued` and handed
//! out again before anything past the frontier. Syncing a reservation marks
//! its entries done, and the done prefix is dropped: the read point is the
//! first entry left (or the durable end when none is).
//!
//! Everything here is plain data under the journal's mutex; the blocking
//! file reads are in [`read_plan`], run off the async workers.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use tokio::time::Instant;

use super::segment::{self, Pos, io_err};
use super::{JournalError, Record, record};

/// One durable record not yet behind the read point.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    /// Where its line starts in its segment.
    pub off: u64,
    /// Its line's length, newline included.
    pub len: u32,
    /// Synced, or found damaged when read: never handed out again.
    pub done: bool,
}

/// One record to read for a reservation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlanItem {
    /// Its global index.
    pub index: u64,
    /// Its segment.
    pub seq: u64,
    /// Where its line starts.
    pub off: u64,
    /// Its line's length, newline included.
    pub len: u32,
}

/// A reservation: index ranges, a deadline, and its records once read.
#[derive(Debug)]
struct Reservation {
    ranges: Vec<(u64, u64)>,
    deadline: Instant,
    records: Option<Arc<Vec<Record>>>,
}

/// What [`State::sync`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Synced {
    /// The token was unknown (never issued, already synced, or expired and
    /// collected).
    Unknown,
    /// The reservation had expired: its records are readable again.
    Expired,
    /// Done; whether the read point moved.
    Done { moved: bool },
}

/// Whether something is readable, and if not, until when nothing will be
/// (short of new appends).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Readiness {
    /// `reserve` may find something now.
    Now,
    /// Nothing until new appends or this deadline (a reservation expiring),
    /// if any.
    Wait(Option<Instant>),
}

/// The journal's index and reservations.
#[derive(Debug)]
pub(crate) struct State {
    /// Entries from global index `base` on.
    entries: VecDeque<Entry>,
    /// The global index of `entries[0]`.
    base: u64,
    /// `(segment, global index of its first entry)`, in order; covers every
    /// entry.
    segs: VecDeque<(u64, u64)>,
    /// Below this, records have been handed out at least once.
    frontier: u64,
    /// Ranges of expired reservations, readable again: start → end.
    requeued: BTreeMap<u64, u64>,
    reservations: HashMap<u64, Reservation>,
    deadlines: BTreeSet<(Instant, u64)>,
    next_token: u64,
    /// The end of the durable records.
    pub durable: Pos,
    /// Segment files present, oldest first.
    pub files: VecDeque<u64>,
    /// Entries not done, and their bytes.
    pub backlog_records: u64,
    /// See `backlog_records`.
    pub backlog_bytes: u64,
    /// Counters for [`super::JournalStats`].
    pub appended_records: u64,
    /// See `appended_records`.
    pub appended_bytes: u64,
    /// See `appended_records`.
    pub fsyncs: u64,
    /// See `appended_records`.
    pub group_writes: u64,
    /// See `appended_records`.
    pub damaged_records: u64,
    /// See `appended_records`.
    pub expired_reservations: u64,
}

impl State {
    /// An index whose read point and durable end are `durable`, holding no
    /// records; `files` are the segments present.
    pub(crate) fn new(durable: Pos, files: VecDeque<u64>) -> Self {
        State {
            entries: VecDeque::new(),
            base: 0,
            segs: VecDeque::new(),
            frontier: 0,
            requeued: BTreeMap::new(),
            reservations: HashMap::new(),
            deadlines: BTreeSet::new(),
            next_token: 1,
            durable,
            files,
            backlog_records: 0,
            backlog_bytes: 0,
            appended_records: 0,
            appended_bytes: 0,
            fsyncs: 0,
            group_writes: 0,
            damaged_records: 0,
            expired_reservations: 0,
        }
    }

    /// The number of durable records since open (the global index past the
    /// last one).
    pub(crate) fn durable_count(&self) -> u64 {
        self.base + self.entries.len() as u64
    }

    /// Adds a durable record of segment `seq` (the writer calls this after
    /// the fsync; recovery for what it found).
    pub(crate) fn push(&mut self, seq: u64, off: u64, len: u32) {
        if self.segs.back().is_none_or(|&(s, _)| s != seq) {
            self.segs.push_back((seq, self.durable_count()));
        }
        self.entries.push_back(Entry {
            off,
            len,
            done: false,
        });
        self.backlog_records += 1;
        self.backlog_bytes += u64::from(len);
    }

    fn seq_of(&self, index: u64) -> u64 {
        let i = self.segs.partition_point(|&(_, first)| first <= index);
        self.segs[i - 1].0
    }

    fn entry_mut(&mut self, index: u64) -> Option<&mut Entry> {
        let i = index.checked_sub(self.base)?;
        self.entries.get_mut(usize::try_from(i).ok()?)
    }

    /// The position of the first record not synced, or the durable end.
    pub(crate) fn read_point(&self) -> Pos {
        match self.entries.front() {
            Some(e) => Pos {
                seq: self.seq_of(self.base),
                off: e.off,
            },
            None => self.durable,
        }
    }

    /// The number of records under a live or expired reservation.
    pub(crate) fn reserved_records(&self) -> u64 {
        self.reservations
            .values()
            .flat_map(|r| &r.ranges)
            .map(|&(s, e)| e - s)
            .sum()
    }

    /// The number of reservations not synced (live, or expired and not yet
    /// collected).
    pub(crate) fn reservations(&self) -> usize {
        self.reservations.len()
    }

    /// Makes the reservations whose deadline is at or before `now` readable
    /// again; their tokens become unknown.
    pub(crate) fn expire(&mut self, now: Instant) -> usize {
        let mut n = 0;
        while let Some(&(deadline, id)) = self.deadlines.first()
            && deadline <= now
        {
            self.deadlines.pop_first();
            self.requeue(id);
            n += 1;
        }
        self.expired_reservations += n as u64;
        n
    }

    /// Removes a reservation and makes its records readable again.
    fn requeue(&mut self, id: u64) -> bool {
        let Some(r) = self.reservations.remove(&id) else {
            return false;
        };
        self.deadlines.remove(&(r.deadline, id));
        // Only the runs of entries not done (found damaged when read) come
        // back, so that nothing readable-looking is empty.
        for (start, end) in r.ranges {
            let mut run = None;
            for index in start.max(self.base)..end {
                let done = self.entry_mut(index).is_none_or(|e| e.done);
                match (done, run) {
                    (false, None) => run = Some(index),
                    (true, Some(from)) => {
                        self.requeued.insert(from, index);
                        run = None;
                    }
                    _ => {}
                }
            }
            if let Some(from) = run {
                self.requeued.insert(from, end);
            }
        }
        true
    }

    /// Whether `reserve` may find something at `now`.
    pub(crate) fn readiness(&self, now: Instant) -> Readiness {
        if !self.requeued.is_empty() || self.frontier < self.durable_count() {
            return Readiness::Now;
        }
        match self.deadlines.first() {
            Some(&(deadline, _)) if deadline <= now => Readiness::Now,
            first => Readiness::Wait(first.map(|&(deadline, _)| deadline)),
        }
    }

    /// Reserves up to `count` readable records until `deadline`: expired
    /// reservations' records first, then never handed out ones, oldest
    /// first. Returns the token and what to read, or `None`.
    pub(crate) fn reserve(
        &mut self,
        count: usize,
        now: Instant,
        deadline: Instant,
    ) -> Option<(u64, Vec<PlanItem>)> {
        self.expire(now);
        loop {
            let ranges = self.take(count as u64);
            if ranges.is_empty() {
                return None;
            }
            let mut plan = Vec::new();
            for &(start, end) in &ranges {
                for index in start.max(self.base)..end {
                    let e = self.entries[(index - self.base) as usize];
                    if !e.done {
                        plan.push(PlanItem {
                            index,
                            seq: self.seq_of(index),
                            off: e.off,
                            len: e.len,
                        });
                    }
                }
            }
            if plan.is_empty() {
                // Only done entries: nothing to hand out, look further.
                continue;
            }
            let id = self.next_token;
            self.next_token += 1;
            self.deadlines.insert((deadline, id));
            self.reservations.insert(
                id,
                Reservation {
                    ranges,
                    deadline,
                    records: None,
                },
            );
            return Some((id, plan));
        }
    }

    /// Takes up to `want` readable records: requeued ones first, then never
    /// handed out ones. Returns their index ranges.
    fn take(&mut self, mut want: u64) -> Vec<(u64, u64)> {
        let mut ranges = Vec::new();
        while want > 0
            && let Some((start, end)) = self.requeued.pop_first()
        {
            let take = want.min(end - start);
            if start + take < end {
                self.requeued.insert(start + take, end);
            }
            ranges.push((start, start + take));
            want -= take;
        }
        let durable = self.durable_count();
        self.frontier = self.frontier.max(self.base);
        if want > 0 && self.frontier < durable {
            let take = want.min(durable - self.frontier);
            ranges.push((self.frontier, self.frontier + take));
            self.frontier += take;
        }
        ranges
    }

    /// Stores the records read for reservation `id`, and marks `damaged`
    /// entries (which failed to verify when read) done. Returns whether the
    /// reservation is still there, and the read point moved.
    pub(crate) fn loaded(
        &mut self,
        id: u64,
        records: Vec<Record>,
        damaged: &[u64],
    ) -> (bool, bool) {
        let before = self.read_point();
        for &index in damaged {
            self.mark_done(index);
        }
        self.damaged_records += damaged.len() as u64;
        self.trim();
        let moved = self.read_point() != before;
        match self.reservations.get_mut(&id) {
            Some(r) => {
                r.records = Some(Arc::new(records));
                (true, moved)
            }
            None => (false, moved),
        }
    }

    /// Gives up reservation `id` (its reserve failed or was cancelled): its
    /// records are readable again at once.
    pub(crate) fn release(&mut self, id: u64) -> bool {
        self.requeue(id)
    }

    /// The records of live reservation `id`.
    pub(crate) fn records(&self, id: u64, now: Instant) -> Option<Arc<Vec<Record>>> {
        let r = self.reservations.get(&id)?;
        if r.deadline <= now {
            return None;
        }
        r.records.clone()
    }

    /// Marks reservation `id` consumed, if it is live at `now`.
    pub(crate) fn sync(&mut self, id: u64, now: Instant) -> Synced {
        let Some(r) = self.reservations.get(&id) else {
            return Synced::Unknown;
        };
        if r.deadline <= now {
            self.requeue(id);
            self.expired_reservations += 1;
            return Synced::Expired;
        }
        let Some(r) = self.reservations.remove(&id) else {
            return Synced::Unknown;
        };
        self.deadlines.remove(&(r.deadline, id));
        let before = self.read_point();
        for (start, end) in r.ranges {
            for index in start..end {
                self.mark_done(index);
            }
        }
        self.trim();
        Synced::Done {
            moved: self.read_point() != before,
        }
    }

    fn mark_done(&mut self, index: u64) {
        if let Some(e) = self.entry_mut(index)
            && !e.done
        {
            e.done = true;
            let len = u64::from(e.len);
            self.backlog_records -= 1;
            self.backlog_bytes -= len;
        }
    }

    /// Drops the done prefix.
    fn trim(&mut self) {
        while self.entries.front().is_some_and(|e| e.done) {
            self.entries.pop_front();
            self.base += 1;
        }
        while self.segs.len() > 1 && self.segs[1].1 <= self.base {
            self.segs.pop_front();
        }
        if self.entries.is_empty() {
            self.segs.clear();
        }
        self.frontier = self.frontier.max(self.base);
        // Requeued ranges wholly behind the read point hold only done
        // (damaged) entries.
        while let Some((&start, &end)) = self.requeued.first_key_value()
            && start < self.base
        {
            self.requeued.pop_first();
            if end > self.base {
                self.requeued.insert(self.base, end);
            }
        }
    }
}

/// Reads and verifies the records of a plan, in plan order: one read per
/// run of adjacent lines. Returns the records and the indexes of lines that
/// no longer verify (logged).
pub(crate) fn read_plan(
    dir: &Path,
    plan: &[PlanItem],
) -> Result<(Vec<Record>, Vec<u64>), JournalError> {
    let mut records = Vec::with_capacity(plan.len());
    let mut damaged = Vec::new();
    let mut buf = Vec::new();
    let mut file: Option<(u64, File)> = None;
    let mut i = 0;
    while i < plan.len() {
        let first = plan[i];
        // The run of lines adjacent to `first` in the same segment.
        let mut j = i + 1;
        let mut end = first.off + u64::from(first.len);
        while j < plan.len() && plan[j].seq == first.seq && plan[j].off == end {
            end += u64::from(plan[j].len);
            j += 1;
        }
        let path = segment::segment_path(dir, first.seq);
        if file.as_ref().is_none_or(|(seq, _)| *seq != first.seq) {
            let f = File::open(&path).map_err(io_err("opening a segment to read", &path))?;
            file = Some((first.seq, f));
        }
        let Some((_, f)) = &file else { unreachable!() };
        buf.resize((end - first.off) as usize, 0);
        f.read_exact_at(&mut buf, first.off)
            .map_err(io_err("reading records", &path))?;
        let mut at = 0usize;
        for item in &plan[i..j] {
            let line = &buf[at..at + item.len as usize];
            at += item.len as usize;
            match line
                .strip_suffix(b"\n")
                .ok_or("no newline")
                .and_then(record::decode_line)
            {
                Ok(r) => records.push(r),
                Err(reason) => {
                    tracing::warn!(
                        segment = %path.display(),
                        offset = item.off,
                        reason,
                        "journal: a record no longer verifies; skipped"
                    );
                    damaged.push(item.index);
                }
            }
        }
        i = j;
    }
    Ok((records, damaged))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn state(n: u64) -> State {
        let mut s = State::new(Pos { seq: 1, off: 19 }, VecDeque::from([1]));
        for i in 0..n {
            s.push(1, 19 + 10 * i, 10);
        }
        s.durable = Pos {
            seq: 1,
            off: 19 + 10 * n,
        };
        s
    }

    fn indexes(plan: &[PlanItem]) -> Vec<u64> {
        plan.iter().map(|p| p.index).collect()
    }

    #[test]
    fn reserve_in_order_with_limits() {
        let now = Instant::now();
        let later = now + Duration::from_secs(60);
        let mut s = state(5);
        let (a, plan) = s.reserve(2, now, later).unwrap();
        assert_eq!(indexes(&plan), [0, 1]);
        let (_, plan) = s.reserve(10, now, later).unwrap();
        assert_eq!(indexes(&plan), [2, 3, 4]);
        assert!(s.reserve(1, now, later).is_none());
        assert_eq!(s.readiness(now), Readiness::Wait(Some(later)));
        assert_eq!(s.sync(a, now), Synced::Done { moved: true });
        assert_eq!(s.read_point(), Pos { seq: 1, off: 39 });
        assert_eq!(s.sync(a, now), Synced::Unknown);
    }

    #[test]
    fn expired_first_then_new() {
        let now = Instant::now();
        let soon = now + Duration::from_millis(5);
        let later = now + Duration::from_secs(60);
        let mut s = state(4);
        let (a, _) = s.reserve(2, now, soon).unwrap();
        assert_eq!(s.readiness(now), Readiness::Now);
        let (_, plan) = s.reserve(1, now, later).unwrap();
        assert_eq!(indexes(&plan), [2]);
        // After the deadline, a's records come first.
        let (_, plan) = s.reserve(3, soon, later).unwrap();
        assert_eq!(indexes(&plan), [0, 1, 3]);
        assert_eq!(s.sync(a, soon), Synced::Unknown);
    }

    #[test]
    fn sync_of_expired_token_requeues() {
        let now = Instant::now();
        let soon = now + Duration::from_millis(5);
        let mut s = state(2);
        let (a, _) = s.reserve(2, now, soon).unwrap();
        assert_eq!(s.readiness(now), Readiness::Wait(Some(soon)));
        assert_eq!(s.sync(a, soon), Synced::Expired);
        assert_eq!(s.expired_reservations, 1);
        assert_eq!(s.readiness(soon), Readiness::Now);
        assert_eq!(s.backlog_records, 2);
        // Found expired once: a second sync knows nothing of it.
        assert_eq!(s.sync(a, soon), Synced::Unknown);
        assert_eq!(s.expired_reservations, 1);
    }

    #[test]
    fn read_point_follows_the_contiguous_synced_prefix() {
        let now = Instant::now();
        let later = now + Duration::from_secs(60);
        let mut s = state(6);
        let (a, _) = s.reserve(2, now, later).unwrap();
        let (b, _) = s.reserve(2, now, later).unwrap();
        let (c, _) = s.reserve(2, now, later).unwrap();
        assert_eq!((s.backlog_records, s.backlog_bytes), (6, 60));
        assert_eq!(s.sync(b, now), Synced::Done { moved: false });
        assert_eq!(s.read_point(), Pos { seq: 1, off: 19 });
        assert_eq!((s.backlog_records, s.backlog_bytes), (4, 40));
        assert_eq!(s.sync(a, now), Synced::Done { moved: true });
        assert_eq!(s.read_point(), Pos { seq: 1, off: 59 });
        assert_eq!(s.sync(c, now), Synced::Done { moved: true });
        assert_eq!(s.read_point(), s.durable);
        assert_eq!((s.backlog_records, s.backlog_bytes), (0, 0));
    }

    #[test]
    fn segments_of_entries() {
        let now = Instant::now();
        let later = now + Duration::from_secs(60);
        let mut s = State::new(Pos { seq: 3, off: 19 }, VecDeque::from([3, 4]));
        s.push(3, 19, 10);
        s.push(4, 19, 10);
        s.push(4, 29, 10);
        let (a, plan) = s.reserve(2, now, later).unwrap();
        assert_eq!(
            plan.iter().map(|p| (p.seq, p.off)).collect::<Vec<_>>(),
            [(3, 19), (4, 19)]
        );
        s.sync(a, now);
        assert_eq!(s.read_point(), Pos { seq: 4, off: 29 });
        // Segment 3 is behind the read point: only segment 4 is kept.
        assert_eq!(s.segs, [(4, 1)]);
    }

    #[test]
    fn released_and_damaged() {
        let now = Instant::now();
        let later = now + Duration::from_secs(60);
        let mut s = state(3);
        let (a, _) = s.reserve(3, now, later).unwrap();
        assert!(s.release(a));
        let (b, plan) = s.reserve(3, now, later).unwrap();
        assert_eq!(indexes(&plan), [0, 1, 2]);
        assert_eq!(s.loaded(b, vec![], &[0]), (true, true));
        assert_eq!(s.damaged_records, 1);
        assert!(s.release(b));
        let (_, plan) = s.reserve(3, now, later).unwrap();
        assert_eq!(indexes(&plan), [1, 2]);
    }

    /// Records found damaged by a reservation that expired while it read
    /// them are done all the same: a requeued run is cut to what is left
    /// of it past the read point, or dropped when nothing is.
    #[test]
    fn damage_found_after_expiry_cuts_the_requeued_run() {
        let now = Instant::now();
        let soon = now + Duration::from_millis(5);
        let later = now + Duration::from_secs(60);
        let mut s = state(5);
        let (a, plan) = s.reserve(4, now, soon).unwrap();
        assert_eq!(indexes(&plan), [0, 1, 2, 3]);
        assert_eq!(s.expire(soon), 1);
        assert_eq!(s.loaded(a, vec![], &[0, 1]), (false, true));
        assert_eq!(s.read_point(), Pos { seq: 1, off: 39 });
        let (_, plan) = s.reserve(10, soon, later).unwrap();
        assert_eq!(indexes(&plan), [2, 3, 4]);

        let mut s = state(2);
        let (a, _) = s.reserve(2, now, soon).unwrap();
        assert_eq!(s.expire(soon), 1);
        assert_eq!(s.loaded(a, vec![], &[0, 1]), (false, true));
        assert_eq!(s.readiness(soon), Readiness::Wait(None));
        assert!(s.reserve(10, soon, later).is_none());
    }

    /// One read per run of adjacent lines: a plan with a gap is read as
    /// two runs, each line decoded where it lies, and a line that no
    /// longer verifies is reported by its index while the others are read.
    #[test]
    fn read_plan_reads_each_line_where_it_lies() {
        let dir = tempfile::tempdir().unwrap();
        let rec = |i: u8| Record {
            id: format!("id{i}"),
            jobtype: "t".into(),
            priority: i32::from(i),
            run_at: None,
            data: vec![b'x'; usize::from(i) * 3],
            tags: Vec::new(),
            trace: None,
            unique: None,
            repeat: None,
            depends_on: Vec::new(),
            on_dependency_failure: Default::default(),
            with_outputs: false,
        };
        let mut file = vec![0u8; 19];
        let mut plan = Vec::new();
        for i in 0..4 {
            let off = file.len() as u64;
            let len = record::encode_into(&rec(i), &mut file).unwrap();
            let len = u32::try_from(len).unwrap();
            plan.push(PlanItem {
                index: u64::from(i),
                seq: 1,
                off,
                len,
            });
        }
        let path = segment::segment_path(dir.path(), 1);
        std::fs::write(&path, &file).unwrap();
        let gap = [plan[0], plan[1], plan[3]];
        let (records, damaged) = read_plan(dir.path(), &gap).unwrap();
        assert_eq!(records, [rec(0), rec(1), rec(3)]);
        assert!(damaged.is_empty());
        // A payload byte of line 1 changes: its checksum no longer holds.
        let at = plan[1].off + u64::from(plan[1].len) - 2;
        file[at as usize] ^= 0x01;
        std::fs::write(&path, &file).unwrap();
        let (records, damaged) = read_plan(dir.path(), &plan).unwrap();
        assert_eq!(records, [rec(0), rec(2), rec(3)]);
        assert_eq!(damaged, [1]);
    }

    /// A requeued run longer than a reserve's count is handed out in
    /// parts, in order; a reserve of nothing finds nothing.
    #[test]
    fn a_long_requeued_run_is_handed_out_in_parts() {
        let now = Instant::now();
        let later = now + Duration::from_secs(60);
        let mut s = state(5);
        assert!(s.reserve(0, now, later).is_none());
        let (a, _) = s.reserve(4, now, later).unwrap();
        assert!(s.release(a));
        assert!(s.reserve(0, now, later).is_none());
        let (_, plan) = s.reserve(2, now, later).unwrap();
        assert_eq!(indexes(&plan), [0, 1]);
        let (_, plan) = s.reserve(1, now, later).unwrap();
        assert_eq!(indexes(&plan), [2]);
        let (_, plan) = s.reserve(5, now, later).unwrap();
        assert_eq!(indexes(&plan), [3, 4]);
    }

    /// A reservation given back with a damaged record inside comes back
    /// as the runs around it, so a reserve of n hands out n records.
    #[test]
    fn requeued_runs_leave_out_damaged_entries() {
        let now = Instant::now();
        let later = now + Duration::from_secs(60);
        let mut s = state(6);
        let (a, plan) = s.reserve(4, now, later).unwrap();
        assert_eq!(indexes(&plan), [0, 1, 2, 3]);
        s.loaded(a, vec![], &[1]);
        assert!(s.release(a));
        let (_, plan) = s.reserve(3, now, later).unwrap();
        assert_eq!(indexes(&plan), [0, 2, 3]);
        let (_, plan) = s.reserve(3, now, later).unwrap();
        assert_eq!(indexes(&plan), [4, 5]);
    }

    #[test]
    fn damaged_entries_behind_a_live_reservation_are_not_readable() {
        let now = Instant::now();
        let later = now + Duration::from_secs(60);
        let mut s = state(3);
        let (_a, _) = s.reserve(1, now, later).unwrap();
        let (b, plan) = s.reserve(2, now, later).unwrap();
        assert_eq!(indexes(&plan), [1, 2]);
        // Both of b's records are found damaged when read; b is given back.
        s.loaded(b, vec![], &[1, 2]);
        assert!(s.release(b));
        assert_eq!(s.readiness(now), Readiness::Wait(Some(later)));
        assert!(s.reserve(10, now, later).is_none());
        assert_eq!(s.backlog_records, 1);
    }
}
