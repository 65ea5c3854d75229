//! The registry of remote workers: who fetched jobs from this daemon,
//! when each was last heard from, and which jobs each holds, so that
//! finished or abandoned jobs give their scheduler slots back. It is this
//! daemon's view: a worker that talks to several daemons on one store is
//! in the registry of each, with what it did there.
//!
//! # Lease tokens
//!
//! A remote worker holds its jobs under a *lease token*, the store's lock
//! owner of each job it was handed:
//!
//! ```text
//! {sysid}/{client}:{worker}/{session}
//! ```
//!
//! `sysid` is the daemon that handed the jobs out (it may itself contain
//! `/`), `client` the tenant, `worker` the worker's name (1..=64 bytes of
//! `A-Za-z0-9_.-`), `session` 16 hex digits, new for each fetch without a
//! token. The daemon's own runners claim under the bare sysid, and every
//! worker session has its own token, so the store's owner fencing keeps
//! them apart: a worker cannot finish, renew or update another's jobs, nor
//! its own once another claimer took them over after its lease ran out.
//! The client in the token makes it useless on another client's paths, and
//! any daemon on the same store can take the worker's heartbeats and
//! results.

use crate::events::RunStart;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use jobstore_api::Millis;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::Limits;

/// Longest worker name, in bytes.
pub const MAX_WORKER_LEN: usize = 64;

/// Remote workers seen and the jobs they hold.
pub struct WorkerRegistry {
    inner: Mutex<Registry>,
    /// How long a worker may stay silent before it counts as gone.
    worker_expiry: Duration,
}

impl std::fmt::Debug for WorkerRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerRegistry").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Registry {
    jobs: HashMap<String, RemoteJob>,
    workers: BTreeMap<(String, String), WorkerEntry>,
}

/// A job a remote worker holds.
#[derive(Debug, Clone)]
pub struct RemoteJob {
    /// Its store jobtype.
    pub jobtype: String,
    /// The lease token (store lock owner).
    pub owner: String,
    /// The client and worker holding it.
    pub worker: (String, String),
    /// When its lease runs out unless renewed.
    pub expires: Millis,
    /// Its hand-out number.
    pub attempt: u32,
    /// When it was stored.
    pub created: Millis,
    /// When it was handed out, if known (a run's length is counted from
    /// it).
    pub claimed: Option<Millis>,
    /// The limits of its handler when it was handed out.
    pub limits: Limits,
    /// The run as handed out, while job events are on.
    pub run: Option<Box<RunStart>>,
    /// The trace context its run continues ([`crate::trace::run_trace`]),
    /// given to the jobs its finish adds.
    pub trace: Option<jobstore_api::TraceContext>,
    /// Its rule and times, when it repeats.
    pub repeat: Option<Box<super::policy::Repeating>>,
}

#[derive(Debug, Clone, Default)]
struct WorkerEntry {
    last_seen: Millis,
    held: usize,
    fetched: u64,
    finished: u64,
}

/// A worker as the registry knows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WorkerView {
    /// Its name.
    pub worker: String,
    /// `active`, or `gone` when silent past its expiry (its jobs come back
    /// after their leases).
    pub state: String,
    /// When it last fetched, renewed or finished (epoch ms).
    pub last_seen: Millis,
    /// Jobs it holds now.
    pub jobs_held: usize,
    /// Jobs handed to it since the daemon started.
    pub fetched: u64,
    /// Jobs it finished since the daemon started.
    pub finished: u64,
}

