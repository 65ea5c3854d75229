//! Tests of the journal as a whole: the API, restarts, and damage.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use tempfile::TempDir;

use super::segment::{self, HEADER_LEN};
use super::*;

const LONG: Duration = Duration::from_secs(600);

fn rec(i: usize) -> Record {
    Record {
        id: format!("job-{i}"),
        jobtype: format!("type-{}", i % 3),
        priority: i as i32 - 2,
        run_at: i.is_multiple_of(2).then_some(1_700_000_000_000 + i as i64),
        data: format!("payload {i}").into_bytes(),
        tags: Vec::new(),
        trace: trace_of(i),
        unique: None,
        repeat: None,
        depends_on: Vec::new(),
        on_dependency_failure: Default::default(),
        with_outputs: false,
    }
}

/// Every fourth record has a trace context, every eighth with a
/// tracestate holding the characters the journal escapes.
fn trace_of(i: usize) -> Option<jobstore_api::TraceContext> {
    (i % 4 == 3).then(|| {
        let parent = format!("00-4bf92f3577b34da6a3ce9290{i:08x}-00f067aa0ba902b7-01");
        let state = (i % 8 == 7).then_some("a=1|%7C%,\tb=x~z");
        jobstore_api::TraceContext::parse(&parent, state).unwrap()
    })
}

fn recs(range: std::ops::Range<usize>) -> Vec<Record> {
    range.map(rec).collect()
}

fn open(dir: &Path) -> Journal {
    Journal::open(JournalOptions::new(dir)).unwrap()
}

fn open_nosync(dir: &Path) -> Journal {
    Journal::open(JournalOptions::new(dir).fsync(false)).unwrap()
}

/// Reserves everything readable now and returns it, unsynced.
async fn take_all(j: &Journal) -> (Option<Token>, Vec<Record>) {
    match j.reserve(usize::MAX, LONG).await.unwrap() {
        Some(t) => (Some(t), j.read(t).unwrap()),
        None => (None, Vec::new()),
    }
}

/// Reserves, reads and syncs everything readable now.
async fn drain(j: &Journal) -> Vec<Record> {
    let mut all = Vec::new();
    while let Some(t) = j.reserve(7, LONG).await.unwrap() {
        all.extend(j.read(t).unwrap());
        assert!(j.sync(t).await.unwrap());
    }
    all
}

fn ids(records: &[Record]) -> Vec<String> {
    records.iter().map(|r| r.id.clone()).collect()
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jnl"))
        .collect();
    files.sort();
    files
}

#[tokio::test]
async fn append_reserve_read_sync_round_trip() {
    let dir = TempDir::new().unwrap();
    let j = open(dir.path());
    assert!(j.reserve(10, LONG).await.unwrap().is_none());
    j.append(recs(0..3)).await.unwrap();
    let stats = j.stats();
    assert_eq!(stats.appended_records, 3);
    assert_eq!(stats.backlog_records, 3);
    assert_eq!(stats.backlog_bytes, stats.appended_bytes);
    let t = j.reserve(10, LONG).await.unwrap().unwrap();
    assert_eq!(j.read(t).unwrap(), recs(0..3));
    assert_eq!(j.read(t).unwrap(), recs(0..3), "read is repeatable");
    assert_eq!(j.stats().reserved_records, 3);
    assert!(j.reserve(10, LONG).await.unwrap().is_none());
    assert!(j.sync(t).await.unwrap());
    assert!(!j.sync(t).await.unwrap(), "a second sync is a no-op");
    assert!(matches!(j.read(t), Err(JournalError::StaleToken)));
    let stats = j.stats();
    assert_eq!((stats.backlog_records, stats.backlog_bytes), (0, 0));
    assert_eq!(stats.reservations, 0);
    assert!(j.reserve(10, LONG).await.unwrap().is_none());
    // Nothing else (not even an empty append) reaches the disk.
    j.append(Vec::new()).await.unwrap();
    assert_eq!(j.stats().group_writes, 1);
}

#[tokio::test]
async fn order_is_journal_order_across_appends_and_reservations() {
    let dir = TempDir::new().unwrap();
    let j = open_nosync(dir.path());
    for chunk in [0..4, 4..5, 5..12] {
        j.append(recs(chunk)).await.unwrap();
    }
    let mut seen = Vec::new();
    for want in [1, 5, 2, 100] {
        let t = j.reserve(want, LONG).await.unwrap().unwrap();
        let got = j.read(t).unwrap();
        assert_eq!(got.len(), want.min(12 - seen.len()));
        seen.extend(got);
    }
    assert_eq!(seen, recs(0..12));
}

#[tokio::test]
async fn reserve_count_limits() {
    let dir = TempDir::new().unwrap();
    let j = open_nosync(dir.path());
    j.append(recs(0..10)).await.unwrap();
    assert!(j.reserve(0, LONG).await.unwrap().is_none());
    let a = j.reserve(3, LONG).await.unwrap().unwrap();
    assert_eq!(j.read(a).unwrap(), recs(0..3));
    let b = j.reserve(1, LONG).await.unwrap().unwrap();
    assert_eq!(j.read(b).unwrap(), recs(3..4));
    let c = j.reserve(100, LONG).await.unwrap().unwrap();
    assert_eq!(j.read(c).unwrap(), recs(4..10));
    assert!(j.reserve(1, LONG).await.unwrap().is_none());
    assert_eq!(j.stats().reserved_records, 10);
    assert_eq!(j.stats().reservations, 3);
}

