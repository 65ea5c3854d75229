//! Checks of behaviour that depends on a store's own options, which the
//! suite cannot set: a store's tests configure the store, then call these.

use std::time::Duration;

use jobstore_api::limits::MAX_CLAIM;
use jobstore_api::{JobRelease, JobResult, JobStore, NewJob, Release, ResultCode};

use crate::suite::T0;

/// A purge that deletes in bounded batches (of `batch` archived jobs per
/// statement or round trip, as the store was configured) is exact across
/// them: every archived job of the codes purged before the cutoff goes,
/// none after it and none of another code (here `error` jobs interleaved
/// with the `ok` ones, in the same range of `done_dt`), the count is right
/// when it is a multiple of the batch, and running jobs are never touched.
/// Uses the jobtype `purge-batches` with about 4.5 times `batch` jobs,
/// claimed [`MAX_CLAIM`] at a time.
pub async fn purge_is_exact_across_batches(s: &dyn JobStore, batch: usize) {
    // Of the first `old` jobs, every fourth one (`batch` or so) is an error.
    let (old, new, running) = (4 * batch, batch / 2 + 1, 2);
    let failed = |i: usize| i < old && i % 4 == 3;
    let old_failed = (0..old).filter(|i| failed(*i)).count();
    let old_ok = old - old_failed;
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
        ids.map(|i| {
            let status = if failed(i) { 500 } else { 200 };
            JobRelease::new(id(i), Release::Archive(JobResult::from_status(status)))
        })
        .collect()
    };
    let done = s.release_jobs(&archive(0..old), "owner", T0 + 10).await;
    assert_eq!(done.unwrap().len(), old);
    let done = s
        .release_jobs(&archive(old..old + new), "owner", T0 + 1_000)
        .await;
    assert_eq!(done.unwrap().len(), new);

    let ok = [ResultCode::Ok];
    assert_eq!(
        s.purge_archived(T0 + 500, &ok).await.unwrap(),
        old_ok as u64
    );
    for i in 0..all {
        let kept = s.get_job(&id(i)).await.unwrap().is_some();
        assert_eq!(kept, i >= old || failed(i), "{}", id(i));
    }
    assert_eq!(s.purge_archived(T0 + 500, &ok).await.unwrap(), 0);
    let error = [ResultCode::Error];
    assert_eq!(
        s.purge_archived(T0 + 500, &error).await.unwrap(),
        old_failed as u64
    );
    assert_eq!(
        s.purge_archived(T0 + 500, &ResultCode::ALL).await.unwrap(),
        0
    );
    assert_eq!(
        s.purge_archived(T0 + 2_000, &ResultCode::ALL)
            .await
            .unwrap(),
        new as u64
    );
    for i in 0..all {
        let kept = s.get_job(&id(i)).await.unwrap().is_some();
        assert_eq!(kept, i >= old + new, "{}", id(i));
    }
}