impl WorkerRegistry {
    /// An empty registry; workers silent for `worker_expiry` count as gone.
    pub fn new(worker_expiry: Duration) -> Self {
        WorkerRegistry {
            inner: Mutex::default(),
            worker_expiry,
        }
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A worker was heard from.
    pub fn seen(&self, client: &str, worker: &str, now: Millis) {
        self.registry()
            .workers
            .entry((client.to_owned(), worker.to_owned()))
            .or_default()
            .last_seen = now;
    }

    /// Jobs were handed to a worker. Returns the jobtype of each job the
    /// registry still knew under an earlier holder, whose scheduler slot
    /// is to be given back.
    pub fn handed_out(
        &self,
        client: &str,
        worker: &str,
        jobs: Vec<(String, RemoteJob)>,
        now: Millis,
    ) -> Vec<String> {
        let mut r = self.registry();
        let w = r
            .workers
            .entry((client.to_owned(), worker.to_owned()))
            .or_default();
        w.last_seen = now;
        w.held += jobs.len();
        w.fetched += jobs.len() as u64;
        // A job handed out again before the sweep forgot its last holder
        // (whose lease ran out): that holder's entry ends here.
        let mut replaced = Vec::new();
        for (id, job) in jobs {
            if let Some(old) = r.jobs.insert(id, job) {
                if let Some(w) = r.workers.get_mut(&old.worker) {
                    w.held = w.held.saturating_sub(1);
                }
                replaced.push(old.jobtype);
            }
        }
        replaced
    }

    /// The registry's entry of a held job.
    pub fn job(&self, id: &str) -> Option<RemoteJob> {
        self.registry().jobs.get(id).cloned()
    }

    /// Leases renewed until `expires`.
    pub fn renewed(&self, ids: &[String], expires: Millis) {
        let mut r = self.registry();
        for id in ids {
            if let Some(j) = r.jobs.get_mut(id) {
                j.expires = expires;
            }
        }
    }

    /// Jobs that left their worker (finished, failed, lost or abandoned).
    /// `finished` counts toward the worker's finished jobs. Returns the
    /// jobtype of each job the registry held, whose scheduler slot is to be
    /// given back.
    pub fn settle(&self, ids: &[String], finished: bool) -> Vec<String> {
        let mut gone = Vec::new();
        let mut r = self.registry();
        for id in ids {
            if let Some(job) = r.jobs.remove(id) {
                if let Some(w) = r.workers.get_mut(&job.worker) {
                    w.held = w.held.saturating_sub(1);
                    if finished {
                        w.finished += 1;
                    }
                }
                gone.push(job.jobtype);
            }
        }
        gone
    }

    /// Forgets held jobs whose lease ran out (their worker went away; the
    /// store hands them out again) and workers long gone. Returns the
    /// jobtypes of the jobs forgotten, as [`settle`](Self::settle) does.
    pub fn sweep(&self, now: Millis) -> Vec<String> {
        let expired: Vec<String> = self
            .registry()
            .jobs
            .iter()
            .filter(|(_, j)| j.expires <= now)
            .map(|(id, _)| id.clone())
            .collect();
        let mut gone = Vec::new();
        if !expired.is_empty() {
            tracing::info!(
                jobs = expired.len(),
                "remote leases ran out; the jobs run again elsewhere"
            );
            gone = self.settle(&expired, false);
        }
        let forget_after = jobstore_api::duration_ms(self.worker_expiry) * 60;
        self.registry()
            .workers
            .retain(|_, w| w.held > 0 || now - w.last_seen < forget_after);
        gone
    }

    /// The workers of `client` the registry knows.
    pub fn workers(&self, client: &str, now: Millis) -> Vec<WorkerView> {
        let expiry = jobstore_api::duration_ms(self.worker_expiry);
        self.registry()
            .workers
            .iter()
            .filter(|((c, _), _)| c == client)
            .map(|((_, name), w)| WorkerView {
                worker: name.clone(),
                state: if now - w.last_seen > expiry {
                    "gone".to_owned()
                } else {
                    "active".to_owned()
                },
                last_seen: w.last_seen,
                jobs_held: w.held,
                fetched: w.fetched,
                finished: w.finished,
            })
            .collect()
    }

    /// (active workers, gone workers, jobs held) over every client.
    pub fn totals(&self, now: Millis) -> (usize, usize, usize) {
        let expiry = jobstore_api::duration_ms(self.worker_expiry);
        let r = self.registry();
        let active = r
            .workers
            .values()
            .filter(|w| now - w.last_seen <= expiry)
            .count();
        (active, r.workers.len() - active, r.jobs.len())
    }
}

/// A worker name: 1..=[`MAX_WORKER_LEN`] bytes of `[A-Za-z0-9_.-]`.
pub fn check_worker(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_WORKER_LEN {
        return Err(format!(
            "worker name must be 1..={MAX_WORKER_LEN} bytes, not {}",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(format!(
            "worker name {name:?} contains {c:?}; allowed are A-Z a-z 0-9 _ . -"
        ));
    }
    Ok(())
}

/// A new lease token for `client`'s `worker`, handed out by daemon
/// `sysid` (see the module docs for its form).
pub fn new_lease(sysid: &str, client: &str, worker: &str) -> String {
    let session: [u8; 8] = rand::random();
    format!("{sysid}/{client}:{worker}/{}", hex::encode(session))
}

/// The client and worker named in a lease token, if the token is well
/// formed.
pub fn lease_holder(token: &str) -> Option<(&str, &str)> {
    let mut parts = token.rsplitn(3, '/');
    let session = parts.next()?;
    let holder = parts.next()?;
    let sysid = parts.next()?;
    let (client, worker) = holder.split_once(':')?;
    (session.len() == 16
        && session.bytes().all(|b| b.is_ascii_hexdigit())
        && crate::tenant::Client::new(client).is_ok()
        && check_worker(worker).is_ok()
        && jobstore_api::validate::sysid(token).is_ok()
        && !sysid.is_empty())
    .then_some((client, worker))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_tokens_name_their_worker() {
        let t = new_lease("node-1", "acme", "w_1");
        assert_eq!(lease_holder(&t), Some(("acme", "w_1")));
        let t = new_lease("host/with/slashes", "c", "w");
        assert_eq!(lease_holder(&t), Some(("c", "w")));
        for bad in [
            "",
            "node/c:w",
            "node/c:w/xyz",
            "node/w/0123456789abcdef",
            "node/c:w w/0123456789abcdef",
            "node/c-d:w/0123456789abcdef",
            "node/:w/0123456789abcdef",
            "/c:w/0123456789abcdef",
        ] {
            assert_eq!(lease_holder(bad), None, "{bad:?}");
        }
        assert!(check_worker("a.b-c_1").is_ok());
        assert!(check_worker("a/b").is_err());
        assert!(check_worker(&"x".repeat(65)).is_err());
    }

    #[test]
    fn settling_and_sweeping_name_the_slots_to_give_back() {
        let reg = WorkerRegistry::new(Duration::from_secs(10));
        let job = |id: &str, expires| {
            (
                id.to_owned(),
                RemoteJob {
                    jobtype: format!("acme-{id}"),
                    owner: "n/w/0123456789abcdef".into(),
                    worker: ("acme".into(), "w".into()),
                    expires,
                    attempt: 1,
                    created: 0,
                    claimed: Some(0),
                    limits: Limits::default(),
                    run: None,
                    trace: None,
                    repeat: None,
                    depends_on: Vec::new(),
                    on_dependency_failure: Default::default(),
                },
            )
        };
        let replaced = reg.handed_out(
            "acme",
            "w",
            vec![job("a", 100), job("b", 100), job("c", 50)],
            0,
        );
        assert!(replaced.is_empty());
        assert_eq!(reg.totals(0), (1, 0, 3));
        assert_eq!(reg.settle(&["a".into(), "x".into()], true), ["acme-a"]);
        assert!(reg.settle(&["a".into()], true).is_empty(), "settled once");
        assert_eq!(reg.sweep(60), ["acme-c"], "c's lease ran out");
        assert!(reg.sweep(60).is_empty());
        let w = &reg.workers("acme", 60)[0];
        assert_eq!((w.jobs_held, w.fetched, w.finished), (1, 3, 1));
        assert_eq!(w.state, "active");
        assert_eq!(reg.workers("acme", 20_000)[0].state, "gone");
        assert!(reg.workers("globex", 60).is_empty());
        assert_eq!(reg.totals(20_000), (0, 1, 1));
        // b handed out again (its lease ran out, the sweep had not run):
        // the earlier holder's entry ends, its slot is named.
        assert_eq!(
            reg.handed_out("acme", "w2", vec![job("b", 200)], 70),
            ["acme-b"]
        );
        assert_eq!(
            reg.workers("acme", 70)[0].jobs_held,
            0,
            "w holds nothing now"
        );
        assert_eq!(reg.totals(70).2, 1);
    }
}
