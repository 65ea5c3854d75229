//! Wake-ups through pub/sub: a listener task per watcher.

use std::time::Duration;

use futures::StreamExt;
use jobstore_api::{Error, Result, WorkNotice, WorkWatcher};
use tokio::sync::{broadcast, oneshot};
use tokio::task::AbortHandle;

use crate::error::map;

/// Stops the listener task when the watcher is dropped.
struct StopOnDrop(AbortHandle);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A watcher fed by a subscription to `channel` on one of `nodes` (in a
/// cluster, PUBLISH reaches every node). Returns once subscribed.
pub(crate) async fn watch(
    nodes: Vec<redis::Client>,
    channel: String,
    poll: Duration,
    connect_timeout: Duration,
) -> Result<WorkWatcher> {
    let (tx, rx) = broadcast::channel(1024);
    let (ready_tx, ready_rx) = oneshot::channel();
    let task = tokio::spawn(listen(nodes, channel, tx, ready_tx, connect_timeout));
    let guard = StopOnDrop(task.abort_handle());
    match ready_rx.await {
        Ok(Ok(())) => Ok(WorkWatcher::notified(rx, poll, Some(Box::new(guard)))),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Error::backend_msg("redis: the pub/sub listener stopped")),
    }
}

async fn subscribe(
    client: &redis::Client,
    channel: &str,
    connect_timeout: Duration,
) -> Result<redis::aio::PubSub> {
    let attempt = async {
        let mut ps = client
            .get_async_pubsub()
            .await
            .map_err(|e| map(e, "pub/sub connect"))?;
        ps.subscribe(channel)
            .await
            .map_err(|e| map(e, "SUBSCRIBE"))?;
        Ok(ps)
    };
    match tokio::time::timeout(connect_timeout, attempt).await {
        Ok(r) => r,
        Err(elapsed) => Err(Error::unavailable(
            "redis: pub/sub connect timed out",
            elapsed,
        )),
    }
}

async fn listen(
    nodes: Vec<redis::Client>,
    channel: String,
    tx: broadcast::Sender<WorkNotice>,
    ready: oneshot::Sender<Result<()>>,
    connect_timeout: Duration,
) {
    let mut ready = Some(ready);
    let mut node = 0usize;
    let mut failures = 0usize;
    let mut backoff = Duration::from_millis(50);
    loop {
        let client = &nodes[node % nodes.len()];
        match subscribe(client, &channel, connect_timeout).await {
            Ok(ps) => {
                failures = 0;
                backoff = Duration::from_millis(50);
                match ready.take() {
                    Some(r) => {
                        if r.send(Ok(())).is_err() {
                            return;
                        }
                    }
                    // Notices may have been missed while disconnected.
                    None => {
                        let _ = tx.send(String::new());
                    }
                }
                let mut messages = ps.into_on_message();
                while let Some(msg) = messages.next().await {
                    let jobtype = String::from_utf8_lossy(msg.get_payload_bytes()).into_owned();
                    // No receiver means the watcher is gone; the guard aborts us.
                    let _ = tx.send(jobtype);
                }
                tracing::debug!("redis pub/sub connection lost; resubscribing");
            }
            Err(e) => {
                failures += 1;
                if ready.is_some() && failures >= nodes.len() {
                    if let Some(r) = ready.take() {
                        let _ = r.send(Err(e));
                    }
                    return;
                }
                if ready.is_none() {
                    tokio::time::sleep(backoff).await;
                    backoff = next_backoff(backoff);
                }
            }
        }
        node += 1;
    }
}

/// The wait before the next attempt to resubscribe after waiting
/// `backoff`: twice as long, at most two seconds.
fn next_backoff(backoff: Duration) -> Duration {
    (backoff * 2).min(Duration::from_secs(2))
}

#[cfg(test)]
mod tests {
    use super::{next_backoff, watch};
    use jobstore_api::Wakeup;
    use std::collections::BTreeSet;
    use std::time::Duration;

    /// A watcher tries the nodes in turn: with the first one down it
    /// subscribes on the next, and wakes for what is published there.
    #[test]
    fn a_watcher_subscribes_on_the_next_node_when_one_is_down() {
        jobstore_conformance::block_on(async {
            let Some(url) = jobstore_conformance::services::redis_url().await else {
                return;
            };
            // A port nothing listens on: connections to it are refused.
            let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let down_url = format!("redis://{}/", down.local_addr().unwrap());
            drop(down);
            let nodes = vec![
                redis::Client::open(down_url).unwrap(),
                redis::Client::open(url.as_str()).unwrap(),
            ];
            let channel = jobstore_conformance::services::unique_namespace();
            let second = Duration::from_secs(1);
            let mut w = watch(nodes, channel.clone(), Duration::from_secs(60), second)
                .await
                .expect("subscribed on the second node");
            let mut c = redis::Client::open(url.as_str())
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            let _: i64 = redis::cmd("PUBLISH")
                .arg(&channel)
                .arg("t")
                .query_async(&mut c)
                .await
                .unwrap();
            let want = Wakeup::Work(BTreeSet::from(["t".to_owned()]));
            assert_eq!(w.wait(Duration::from_secs(10)).await, want);
        });
    }

    #[test]
    fn resubscribing_backs_off_twice_as_long_up_to_two_seconds() {
        let mut waits = vec![Duration::from_millis(50)];
        for _ in 0..7 {
            waits.push(next_backoff(*waits.last().unwrap()));
        }
        let ms: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [50, 100, 200, 400, 800, 1600, 2000, 2000]);
    }
}
