//! A store that offers neither schedules, unique keys, repeating jobs nor
//! dependencies, as a third-party backend may declare: the reference store
//! behind a layer that turns `Capabilities::schedules`, `unique_jobs`,
//! `repeat` and `dependencies` off, answers every schedule method,
//! `job_waits`, `waits_of` and `unblock_jobs` as the trait's defaults do (`Unsupported`), and validates
//! adds and releases against its own capabilities (a job with a unique
//! key, a rule or dependencies, a `Release::Repeat`: `Unsupported`). The
//! whole suite passes, its schedule, unique-key, repeat and dependency
//! behaviours checking those answers.

use async_trait::async_trait;
use jobstore_api::{
    AddOutcome, Capabilities, Error, JobRelease, MemoryStore, Millis, NewJob, Result, Schedule,
    ScheduleAdvance, ScheduleRecord,
};
use jobstore_conformance::TestStore;

#[derive(Debug)]
struct NoOptions(MemoryStore);

#[async_trait]
impl jobstore_api::layer::StoreLayer for NoOptions {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.0
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = jobstore_api::JobStore::capabilities(&self.0);
        caps.schedules = false;
        caps.unique_jobs = false;
        caps.repeat = false;
        caps.dependencies = false;
        caps
    }

    async fn job_waits(
        &self,
        _: &str,
        _: Option<&str>,
        _: usize,
    ) -> Result<Option<jobstore_api::Waits>> {
        Err(Error::unsupported("job_waits"))
    }

    async fn waits_of(&self, _: &[String], _: usize) -> Result<Vec<jobstore_api::Waits>> {
        Err(Error::unsupported("waits_of"))
    }

    async fn unblock_jobs(&self, _: &[String], _: Millis) -> Result<Vec<String>> {
        Err(Error::unsupported("unblock_jobs"))
    }

    async fn add_jobs(&self, jobs: &[NewJob], now: Millis) -> Result<AddOutcome> {
        jobstore_api::validate::new_jobs(jobs, &self.capabilities(), now)?;
        jobstore_api::JobStore::add_jobs(&self.0, jobs, now).await
    }

    async fn release_jobs(
        &self,
        releases: &[JobRelease],
        owner: &str,
        now: Millis,
    ) -> Result<Vec<String>> {
        jobstore_api::validate::release(releases, owner, now, &self.capabilities())?;
        jobstore_api::JobStore::release_jobs(&self.0, releases, owner, now).await
    }

    async fn set_schedule(
        &self,
        _: &Schedule,
        _: Option<Millis>,
        _: Millis,
    ) -> Result<ScheduleRecord> {
        Err(Error::unsupported("set_schedule"))
    }
    async fn get_schedule(&self, _: &str) -> Result<Option<ScheduleRecord>> {
        Err(Error::unsupported("get_schedule"))
    }
    async fn list_schedules(&self, _: &str) -> Result<Vec<ScheduleRecord>> {
        Err(Error::unsupported("list_schedules"))
    }
    async fn delete_schedule(&self, _: &str) -> Result<bool> {
        Err(Error::unsupported("delete_schedule"))
    }
    async fn pause_schedule(&self, _: &str, _: bool, _: Option<Millis>, _: Millis) -> Result<bool> {
        Err(Error::unsupported("pause_schedule"))
    }
    async fn due_schedules(&self, _: Millis, _: usize) -> Result<Vec<ScheduleRecord>> {
        Err(Error::unsupported("due_schedules"))
    }
    async fn advance_schedule(
        &self,
        _: &str,
        _: u64,
        _: &ScheduleAdvance,
        _: Millis,
    ) -> Result<bool> {
        Err(Error::unsupported("advance_schedule"))
    }
}

async fn factory() -> Option<TestStore> {
    Some(TestStore::new(NoOptions(MemoryStore::new())))
}

jobstore_conformance::conformance_tests!(factory);
