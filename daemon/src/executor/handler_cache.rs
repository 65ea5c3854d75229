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
        let fresh: HashMap<String, HandlerVersion> = list
            .into_iter()
            .map(|v| (v.jobtype.clone(), v))
            .collect();
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