#[tokio::test]
async fn expired_reservations_are_handed_out_again_first() {
    let dir = TempDir::new().unwrap();
    let j = open_nosync(dir.path());
    j.append(recs(0..6)).await.unwrap();
    let short = j
        .reserve(2, Duration::from_millis(50))
        .await
        .unwrap()
        .unwrap();
    let long = j.reserve(2, LONG).await.unwrap().unwrap();
    assert_eq!(j.read(long).unwrap(), recs(2..4));
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert!(matches!(j.read(short), Err(JournalError::StaleToken)));
    let again = j.reserve(3, LONG).await.unwrap().unwrap();
    // The expired records first, then the oldest never handed out.
    assert_eq!(ids(&j.read(again).unwrap()), ids(&[rec(0), rec(1), rec(4)]));
    assert!(
        !j.sync(short).await.unwrap(),
        "a stale token's sync is false"
    );
    assert!(j.sync(again).await.unwrap());
    assert!(j.sync(long).await.unwrap());
    let rest = j.reserve(10, LONG).await.unwrap().unwrap();
    assert_eq!(j.read(rest).unwrap(), recs(5..6));
    assert!(j.sync(rest).await.unwrap());
    assert_eq!(j.stats().backlog_records, 0);
    assert_eq!(j.stats().expired_reservations, 1);
}

#[tokio::test]
async fn sync_after_expiry_returns_false_and_records_come_back() {
    let dir = TempDir::new().unwrap();
    let j = open_nosync(dir.path());
    j.append(recs(0..2)).await.unwrap();
    let t = j
        .reserve(5, Duration::from_millis(30))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Nobody else touched the journal: sync itself notices the expiry.
    assert!(!j.sync(t).await.unwrap());
    assert_eq!(drain(&j).await, recs(0..2));
}

#[tokio::test]
async fn readable_wakes_on_append() {
    let dir = TempDir::new().unwrap();
    let j = open_nosync(dir.path());
    let waiter = tokio::spawn({
        let j = j.clone();
        async move { j.readable().await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiter.is_finished(), "nothing to read yet");
    j.append(recs(0..1)).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("readable() woke on append")
        .unwrap();
    // Readable stays true until reserved; then false.
    tokio::time::timeout(Duration::from_secs(1), j.readable())
        .await
        .unwrap();
    let t = j.reserve(10, LONG).await.unwrap().unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(50), j.readable())
            .await
            .is_err(),
        "everything is reserved"
    );
    assert!(j.sync(t).await.unwrap());
}

