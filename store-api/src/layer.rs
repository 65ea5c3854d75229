//! Store middleware: [`StoreLayer`], a [`JobStore`] that wraps another and
//! overrides only what it changes.
//!
//! A type that implements [`StoreLayer`] is a [`JobStore`] (through a
//! blanket impl): it names the store it wraps ([`StoreLayer::inner`]), and
//! every method it does not write itself goes to that store unchanged. It
//! can also wrap every call at once with [`StoreLayer::around`] (timing,
//! tracing, fault injection), without writing any method.
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::time::Duration;
//!
//! use async_trait::async_trait;
//! use jobstore_api::layer::StoreFuture;
//! use jobstore_api::{Job, JobStore, Millis, MemoryStore, NewJob, Result};
//!
//! /// Counts the jobs handed out by claims; everything else is the inner
//! /// store's.
//! #[derive(Debug)]
//! struct CountClaims<S> {
//!     inner: S,
//!     claimed: AtomicU64,
//! }
//!
//! #[async_trait]
//! impl<S: JobStore> jobstore_api::layer::StoreLayer for CountClaims<S> {
//!     type Inner = S;
//!
//!     fn inner(&self) -> &S {
//!         &self.inner
//!     }
//!
//!     async fn claim_jobs(
//!         &self,
//!         jobtype: &str,
//!         limit: usize,
//!         owner: &str,
//!         lease: Duration,
//!         now: Millis,
//!     ) -> Result<Vec<Job>> {
//!         let jobs = self.inner.claim_jobs(jobtype, limit, owner, lease, now).await?;
//!         self.claimed.fetch_add(jobs.len() as u64, Ordering::Relaxed);
//!         Ok(jobs)
//!     }
//! }
//!
//! /// Fails every call with `Unavailable` while `down` is set.
//! #[derive(Debug)]
//! struct Outage {
//!     inner: Arc<dyn JobStore>,
//!     down: std::sync::atomic::AtomicBool,
//! }
//!
//! impl jobstore_api::layer::StoreLayer for Outage {
//!     type Inner = dyn JobStore;
//!
//!     fn inner(&self) -> &Self::Inner {
//!         &*self.inner
//!     }
//!
//!     fn around<'a, T: Send + 'a>(
//!         &'a self,
//!         op: &'static str,
//!         call: StoreFuture<'a, T>,
//!     ) -> StoreFuture<'a, T> {
//!         if self.down.load(Ordering::Relaxed) {
//!             // `call` is dropped unpolled: the inner store never sees it.
//!             let e = jobstore_api::Error::unavailable(format!("{op}: store down"), "injected");
//!             Box::pin(async move { Err(e) })
//!         } else {
//!             call
//!         }
//!     }
//! }
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let counted = Arc::new(CountClaims { inner: MemoryStore::new(), claimed: AtomicU64::new(0) });
//! let store = Outage { inner: counted.clone(), down: Default::default() };
//! let now = 1_700_000_000_000;
//! store.add_jobs(&[NewJob::new("job-1", "acme-mail", b"hi".to_vec())], now).await?;
//! let jobs = store.claim_jobs("acme-mail", 10, "daemon-a", Duration::from_secs(30), now).await?;
//! assert_eq!((jobs.len(), counted.claimed.load(Ordering::Relaxed)), (1, 1));
//!
//! store.down.store(true, Ordering::Relaxed);
//! assert!(store.get_job("job-1").await.unwrap_err().is_retryable());
//! # Ok::<(), jobstore_api::Error>(()) }).unwrap();
//! ```
//!
//! # Writing a layer
//!
//! - Implement [`StoreLayer`] with `#[async_trait]` (needed only when it
//!   overrides an `async` method): `type Inner` is the wrapped store's type
//!   (`dyn JobStore` for an `Arc<dyn JobStore>`, which dispatches straight
//!   to the store behind it), and [`inner`](StoreLayer::inner) returns it.
//!   Write its return type as `&Self::Inner`: a bare `&dyn JobStore`
//!   there would mean a shorter-lived trait object than the trait's.
//! - Override the methods whose behaviour changes, with the same signature
//!   as in [`JobStore`]; the others forward to `inner()`, through
//!   [`around`](StoreLayer::around).
//! - Override [`around`](StoreLayer::around) to act on every call. It wraps
//!   each *forwarded* call; a method the layer writes itself is not wrapped
//!   unless it calls `self.around(...)` too.
//! - A layer keeps the contract of [`JobStore`]: if it changes what a
//!   call does (a gate, a delay, an injected error), the caller must still
//!   see an outcome some store could have given.
//!
//! **Name the trait by its path** (`impl jobstore_api::layer::StoreLayer
//! for ...`) rather than importing it. `StoreLayer`'s methods have the
//! names of [`JobStore`]'s, so where both traits are in scope a call such
//! as `store.get_job(id)` on a layer (or on an `Arc` or `Box`, which are
//! layers themselves) is ambiguous (error E0034). That is also why the
//! crate root does not re-export it: `use jobstore_api::*` never brings it
//! into scope. Inside the impl, call the wrapped store as `self.inner()`
//! (or the field), which only [`JobStore`] applies to.
//!
//! `Arc<S>` and `Box<S>` are layers over `S` with nothing overridden, which
//! is how they are stores.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::Result;
use crate::manage::*;
use crate::schedule::{Schedule, ScheduleAdvance, ScheduleRecord};
use crate::stats::{StatsBucket, StatsDelta, StatsQuery};
use crate::store::JobStore;
use crate::types::*;
use crate::watch::WorkWatcher;

