//! The handlers this daemon claims with: every handler read in one
//! `list_handlers` call at most once per `handler_ttl`, and a jobtype
//! without one looked up on its own (at most once per `handler_ttl`), so
//! that a handler set just before its jobs were added is found at once.
//! Local claims and remote fetches read the same cache, and every read
//! gives the scheduler the handler's concurrency cap and whether this
//! daemon's runners run its jobs.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use jobstore_api::{HandlerVersion, JobStore};

use super::scheduler::Scheduler;
use crate::runner::Method;

#[derive(Debug, Default)]
struct Cache {
    /// Every handler, as of `read`.
    handlers: HashMap<String, HandlerVersion>,
    read: Option<Instant>,
    /// Jobtypes found without a handler, and when.
    missing: HashMap<String, Instant>,
}

/// The cache (see the module docs).
#[derive(Debug)]
pub struct HandlerCache {
    cache: Mutex<Cache>,
    ttl: Duration,
    /// Whether this daemon runs process handlers.
    processes: bool,
}

impl HandlerCache {
    /// An empty cache whose reads live `ttl`.
    pub fn new(ttl: Duration, processes: bool) -> Self {
        HandlerCache {
            cache: Mutex::default(),
            ttl,
            processes,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads every handler when the last read is older than the TTL, and
    /// gives the scheduler their caps, so that caps hold before the first
    /// claim of a jobtype.
    pub async fn refresh(
        &self,
        store: &dyn JobStore,
        sched: &Mutex<Scheduler>,
    ) -> jobstore_api::Result<()> {
        if self.lock().read.is_some_and(|at| at.elapsed() < self.ttl) {
            return Ok(());
        }
        let list = store.list_handlers().await?;
        let fresh: HashMap<String, HandlerVersion> =
            list.into_iter().map(|v| (v.jobtype.clone(), v)).collect();
        let mut cache = self.lock();
        let mut sched = sched.lock().unwrap_or_else(|e| e.into_inner());
        for v in fresh.values() {
            self.apply(&mut sched, v);
        }
        for gone in cache.handlers.keys().filter(|jt| !fresh.contains_key(*jt)) {
            sched.set_jobtype_cap(gone, None);
            sched.set_remote_only(gone, false);
        }
        cache.handlers = fresh;
        cache.read = Some(Instant::now());
        cache.missing.clear();
        Ok(())
    }

    /// The jobtype's handler, from the last read or looked up on its own.
    pub async fn get(
        &self,
        store: &dyn JobStore,
        sched: &Mutex<Scheduler>,
        jobtype: &str,
    ) -> jobstore_api::Result<Option<HandlerVersion>> {
        {
            let cache = self.lock();
            if let Some(h) = cache.handlers.get(jobtype) {
                return Ok(Some(h.clone()));
            }
            if cache
                .missing
                .get(jobtype)
                .is_some_and(|at| at.elapsed() < self.ttl)
            {
                return Ok(None);
            }
        }
        let found = store.get_handler(jobtype).await?;
        let mut cache = self.lock();
        match found {
            Some(v) => {
                self.apply(&mut sched.lock().unwrap_or_else(|e| e.into_inner()), &v);
                cache.handlers.insert(jobtype.to_owned(), v.clone());
                Ok(Some(v))
            }
            None => {
                if cache.missing.len() > 10_000 {
                    let ttl = self.ttl;
                    cache.missing.retain(|_, at| at.elapsed() < ttl);
                }
                cache.missing.insert(jobtype.to_owned(), Instant::now());
                Ok(None)
            }
        }
    }

    /// Whether this daemon's runners run jobs of `handler`.
    pub fn runs_here(&self, handler: &HandlerVersion) -> bool {
        Method::of(&handler.handler).is_some_and(|m| m.runs_here(self.processes))
    }

    /// Gives the scheduler what a handler says: its concurrency cap, and
    /// whether this daemon's runners leave its jobs to others (remote
    /// workers, or daemons that allow process handlers).
    fn apply(&self, sched: &mut Scheduler, v: &HandlerVersion) {
        sched.set_jobtype_cap(&v.jobtype, v.handler.limits.concurrency);
        sched.set_remote_only(&v.jobtype, !self.runs_here(v));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::time::Duration;

    use jobstore_api::layer::StoreFuture;
    use jobstore_api::{Handler, HandlerLimits, JobStore, MemoryStore};

    use super::*;
    use crate::executor::scheduler::SchedulerConfig;

    /// Counts the calls that reach the store, by operation.
    #[derive(Debug, Default)]
    struct Counted {
        inner: MemoryStore,
        calls: Mutex<HashMap<&'static str, u32>>,
    }

    impl jobstore_api::layer::StoreLayer for Counted {
        type Inner = MemoryStore;
        fn inner(&self) -> &MemoryStore {
            &self.inner
        }
        fn around<'a, T: Send + 'a>(
            &'a self,
            op: &'static str,
            call: StoreFuture<'a, T>,
        ) -> StoreFuture<'a, T> {
            *self.calls.lock().unwrap().entry(op).or_default() += 1;
            call
        }
    }

    impl Counted {
        fn calls(&self, op: &str) -> u32 {
            self.calls.lock().unwrap().get(op).copied().unwrap_or(0)
        }
    }

    fn handler(method: &str, concurrency: Option<u32>) -> Handler {
        Handler::new(method, "http://127.0.0.1:9/").limits(HandlerLimits {
            concurrency,
            ..HandlerLimits::default()
        })
    }

    #[tokio::test]
    async fn reads_once_per_ttl_and_gives_the_scheduler_caps() {
        let store = Counted::default();
        store
            .set_handler("acme-a", &handler("http", Some(2)), 1)
            .await
            .unwrap();
        store
            .set_handler("acme-r", &handler("remote", None), 1)
            .await
            .unwrap();
        let sched = Mutex::new(Scheduler::new(SchedulerConfig::with_slots(16)));
        let cache = HandlerCache::new(Duration::from_secs(60), false);
        cache.refresh(&store, &sched).await.unwrap();
        cache.refresh(&store, &sched).await.unwrap();
        assert_eq!(store.calls("list_handlers"), 1, "once per TTL");
        let grant = sched.lock().unwrap().admit("acme-a", 5, 1).unwrap();
        assert_eq!(grant.count, 2, "the handler's concurrency caps grants");
        let a = cache.get(&store, &sched, "acme-a").await.unwrap().unwrap();
        let r = cache.get(&store, &sched, "acme-r").await.unwrap().unwrap();
        assert!(cache.runs_here(&a) && !cache.runs_here(&r));
        assert_eq!(store.calls("get_handler"), 0, "both came with the list");
        // A jobtype without a handler is looked up on its own, once per TTL.
        assert!(cache.get(&store, &sched, "acme-x").await.unwrap().is_none());
        assert!(cache.get(&store, &sched, "acme-x").await.unwrap().is_none());
        assert_eq!(store.calls("get_handler"), 1);
        // Set after the list was read: found by the lookup of its own.
        store
            .set_handler("acme-y", &handler("process", None), 2)
            .await
            .unwrap();
        let y = cache.get(&store, &sched, "acme-y").await.unwrap().unwrap();
        assert!(
            !cache.runs_here(&y),
            "process handlers are not allowed here"
        );
        assert_eq!(store.calls("get_handler"), 2);
    }

    #[tokio::test]
    async fn a_deleted_handler_takes_its_cap_with_it() {
        let store = Counted::default();
        store
            .set_handler("acme-a", &handler("http", Some(1)), 1)
            .await
            .unwrap();
        let sched = Mutex::new(Scheduler::new(SchedulerConfig::with_slots(16)));
        let cache = HandlerCache::new(Duration::ZERO, true);
        cache.refresh(&store, &sched).await.unwrap();
        let g = sched.lock().unwrap().admit("acme-a", 4, 1).unwrap();
        assert_eq!(g.count, 1);
        sched.lock().unwrap().jobs_started(g, 0, 1);
        store.delete_handler("acme-a").await.unwrap();
        cache.refresh(&store, &sched).await.unwrap();
        assert_eq!(
            store.calls("list_handlers"),
            2,
            "a TTL of zero reads every time"
        );
        let g = sched.lock().unwrap().admit("acme-a", 4, 2).unwrap();
        assert_eq!(g.count, 4, "no cap once the handler is gone");
        assert!(cache.get(&store, &sched, "acme-a").await.unwrap().is_none());
    }
}
