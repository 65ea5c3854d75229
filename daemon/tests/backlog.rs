//! A store slower to release jobs than the runners are to finish them
//! holds claims back: the daemon stops claiming while
//! `executor::MAX_BACKLOG` finished jobs wait for their release, so that a
//! crash costs at most those and the running ones, and it catches up once
//! the store does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use jobstore_api::*;
use jobstore_daemon::config::{FileConfig, ServeArgs};
use jobstore_daemon::executor::MAX_BACKLOG;
use jobstore_daemon::{Config, Daemon};
use tokio::sync::watch;

/// A `MemoryStore` whose releases wait until the gate opens.
#[derive(Debug)]
struct GatedStore {
    inner: MemoryStore,
    open: watch::Receiver<bool>,
}

#[async_trait]
impl JobStore for GatedStore {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn add_jobs(&self, jobs: &[NewJob], now: Millis) -> Result<AddOutcome> {
        self.inner.add_jobs(jobs, now).await
    }
    async fn waiting_jobtypes(&self, now: Millis) -> Result<Vec<WaitingJobtype>> {
        self.inner.waiting_jobtypes(now).await
    }
    async fn claim_jobs(
        &self,
        jobtype: &str,
        limit: usize,
        owner: &str,
        lease: Duration,
        now: Millis,
    ) -> Result<Vec<Job>> {
        self.inner
            .claim_jobs(jobtype, limit, owner, lease, now)
            .await
    }
    async fn renew_locks(
        &self,
        ids: &[String],
        owner: &str,
        lease: Duration,
        now: Millis,
    ) -> Result<Vec<String>> {
        self.inner.renew_locks(ids, owner, lease, now).await
    }
    async fn release_jobs(
        &self,
        releases: &[JobRelease],
        owner: &str,
        _now: Millis,
    ) -> Result<Vec<String>> {
        let mut open = self.open.clone();
        let _ = open.wait_for(|o| *o).await;
        // The caller's `now` is from before the wait.
        self.inner.release_jobs(releases, owner, now_millis()).await
    }
    async fn update_data(&self, id: &str, owner: &str, data: &[u8], now: Millis) -> Result<bool> {
        self.inner.update_data(id, owner, data, now).await
    }
    async fn cancel_jobs(&self, ids: &[String], now: Millis) -> Result<Vec<String>> {
        self.inner.cancel_jobs(ids, now).await
    }
    async fn get_job(&self, id: &str) -> Result<Option<Job>> {
        self.inner.get_job(id).await
    }
    async fn purge_archived(&self, before: Millis, codes: &[ResultCode]) -> Result<u64> {
        self.inner.purge_archived(before, codes).await
    }
    async fn job_counts(&self, now: Millis) -> Result<Vec<JobCounts>> {
        self.inner.job_counts(now).await
    }
    async fn watch(&self) -> Result<WorkWatcher> {
        self.inner.watch().await
    }
    async fn set_handler(
        &self,
        jobtype: &str,
        handler: &Handler,
        now: Millis,
    ) -> Result<HandlerVersion> {
        self.inner.set_handler(jobtype, handler, now).await
    }
    async fn get_handler(&self, jobtype: &str) -> Result<Option<HandlerVersion>> {
        self.inner.get_handler(jobtype).await
    }
    async fn delete_handler(&self, jobtype: &str) -> Result<bool> {
        self.inner.delete_handler(jobtype).await
    }
    async fn list_handlers(&self) -> Result<Vec<HandlerVersion>> {
        self.inner.list_handlers().await
    }
    async fn reserve_sysid(&self, sysid: &str, ttl: Duration, now: Millis) -> Result<SysidLease> {
        self.inner.reserve_sysid(sysid, ttl, now).await
    }
    async fn renew_sysid(
        &self,
        lease: &SysidLease,
        ttl: Duration,
        now: Millis,
    ) -> Result<SysidLease> {
        self.inner.renew_sysid(lease, ttl, now).await
    }
    async fn release_sysid(&self, lease: &SysidLease) -> Result<bool> {
        self.inner.release_sysid(lease).await
    }
}

const JOBTYPE: &str = "acme-t";
const MAX_RUNNING: usize = 16;

/// The jobs claimed (running, as the store counts them) and archived.
async fn counts(store: &dyn JobStore) -> (u64, u64) {
    let c = store.job_counts(now_millis()).await.unwrap();
    let c = c
        .iter()
        .find(|c| c.jobtype == JOBTYPE)
        .cloned()
        .unwrap_or_default();
    (
        c.running,
        c.archived.get(&ResultCode::Ok).copied().unwrap_or(0),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_release_holds_claims_back() {
    let jobs = MAX_BACKLOG + 1_500;
    let (gate, open) = watch::channel(false);
    let store = Arc::new(GatedStore {
        inner: MemoryStore::new(),
        open,
    });
    let new: Vec<NewJob> = (0..jobs)
        .map(|i| NewJob::new(format!("j{i}"), JOBTYPE, ""))
        .collect();
    store.add_jobs(&new, now_millis()).await.unwrap();
    store
        .set_handler(JOBTYPE, &Handler::new("process", "true"), now_millis())
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let args = ServeArgs {
        data_dir: Some(dir.path().to_path_buf()),
        listen: Some(([127, 0, 0, 1], 0).into()),
        max_running: Some(MAX_RUNNING as u32),
        allow_process_handlers: true,
        ..ServeArgs::default()
    };
    let config = Config::resolve(&args, FileConfig::default()).unwrap();
    let daemon = Daemon::start_with_store(config, store.clone())
        .await
        .unwrap();

    // Claims go on until the backlog is full, then stop: the count of
    // claimed jobs settles (unchanged for 2 s) at most a backlog and two
    // rounds of runs above it.
    let bound = (MAX_BACKLOG + 2 * MAX_RUNNING) as u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut last, mut since) = (0, Instant::now());
    loop {
        let (running, archived) = counts(&*store).await;
        assert_eq!(archived, 0, "a release went through the closed gate");
        assert!(
            running <= bound,
            "{running} jobs claimed with releases stalled; at most {bound}"
        );
        if running != last {
            (last, since) = (running, Instant::now());
        } else if running >= MAX_BACKLOG as u64 && since.elapsed() >= Duration::from_secs(2) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "claims never reached the backlog: {running}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("claims stopped at {last} of {jobs} jobs with releases stalled");

    // Once the store releases again, every job runs to ok.
    gate.send(true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, archived) = counts(&*store).await;
        if archived == jobs as u64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {archived} of {jobs} archived"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    daemon.shutdown();
    daemon.wait().await;
}