/// The future of one store call, as [`JobStore`]'s methods return it (and
/// as [`StoreLayer::around`] takes and gives it).
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// A [`JobStore`] that wraps another, [`Inner`](Self::Inner): every method
/// has a default that calls the same method of [`inner`](Self::inner)
/// through [`around`](Self::around), so a layer writes only what it
/// changes. Every `StoreLayer` is a [`JobStore`]. See the
/// [module docs](self) for how to write one, and why to implement it by
/// its path.
#[async_trait]
pub trait StoreLayer: Send + Sync + Debug {
    /// The store wrapped (`dyn JobStore` for a shared `Arc<dyn JobStore>`).
    type Inner: JobStore + ?Sized;

    /// The store wrapped, which every method not overridden calls.
    fn inner(&self) -> &Self::Inner;

    /// Wraps each forwarded call: `op` is the [`JobStore`] method's name
    /// (`"claim_jobs"`), and `call` the inner store's call, not started
    /// until polled. The default returns `call` as is. A layer may time
    /// it, retry nothing, or answer without it (dropping it unpolled sends
    /// nothing to the inner store). Not applied to
    /// [`capabilities`](Self::capabilities), which is no call, nor to
    /// methods the layer writes itself.
    fn around<'a, T: Send + 'a>(
        &'a self,
        op: &'static str,
        call: StoreFuture<'a, T>,
    ) -> StoreFuture<'a, T> {
        let _ = op;
        call
    }

    /// [`JobStore::capabilities`]; by default the inner store's.
    fn capabilities(&self) -> Capabilities {
        self.inner().capabilities()
    }

    /// [`JobStore::add_jobs`].
    async fn add_jobs(&self, jobs: &[NewJob], now: Millis) -> Result<AddOutcome> {
        self.around("add_jobs", self.inner().add_jobs(jobs, now))
            .await
    }

    /// [`JobStore::waiting_jobtypes`].
    async fn waiting_jobtypes(&self, now: Millis) -> Result<Vec<WaitingJobtype>> {
        self.around("waiting_jobtypes", self.inner().waiting_jobtypes(now))
            .await
    }

    /// [`JobStore::claim_jobs`].
    async fn claim_jobs(
        &self,
        jobtype: &str,
        limit: usize,
        owner: &str,
        lease: Duration,
        now: Millis,
    ) -> Result<Vec<Job>> {
        self.around(
            "claim_jobs",
            self.inner().claim_jobs(jobtype, limit, owner, lease, now),
        )
        .await
    }

    /// [`JobStore::renew_locks`].
    async fn renew_locks(
        &self,
        ids: &[String],
        owner: &str,
        lease: Duration,
        now: Millis,
    ) -> Result<Renewal> {
        self.around(
            "renew_locks",
            self.inner().renew_locks(ids, owner, lease, now),
        )
        .await
    }

    /// [`JobStore::release_jobs`].
    async fn release_jobs(
        &self,
        releases: &[JobRelease],
        owner: &str,
        now: Millis,
    ) -> Result<Vec<String>> {
        self.around(
            "release_jobs",
            self.inner().release_jobs(releases, owner, now),
        )
        .await
    }

    /// [`JobStore::update_data`].
    async fn update_data(&self, id: &str, owner: &str, data: &[u8], now: Millis) -> Result<bool> {
        self.around(
            "update_data",
            self.inner().update_data(id, owner, data, now),
        )
        .await
    }

    /// [`JobStore::cancel_jobs`].
    async fn cancel_jobs(&self, ids: &[String], now: Millis) -> Result<CancelOutcome> {
        self.around("cancel_jobs", self.inner().cancel_jobs(ids, now))
            .await
    }

    /// [`JobStore::get_job`].
    async fn get_job(&self, id: &str) -> Result<Option<Job>> {
        self.around("get_job", self.inner().get_job(id)).await
    }

    /// [`JobStore::get_jobs`].
    async fn get_jobs(&self, ids: &[String]) -> Result<Vec<Job>> {
        self.around("get_jobs", self.inner().get_jobs(ids)).await
    }

    /// [`JobStore::purge_archived`].
    async fn purge_archived(&self, before: Millis, codes: &[ResultCode]) -> Result<u64> {
        self.around("purge_archived", self.inner().purge_archived(before, codes))
            .await
    }

    /// [`JobStore::job_counts`].
    async fn job_counts(&self, now: Millis) -> Result<Vec<JobCounts>> {
        self.around("job_counts", self.inner().job_counts(now))
            .await
    }

    /// [`JobStore::list_jobs`].
    async fn list_jobs(&self, query: &JobQuery, now: Millis) -> Result<JobPage> {
        self.around("list_jobs", self.inner().list_jobs(query, now))
            .await
    }

    /// [`JobStore::rerun_jobs`].
    async fn rerun_jobs(
        &self,
        ids: &[String],
        delay: Duration,
        now: Millis,
    ) -> Result<Vec<String>> {
        self.around("rerun_jobs", self.inner().rerun_jobs(ids, delay, now))
            .await
    }

    /// [`JobStore::delete_jobs`].
    async fn delete_jobs(&self, ids: &[String], now: Millis) -> Result<DeleteOutcome> {
        self.around("delete_jobs", self.inner().delete_jobs(ids, now))
            .await
    }

    /// [`JobStore::job_waits`].
    async fn job_waits(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<crate::Waits>> {
        self.around("job_waits", self.inner().job_waits(id, after, limit))
            .await
    }

    /// [`JobStore::waits_of`].
    async fn waits_of(&self, ids: &[String], limit: usize) -> Result<Vec<crate::Waits>> {
        self.around("waits_of", self.inner().waits_of(ids, limit))
            .await
    }

    /// [`JobStore::unblock_jobs`].
    async fn unblock_jobs(&self, ids: &[String], now: Millis) -> Result<Vec<String>> {
        self.around("unblock_jobs", self.inner().unblock_jobs(ids, now))
            .await
    }

    /// [`JobStore::settle_flows`].
    async fn settle_flows(&self, now: Millis, limit: usize) -> Result<u64> {
        self.around("settle_flows", self.inner().settle_flows(now, limit))
            .await
    }

    /// [`JobStore::edit_jobs`].
    async fn edit_jobs(&self, edits: &[JobEdit], now: Millis) -> Result<Vec<String>> {
        self.around("edit_jobs", self.inner().edit_jobs(edits, now))
            .await
    }

    /// [`JobStore::pause_jobtype`].
    async fn pause_jobtype(&self, jobtype: &str, paused: bool, now: Millis) -> Result<bool> {
        self.around(
            "pause_jobtype",
            self.inner().pause_jobtype(jobtype, paused, now),
        )
        .await
    }

    /// [`JobStore::paused_jobtypes`].
    async fn paused_jobtypes(&self) -> Result<Vec<String>> {
        self.around("paused_jobtypes", self.inner().paused_jobtypes())
            .await
    }

    /// [`JobStore::add_stats`].
    async fn add_stats(&self, deltas: &[StatsDelta], now: Millis) -> Result<()> {
        self.around("add_stats", self.inner().add_stats(deltas, now))
            .await
    }

    /// [`JobStore::job_stats`].
    async fn job_stats(&self, query: &StatsQuery, now: Millis) -> Result<Vec<StatsBucket>> {
        self.around("job_stats", self.inner().job_stats(query, now))
            .await
    }

    /// [`JobStore::set_schedule`].
    async fn set_schedule(
        &self,
        s: &Schedule,
        next_due: Option<Millis>,
        now: Millis,
    ) -> Result<ScheduleRecord> {
        self.around("set_schedule", self.inner().set_schedule(s, next_due, now))
            .await
    }

    /// [`JobStore::get_schedule`].
    async fn get_schedule(&self, name: &str) -> Result<Option<ScheduleRecord>> {
        self.around("get_schedule", self.inner().get_schedule(name))
            .await
    }

    /// [`JobStore::list_schedules`].
    async fn list_schedules(&self, prefix: &str) -> Result<Vec<ScheduleRecord>> {
        self.around("list_schedules", self.inner().list_schedules(prefix))
            .await
    }

    /// [`JobStore::delete_schedule`].
    async fn delete_schedule(&self, name: &str) -> Result<bool> {
        self.around("delete_schedule", self.inner().delete_schedule(name))
            .await
    }

    /// [`JobStore::pause_schedule`].
    async fn pause_schedule(
        &self,
        name: &str,
        paused: bool,
        next_due: Option<Millis>,
        now: Millis,
    ) -> Result<bool> {
        self.around(
            "pause_schedule",
            self.inner().pause_schedule(name, paused, next_due, now),
        )
        .await
    }

    /// [`JobStore::due_schedules`].
    async fn due_schedules(&self, now: Millis, limit: usize) -> Result<Vec<ScheduleRecord>> {
        self.around("due_schedules", self.inner().due_schedules(now, limit))
            .await
    }

    /// [`JobStore::advance_schedule`].
    async fn advance_schedule(
        &self,
        name: &str,
        version: u64,
        advance: &ScheduleAdvance,
        now: Millis,
    ) -> Result<bool> {
        self.around(
            "advance_schedule",
            self.inner().advance_schedule(name, version, advance, now),
        )
        .await
    }

    /// [`JobStore::watch`]; by default the inner store's watcher, so
    /// notifications pass through the layer.
    async fn watch(&self) -> Result<WorkWatcher> {
        self.around("watch", self.inner().watch()).await
    }

    /// [`JobStore::set_handler`].
    async fn set_handler(
        &self,
        jobtype: &str,
        handler: &Handler,
        now: Millis,
    ) -> Result<HandlerVersion> {
        self.around(
            "set_handler",
            self.inner().set_handler(jobtype, handler, now),
        )
        .await
    }

    /// [`JobStore::get_handler`].
    async fn get_handler(&self, jobtype: &str) -> Result<Option<HandlerVersion>> {
        self.around("get_handler", self.inner().get_handler(jobtype))
            .await
    }

    /// [`JobStore::delete_handler`].
    async fn delete_handler(&self, jobtype: &str) -> Result<bool> {
        self.around("delete_handler", self.inner().delete_handler(jobtype))
            .await
    }

    /// [`JobStore::list_handlers`].
    async fn list_handlers(&self) -> Result<Vec<HandlerVersion>> {
        self.around("list_handlers", self.inner().list_handlers())
            .await
    }

    /// [`JobStore::reserve_sysid`].
    async fn reserve_sysid(&self, sysid: &str, ttl: Duration, now: Millis) -> Result<SysidLease> {
        self.around("reserve_sysid", self.inner().reserve_sysid(sysid, ttl, now))
            .await
    }

    /// [`JobStore::renew_sysid`].
    async fn renew_sysid(
        &self,
        lease: &SysidLease,
        ttl: Duration,
        now: Millis,
    ) -> Result<SysidLease> {
        self.around("renew_sysid", self.inner().renew_sysid(lease, ttl, now))
            .await
    }

    /// [`JobStore::release_sysid`].
    async fn release_sysid(&self, lease: &SysidLease) -> Result<bool> {
        self.around("release_sysid", self.inner().release_sysid(lease))
            .await
    }
}

