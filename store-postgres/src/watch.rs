//! Wake-ups through `LISTEN/NOTIFY`.

use std::time::Duration;

use jobstore_api::{Result, WorkNotice, WorkWatcher};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use tokio::sync::broadcast;
use tokio::task::AbortHandle;

use crate::error::map;
use crate::options::PgStoreOptions;

/// Stops the listener task when the watcher holding it is dropped.
struct StopOnDrop(AbortHandle);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A watcher fed by a listener on `channel`, over a connection of its own.
/// Returns once `LISTEN` is in effect, so no notice sent after it returns
/// is missed.
pub(crate) async fn watch(
    connect: &PgConnectOptions,
    options: &PgStoreOptions,
    channel: &str,
) -> Result<WorkWatcher> {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(options.get_acquire_timeout())
        .max_lifetime(None)
        .idle_timeout(None)
        .connect_lazy_with(connect.clone());
    let listener = listen(&pool, channel).await?;
    let (tx, rx) = broadcast::channel(1024);
    let task = tokio::spawn(run(listener, pool, channel.to_owned(), tx));
    Ok(WorkWatcher::notified(
        rx,
        options.get_poll_interval(),
        Some(Box::new(StopOnDrop(task.abort_handle()))),
    ))
}

async fn listen(pool: &PgPool, channel: &str) -> Result<PgListener> {
    let mut listener = PgListener::connect_with(pool)
        .await
        .map_err(|e| map("listen", e))?;
    listener
        .listen(channel)
        .await
        .map_err(|e| map("listen", e))?;
    Ok(listener)
}

/// Forwards notices until the watcher goes away. When the connection is
/// lost it reconnects (backing off up to 5 s) and sends an empty notice:
/// anything may have changed while it was away.
async fn run(
    mut listener: PgListener,
    pool: PgPool,
    channel: String,
    tx: broadcast::Sender<WorkNotice>,
) {
    loop {
        match listener.try_recv().await {
            Ok(Some(n)) => {
                if tx.send(n.payload().to_owned()).is_err() {
                    return; // no watcher left
                }
            }
            // The connection was lost and re-established: notices may
            // have been missed.
            Ok(None) => {
                if tx.send(WorkNotice::new()).is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, %channel, "work listener lost its connection");
                drop(listener);
                let mut backoff = Duration::from_millis(50);
                listener = loop {
                    tokio::time::sleep(backoff).await;
                    match listen(&pool, &channel).await {
                        Ok(l) => break l,
                        Err(e) => {
                            tracing::debug!(error = %e, %channel, "work listener reconnect failed");
                            backoff = (backoff * 2).min(Duration::from_secs(5));
                        }
                    }
                };
                if tx.send(WorkNotice::new()).is_err() {
                    return;
                }
            }
        }
    }
}
