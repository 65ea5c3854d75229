//! `WorkWatcher` wake-up semantics.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use jobstore_api::{Wakeup, WorkWatcher};
use tokio::sync::broadcast;

#[tokio::test]
async fn polling_watcher_wakes_at_the_poll_interval_or_the_timeout() {
    let mut w = WorkWatcher::polling(Duration::from_millis(30));
    assert!(!w.is_notified());
    let start = Instant::now();
    assert_eq!(w.wait(Duration::from_secs(5)).await, Wakeup::Unknown);
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(w.wait(Duration::from_millis(10)).await, Wakeup::TimedOut);
}

#[tokio::test]
async fn notified_watcher_drains_all_pending_notices() {
    let (tx, rx) = broadcast::channel(16);
    let mut w = WorkWatcher::notified(rx, Duration::from_secs(60), None);
    tx.send("a".to_owned()).unwrap();
    tx.send("b".to_owned()).unwrap();
    tx.send("a".to_owned()).unwrap();
    let expected: BTreeSet<String> = ["a", "b"].map(String::from).into();
    assert_eq!(w.wait(Duration::from_secs(5)).await, Wakeup::Work(expected));
    assert_eq!(w.wait(Duration::from_millis(10)).await, Wakeup::TimedOut);
}

#[tokio::test]
async fn an_empty_notice_or_a_lag_means_unknown() {
    let (tx, rx) = broadcast::channel(2);
    let mut w = WorkWatcher::notified(rx, Duration::from_secs(60), None);
    tx.send(String::new()).unwrap();
    assert_eq!(w.wait(Duration::from_secs(5)).await, Wakeup::Unknown);
    for i in 0..5 {
        tx.send(format!("t{i}")).unwrap();
    }
    assert_eq!(w.wait(Duration::from_secs(5)).await, Wakeup::Unknown);
}

#[tokio::test]
async fn a_closed_channel_falls_back_to_polling() {
    let (tx, rx) = broadcast::channel::<String>(2);
    let mut w = WorkWatcher::notified(rx, Duration::from_millis(20), None);
    drop(tx);
    assert_eq!(w.wait(Duration::from_secs(5)).await, Wakeup::Unknown);
    assert!(!w.is_notified());
    assert_eq!(w.wait(Duration::from_secs(5)).await, Wakeup::Unknown);
}

#[tokio::test]
async fn notified_watcher_wakes_as_soon_as_a_notice_arrives() {
    let (tx, rx) = broadcast::channel(16);
    let mut w = WorkWatcher::notified(rx, Duration::from_secs(60), None);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        tx.send("late".to_owned()).unwrap();
    });
    let start = Instant::now();
    let wake = w.wait(Duration::from_secs(30)).await;
    assert_eq!(wake, Wakeup::Work(["late".to_owned()].into()));
    assert!(start.elapsed() < Duration::from_secs(30));
}