/// Every layer is a store: each method is the layer's.
#[async_trait]
impl<L: StoreLayer> JobStore for L {
    fn capabilities(&self) -> Capabilities {
        StoreLayer::capabilities(self)
    }
    async fn add_jobs(&self, jobs: &[NewJob], now: Millis) -> Result<AddOutcome> {
        StoreLayer::add_jobs(self, jobs, now).await
    }
    async fn waiting_jobtypes(&self, now: Millis) -> Result<Vec<WaitingJobtype>> {
        StoreLayer::waiting_jobtypes(self, now).await
    }
    async fn claim_jobs(
        &self,
        jobtype: &str,
        limit: usize,
        owner: &str,
        lease: Duration,
        now: Millis,
    ) -> Result<Vec<Job>> {
        StoreLayer::claim_jobs(self, jobtype, limit, owner, lease, now).await
    }
    async fn renew_locks(
        &self,
        ids: &[String],
        owner: &str,
        lease: Duration,
        now: Millis,
    ) -> Result<Renewal> {
        StoreLayer::renew_locks(self, ids, owner, lease, now).await
    }
    async fn release_jobs(
        &self,
        releases: &[JobRelease],
        owner: &str,
        now: Millis,
    ) -> Result<Vec<String>> {
        StoreLayer::release_jobs(self, releases, owner, now).await
    }
    async fn update_data(&self, id: &str, owner: &str, data: &[u8], now: Millis) -> Result<bool> {
        StoreLayer::update_data(self, id, owner, data, now).await
    }
    async fn cancel_jobs(&self, ids: &[String], now: Millis) -> Result<CancelOutcome> {
        StoreLayer::cancel_jobs(self, ids, now).await
    }
    async fn get_job(&self, id: &str) -> Result<Option<Job>> {
        StoreLayer::get_job(self, id).await
    }
    async fn get_jobs(&self, ids: &[String]) -> Result<Vec<Job>> {
        StoreLayer::get_jobs(self, ids).await
    }
    async fn purge_archived(&self, before: Millis, codes: &[ResultCode]) -> Result<u64> {
        StoreLayer::purge_archived(self, before, codes).await
    }
    async fn job_counts(&self, now: Millis) -> Result<Vec<JobCounts>> {
        StoreLayer::job_counts(self, now).await
    }
    async fn list_jobs(&self, query: &JobQuery, now: Millis) -> Result<JobPage> {
        StoreLayer::list_jobs(self, query, now).await
    }
    async fn rerun_jobs(
        &self,
        ids: &[String],
        delay: Duration,
        now: Millis,
    ) -> Result<Vec<String>> {
        StoreLayer::rerun_jobs(self, ids, delay, now).await
    }
    async fn delete_jobs(&self, ids: &[String], now: Millis) -> Result<DeleteOutcome> {
        StoreLayer::delete_jobs(self, ids, now).await
    }
    async fn job_waits(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<crate::Waits>> {
        StoreLayer::job_waits(self, id, after, limit).await
    }
    async fn waits_of(&self, ids: &[String], limit: usize) -> Result<Vec<crate::Waits>> {
        StoreLayer::waits_of(self, ids, limit).await
    }
    async fn unblock_jobs(&self, ids: &[String], now: Millis) -> Result<Vec<String>> {
        StoreLayer::unblock_jobs(self, ids, now).await
    }
    async fn settle_flows(&self, now: Millis, limit: usize) -> Result<u64> {
        StoreLayer::settle_flows(self, now, limit).await
    }
    async fn edit_jobs(&self, edits: &[JobEdit], now: Millis) -> Result<Vec<String>> {
        StoreLayer::edit_jobs(self, edits, now).await
    }
    async fn pause_jobtype(&self, jobtype: &str, paused: bool, now: Millis) -> Result<bool> {
        StoreLayer::pause_jobtype(self, jobtype, paused, now).await
    }
    async fn paused_jobtypes(&self) -> Result<Vec<String>> {
        StoreLayer::paused_jobtypes(self).await
    }
    async fn add_stats(&self, deltas: &[StatsDelta], now: Millis) -> Result<()> {
        StoreLayer::add_stats(self, deltas, now).await
    }
    async fn job_stats(&self, query: &StatsQuery, now: Millis) -> Result<Vec<StatsBucket>> {
        StoreLayer::job_stats(self, query, now).await
    }
    async fn watch(&self) -> Result<WorkWatcher> {
        StoreLayer::watch(self).await
    }
    async fn set_schedule(
        &self,
        s: &Schedule,
        next_due: Option<Millis>,
        now: Millis,
    ) -> Result<ScheduleRecord> {
        StoreLayer::set_schedule(self, s, next_due, now).await
    }
    async fn get_schedule(&self, name: &str) -> Result<Option<ScheduleRecord>> {
        StoreLayer::get_schedule(self, name).await
    }
    async fn list_schedules(&self, prefix: &str) -> Result<Vec<ScheduleRecord>> {
        StoreLayer::list_schedules(self, prefix).await
    }
    async fn delete_schedule(&self, name: &str) -> Result<bool> {
        StoreLayer::delete_schedule(self, name).await
    }
    async fn pause_schedule(
        &self,
        name: &str,
        paused: bool,
        next_due: Option<Millis>,
        now: Millis,
    ) -> Result<bool> {
        StoreLayer::pause_schedule(self, name, paused, next_due, now).await
    }
    async fn due_schedules(&self, now: Millis, limit: usize) -> Result<Vec<ScheduleRecord>> {
        StoreLayer::due_schedules(self, now, limit).await
    }
    async fn advance_schedule(
        &self,
        name: &str,
        version: u64,
        advance: &ScheduleAdvance,
        now: Millis,
    ) -> Result<bool> {
        StoreLayer::advance_schedule(self, name, version, advance, now).await
    }
    async fn set_handler(
        &self,
        jobtype: &str,
        handler: &Handler,
        now: Millis,
    ) -> Result<HandlerVersion> {
        StoreLayer::set_handler(self, jobtype, handler, now).await
    }
    async fn get_handler(&self, jobtype: &str) -> Result<Option<HandlerVersion>> {
        StoreLayer::get_handler(self, jobtype).await
    }
    async fn delete_handler(&self, jobtype: &str) -> Result<bool> {
        StoreLayer::delete_handler(self, jobtype).await
    }
    async fn list_handlers(&self) -> Result<Vec<HandlerVersion>> {
        StoreLayer::list_handlers(self).await
    }
    async fn reserve_sysid(&self, sysid: &str, ttl: Duration, now: Millis) -> Result<SysidLease> {
        StoreLayer::reserve_sysid(self, sysid, ttl, now).await
    }
    async fn renew_sysid(
        &self,
        lease: &SysidLease,
        ttl: Duration,
        now: Millis,
    ) -> Result<SysidLease> {
        StoreLayer::renew_sysid(self, lease, ttl, now).await
    }
    async fn release_sysid(&self, lease: &SysidLease) -> Result<bool> {
        StoreLayer::release_sysid(self, lease).await
    }
}

/// A shared store is the store behind it.
impl<S: JobStore + ?Sized> StoreLayer for Arc<S> {
    type Inner = S;
    fn inner(&self) -> &S {
        self
    }
}

/// A boxed store is the store inside it.
impl<S: JobStore + ?Sized> StoreLayer for Box<S> {
    type Inner = S;
    fn inner(&self) -> &S {
        self
    }
}