#[tokio::test]
async fn readable_wakes_on_expiry() {
    let dir = TempDir::new().unwrap();
    let j = open_nosync(dir.path());
    j.append(recs(0..1)).await.unwrap();
    let t = j
        .reserve(1, Duration::from_millis(500))
        .await
        .unwrap()
        .unwrap();
    let start = std::time::Instant::now();
    // Cancel-safe: a timed-out wait leaves nothing behind.
    assert!(
        tokio::time::timeout(Duration::from_millis(50), j.readable())
            .await
            .is_err()
    );
    tokio::time::timeout(Duration::from_secs(5), j.readable())
        .await
        .expect("readable() woke on expiry");
    assert!(start.elapsed() >= Duration::from_millis(400));
    let again = j.reserve(1, LONG).await.unwrap().unwrap();
    assert_eq!(j.read(again).unwrap(), recs(0..1));
    assert!(!j.sync(t).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_are_all_durable_and_read_exactly_once() {
    let dir = TempDir::new().unwrap();
    // Small segments, so rotation happens under concurrency too.
    let j = Journal::open(JournalOptions::new(dir.path()).segment_size(16 << 10)).unwrap();
    const TASKS: usize = 24;
    const CALLS: usize = 20;
    // Two ingest loops run while the appends are going on.
    let mut readers = Vec::new();
    for _ in 0..2 {
        let j = j.clone();
        readers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                match j.reserve(13, LONG).await {
                    Ok(Some(t)) => {
                        got.push(j.read(t).unwrap());
                        assert!(j.sync(t).await.unwrap());
                    }
                    Ok(None) => j.readable().await,
                    Err(JournalError::Closed) => return got,
                    Err(e) => panic!("{e}"),
                }
            }
        }));
    }
    let mut writers = Vec::new();
    for task in 0..TASKS {
        let j = j.clone();
        writers.push(tokio::spawn(async move {
            for call in 0..CALLS {
                let n = 1 + (task + call) % 4;
                let batch: Vec<Record> = (0..n)
                    .map(|k| Record {
                        id: format!("t{task}-c{call}-k{k}"),
                        jobtype: "t".into(),
                        priority: k as i32,
                        run_at: None,
                        data: vec![task as u8; call],
                        tags: Vec::new(),
                        trace: None,
                        unique: None,
                        repeat: None,
                        depends_on: Vec::new(),
                        on_dependency_failure: Default::default(),
                        with_outputs: false,
                    })
                    .collect();
                j.append(batch).await.unwrap();
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    // Wait for the readers to catch up, then stop them.
    while j.stats().backlog_records > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    j.close().await.unwrap();
    let mut batches = Vec::new();
    for r in readers {
        batches.extend(r.await.unwrap());
    }
    let all: Vec<&Record> = batches.iter().flatten().collect();
    let expected: usize = (0..TASKS)
        .flat_map(|t| (0..CALLS).map(move |c| 1 + (t + c) % 4))
        .sum();
    assert_eq!(all.len(), expected);
    let unique: HashSet<&str> = all.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(unique.len(), expected, "every record read exactly once");
    // Within a reservation (a contiguous stretch of the journal), each
    // task's records are in the order it appended them, and the records of
    // one call are adjacent.
    let parse = |r: &Record| {
        let (task, rest) = r.id.split_once("-c").unwrap();
        let (call, k) = rest.split_once("-k").unwrap();
        (
            task.to_owned(),
            call.parse::<usize>().unwrap(),
            k.parse::<usize>().unwrap(),
        )
    };
    for batch in &batches {
        let mut last: HashMap<String, (usize, usize)> = HashMap::new();
        for (pos, r) in batch.iter().enumerate() {
            let (task, call, k) = parse(r);
            if let Some(&prev) = last.get(&task) {
                assert!((call, k) > prev, "{} after {prev:?}", r.id);
            }
            if k > 0 && last.get(&task) == Some(&(call, k - 1)) {
                assert_eq!(parse(&batch[pos - 1]), (task.clone(), call, k - 1));
            }
            last.insert(task, (call, k));
        }
    }
    let stats = j.stats();
    assert_eq!(stats.appended_records, expected as u64);
    assert!(stats.segments >= 1);
    drop(j);
    // Everything was synced: nothing comes back.
    let j = open(dir.path());
    assert_eq!(j.recovery().records_pending, 0);
    assert!(take_all(&j).await.1.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_share_fsyncs() {
    let dir = TempDir::new().unwrap();
    let j = open(dir.path());
    const N: usize = 200;
    let barrier = Arc::new(tokio::sync::Barrier::new(N));
    let mut tasks = Vec::new();
    for i in 0..N {
        let j = j.clone();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            j.append(vec![rec(i)]).await.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let stats = j.stats();
    assert_eq!(stats.appended_records, N as u64);
    assert_eq!(stats.fsyncs, stats.group_writes);
    assert!(
        stats.fsyncs <= (N / 10) as u64,
        "{N} concurrent appends took {} fsyncs",
        stats.fsyncs
    );
    let mut got = ids(&take_all(&j).await.1);
    got.sort();
    let mut want = ids(&recs(0..N));
    want.sort();
    assert_eq!(got, want);
}

#[tokio::test]
async fn rotation_and_deletion_of_consumed_segments() {
    let dir = TempDir::new().unwrap();
    let j = Journal::open(JournalOptions::new(dir.path()).segment_size(200)).unwrap();
    for i in 0..20 {
        j.append(vec![rec(i)]).await.unwrap();
    }
    let segments = j.stats().segments;
    assert!(segments >= 5, "{segments} segments");
    assert_eq!(segment_files(dir.path()).len() as u64, segments);
    for file in segment_files(dir.path()) {
        let bytes = fs::read(&file).unwrap();
        assert!(bytes.starts_with(segment::HEADER));
        assert!(bytes.len() <= 200, "{}", bytes.len());
    }
    // One append's records stay together even when bigger than a segment.
    j.append(recs(20..30)).await.unwrap();
    // Consume the first half: the segments behind the read point go.
    let t = j.reserve(10, LONG).await.unwrap().unwrap();
    assert_eq!(j.read(t).unwrap(), recs(0..10));
    assert!(j.sync(t).await.unwrap());
    let left = segment_files(dir.path()).len();
    assert!(left < segments as usize, "{left} of {segments} left");
    assert_eq!(j.stats().segments, left as u64);
    assert_eq!(drain(&j).await, recs(10..30));
    assert_eq!(segment_files(dir.path()).len(), 1, "only the current one");
    assert_eq!(j.stats().segments, 1);
    drop(j);
    let j = open(dir.path());
    assert_eq!(j.recovery().records_pending, 0);
    assert_eq!(j.recovery().segments_deleted, 0);
    j.append(recs(30..31)).await.unwrap();
    assert_eq!(drain(&j).await, recs(30..31));
}

#[tokio::test]
async fn read_point_survives_close_and_reopen() {
    let dir = TempDir::new().unwrap();
    let j = Journal::open(JournalOptions::new(dir.path()).segment_size(300)).unwrap();
    j.append(recs(0..4)).await.unwrap();
    j.append(recs(4..10)).await.unwrap();
    let a = j.reserve(3, LONG).await.unwrap().unwrap();
    let b = j.reserve(3, LONG).await.unwrap().unwrap();
    let c = j.reserve(2, LONG).await.unwrap().unwrap();
    assert!(j.sync(a).await.unwrap());
    assert!(j.sync(b).await.unwrap());
    assert_eq!(j.read(c).unwrap(), recs(6..8));
    j.close().await.unwrap();
    drop(j);
    let j = open(dir.path());
    let report = j.recovery();
    assert_eq!(report.cursor, CursorStatus::Valid);
    assert_eq!(report.records_pending, 4);
    assert_eq!(report.damaged_records, 0);
    assert_eq!(report.torn_tail_bytes, 0);
    // The synced records never return; the reserved-but-unsynced and the
    // unreserved ones do, in order.
    assert_eq!(drain(&j).await, recs(6..10));
    drop(j);
    let j = open(dir.path());
    assert_eq!(j.recovery().records_pending, 0);
    assert!(take_all(&j).await.1.is_empty());
}

#[tokio::test]
async fn out_of_order_syncs_persist_only_the_contiguous_prefix() {
    let dir = TempDir::new().unwrap();
    let j = open(dir.path());
    j.append(recs(0..6)).await.unwrap();
    let a = j.reserve(2, LONG).await.unwrap().unwrap();
    let b = j.reserve(2, LONG).await.unwrap().unwrap();
    assert!(j.sync(b).await.unwrap());
    // b's records are not handed out again while the journal is open.
    let c = j.reserve(10, LONG).await.unwrap().unwrap();
    assert_eq!(j.read(c).unwrap(), recs(4..6));
    assert!(j.sync(c).await.unwrap());
    drop(j);
    // After a restart, a (never synced) and everything after it return:
    // b and c are replayed, which adds tolerate.
    let j = open(dir.path());
    assert_eq!(take_all(&j).await.1, recs(0..6));
    let _ = a;
}

#[tokio::test]
async fn close_then_append_fails_and_close_is_idempotent() {
    let dir = TempDir::new().unwrap();
    let j = open(dir.path());
    j.append(recs(0..3)).await.unwrap();
    let t = j.reserve(2, LONG).await.unwrap().unwrap();
    j.close().await.unwrap();
    j.close().await.unwrap();
    assert!(matches!(
        j.append(recs(3..4)).await,
        Err(JournalError::Closed)
    ));
    assert!(matches!(
        j.reserve(1, LONG).await,
        Err(JournalError::Closed)
    ));
    tokio::time::timeout(Duration::from_secs(1), j.readable())
        .await
        .expect("readable() resolves once closed");
    // A reservation made before close can still be finished.
    assert_eq!(j.read(t).unwrap(), recs(0..2));
    assert!(j.sync(t).await.unwrap());
    drop(j);
    let j = open(dir.path());
    assert_eq!(take_all(&j).await.1, recs(2..3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_flushes_appends_in_flight() {
    let dir = TempDir::new().unwrap();
    let j = open(dir.path());
    let mut tasks = Vec::new();
    for i in 0..50 {
        let j = j.clone();
        tasks.push(tokio::spawn(
            async move { (i, j.append(vec![rec(i)]).await) },
        ));
    }
    tokio::task::yield_now().await;
    j.close().await.unwrap();
    let mut acked = Vec::new();
    for t in tasks {
        let (i, result) = t.await.unwrap();
        match result {
            Ok(()) => acked.push(rec(i).id),
            Err(JournalError::Closed) => {}
            Err(e) => panic!("{e}"),
        }
    }
    drop(j);
    let j = open(dir.path());
    let got = ids(&take_all(&j).await.1);
    for id in &acked {
        assert!(got.contains(id), "acknowledged {id} is missing");
    }
}

#[tokio::test]
async fn appends_continue_after_reopen() {
    let dir = TempDir::new().unwrap();
    let j = open(dir.path());
    j.append(recs(0..3)).await.unwrap();
    drop(j); // no close: like a crash after the acknowledgement
    let j = open(dir.path());
    assert_eq!(j.recovery().records_pending, 3);
    j.append(recs(3..5)).await.unwrap();
    assert_eq!(drain(&j).await, recs(0..5));
    assert_eq!(segment_files(dir.path()).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_records_are_on_disk_at_once() {
    // What is on disk when append returns is what survives `kill -9`:
    // copy the files while other appends are in flight and open the copy.
    let dir = TempDir::new().unwrap();
    let j = Journal::open(JournalOptions::new(dir.path()).segment_size(4096)).unwrap();
    let busy = {
        let j = j.clone();
        tokio::spawn(async move {
            for i in 1000..1400 {
                j.append(vec![rec(i)]).await.unwrap();
            }
        })
    };
    let mut acked = Vec::new();
    for round in 0..5 {
        j.append(recs(round * 10..round * 10 + 10)).await.unwrap();
        acked.extend(recs(round * 10..round * 10 + 10));
        let copy = TempDir::new().unwrap();
        for file in fs::read_dir(dir.path()).unwrap() {
            let file = file.unwrap().path();
            let name = file.file_name().unwrap();
            if name != "lock" {
                // A segment may vanish (consumed) or grow meanwhile.
                let _ = fs::copy(&file, copy.path().join(name));
            }
        }
        let c = open_nosync(copy.path());
        assert_eq!(c.recovery().damaged_records, 0);
        let got = take_all(&c).await.1;
        let mine: Vec<Record> = got
            .into_iter()
            .filter(|r| r.id.len() < "job-1000".len())
            .collect();
        assert_eq!(mine, acked);
    }
    busy.await.unwrap();
}

#[tokio::test]
async fn payloads_of_every_kind_round_trip() {
    let dir = TempDir::new().unwrap();
    let j = open(dir.path());
    let payloads: Vec<Vec<u8>> = vec![
        (0..=255u8).collect(),
        b"line one\nline two\r\nthree\\n\\\\".to_vec(),
        b"\xff\xfe\x80 not utf-8 \xc3".to_vec(),
        Vec::new(),
        b"|||".to_vec(),
        "ünïcödé ✓ 𝄞".as_bytes().to_vec(),
        (0..1u32 << 20).map(|i| (i % 256) as u8).collect(),
        vec![b'\n'; 1000],
    ];
    let records: Vec<Record> = payloads
        .into_iter()
        .enumerate()
        .map(|(i, data)| Record {
            id: format!("p{i}"),
            jobtype: "bytes".into(),
            priority: i32::MIN + i as i32,
            run_at: Some(i64::MAX - i as i64),
            data,
            tags: Vec::new(),
            trace: None,
            unique: None,
            repeat: None,
            depends_on: Vec::new(),
            on_dependency_failure: Default::default(),
            with_outputs: false,
        })
        .collect();
    j.append(records.clone()).await.unwrap();
    assert_eq!(take_all(&j).await.1, records);
    drop(j);
    let j = open(dir.path());
    assert_eq!(j.recovery().damaged_records, 0);
    assert_eq!(take_all(&j).await.1, records);
}

#[tokio::test]
async fn invalid_records_are_refused_whole() {
    let dir = TempDir::new().unwrap();
    let j = open(dir.path());
    for (id, jobtype) in [
        ("a|b", "t"),
        ("a", "t\n"),
        ("", "t"),
        ("a", ""),
        ("a\r", "t"),
    ] {
        let bad = Record {
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
        let err = j.append(vec![rec(0), bad]).await.unwrap_err();
        assert!(matches!(err, JournalError::InvalidRecord { .. }), "{err}");
    }
    assert_eq!(j.stats().appended_records, 0, "nothing of a refused call");
    j.append(recs(0..1)).await.unwrap();
    assert_eq!(take_all(&j).await.1, recs(0..1));
}

#[tokio::test]
async fn a_directory_is_opened_once() {
    let dir = TempDir::new().unwrap();
    let j = open(dir.path());
    assert!(matches!(
        Journal::open(JournalOptions::new(dir.path())),
        Err(JournalError::Locked { .. })
    ));
    let clone = j.clone();
    drop(j);
    assert!(matches!(
        Journal::open(JournalOptions::new(dir.path())),
        Err(JournalError::Locked { .. })
    ));
    drop(clone);
    let _ = open(dir.path());
}

#[tokio::test]
async fn tokens_of_another_journal_are_stale() {
    let (d1, d2) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let (j1, j2) = (open_nosync(d1.path()), open_nosync(d2.path()));
    j1.append(recs(0..1)).await.unwrap();
    j2.append(recs(0..1)).await.unwrap();
    let t1 = j1.reserve(1, LONG).await.unwrap().unwrap();
    let _t2 = j2.reserve(1, LONG).await.unwrap().unwrap();
    assert!(matches!(j2.read(t1), Err(JournalError::StaleToken)));
    assert!(!j2.sync(t1).await.unwrap());
    assert!(j1.sync(t1).await.unwrap());
}

#[tokio::test]
async fn a_damaged_cursor_replays_from_the_oldest_segment() {
    let dir = TempDir::new().unwrap();
    let j = open(dir.path());
    j.append(recs(0..5)).await.unwrap();
    let t = j.reserve(3, LONG).await.unwrap().unwrap();
    assert!(j.sync(t).await.unwrap());
    drop(j);
    fs::write(
        dir.path().join(segment::CURSOR),
        b"jobstore-cursor 1 1 9 00000000\n",
    )
    .unwrap();
    let j = open(dir.path());
    assert!(matches!(j.recovery().cursor, CursorStatus::Damaged { .. }));
    assert_eq!(drain(&j).await, recs(0..5), "replayed, not lost");
    drop(j);
    let j = open(dir.path());
    assert_eq!(j.recovery().cursor, CursorStatus::Valid);
    assert!(take_all(&j).await.1.is_empty());
}

#[tokio::test]
async fn damage_in_the_middle_is_skipped_and_counted() {
    let dir = TempDir::new().unwrap();
    let j = open(dir.path());
    j.append(recs(0..5)).await.unwrap();
    drop(j);
    let path = &segment_files(dir.path())[0];
    let mut bytes = fs::read(path).unwrap();
    let lines = line_spans(&bytes);
    // Damage the payload of record 2 and the checksum of record 3.
    bytes[lines[2].1 - 3] ^= 0x01;
    bytes[lines[3].0] = b'z';
    fs::write(path, &bytes).unwrap();
    let j = open(dir.path());
    assert_eq!(j.recovery().damaged_records, 2);
    assert_eq!(j.recovery().torn_tail_bytes, 0);
    assert_eq!(j.stats().damaged_records, 2);
    assert_eq!(
        take_all(&j).await.1,
        vec![rec(0), rec(1), rec(4)],
        "the damaged records are never returned"
    );
}

/// A journal written by the version before trace contexts (lines as it
/// wrote them: no `~` in any jobtype field) replays whole, each record
/// without a trace context; records appended after it keep theirs.
#[tokio::test]
async fn a_journal_of_the_previous_version_replays() {
    let dir = TempDir::new().unwrap();
    let old = concat!(
        "jobstore-journal 1\n",
        "32cffc22 24 job-a|acme-mail|5||hello\n",
        "748874a9 71 job-b|acme-mail#eu,vip|-3|1700000000000|line\\nwith \\\\ escapes \\xff|pipe\n",
    );
    fs::write(segment::segment_path(dir.path(), 1), old).unwrap();
    let j = open(dir.path());
    assert_eq!(j.recovery().damaged_records, 0);
    assert_eq!(j.recovery().torn_tail_bytes, 0);
    j.append(recs(3..4)).await.unwrap();
    let want = vec![
        Record {
            id: "job-a".into(),
            jobtype: "acme-mail".into(),
            priority: 5,
            run_at: None,
            data: b"hello".to_vec(),
            tags: Vec::new(),
            trace: None,
            unique: None,
            repeat: None,
            depends_on: Vec::new(),
            on_dependency_failure: Default::default(),
            with_outputs: false,
        },
        Record {
            id: "job-b".into(),
            jobtype: "acme-mail".into(),
            priority: -3,
            run_at: Some(1_700_000_000_000),
            data: b"line\nwith \\ escapes \xff|pipe".to_vec(),
            tags: vec!["eu".into(), "vip".into()],
            trace: None,
            unique: None,
            repeat: None,
            depends_on: Vec::new(),
            on_dependency_failure: Default::default(),
            with_outputs: false,
        },
        rec(3),
    ];
    assert!(want[2].trace.is_some());
    assert_eq!(drain(&j).await, want);
}

#[tokio::test]
async fn a_newer_format_is_refused_not_truncated() {
    let dir = TempDir::new().unwrap();
    let path = segment::segment_path(dir.path(), 1);
    let content = b"jobstore-journal 2\nsomething else entirely\n";
    fs::write(&path, content).unwrap();
    assert!(matches!(
        Journal::open(JournalOptions::new(dir.path())),
        Err(JournalError::Unsupported { .. })
    ));
    assert_eq!(fs::read(&path).unwrap(), content);
}

// ---- Damage: truncation, bit flips, garbage. ----

/// `(start, end)` of each record line of a segment's bytes.
fn line_spans(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut at = HEADER_LEN as usize;
    while at < bytes.len() {
        let end = at + bytes[at..].iter().position(|&b| b == b'\n').unwrap() + 1;
        spans.push((at, end));
        at = end;
    }
    spans
}

/// Per segment file, its records with their line spans.
type Layout = Vec<(PathBuf, Vec<(Record, (usize, usize))>)>;

/// Records with payloads that exercise the escapes.
fn tricky(i: usize) -> Record {
    let data: &[u8] = match i % 4 {
        0 => b"a\nb",
        1 => b"\\x\xff",
        2 => b"",
        _ => b"\r|z",
    };
    Record {
        id: format!("r{i}"),
        jobtype: "t".into(),
        priority: i as i32,
        run_at: (i % 2 == 1).then_some(i as i64),
        data: data.to_vec(),
        tags: Vec::new(),
        trace: trace_of(i),
        unique: None,
        repeat: None,
        depends_on: Vec::new(),
        on_dependency_failure: Default::default(),
        with_outputs: false,
    }
}

/// A small journal on disk: `n` records, the first `synced` of them synced,
/// in segments of `segment_size`. Returns the directory and, per segment
/// file, the records in it with their line spans.
fn build(n: usize, synced: usize, segment_size: u64) -> (TempDir, Layout) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = TempDir::new().unwrap();
    rt.block_on(async {
        let j = Journal::open(
            JournalOptions::new(dir.path())
                .fsync(false)
                .segment_size(segment_size),
        )
        .unwrap();
        for i in 0..n {
            j.append(vec![tricky(i)]).await.unwrap();
        }
        if synced > 0 {
            let t = j.reserve(synced, LONG).await.unwrap().unwrap();
            assert!(j.sync(t).await.unwrap());
        }
    });
    let mut next = 0;
    let mut layout = Vec::new();
    for file in segment_files(dir.path()) {
        let bytes = fs::read(&file).unwrap();
        let spans = line_spans(&bytes);
        let recs = spans
            .into_iter()
            .map(|span| {
                let r = tricky(next);
                next += 1;
                (r, span)
            })
            .collect();
        layout.push((file, recs));
    }
    assert_eq!(next, n, "nothing deleted while building");
    (dir, layout)
}

/// Copies the journal files of `from` into a fresh directory.
fn copy_journal(from: &Path) -> TempDir {
    let to = TempDir::new().unwrap();
    for file in fs::read_dir(from).unwrap() {
        let file = file.unwrap().path();
        let name = file.file_name().unwrap();
        if name != "lock" {
            fs::copy(&file, to.path().join(name)).unwrap();
        }
    }
    to
}

/// Opens `dir`, checks that exactly `expected` is readable (in order),
/// appends a marker, and checks after a second open that everything,
/// marker included, is there, with nothing left to truncate.
fn check_recovers(rt: &tokio::runtime::Runtime, dir: &Path, expected: &[Record], what: &str) {
    rt.block_on(async {
        let j = open_nosync(dir);
        let (_, got) = take_all(&j).await;
        assert_eq!(ids(&got), ids(expected), "{what}");
        assert_eq!(got, expected, "{what}");
        let marker = Record {
            id: "marker".into(),
            jobtype: "t".into(),
            priority: 0,
            run_at: None,
            data: b"after reopen".to_vec(),
            tags: Vec::new(),
            trace: None,
            unique: None,
            repeat: None,
            depends_on: Vec::new(),
            on_dependency_failure: Default::default(),
            with_outputs: false,
        };
        j.append(vec![marker.clone()]).await.unwrap();
        let t = j.reserve(10, LONG).await.unwrap().unwrap();
        assert_eq!(j.read(t).unwrap(), std::slice::from_ref(&marker), "{what}");
        drop(j);
        let j = open_nosync(dir);
        assert_eq!(j.recovery().torn_tail_bytes, 0, "{what}: tail left");
        let (_, got) = take_all(&j).await;
        let mut want = expected.to_vec();
        want.push(marker);
        assert_eq!(got, want, "{what}: after the second open");
    });
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn truncation_at_every_offset() {
    let rt = runtime();
    // One segment, and three segments with a cursor in the first one.
    for (n, synced, segment_size) in [(5, 0, 1 << 20), (7, 1, 90)] {
        let (dir, layout) = build(n, synced, segment_size);
        for (f, (file, _)) in layout.iter().enumerate() {
            let len = fs::metadata(file).unwrap().len() as usize;
            for cut in 0..=len {
                let copy = copy_journal(dir.path());
                let path = copy.path().join(file.file_name().unwrap());
                fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_len(cut as u64)
                    .unwrap();
                // Every unsynced record but those of the cut file that do
                // not end before the cut.
                let expected: Vec<Record> = layout
                    .iter()
                    .enumerate()
                    .flat_map(|(g, (_, recs))| {
                        recs.iter()
                            .filter(move |(_, (_, end))| g != f || *end <= cut)
                            .map(|(r, _)| r.clone())
                    })
                    .filter(|r| r.priority as usize >= synced)
                    .collect();
                check_recovers(
                    &rt,
                    copy.path(),
                    &expected,
                    &format!("{n} records, file {f} cut at {cut}"),
                );
            }
        }
    }
}

#[test]
fn every_bit_flip_is_caught() {
    let rt = runtime();
    let (dir, layout) = build(5, 0, 1 << 20);
    let (file, records) = &layout[0];
    let len = fs::metadata(file).unwrap().len() as usize;
    let copy = copy_journal(dir.path());
    let path = copy.path().join(file.file_name().unwrap());
    let original = fs::read(file).unwrap();
    for at in 0..len {
        for bit in 0..8 {
            let mut bytes = original.clone();
            bytes[at] ^= 1 << bit;
            fs::write(&path, &bytes).unwrap();
            let what = format!("flip of bit {bit} at {at}");
            rt.block_on(async {
                let j = open_nosync(copy.path());
                let (_, got) = take_all(&j).await;
                // All records but the one whose line holds the flipped byte.
                let expected: Vec<Record> = records
                    .iter()
                    .filter(|(_, (start, end))| !(*start..*end).contains(&at))
                    .map(|(r, _)| r.clone())
                    .collect();
                assert_eq!(got, expected, "{what}");
                let report = j.recovery();
                if expected.len() < records.len() {
                    assert!(
                        report.damaged_records > 0 || report.torn_tail_bytes > 0,
                        "{what}: {report:?}"
                    );
                } else {
                    assert_eq!(report.damaged_records, 0, "{what}");
                    assert_eq!(report.torn_tail_bytes, 0, "{what}");
                }
                // Appending still works, and is read back after reopening.
                j.append(vec![rec(99)]).await.unwrap();
                drop(j);
                let j = open_nosync(copy.path());
                let (_, got) = take_all(&j).await;
                assert_eq!(got.last(), Some(&rec(99)), "{what}");
                assert!(got.iter().all(|r| r == &rec(99) || expected.contains(r)));
            });
            // Back to the original for the next flip.
            let _ = fs::remove_file(copy.path().join(segment::CURSOR));
            fs::write(&path, &original).unwrap();
        }
    }
    // The cursor too: any damage to it means a replay, never a loss or a
    // bogus record.
    let (dir, layout) = build(5, 2, 1 << 20);
    let all: Vec<Record> = layout[0].1.iter().map(|(r, _)| r.clone()).collect();
    let cursor = fs::read(dir.path().join(segment::CURSOR)).unwrap();
    for at in 0..cursor.len() {
        for bit in 0..8 {
            let copy = copy_journal(dir.path());
            let mut bytes = cursor.clone();
            bytes[at] ^= 1 << bit;
            fs::write(copy.path().join(segment::CURSOR), &bytes).unwrap();
            rt.block_on(async {
                let j = open_nosync(copy.path());
                assert!(matches!(j.recovery().cursor, CursorStatus::Damaged { .. }));
                assert_eq!(take_all(&j).await.1, all, "cursor flip {at}:{bit}");
            });
        }
    }
}

#[test]
fn garbage_after_valid_records() {
    let rt = runtime();
    let (dir, layout) = build(4, 0, 1 << 20);
    let (file, records) = &layout[0];
    let expected: Vec<Record> = records.iter().map(|(r, _)| r.clone()).collect();
    let mut line = Vec::new();
    record::encode_into(&tricky(9), &mut line).unwrap();
    let mut wrong_crc = line.clone();
    wrong_crc[0] = if wrong_crc[0] == b'0' { b'1' } else { b'0' };
    let partial = line[..line.len() / 2].to_vec();
    let no_newline = line[..line.len() - 1].to_vec();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("partial line", partial.clone()),
        ("line without its newline", no_newline),
        ("wrong checksum", wrong_crc.clone()),
        ("wrong checksum then partial", [wrong_crc, partial].concat()),
        ("zeros", vec![0; 4096]),
        ("empty lines", b"\n\n\n".to_vec()),
        ("text", b"hello world\nand more".to_vec()),
        (
            "a record header with a short body",
            b"00000000 99 a|b|0||c\n".to_vec(),
        ),
    ];
    for (what, garbage) in cases {
        let copy = copy_journal(dir.path());
        let path = copy.path().join(file.file_name().unwrap());
        let mut bytes = fs::read(&path).unwrap();
        bytes.extend_from_slice(&garbage);
        fs::write(&path, &bytes).unwrap();
        let report = rt.block_on(async { open_nosync(copy.path()).recovery().clone() });
        assert_eq!(report.torn_tail_bytes, garbage.len() as u64, "{what}");
        assert_eq!(
            report.damaged_records, 0,
            "{what}: a torn tail is not damage"
        );
        check_recovers(&rt, copy.path(), &expected, what);
    }
}

proptest! {
    // No regression files: they would land outside this module.
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_garbage_tails(garbage in proptest::collection::vec(any::<u8>(), 1..300)) {
        let rt = runtime();
        let (dir, layout) = build(3, 0, 1 << 20);
        let (file, records) = &layout[0];
        let expected: Vec<Record> = records.iter().map(|(r, _)| r.clone()).collect();
        let path = dir.path().join(file.file_name().unwrap());
        let mut bytes = fs::read(&path).unwrap();
        bytes.extend_from_slice(&garbage);
        fs::write(&path, &bytes).unwrap();
        check_recovers(&rt, dir.path(), &expected, "random garbage");
    }

    #[test]
    fn random_corruption_never_returns_a_bogus_record(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), 1..=255u8), 1..6),
    ) {
        let rt = runtime();
        let (dir, layout) = build(6, 0, 1 << 20);
        let (file, records) = &layout[0];
        let path = dir.path().join(file.file_name().unwrap());
        let mut bytes = fs::read(&path).unwrap();
        let mut touched = Vec::new();
        for (at, xor) in &edits {
            let at = at.index(bytes.len());
            bytes[at] ^= xor;
            touched.push(at);
        }
        fs::write(&path, &bytes).unwrap();
        rt.block_on(async {
            let j = open_nosync(dir.path());
            let (_, got) = take_all(&j).await;
            // Never anything that was not appended, in journal order, and
            // every record whose line was not touched (nor its
            // predecessor's newline, which merges the two lines when more
            // than one edit hits) is still there.
            let all: Vec<&Record> = records.iter().map(|(r, _)| r).collect();
            let mut last = None;
            for r in &got {
                let i = all.iter().position(|a| *a == r).expect("a bogus record");
                assert!(last.is_none_or(|l| i > l));
                last = Some(i);
            }
            for (k, (r, (start, end))) in records.iter().enumerate() {
                let hit = |s: usize, e: usize| touched.iter().any(|&t| (s..e).contains(&t));
                let prev_nl_hit = k > 0 && hit(records[k - 1].1.1 - 1, records[k - 1].1.1);
                let header_hit = touched.iter().any(|&t| t < HEADER_LEN as usize);
                let exempt = header_hit || (prev_nl_hit && edits.len() > 1);
                if !hit(*start, *end) && !exempt {
                    assert!(got.contains(r), "untouched {} lost", r.id);
                }
            }
        });
    }

    #[test]
    fn arbitrary_records_round_trip_through_the_journal(
        batch in proptest::collection::vec(
            (
                "[^|\\p{Cc}]{1,20}",
                "[^|#~\\p{Cc}]{1,20}",
                any::<i32>(),
                any::<Option<i64>>(),
                proptest::collection::vec(any::<u8>(), 0..300),
            ),
            1..8,
        ),
    ) {
        let rt = runtime();
        let dir = TempDir::new().unwrap();
        let records: Vec<Record> = batch
            .into_iter()
            .map(|(id, jobtype, priority, run_at, data)| Record { id, jobtype, priority, run_at, data, tags: Vec::new(), trace: None, unique: None, repeat: None, depends_on: Vec::new(), on_dependency_failure: Default::default(), with_outputs: false })
            .collect();
        rt.block_on(async {
            let j = open_nosync(dir.path());
            j.append(records.clone()).await.unwrap();
            assert_eq!(take_all(&j).await.1, records);
            drop(j);
            let j = open_nosync(dir.path());
            assert_eq!(j.recovery().damaged_records, 0);
            assert_eq!(take_all(&j).await.1, records);
        });
    }
}

// ---- Power loss: writes not yet fsynced are dropped. ----

/// What the disk holds after a power loss at the moment `upto` events into
/// `events`: each segment cut to its last durable length (a segment with
/// none is absent), and the unsynced part of the newest one treated as
/// `tail` says. Returns the directory and the ids acknowledged by then.
fn image_at(
    final_dir: &Path,
    events: &[probe::Event],
    upto: usize,
    tail: Tail,
) -> (TempDir, Vec<String>) {
    let mut durable: std::collections::BTreeMap<u64, u64> = Default::default();
    let mut acked = Vec::new();
    for e in &events[..upto] {
        match e {
            probe::Event::Synced { seq, len } => {
                durable.insert(*seq, *len);
            }
            probe::Event::Acked(ids) => acked.extend(ids.iter().cloned()),
        }
    }
    let to = TempDir::new().unwrap();
    let newest = durable.keys().next_back().copied();
    for (&seq, &len) in &durable {
        let bytes = fs::read(segment::segment_path(final_dir, seq)).unwrap();
        let len = len as usize;
        let mut kept = bytes[..len].to_vec();
        if Some(seq) == newest {
            // The bytes written after the last fsync (as the run went on;
            // at this moment any prefix of them may have been written).
            let unsynced = &bytes[len..];
            match tail {
                Tail::Dropped => {}
                Tail::Prefix(n) => kept.extend_from_slice(&unsynced[..n.min(unsynced.len())]),
                Tail::Zeros(n) => kept.resize(len + n.min(unsynced.len()), 0),
            }
        }
        fs::write(segment::segment_path(to.path(), seq), kept).unwrap();
    }
    (to, acked)
}

#[derive(Debug, Clone, Copy)]
enum Tail {
    /// Every unsynced byte is lost.
    Dropped,
    /// The first `n` unsynced bytes reached the disk, the rest did not.
    Prefix(usize),
    /// The file grew by `n` bytes but their data never arrived (zeros).
    Zeros(usize),
}

/// Concurrent appenders, group commit and segment rotation, with real
/// fsyncs; then a power loss simulated at every point of the run, dropping
/// whatever was not yet fsynced (or keeping part of it, or leaving zeros in
/// its place): every acknowledged record is recovered, exactly once and
/// intact, and nothing that was never appended appears.
#[test]
fn power_loss_at_any_moment_keeps_every_acknowledged_record() {
    let dir = TempDir::new().unwrap();
    probe::watch(dir.path());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let appended: Vec<Record> = rt.block_on(async {
        let j = Arc::new(
            Journal::open(
                JournalOptions::new(dir.path())
                    .segment_size(1500)
                    .spin_fsync(false),
            )
            .unwrap(),
        );
        let mut tasks = Vec::new();
        for w in 0..4usize {
            let j = j.clone();
            let path = dir.path().to_owned();
            tasks.push(tokio::spawn(async move {
                let mut mine = Vec::new();
                for k in 0..40usize {
                    let batch: Vec<Record> = (0..1 + (k % 3))
                        .map(|b| {
                            let mut r = tricky(w * 1000 + k * 10 + b);
                            r.id = format!("w{w}-{k}-{b}");
                            r
                        })
                        .collect();
                    j.append(batch.clone()).await.unwrap();
                    probe::record(
                        &path,
                        probe::Event::Acked(batch.iter().map(|r| r.id.clone()).collect()),
                    );
                    mine.extend(batch);
                }
                mine
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all
    });
    let events = probe::take(dir.path());
    let syncs = events
        .iter()
        .filter(|e| matches!(e, probe::Event::Synced { .. }))
        .count();
    let segments = segment_files(dir.path()).len();
    assert!(segments >= 5, "the run rotated segments: {segments}");
    assert_eq!(appended.len(), 4 * (14 + 13 * 2 + 13 * 3));
    let by_id: HashMap<&str, &Record> = appended.iter().map(|r| (r.id.as_str(), r)).collect();

    let check = rt.block_on(async {
        let mut images = 0;
        let mut extra_recovered = 0usize;
        for upto in 0..=events.len() {
            for tail in [
                Tail::Dropped,
                Tail::Prefix(40),
                Tail::Prefix(usize::MAX),
                Tail::Zeros(37),
            ] {
                let (img, acked) = image_at(dir.path(), &events, upto, tail);
                let what = format!("power loss after event {upto}, tail {tail:?}");
                let j = match Journal::open(JournalOptions::new(img.path()).fsync(false)) {
                    Ok(j) => j,
                    Err(e) => panic!("{what}: open failed: {e}"),
                };
                let (_, got) = take_all(&j).await;
                let mut seen = HashSet::new();
                for r in &got {
                    assert!(seen.insert(r.id.clone()), "{what}: {} twice", r.id);
                    assert_eq!(
                        Some(&r),
                        by_id.get(r.id.as_str()),
                        "{what}: a record not appended"
                    );
                }
                for id in &acked {
                    assert!(seen.contains(id), "{what}: acknowledged {id} lost");
                }
                extra_recovered += got.len() - acked.len();
                images += 1;
            }
        }
        (images, extra_recovered)
    });
    // Straight to stderr, which the test harness does not capture: the
    // figures show in `cargo test`'s output (CI's log) when the test passes.
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr().lock(),
        "power loss: {} records in {} appends by 4 writers, {syncs} durable points, {segments} segments; \
         {} crash images (every event x 4 tails) recovered every acknowledged record; \
         {} unacknowledged records recovered whole from kept tails",
        appended.len(),
        4 * 40,
        check.0,
        check.1
    );
}
