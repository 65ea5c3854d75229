//! One store-wide snapshot of job counts that callers may accept a few
//! seconds old (`max_age`): however many dashboards refresh, the daemon
//! asks the store for counts at most once per `max_age`.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jobstore_api::JobCounts;
use tokio::sync::Mutex;

/// Every jobtype's counts and the paused jobtypes, as read together.
pub type Counts = (Vec<JobCounts>, Vec<String>);

/// The newest snapshot and when it was read. Callers that accept an old
/// enough one share it; a caller that needs a newer one reads the store
/// while the others wait for its answer (one read at a time).
#[derive(Debug, Default)]
pub struct CountsCache {
    slot: Mutex<Option<(Instant, Arc<Counts>)>>,
}

impl CountsCache {
    /// A snapshot at most `max_age` old, from `load` when the kept one is
    /// older (or missing). `max_age` zero always loads.
    pub async fn get<F, Fut, E>(&self, max_age: Duration, load: F) -> Result<Arc<Counts>, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Counts, E>>,
    {
        let mut slot = self.slot.lock().await;
        if let Some((at, counts)) = slot.as_ref()
            && !max_age.is_zero()
            && at.elapsed() <= max_age
        {
            return Ok(counts.clone());
        }
        let counts = Arc::new(load().await?);
        *slot = Some((Instant::now(), counts.clone()));
        Ok(counts)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn counts(n: u64) -> Counts {
        let c = JobCounts {
            jobtype: "a-b".into(),
            waiting: n,
            ..JobCounts::default()
        };
        (vec![c], Vec::new())
    }

    #[tokio::test]
    async fn callers_within_max_age_share_one_read() {
        let cache = Arc::new(CountsCache::default());
        let loads = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..20 {
            let (cache, loads) = (cache.clone(), loads.clone());
            tasks.push(tokio::spawn(async move {
                cache
                    .get(Duration::from_secs(60), || async {
                        let n = loads.fetch_add(1, Ordering::SeqCst) as u64;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        Ok::<_, ()>(counts(n))
                    })
                    .await
                    .unwrap()
            }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap().0[0].waiting, 0);
        }
        assert_eq!(loads.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn zero_or_an_older_snapshot_reads_again() {
        let cache = CountsCache::default();
        let load = |n| move || async move { Ok::<_, ()>(counts(n)) };
        let long = Duration::from_secs(60);
        assert_eq!(cache.get(long, load(1)).await.unwrap().0[0].waiting, 1);
        assert_eq!(cache.get(long, load(2)).await.unwrap().0[0].waiting, 1);
        assert_eq!(
            cache.get(Duration::ZERO, load(3)).await.unwrap().0[0].waiting,
            3
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
        let short = Duration::from_millis(1);
        assert_eq!(cache.get(short, load(4)).await.unwrap().0[0].waiting, 4);
        assert!(cache.get(long, load(5)).await.is_ok());
        assert_eq!(cache.get(long, load(6)).await.unwrap().0[0].waiting, 4);
        let failed = cache
            .get(Duration::ZERO, || async { Err::<Counts, _>("down") })
            .await;
        assert_eq!(failed.unwrap_err(), "down");
        assert_eq!(
            cache.get(long, load(7)).await.unwrap().0[0].waiting,
            4,
            "a failed read keeps the snapshot"
        );
    }
}
