//! Lease renewal: one `renew_locks` call per tick for every held job.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use jobstore_api::limits::MAX_BATCH;
use jobstore_api::{JobStore, now_millis};
use tokio_util::sync::CancellationToken;

use super::held::{HeldMap, lock};
use crate::metrics::Metrics;

/// Renews every third of `lease` until `stop`. A job the store does not
/// renew is lost to this daemon: its run is stopped and it is forgotten.
/// A job the store says was cancelled has its run stopped too, and is
/// archived as `cancelled` when the run ends.
pub(super) async fn run(
    store: Arc<dyn JobStore>,
    owner: String,
    lease: Duration,
    held: HeldMap,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let tick = (lease / 3).max(Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(tick) => {}
        }
        let ids: Vec<String> = lock(&held).keys().cloned().collect();
        for chunk in ids.chunks(MAX_BATCH) {
            match store.renew_locks(chunk, &owner, lease, now_millis()).await {
                Ok(renewal) => {
                    if !renewal.cancelled.is_empty() {
                        let mut held = lock(&held);
                        for id in &renewal.cancelled {
                            if let Some(h) = held.get_mut(id).filter(|h| !h.cancelled) {
                                tracing::info!(id = %id, "job cancelled while running; stopping its run");
                                h.cancelled = true;
                                h.lost.cancel();
                            }
                        }
                    }
                    let renewed = renewal.renewed;
                    if renewed.len() == chunk.len() {
                        continue;
                    }
                    let renewed: HashSet<&str> = renewed.iter().map(String::as_str).collect();
                    let mut held = lock(&held);
                    for id in chunk.iter().filter(|id| !renewed.contains(id.as_str())) {
                        // Released meanwhile (gone, or queued for release):
                        // nothing is lost.
                        if held.get(id).is_some_and(|h| h.releasing) {
                            continue;
                        }
                        if let Some(h) = held.remove(id) {
                            tracing::warn!(id = %id, "lease lost: another daemon owns the job now; stopping its run");
                            metrics.error("executor", "lease_lost");
                            h.lost.cancel();
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, jobs = chunk.len(), "cannot renew leases; retrying next tick");
                }
            }
        }
    }
}
