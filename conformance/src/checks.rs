//! Checks of behaviour that depends on a store's own options, which the
//! suite cannot set: a store's tests configure the store, then call these.

use std::time::Duration;

use jobstore_api::limits::MAX_CLAIM;
use jobstore_api::{JobRelease, JobResult, JobStore, NewJob, Release};

use crate::suite::T0;

/// A purge that deletes in bounded batches (of `batch` archived jobs per
/// statement or round trip, as the store was configured) is exact across
/// them: every archived job before the cutoff goes, none after it, the
/// count is right when it is a multiple of the batch, and running jobs are
/// never touched. Uses the jobtype `purge-batches` with about 3.5 times
/// `batch` jobs, claimed [`MAX_CLAIM`] at a time.
pub async fn purge_is_exact_across_batches(s: &dyn JobStore, batch: usize) {
    let (old, new, running) = (3 * batch, batch / 2 + 1, 2);
    let id = |i: usize| format!("purge-{i:05}");
    let all = old + new + running;
    let jobs: Vec<NewJob> = (0..all)
        .map(|i| NewJob::new(id(i), "purge-batches", "x"))
        .collect();
    s.add_jobs(&jobs, T0).await.unwrap();
    let lease = Duration::from_secs(600);
    let mut claimed = 0;
    while claimed < all {
        let n = (all - claimed).min(MAX_CLAIM);
        let got = s.claim_jobs("purge-batches", n, "owner", lease, T0).await;
        assert_eq!(got.unwrap().len(), n, "after {claimed} of {all}");
        claimed += n;
    }
    let archive = |ids: std::ops::Range<usize>| -> Vec<JobRelease> {
        ids.map(|i| JobRelease::new(id(i), Release::Archive(JobResult::from_status(200))))
            .collect()
    };
    let done = s.release_jobs(&archive(0..old), "owner", T0 + 10).await;
    assert_eq!(done.unwrap().len(), old);
    let done = s
        .release_jobs(&archive(old..old + new), "owner", T0 + 1_000)
        .await;
    assert_eq!(done.unwrap().len(), new);

    assert_eq!(s.purge_archived(T0 + 500).await.unwrap(), old as u64);
    for i in 0..all {
        let kept = s.get_job(&id(i)).await.unwrap().is_some();
        assert_eq!(kept, i >= old, "{}", id(i));
    }
    assert_eq!(s.purge_archived(T0 + 500).await.unwrap(), 0);
    assert_eq!(s.purge_archived(T0 + 2_000).await.unwrap(), new as u64);
    for i in old + new..all {
        assert!(
            s.get_job(&id(i)).await.unwrap().is_some(),
            "running {}",
            id(i)
        );
    }
}
