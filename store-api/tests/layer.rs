//! Store middleware: a layer overrides one method and forwards the rest;
//! `around` sees every forwarded call; `Arc` and `Box` are stores.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use jobstore_api::layer::StoreFuture;
use jobstore_api::*;

const NOW: Millis = 1_700_000_000_000;
const LEASE: Duration = Duration::from_secs(30);

/// Counts calls to `claim_jobs`; everything else is the inner store's.
#[derive(Debug)]
struct CountClaims<S> {
    inner: S,
    claims: AtomicUsize,
}

#[async_trait]
impl<S: JobStore> jobstore_api::layer::StoreLayer for CountClaims<S> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
    }

    async fn claim_jobs(
        &self,
        jobtype: &str,
        limit: usize,
        owner: &str,
        lease: Duration,
        now: Millis,
    ) -> Result<Vec<Job>> {
        self.claims.fetch_add(1, Ordering::Relaxed);
        self.inner
            .claim_jobs(jobtype, limit, owner, lease, now)
            .await
    }
}

/// Records the name of every forwarded call, over a shared store.
#[derive(Debug, Default)]
struct Trace {
    inner: Option<Arc<dyn JobStore>>,
    ops: Mutex<Vec<&'static str>>,
}

impl jobstore_api::layer::StoreLayer for Trace {
    type Inner = dyn JobStore;

    fn inner(&self) -> &Self::Inner {
        self.inner.as_deref().expect("an inner store")
    }

    fn around<'a, T: Send + 'a>(
        &'a self,
        op: &'static str,
        call: StoreFuture<'a, T>,
    ) -> StoreFuture<'a, T> {
        self.ops.lock().unwrap().push(op);
        call
    }
}

fn job(id: &str) -> NewJob {
    NewJob::new(id, "acme-t", b"x".to_vec())
}

#[tokio::test]
async fn a_layer_overrides_one_method_and_forwards_the_rest() {
    let store = CountClaims {
        inner: MemoryStore::new(),
        claims: AtomicUsize::new(0),
    };
    let added = store.add_jobs(&[job("a"), job("b")], NOW).await.unwrap();
    assert_eq!(added.new.len(), 2);
    let claimed = store
        .claim_jobs("acme-t", 1, "d-1", LEASE, NOW)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let ids: Vec<String> = claimed.iter().map(|j| j.id.clone()).collect();
    assert_eq!(
        store
            .renew_locks(&ids, "d-1", LEASE, NOW + 1)
            .await
            .unwrap()
            .renewed,
        ids
    );
    assert_eq!(
        store
            .archive_jobs(&ids, "d-1", JobResult::from_status(200), NOW + 2)
            .await
            .unwrap(),
        ids
    );
    // The same calls through `dyn JobStore`, as the daemon makes them.
    let shared: &dyn JobStore = &store;
    assert_eq!(
        shared
            .claim_jobs("acme-t", 10, "d-1", LEASE, NOW)
            .await
            .unwrap()
            .len(),
        1
    );
    let counts = shared.job_counts(NOW + 3).await.unwrap();
    assert_eq!(
        (counts[0].running, counts[0].archived[&ResultCode::Ok]),
        (1, 1)
    );
    assert_eq!(store.claims.load(Ordering::Relaxed), 2);
    // What is not overridden is the inner store's, errors included.
    assert_eq!(store.capabilities(), store.inner.capabilities());
    assert_eq!(
        store.get_job("").await.unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
}

#[tokio::test]
async fn around_wraps_every_forwarded_call() {
    let counted = Arc::new(CountClaims {
        inner: MemoryStore::new(),
        claims: AtomicUsize::new(0),
    });
    let trace = Trace {
        inner: Some(counted.clone()),
        ..Trace::default()
    };
    let now = NOW;
    trace.add_jobs(&[job("a")], now).await.unwrap();
    trace.waiting_jobtypes(now).await.unwrap();
    let jobs = trace
        .claim_jobs("acme-t", 1, "d-1", LEASE, now)
        .await
        .unwrap();
    let ids = vec![jobs[0].id.clone()];
    trace.renew_locks(&ids, "d-1", LEASE, now).await.unwrap();
    trace.update_data("a", "d-1", b"y", now).await.unwrap();
    let retry = JobRelease::new(
        "a",
        Release::Retry {
            delay: Duration::ZERO,
        },
    );
    trace.release_jobs(&[retry], "d-1", now).await.unwrap();
    trace.cancel_jobs(&ids, now).await.unwrap();
    trace.get_job("a").await.unwrap();
    trace
        .purge_archived(now + 1, &ResultCode::ALL)
        .await
        .unwrap();
    trace.job_counts(now).await.unwrap();
    let _watcher = trace.watch().await.unwrap();
    trace
        .set_handler("acme-t", &Handler::new("process", "true"), now)
        .await
        .unwrap();
    trace.get_handler("acme-t").await.unwrap();
    trace.list_handlers().await.unwrap();
    trace.delete_handler("acme-t").await.unwrap();
    let lease = trace.reserve_sysid("d-1", LEASE, now).await.unwrap();
    let lease = trace.renew_sysid(&lease, LEASE, now).await.unwrap();
    assert!(trace.release_sysid(&lease).await.unwrap());
    assert!(trace.capabilities().notifications);
    assert_eq!(
        *trace.ops.lock().unwrap(),
        [
            "add_jobs",
            "waiting_jobtypes",
            "claim_jobs",
            "renew_locks",
            "update_data",
            "release_jobs",
            "cancel_jobs",
            "get_job",
            "purge_archived",
            "job_counts",
            "watch",
            "set_handler",
            "get_handler",
            "list_handlers",
            "delete_handler",
            "reserve_sysid",
            "renew_sysid",
            "release_sysid",
        ]
    );
    // The claim went through the inner layer's override.
    assert_eq!(counted.claims.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn arc_and_box_are_stores() {
    let store: Arc<dyn JobStore> = Arc::new(MemoryStore::new());
    store.add_job(job("a"), NOW).await.unwrap();
    let boxed: Box<dyn JobStore> = Box::new(store.clone());
    assert_eq!(boxed.get_job("a").await.unwrap().unwrap().id, "a");
    let nested: Arc<Box<dyn JobStore>> = Arc::new(boxed);
    assert_eq!(
        nested
            .claim_jobs("acme-t", 1, "d-1", LEASE, NOW)
            .await
            .unwrap()
            .len(),
        1
    );
}
