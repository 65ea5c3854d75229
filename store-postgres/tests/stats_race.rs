//! Concurrent `add_stats` batches that share rows, listed in different
//! orders, from callers whose clocks are an hour apart: the later ones
//! prune the minute rows the earlier ones are adding to. Every add
//! succeeds (no deadlock: the upsert locks its rows in key order, and the
//! pruning delete starts after it and never waits), and the day rows,
//! which all of them share, sum exactly.

use std::sync::Arc;

use jobstore_api::stats::{DAY_MS, MINUTE_MS};
use jobstore_api::{Durations, JobStore, StatsDelta, StatsQuery, StatsResolution};
use jobstore_conformance::services::{postgres_url, unique_namespace};
use jobstore_postgres::{PgStore, PgStoreOptions};

/// The start of a minute: 2023-11-14T22:13:00Z.
const M0: i64 = 1_700_000_000_000 - 1_700_000_000_000 % MINUTE_MS;
const JOBTYPES: usize = 40;
const TASKS: usize = 8;
const ROUNDS: usize = 25;

#[test]
fn adds_racing_prunes_never_deadlock() {
    jobstore_conformance::block_on(async {
        let Some(url) = postgres_url().await else {
            return;
        };
        let opts = PgStoreOptions::from_url(&url)
            .expect("url")
            .schema(unique_namespace())
            .max_connections(TASKS as u32);
        let store = Arc::new(PgStore::connect_with(opts).await.expect("connect"));
        let outcome = race(&store).await;
        store.drop_schema().await.expect("drop schema");
        outcome.expect("race");
    });
}

async fn race(store: &Arc<PgStore>) -> Result<(), String> {
    // Half the callers add to minute M0 at a `now` within it; the other
    // half an hour later, when M0 is no longer kept and their adds prune
    // it. Both are in the same UTC day.
    let early = M0 + 30_000;
    let late = early + 60 * MINUTE_MS;
    assert_eq!(M0 / DAY_MS, late / DAY_MS, "one day");
    let mut tasks = Vec::new();
    for k in 0..TASKS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let now = if k % 2 == 0 { early } else { late };
            for round in 0..ROUNDS {
                // Each batch lists the jobtypes in an order of its own.
                let mut order: Vec<usize> = (0..JOBTYPES).collect();
                order.rotate_left((k * 7 + round * 3) % JOBTYPES);
                if (k + round) % 3 == 0 {
                    order.reverse();
                }
                let deltas: Vec<StatsDelta> = order
                    .iter()
                    .map(|j| StatsDelta {
                        wait: Durations::of(&[k as u64]),
                        ..StatsDelta::new(format!("r{j:02}"), now)
                    })
                    .collect();
                store
                    .add_stats(&deltas, now)
                    .await
                    .map_err(|e| format!("task {k}, round {round}: {e:?}"))?;
            }
            Ok::<(), String>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    let days = store
        .job_stats(&StatsQuery::new(StatsResolution::Day), late)
        .await
        .map_err(|e| e.to_string())?;
    let per_day: Vec<u64> = (0..TASKS as u64)
        .flat_map(|k| std::iter::repeat_n(k, ROUNDS))
        .collect();
    assert_eq!(days.len(), JOBTYPES);
    for b in &days {
        assert_eq!(b.wait, Durations::of(&per_day), "{}", b.jobtype);
    }
    let minutes = store
        .job_stats(&StatsQuery::new(StatsResolution::Minute), late)
        .await
        .map_err(|e| e.to_string())?;
    assert_eq!(minutes.len(), JOBTYPES, "only the late minute is kept");
    for b in &minutes {
        assert_eq!(b.start, M0 + 60 * MINUTE_MS);
        assert_eq!(b.wait.count, (TASKS / 2 * ROUNDS) as u64, "{}", b.jobtype);
    }
    Ok(())
}
