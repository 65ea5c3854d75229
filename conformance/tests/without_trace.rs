//! A store that does not keep trace context, as a third-party backend may
//! declare: the reference store behind a layer that turns
//! `Capabilities::trace` off and drops each new job's context after
//! validating it. The whole suite passes, its trace behaviours checking
//! the declared behaviour (accepted, validated, read back as `None`).

use async_trait::async_trait;
use jobstore_api::{AddOutcome, Capabilities, JobStore, MemoryStore, Millis, NewJob, Result};
use jobstore_conformance::TestStore;

#[derive(Debug)]
struct NoTrace(MemoryStore);

/// The reference store's capabilities without trace context.
fn caps(inner: &MemoryStore) -> Capabilities {
    let mut caps = inner.capabilities();
    caps.trace = false;
    caps
}

#[async_trait]
impl jobstore_api::layer::StoreLayer for NoTrace {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.0
    }

    fn capabilities(&self) -> Capabilities {
        caps(&self.0)
    }

    async fn add_jobs(&self, jobs: &[NewJob], now: Millis) -> Result<AddOutcome> {
        jobstore_api::validate::new_jobs(jobs, &caps(&self.0), now)?;
        let stripped: Vec<NewJob> = jobs
            .iter()
            .map(|j| NewJob {
                trace: None,
                ..j.clone()
            })
            .collect();
        self.0.add_jobs(&stripped, now).await
    }
}

async fn factory() -> Option<TestStore> {
    Some(TestStore::new(NoTrace(MemoryStore::new())))
}

jobstore_conformance::conformance_tests!(factory);
