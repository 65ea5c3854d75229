//! [`RedisStore`]: the [`JobStore`] on Redis and Redis Cluster.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::{join_all, try_join_all};
use jobstore_api::history::{complete_history, with_added};
use jobstore_api::*;
use jobstore_api::{CancelOutcome, Renewal};
use redis::Value;

use crate::add::{ADD_ROUNDS, Status};
use crate::conn::Conn;
use crate::decode::{
    MARK, ResultField, bytes, handler_version, history, int, is_marked, job_flow, job_from_hash,
    pairs, string, tags, trace,
};
use crate::error::{malformed, map};
use crate::flow::{Entry, LOCK_STAGED};
use crate::index::{CACHE_MAX, in_order};
use crate::keys::{Keys, key_slot};
use crate::options::RedisOptions;
use crate::options::{Target, parse_url, strip_prefix_param};
use crate::scripts::{SCRIPTS, padded};
use crate::watch;

/// How many archived jobs one `purge.lua` call deletes at most.
const PURGE_SLICE: usize = 1_000;

/// A [`JobStore`] on Redis or Redis Cluster. See the crate docs for the
/// URL form, the key layout and the scripts.
pub struct RedisStore {
    pub(crate) conn: Conn,
    pub(crate) keys: Keys,
    pub(crate) opts: RedisOptions,
    /// Clients for pub/sub and maintenance: the server, or the cluster's
    /// seed nodes.
    pub(crate) nodes: Vec<redis::Client>,
    /// The URLs of `nodes` (may hold credentials: never printed).
    pub(crate) node_urls: Vec<String>,
    pub(crate) cluster: bool,
    /// id -> jobtype of jobs this handle claimed (see `per_jobtype`).
    pub(crate) claimed: Mutex<HashMap<String, String>>,
    /// Whether changes deliver to waiters in other slots, and adds link
    /// and commit, before they return (see [`RedisStore::set_flow_delivery`]).
    pub(crate) flows: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // No URLs: they may carry passwords.
        f.debug_struct("RedisStore")
            .field("prefix", &self.keys.prefix())
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// The largest payload this store accepts: 16 MiB.
    pub const MAX_PAYLOAD: usize = 16 << 20;

    /// Connects to `redis://...` (one server) or `redis+cluster://h1:p1,h2:p2`
    /// (a cluster), with the namespace from the URL's `prefix` parameter or
    /// [`DEFAULT_PREFIX`](crate::DEFAULT_PREFIX).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, RedisOptions::default()).await
    }

    /// Like [`connect`](Self::connect), with options; `opts.prefix` wins
    /// over the URL's `prefix` parameter.
    pub async fn connect_with(url: &str, opts: RedisOptions) -> Result<Self> {
        let (target, url_prefix) = parse_url(url)?;
        Self::open(target, url_prefix, opts).await
    }

    /// Connects to a cluster given the URLs of some of its nodes
    /// (`redis://host:port`).
    pub async fn connect_cluster<S: AsRef<str>>(nodes: &[S], opts: RedisOptions) -> Result<Self> {
        let mut urls = Vec::with_capacity(nodes.len());
        let mut url_prefix = None;
        for n in nodes {
            let (u, p) = strip_prefix_param(n.as_ref())?;
            urls.push(u);
            url_prefix = url_prefix.or(p);
        }
        if urls.is_empty() {
            return Err(Error::invalid("no cluster node given"));
        }
        Self::open(Target::Cluster(urls), url_prefix, opts).await
    }

    /// Test hook: with `false`, releases, cancels and deletes record the
    /// effects on waiters in other slots (the outbox) without delivering
    /// them, and adds with dependencies leave their jobs staged, as a
    /// crash right after each script would; `settle_flows` finishes them.
    #[doc(hidden)]
    pub fn set_flow_delivery(&self, on: bool) {
        self.flows.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn flows_on(&self) -> bool {
        self.flows.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The namespace (key prefix) of this store.
    pub fn prefix(&self) -> &str {
        self.keys.prefix()
    }

    /// Whether this store talks to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// The cluster hash slot of `jobtype`'s keys (0..16384): where its
    /// queue lives in a cluster.
    pub fn jobtype_slot(&self, jobtype: &str) -> u16 {
        key_slot(&self.keys.jobtype(jobtype).ready)
    }

    /// Deletes every key of this store's namespace (SCAN + UNLINK, on each
    /// primary of a cluster); returns how many. Meant for tests and for
    /// retiring a namespace: not atomic, run it while nothing uses the
    /// namespace. One UNLINK per page of SCAN, never one per key.
    pub async fn drop_namespace(&self) -> Result<u64> {
        let mut conns: Vec<redis::aio::MultiplexedConnection> = Vec::new();
        if self.cluster {
            for url in self.primary_urls().await? {
                let client = redis::Client::open(url.as_str()).map_err(|e| map(e, "node URL"))?;
                conns.push(
                    client
                        .get_multiplexed_async_connection()
                        .await
                        .map_err(|e| map(e, "connect to node"))?,
                );
            }
        } else {
            conns.push(
                self.nodes[0]
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(|e| map(e, "connect"))?,
            );
        }
        // Keys are found per node but unlinked through the store's own
        // connection, which routes each key to its slot's owner (and
        // follows redirects while slots move): the cluster client splits a
        // multi-key UNLINK by slot and sums the replies.
        let mut by_key = self.conn();
        let mut total = 0;
        for mut c in conns {
            for pattern in self.keys.patterns() {
                let mut cursor: u64 = 0;
                loop {
                    let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(&pattern)
                        .arg("COUNT")
                        .arg(10_000)
                        .query_async(&mut c)
                        .await
                        .map_err(|e| map(e, "SCAN"))?;
                    if !keys.is_empty() {
                        let mut unlink = redis::cmd("UNLINK");
                        for key in &keys {
                            unlink.arg(key.as_slice());
                        }
                        total += unlink
                            .query_async::<u64>(&mut by_key)
                            .await
                            .map_err(|e| map(e, "UNLINK"))?;
                    }
                    cursor = next;
                    if cursor == 0 {
                        break;
                    }
                }
            }
        }
        Ok(total)
    }

    /// Every jobtype that ever had a job in this namespace.
    pub(crate) async fn known_jobtypes(&self) -> Result<Vec<String>> {
        let mut c = self.conn();
        let mut types: Vec<String> = redis::cmd("SMEMBERS")
            .arg(self.keys.jobtypes())
            .query_async(&mut c)
            .await
            .map_err(|e| map(e, "SMEMBERS jobtypes"))?;
        types.sort();
        Ok(types)
    }

    /// `counts.lua` for every known jobtype, concurrently.
    async fn counts(&self, now: Millis, what: &str) -> Result<Vec<(String, Vec<Value>)>> {
        let types = self.known_jobtypes().await?;
        let calls = types.into_iter().map(|t| {
            let k = self.keys.jobtype(&t);
            let mut inv = SCRIPTS.counts.prepare_invoke();
            inv.key(&k.ready)
                .key(&k.sched)
                .key(&k.lock)
                .key(&k.codes)
                .key(&k.paused)
                .key(&k.blocked)
                .arg(now)
                .arg(what);
            let mut c = self.conn();
            async move {
                let v: Vec<Value> = inv
                    .invoke_async(&mut c)
                    .await
                    .map_err(|e| map(e, "counts"))?;
                Ok::<_, Error>((t, v))
            }
        });
        try_join_all(calls).await
    }
}

#[async_trait]
impl JobStore for RedisStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(Self::MAX_PAYLOAD)
            .with_notifications()
            .with_management()
            .with_tags_and_history()
            .with_stats()
            .with_trace()
            .with_schedules()
            .with_unique_jobs()
            .with_repeat()
            .with_dependencies()
    }

    async fn add_jobs(&self, jobs: &[NewJob], now: Millis) -> Result<AddOutcome> {
        validate::new_jobs(jobs, &self.capabilities(), now)?;
        if jobs.is_empty() {
            return Ok(AddOutcome::default());
        }
        let mut status: Vec<Option<Status>> = vec![None; jobs.len()];
        let mut pending: Vec<usize> = (0..jobs.len()).collect();
        let mut failed = None;
        // The jobtypes of the dependencies, from the id index: one more
        // round trip, only for a batch with dependencies.
        let has_deps = jobs.iter().any(|j| !j.dependencies().is_empty());
        let dep_types = if has_deps {
            let mut all: Vec<String> = jobs
                .iter()
                .flat_map(|j| j.dependencies().iter().cloned())
                .collect();
            all.sort_unstable();
            all.dedup();
            self.lookup(&all).await?
        } else {
            HashMap::new()
        };
        for round in 0..ADD_ROUNDS {
            if pending.is_empty() {
                break;
            }
            match self
                .add_round(jobs, &pending, &mut status, now, round == 0, &dep_types)
                .await
            {
                Ok(again) => pending = again,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if has_deps
            && failed.is_none()
            && self.flows_on()
            && let Err(e) = self.commit_added(jobs, &mut status, &dep_types, now).await
        {
            failed = Some(e);
        }
        let mut outcome = AddOutcome::default();
        // The reservations of duplicates' ids, given back (see README,
        // "Unique keys"): one more round trip, only when there are any,
        // also when a later step of the add failed.
        let mut unreserve = Vec::new();
        for (job, s) in jobs.iter().zip(status) {
            match s {
                Some(Status::New) => outcome.new.push(job.id.clone()),
                Some(Status::Duplicate {
                    existing,
                    replaced,
                    token,
                }) => {
                    outcome.duplicates.push(Duplicate {
                        id: job.id.clone(),
                        existing,
                        replaced,
                    });
                    unreserve.push((job.id.clone(), job.jobtype.clone(), token));
                }
                Some(Status::Refused { refusal, token }) => {
                    outcome.refused.push(refusal);
                    unreserve.push((job.id.clone(), job.jobtype.clone(), token));
                }
                Some(Status::Existing) | None => outcome.existing.push(job.id.clone()),
            }
        }
        self.unreserve_then(&unreserve, failed).await?;
        Ok(outcome)
    }

    async fn waiting_jobtypes(&self, now: Millis) -> Result<Vec<WaitingJobtype>> {
        validate::time("now", now)?;
        let mut out = Vec::new();
        for (jobtype, v) in self.counts(now, "w").await? {
            let count = int(v.first().ok_or_else(|| malformed("counts"))?, "waiting")?;
            if count > 0 {
                out.push(WaitingJobtype {
                    jobtype,
                    count: count as u64,
                });
            }
        }
        Ok(out)
    }

    async fn claim_jobs(
        &self,
        jobtype: &str,
        limit: usize,
        owner: &str,
        lease: Duration,
        now: Millis,
    ) -> Result<Vec<Job>> {
        validate::claim(jobtype, limit, owner, lease, now)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let expiry = now + duration_ms(lease);
        let k = self.keys.jobtype(jobtype);
        let mut inv = SCRIPTS.claim.prepare_invoke();
        inv.key(&k.ready)
            .key(&k.sched)
            .key(&k.lock)
            .key(&k.paused)
            .arg(&k.job)
            .arg(now)
            .arg(limit)
            .arg(owner)
            .arg(expiry)
            .arg(self.opts.promote_slice.max(jobstore_api::limits::MAX_CLAIM))
            .arg(padded(now));
        let mut c = self.conn();
        let reply: Vec<Value> = inv
            .invoke_async(&mut c)
            .await
            .map_err(|e| map(e, "claim jobs"))?;
        if !reply.len().is_multiple_of(7) {
            return Err(malformed("claim reply length"));
        }
        let mut jobs = Vec::with_capacity(reply.len() / 7);
        let mut it = reply.into_iter();
        while let (Some(id), Some(data), Some(p), Some(c), Some(a), Some(rest), Some(due)) = (
            it.next(),
            it.next(),
            it.next(),
            it.next(),
            it.next(),
            it.next(),
            it.next(),
        ) {
            // x, h, t, tc, uk, rp, r (r only for a repeating job), dp: one
            // nil when the job has none of them
            let [x, h, t, tc, uk, rp, r, dp] = match rest {
                Value::Nil => std::array::from_fn(|_| Value::Nil),
                Value::Array(v) => {
                    <[Value; 8]>::try_from(v).map_err(|_| malformed("claimed fields"))?
                }
                _ => return Err(malformed("claimed fields")),
            };
            let uk = match uk {
                Value::Nil => None,
                uk => Some(bytes(uk, "claimed unique key")?),
            };
            let rp = match rp {
                Value::Nil => None,
                rp => Some(bytes(rp, "claimed repeat rule")?),
            };
            let dp = match dp {
                Value::Nil => None,
                dp => Some(bytes(dp, "claimed dependencies")?),
            };
            // a repeating job's last result (a live job has no done_dt)
            let result = match r {
                Value::Nil => None,
                r => Some(ResultField::parse(bytes(r, "claimed result")?)?.result),
            };
            let h = match h {
                Value::Nil => None,
                h => Some(bytes(h, "claimed history")?),
            };
            let t = match t {
                Value::Nil => None,
                t => Some(bytes(t, "claimed tags")?),
            };
            let tc = match tc {
                Value::Nil => None,
                tc => Some(bytes(tc, "claimed trace context")?),
            };
            let attempts =
                u32::try_from(int(&a, "attempts")?).map_err(|_| malformed("attempts"))?;
            // the claim just made is pending: in the job's fields, not in h
            let claim = PendingClaim {
                at: now,
                by: owner.to_owned(),
                attempt: attempts,
            };
            let create_dt = int(&c, "create_dt")?;
            jobs.push(Job {
                id: string(id, "claimed id")?,
                jobtype: jobtype.to_owned(),
                data: bytes(data, "claimed data")?,
                priority: i32::try_from(int(&p, "priority")?).map_err(|_| malformed("priority"))?,
                dt: expiry,
                lock: owner.to_owned(),
                attempts,
                create_dt,
                done_dt: None,
                result,
                cancel_requested: is_marked(&x),
                tags: tags(t.as_deref())?,
                history: complete_history(
                    with_added(history(h.as_deref())?, create_dt),
                    Some(claim),
                    None,
                ),
                claimed_due: Some(int(&due, "due time")?),
                flow: job_flow(uk, rp, dp)?,
                trace: trace(tc.as_deref())?,
            });
        }
        {
            let mut cache = self.cache();
            if cache.len() + jobs.len() > CACHE_MAX {
                cache.clear();
            }
            for j in &jobs {
                cache.insert(j.id.clone(), j.jobtype.clone());
            }
        }
        Ok(jobs)
    }

    async fn renew_locks(
        &self,
        ids: &[String],
        owner: &str,
        lease: Duration,
        now: Millis,
    ) -> Result<Renewal> {
        validate::renew(ids, owner, lease, now)?;
        if ids.is_empty() {
            return Ok(Renewal::default());
        }
        let expiry = now + duration_ms(lease);
        let got = self
            .per_jobtype(ids, |jt, ids| {
                let k = self.keys.jobtype(&jt);
                let mut inv = SCRIPTS.renew.prepare_invoke();
                inv.key(&k.ready)
                    .key(&k.lock)
                    .arg(&k.job)
                    .arg(owner)
                    .arg(expiry)
                    .arg(ids);
                let mut c = self.conn();
                async move {
                    let v: Vec<String> = inv
                        .invoke_async(&mut c)
                        .await
                        .map_err(|e| map(e, "renew locks"))?;
                    pairs(v, "renew reply length")
                }
            })
            .await?;
        let renewed: HashSet<String> = got.iter().map(|(id, _, _)| id.clone()).collect();
        let marked: HashSet<String> = got
            .into_iter()
            .filter(|(_, _, x)| x == MARK)
            .map(|(id, _, _)| id)
            .collect();
        Ok(Renewal {
            renewed: in_order(ids, &renewed),
            cancelled: in_order(ids, &marked),
        })
    }

    async fn release_jobs(
        &self,
        releases: &[JobRelease],
        owner: &str,
        now: Millis,
    ) -> Result<Vec<String>> {
        validate::release(releases, owner, now, &self.capabilities())?;
        if releases.is_empty() {
            return Ok(Vec::new());
        }
        let how: HashMap<&str, &Release> =
            releases.iter().map(|r| (r.id.as_str(), &r.how)).collect();
        let status: HashMap<&str, Option<u16>> =
            releases.iter().map(|r| (r.id.as_str(), r.status)).collect();
        let ids: Vec<String> = releases.iter().map(|r| r.id.clone()).collect();
        let channel = self.keys.channel();
        let (now_arg, archive_dt) = (padded(now), padded(now + ARCHIVE_HORIZON_MS));
        let (released, err) = self
            .per_jobtype_partial(&ids, |jt, ids| {
                let k = self.keys.jobtype(&jt);
                let mut inv = SCRIPTS.release.prepare_invoke();
                inv.key(&k.ready).key(&k.sched).key(&k.lock).key(&k.codes);
                for done in &k.done {
                    inv.key(done);
                }
                inv.key(&k.blocked).key(&k.fx);
                inv.arg(&k.job)
                    .arg(owner)
                    .arg(&now_arg)
                    .arg(&channel)
                    .arg(&jt)
                    .arg(&archive_dt);
                // One group per job: id, kind, the kind's own values.
                for id in &ids {
                    inv.arg(id);
                    match how.get(id.as_str()) {
                        Some(Release::Retry { delay }) => {
                            let delay = duration_ms(*delay);
                            let status = status.get(id.as_str()).copied().flatten();
                            inv.arg("r")
                                .arg(padded(now + delay))
                                .arg(delay)
                                .arg(status.map(|s| s.to_string()).unwrap_or_default());
                        }
                        Some(Release::Unget) => {
                            inv.arg("u");
                        }
                        Some(Release::Archive(r)) => {
                            inv.arg("a")
                                .arg(r.code.as_str())
                                .arg(r.status)
                                .arg(r.output.as_slice());
                        }
                        Some(Release::Repeat { at, result, data }) => {
                            inv.arg("p")
                                .arg(padded(*at))
                                .arg(result.code.as_str())
                                .arg(result.status)
                                .arg(result.output.as_slice());
                            match data {
                                Some(d) => inv.arg("1").arg(d.as_slice()),
                                None => inv.arg("0").arg(""),
                            };
                        }
                        Some(Release::Delete) | None => {
                            inv.arg("d");
                        }
                    }
                }
                let mut c = self.conn();
                async move {
                    let v: Vec<String> = inv
                        .invoke_async(&mut c)
                        .await
                        .map_err(|e| map(e, "release jobs"))?;
                    if !v.len().is_multiple_of(2) {
                        return Err(malformed("release reply length"));
                    }
                    Ok(v.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect())
                }
            })
            .await;
        let (entries, released) = split_entries(released);
        self.deliver_after(entries, now).await;
        {
            let mut cache = self.cache();
            for (id, _, _) in &released {
                cache.remove(id);
            }
        }
        // Jobs deleted by the jobtypes whose script succeeded are
        // unreserved even when another jobtype failed; then the first
        // error is reported.
        let deleted: Vec<(String, String, String)> = released
            .iter()
            .filter(|(id, _, _)| matches!(how.get(id.as_str()), Some(Release::Delete)))
            .cloned()
            .collect();
        self.unreserve_then(&deleted, err).await?;
        let done: HashSet<String> = released.into_iter().map(|(id, _, _)| id).collect();
        Ok(in_order(&ids, &done))
    }

    async fn update_data(&self, id: &str, owner: &str, data: &[u8], now: Millis) -> Result<bool> {
        validate::update_data(id, owner, data, &self.capabilities(), now)?;
        let ids = [id.to_owned()];
        let Some(jt) = self.lookup(&ids).await?.remove(id) else {
            return Ok(false);
        };
        let key = format!("{}{id}", self.keys.jobtype(&jt).job);
        let mut inv = SCRIPTS.update.prepare_invoke();
        inv.key(key).arg(owner).arg(data);
        let mut c = self.conn();
        let n: i64 = inv
            .invoke_async(&mut c)
            .await
            .map_err(|e| map(e, "update data"))?;
        Ok(n == 1)
    }

    async fn cancel_jobs(&self, ids: &[String], now: Millis) -> Result<CancelOutcome> {
        validate::cancel(ids, now)?;
        if ids.is_empty() {
            return Ok(CancelOutcome::default());
        }
        let channel = self.keys.channel();
        let (got, err) = self
            .per_jobtype_partial(ids, |jt, ids| {
                let k = self.keys.jobtype(&jt);
                let mut inv = SCRIPTS.cancel.prepare_invoke();
                inv.key(&k.ready)
                    .key(&k.sched)
                    .key(k.done_of(ResultCode::Cancelled))
                    .key(&k.codes)
                    .key(&k.blocked)
                    .key(&k.fx)
                    .arg(&k.job)
                    .arg(padded(now))
                    .arg(padded(now + ARCHIVE_HORIZON_MS))
                    .arg(&channel)
                    .arg(&jt)
                    .arg(ids);
                let mut c = self.conn();
                async move {
                    let v: Vec<String> = inv
                        .invoke_async(&mut c)
                        .await
                        .map_err(|e| map(e, "cancel jobs"))?;
                    pairs(v, "cancel reply length")
                }
            })
            .await;
        let (entries, got) = split_entries(got);
        self.deliver_after(entries, now).await;
        if let Some(e) = err {
            return Err(e);
        }
        let pick = |what: &str| -> HashSet<String> {
            got.iter()
                .filter(|(_, _, how)| how == what)
                .map(|(id, _, _)| id.clone())
                .collect()
        };
        Ok(CancelOutcome {
            cancelled: in_order(ids, &pick("c")),
            marked: in_order(ids, &pick("m")),
        })
    }

    async fn get_job(&self, id: &str) -> Result<Option<Job>> {
        validate::id(id)?;
        let ids = [id.to_owned()];
        let Some(jt) = self.lookup(&ids).await?.remove(id) else {
            return Ok(None);
        };
        let key = format!("{}{id}", self.keys.jobtype(&jt).job);
        let mut c = self.conn();
        let h: HashMap<String, Vec<u8>> = redis::cmd("HGETALL")
            .arg(key)
            .query_async(&mut c)
            .await
            .map_err(|e| map(e, "get job"))?;
        read_job(id, &jt, h)
    }

    async fn get_jobs(&self, ids: &[String]) -> Result<Vec<Job>> {
        validate::ids(ids)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // The index, then one `get.lua` per jobtype (slot), concurrently.
        let mut by_type: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (id, jt) in self.lookup(ids).await? {
            by_type.entry(jt).or_default().push(id);
        }
        let calls = by_type.into_iter().map(|(jt, ids)| {
            let job = self.keys.jobtype(&jt).job;
            let mut inv = SCRIPTS.get.prepare_invoke();
            for id in &ids {
                inv.key(format!("{job}{id}"));
            }
            let mut c = self.conn();
            async move {
                let hashes: Vec<HashMap<String, Vec<u8>>> = inv
                    .invoke_async(&mut c)
                    .await
                    .map_err(|e| map(e, "get jobs"))?;
                if hashes.len() != ids.len() {
                    return Err(malformed("get.lua: one hash per id"));
                }
                Ok::<_, Error>((jt, ids, hashes))
            }
        });
        let mut out = Vec::with_capacity(ids.len());
        for (jt, ids, hashes) in try_join_all(calls).await? {
            for (id, h) in ids.into_iter().zip(hashes) {
                out.extend(read_job(&id, &jt, h)?);
            }
        }
        Ok(out)
    }

    async fn purge_archived(&self, before: Millis, codes: &[ResultCode]) -> Result<u64> {
        validate::time("before", before)?;
        if codes.is_empty() {
            return Ok(0);
        }
        // Each code once, in a fixed order.
        let codes: BTreeSet<ResultCode> = codes.iter().copied().collect();
        let codes = &codes;
        let types = self.known_jobtypes().await?;
        let calls = types.iter().map(|jt| {
            let k = self.keys.jobtype(jt);
            let mut c = self.conn();
            async move {
                let mut purged = 0u64;
                loop {
                    let mut inv = SCRIPTS.purge.prepare_invoke();
                    inv.key(&k.done_before_codes).key(&k.codes);
                    for done in &k.done {
                        inv.key(done);
                    }
                    inv.arg(&k.job).arg(before).arg(PURGE_SLICE);
                    for code in codes {
                        inv.arg(code.as_str());
                    }
                    let v: Vec<Value> = inv
                        .invoke_async(&mut c)
                        .await
                        .map_err(|e| map(e, "purge archived"))?;
                    let Some((moved, pairs)) = v.split_first() else {
                        return Err(malformed("purge reply length"));
                    };
                    let moved = int(moved, "purge reply")?;
                    if !pairs.len().is_multiple_of(2) {
                        return Err(malformed("purge reply length"));
                    }
                    let n = pairs.len() / 2;
                    let deleted: Vec<(String, String, String)> = pairs
                        .chunks(2)
                        .map(|p| {
                            Ok((
                                string(p[0].clone(), "purged id")?,
                                jt.clone(),
                                string(p[1].clone(), "purged token")?,
                            ))
                        })
                        .collect::<Result<_>>()?;
                    // Unreserve each slice right away: bounded work per
                    // step, and a later failure cannot strand its tokens.
                    if !deleted.is_empty() {
                        self.unreserve(&deleted).await?;
                    }
                    purged += n as u64;
                    // Again while a slice came back full, or jobs kept as
                    // before the sets per code were moved over.
                    if n < PURGE_SLICE && moved == 0 {
                        break;
                    }
                }
                Ok::<_, Error>(purged)
            }
        });
        // Every jobtype is purged even when another fails.
        let mut total = 0;
        let mut first = None;
        for r in join_all(calls).await {
            match r {
                Ok(n) => total += n,
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(total),
        }
    }

    async fn job_counts(&self, now: Millis) -> Result<Vec<JobCounts>> {
        validate::time("now", now)?;
        let mut out = Vec::new();
        for (jobtype, v) in self.counts(now, "a").await? {
            if v.len() < 4 || !v.len().is_multiple_of(2) {
                return Err(malformed("counts reply length"));
            }
            let mut c = JobCounts {
                jobtype,
                waiting: int(&v[0], "waiting")? as u64,
                scheduled: int(&v[1], "scheduled")? as u64,
                running: int(&v[2], "running")? as u64,
                blocked: int(&v[3], "blocked")? as u64,
                archived: BTreeMap::new(),
            };
            let mut it = v.into_iter().skip(4);
            while let (Some(code), Some(n)) = (it.next(), it.next()) {
                let code: ResultCode = string(code, "result code")?
                    .parse()
                    .map_err(|_| malformed("result code"))?;
                let n = int(&n, "archived count")?;
                if n > 0 {
                    c.archived.insert(code, n as u64);
                }
            }
            if c.total() > 0 {
                out.push(c);
            }
        }
        Ok(out)
    }

    async fn list_jobs(&self, query: &JobQuery, now: Millis) -> Result<JobPage> {
        validate::job_query(query, now)?;
        self.list(query, now).await
    }

    async fn rerun_jobs(
        &self,
        ids: &[String],
        delay: Duration,
        now: Millis,
    ) -> Result<Vec<String>> {
        validate::rerun(ids, delay, now)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.rerun(ids, delay, now).await
    }

    async fn delete_jobs(&self, ids: &[String], now: Millis) -> Result<DeleteOutcome> {
        validate::ids(ids)?;
        validate::time("now", now)?;
        if ids.is_empty() {
            return Ok(DeleteOutcome::default());
        }
        self.delete(ids, now).await
    }

    async fn edit_jobs(&self, edits: &[JobEdit], now: Millis) -> Result<Vec<String>> {
        validate::edits(edits, &self.capabilities(), now)?;
        if edits.is_empty() {
            return Ok(Vec::new());
        }
        self.edit(edits, now).await
    }

    async fn job_waits(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<Waits>> {
        validate::waits(id, after, limit)?;
        self.waits(id, after, limit).await
    }

    async fn waits_of(&self, ids: &[String], limit: usize) -> Result<Vec<Waits>> {
        validate::waits_of(ids, limit)?;
        self.waits_many(ids, limit).await
    }

    async fn unblock_jobs(&self, ids: &[String], now: Millis) -> Result<Vec<String>> {
        validate::cancel(ids, now)?;
        self.unblock(ids, now).await
    }

    async fn settle_flows(&self, now: Millis, limit: usize) -> Result<u64> {
        validate::time("now", now)?;
        self.settle(now, limit).await
    }

    async fn pause_jobtype(&self, jobtype: &str, paused: bool, now: Millis) -> Result<bool> {
        validate::pause(jobtype, now)?;
        self.pause(jobtype, paused).await
    }

    async fn paused_jobtypes(&self) -> Result<Vec<String>> {
        self.paused().await
    }

    async fn add_stats(&self, deltas: &[StatsDelta], now: Millis) -> Result<()> {
        validate::stats_deltas(deltas, now)?;
        self.add_stats_batch(deltas, now).await
    }

    async fn job_stats(&self, query: &StatsQuery, now: Millis) -> Result<Vec<StatsBucket>> {
        validate::stats_query(query, now)?;
        self.read_stats(query, now).await
    }

    async fn watch(&self) -> Result<WorkWatcher> {
        watch::watch(
            self.nodes.clone(),
            self.keys.channel(),
            self.opts.poll_interval,
            self.opts.connection_timeout,
        )
        .await
    }

    async fn set_handler(
        &self,
        jobtype: &str,
        handler: &Handler,
        now: Millis,
    ) -> Result<HandlerVersion> {
        validate::handler(jobtype, handler, now)?;
        let json = serde_json::to_string(handler)
            .map_err(|e| Error::backend("redis: encode handler", e))?;
        let mut inv = SCRIPTS.handler_set.prepare_invoke();
        inv.key(self.keys.handler_versions(jobtype))
            .key(self.keys.handler_data(jobtype))
            .key(self.keys.handler_seq())
            .key(self.keys.handler_types())
            .arg(jobtype)
            .arg(now)
            .arg(json);
        let mut c = self.conn();
        let id: String = inv
            .invoke_async(&mut c)
            .await
            .map_err(|e| map(e, "set handler"))?;
        Ok(HandlerVersion {
            id,
            jobtype: jobtype.to_owned(),
            dt: now,
            handler: handler.clone(),
        })
    }

    async fn get_handler(&self, jobtype: &str) -> Result<Option<HandlerVersion>> {
        validate::jobtype(jobtype)?;
        let mut inv = SCRIPTS.handler_get.prepare_invoke();
        inv.key(self.keys.handler_versions(jobtype))
            .key(self.keys.handler_data(jobtype));
        let mut c = self.conn();
        let v: Vec<Value> = inv
            .invoke_async(&mut c)
            .await
            .map_err(|e| map(e, "get handler"))?;
        if v.is_empty() {
            return Ok(None);
        }
        let mut it = v.into_iter();
        match (it.next(), it.next(), it.next()) {
            (Some(id), Some(dt), Some(json)) => {
                handler_version(jobtype.to_owned(), id, dt, json).map(Some)
            }
            _ => Err(malformed("handler reply")),
        }
    }

    async fn delete_handler(&self, jobtype: &str) -> Result<bool> {
        validate::jobtype(jobtype)?;
        let mut inv = SCRIPTS.handler_delete.prepare_invoke();
        inv.key(self.keys.handler_versions(jobtype))
            .key(self.keys.handler_data(jobtype))
            .key(self.keys.handler_types())
            .arg(jobtype);
        let mut c = self.conn();
        let n: i64 = inv
            .invoke_async(&mut c)
            .await
            .map_err(|e| map(e, "delete handler"))?;
        Ok(n == 1)
    }

    async fn list_handlers(&self) -> Result<Vec<HandlerVersion>> {
        let mut inv = SCRIPTS.handler_list.prepare_invoke();
        inv.key(self.keys.handler_types()).arg(self.keys.base());
        let mut c = self.conn();
        let v: Vec<Value> = inv
            .invoke_async(&mut c)
            .await
            .map_err(|e| map(e, "list handlers"))?;
        if !v.len().is_multiple_of(4) {
            return Err(malformed("handler list length"));
        }
        let mut out = Vec::with_capacity(v.len() / 4);
        let mut it = v.into_iter();
        while let (Some(t), Some(id), Some(dt), Some(json)) =
            (it.next(), it.next(), it.next(), it.next())
        {
            out.push(handler_version(string(t, "jobtype")?, id, dt, json)?);
        }
        Ok(out)
    }

    async fn set_schedule(
        &self,
        s: &Schedule,
        next_due: Option<Millis>,
        now: Millis,
    ) -> Result<ScheduleRecord> {
        validate::schedule(s, next_due, &self.capabilities(), now)?;
        self.schedule_set(s, next_due, now).await
    }

    async fn get_schedule(&self, name: &str) -> Result<Option<ScheduleRecord>> {
        validate::schedule_name(name)?;
        self.schedule_get(name).await
    }

    async fn list_schedules(&self, prefix: &str) -> Result<Vec<ScheduleRecord>> {
        validate::schedule_prefix(prefix)?;
        self.schedule_list(prefix).await
    }

    async fn delete_schedule(&self, name: &str) -> Result<bool> {
        validate::schedule_name(name)?;
        self.schedule_delete(name).await
    }

    async fn pause_schedule(
        &self,
        name: &str,
        paused: bool,
        next_due: Option<Millis>,
        now: Millis,
    ) -> Result<bool> {
        validate::schedule_pause(name, next_due, now)?;
        self.schedule_pause(name, paused, next_due, now).await
    }

    async fn due_schedules(&self, now: Millis, limit: usize) -> Result<Vec<ScheduleRecord>> {
        validate::due_schedules(now, limit)?;
        self.schedule_due(now, limit).await
    }

    async fn advance_schedule(
        &self,
        name: &str,
        version: u64,
        advance: &ScheduleAdvance,
        now: Millis,
    ) -> Result<bool> {
        validate::schedule_advance(name, version, advance, now)?;
        self.schedule_advance(name, version, advance).await
    }

    async fn reserve_sysid(&self, sysid: &str, ttl: Duration, now: Millis) -> Result<SysidLease> {
        validate::sysid_lease(sysid, ttl, now)?;
        let lease = SysidLease {
            sysid: sysid.to_owned(),
            token: new_token(),
            expires: now + duration_ms(ttl),
        };
        let mut inv = SCRIPTS.sysid_reserve.prepare_invoke();
        inv.key(self.keys.sysid(sysid))
            .arg(now)
            .arg(&lease.token)
            .arg(lease.expires);
        let mut c = self.conn();
        let v: Vec<Value> = inv
            .invoke_async(&mut c)
            .await
            .map_err(|e| map(e, "reserve sysid"))?;
        match v.first().map(|f| int(f, "reserve reply")).transpose()? {
            Some(1) => Ok(lease),
            Some(0) => {
                let until = v
                    .get(1)
                    .map(|e| int(e, "expires"))
                    .transpose()?
                    .unwrap_or_default();
                Err(Error::conflict(format!(
                    "sysid {sysid:?} is held until {until}"
                )))
            }
            _ => Err(malformed("reserve reply")),
        }
    }

    async fn renew_sysid(
        &self,
        lease: &SysidLease,
        ttl: Duration,
        now: Millis,
    ) -> Result<SysidLease> {
        validate::sysid_lease(&lease.sysid, ttl, now)?;
        let expires = now + duration_ms(ttl);
        let mut inv = SCRIPTS.sysid_renew.prepare_invoke();
        inv.key(self.keys.sysid(&lease.sysid))
            .arg(&lease.token)
            .arg(expires);
        let mut c = self.conn();
        let n: i64 = inv
            .invoke_async(&mut c)
            .await
            .map_err(|e| map(e, "renew sysid"))?;
        if n == 1 {
            Ok(SysidLease {
                expires,
                ..lease.clone()
            })
        } else {
            Err(Error::sysid_lost(&lease.sysid))
        }
    }

    async fn release_sysid(&self, lease: &SysidLease) -> Result<bool> {
        validate::sysid(&lease.sysid)?;
        let mut inv = SCRIPTS.sysid_release.prepare_invoke();
        inv.key(self.keys.sysid(&lease.sysid)).arg(&lease.token);
        let mut c = self.conn();
        let n: i64 = inv
            .invoke_async(&mut c)
            .await
            .map_err(|e| map(e, "release sysid"))?;
        Ok(n == 1)
    }
}

/// The job of one hash as `get_job` and `get_jobs` read it (`HGETALL`):
/// none for a missing hash or a staged job (an add with dependencies under
/// way is not a job yet).
fn read_job(id: &str, jobtype: &str, h: HashMap<String, Vec<u8>>) -> Result<Option<Job>> {
    if h.is_empty() || h.get("l").is_some_and(|l| l == LOCK_STAGED.as_bytes()) {
        return Ok(None);
    }
    job_from_hash(id, jobtype, h).map(Some)
}

/// Splits what a release, cancel or delete reported per jobtype into the
/// outbox entries it recorded (reported under the id `""`) and the rest.
pub(crate) fn split_entries(
    got: Vec<(String, String, String)>,
) -> (Vec<Entry>, Vec<(String, String, String)>) {
    let mut entries = Vec::new();
    let mut rest = Vec::with_capacity(got.len());
    for (id, jt, extra) in got {
        if id.is_empty() {
            match Entry::parse(&jt, extra) {
                Ok(e) => entries.push(e),
                Err(e) => tracing::warn!("redis: {e}"),
            }
        } else {
            rest.push((id, jt, extra));
        }
    }
    (entries, rest)
}

#[cfg(test)]
mod tests {
    /// Runs `body` against a store on a fresh namespace of the test
    /// server, and drops the namespace afterwards, even when `body` panics.
    fn with_store<F, Fut>(body: F)
    where
        F: FnOnce(super::RedisStore) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        use futures::FutureExt;
        use jobstore_conformance::services::{redis_url, unique_namespace};
        use std::panic::AssertUnwindSafe;

        jobstore_conformance::block_on(async {
            let Some(url) = redis_url().await else {
                return;
            };
            let opts = super::RedisOptions::new().prefix(unique_namespace());
            let open = || super::RedisStore::connect_with(&url, opts.clone());
            let (store, cleaner) = (open().await.unwrap(), open().await.unwrap());
            let outcome = AssertUnwindSafe(body(store)).catch_unwind().await;
            cleaner.drop_namespace().await.unwrap();
            if let Err(panic) = outcome {
                std::panic::resume_unwind(panic);
            }
        });
    }

    /// An add whose reservation another add took over (its token is in
    /// the jobtype's fence set) must not create the job: `add.lua`
    /// answers 3, read as fenced, while the other jobs of the same script
    /// are created. Only two adds of one id racing reach this, so the
    /// fence is set by hand.
    #[test]
    fn a_fenced_reservation_creates_nothing() {
        use crate::add::Added;
        use jobstore_api::NewJob;
        use std::collections::BTreeMap;

        with_store(|store| async move {
            let k = store.keys.jobtype("t");
            let mut c = store.conn();
            let _: i64 = redis::cmd("SADD")
                .arg(&k.fence)
                .arg("tok x")
                .query_async(&mut c)
                .await
                .unwrap();
            let jobs = [NewJob::new("x", "t", "d"), NewJob::new("y", "t", "d")];
            let groups = BTreeMap::from([("t", vec![(0, None), (1, None)])]);
            let added = store
                .run_add(
                    &jobs,
                    &groups,
                    "tok",
                    1_700_000_000_000,
                    &std::collections::HashMap::new(),
                )
                .await
                .unwrap();
            assert!(matches!(
                added.as_slice(),
                [flags] if matches!(flags.as_slice(), [Added::Fenced, Added::Created])
            ));
            let exists: (i64, i64) = redis::pipe()
                .cmd("EXISTS")
                .arg(format!("{}x", k.job))
                .cmd("EXISTS")
                .arg(format!("{}y", k.job))
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(exists, (0, 1));
        });
    }

    /// A fenced keyed job whose key is held is a duplicate of the holder,
    /// not "existing": the add that fenced it finds the key held too and
    /// stores nothing under the id. A fenced keyed job whose key is free
    /// stays fenced (the other add creates it).
    #[test]
    fn a_fenced_keyed_job_whose_key_is_held_is_a_duplicate() {
        use crate::add::Added;
        use jobstore_api::{JobStore, NewJob, Unique};
        use std::collections::BTreeMap;

        with_store(|store| async move {
            let now = 1_700_000_000_000;
            let holder = NewJob::new("h", "t", "d").unique(Unique::new("k"));
            store.add_jobs(&[holder], now).await.unwrap();
            let k = store.keys.jobtype("t");
            let mut c = store.conn();
            let _: i64 = redis::cmd("SADD")
                .arg(&k.fence)
                .arg("tok x")
                .arg("tok y")
                .query_async(&mut c)
                .await
                .unwrap();
            let jobs = [
                NewJob::new("x", "t", "d").unique(Unique::new("k")),
                NewJob::new("y", "t", "d").unique(Unique::new("free")),
            ];
            let groups = BTreeMap::from([("t", vec![(0, None), (1, None)])]);
            let added = store
                .run_add(
                    &jobs,
                    &groups,
                    "tok",
                    now,
                    &std::collections::HashMap::new(),
                )
                .await
                .unwrap();
            assert!(matches!(
                added.as_slice(),
                [flags] if matches!(
                    flags.as_slice(),
                    [Added::Duplicate(h, false), Added::Fenced] if h == "h"
                )
            ));
            assert_eq!(store.get_job("x").await.unwrap(), None);
            assert_eq!(store.get_job("y").await.unwrap(), None);
        });
    }

    /// Dropping a watcher stops its listener, which closes its pub/sub
    /// connection: the server counts no subscriber left on the channel.
    #[test]
    fn a_dropped_watcher_leaves_no_subscriber() {
        use jobstore_api::JobStore;
        use std::time::{Duration, Instant};

        with_store(|store| async move {
            let channel = store.keys.channel();
            let subscribers = || async {
                let (_, n): (String, i64) = redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(&channel)
                    .query_async(&mut store.conn())
                    .await
                    .unwrap();
                n
            };
            let watcher = store.watch().await.unwrap();
            assert_eq!(subscribers().await, 1);
            drop(watcher);
            let deadline = Instant::now() + Duration::from_secs(10);
            while subscribers().await != 0 {
                assert!(Instant::now() < deadline, "the listener still subscribes");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
    }

    /// A purge deletes in slices of `PURGE_SLICE` per script call and goes
    /// on until a slice comes back short, so a count that is an exact
    /// multiple of the slice must still be purged in full.
    #[test]
    fn purges_are_exact_across_slices() {
        with_store(|store| async move {
            jobstore_conformance::checks::purge_is_exact_across_batches(&store, super::PURGE_SLICE)
                .await;
        });
    }

    /// The claims' id -> jobtype cache stays bounded: a claim that would
    /// take it past `CACHE_MAX` entries starts it afresh.
    #[test]
    fn the_jobtype_cache_stays_bounded() {
        use jobstore_api::{JobStore, NewJob};
        use std::time::Duration;

        with_store(|store| async move {
            let old = (1..super::CACHE_MAX).map(|i| (format!("old{i}"), "t".to_owned()));
            store.cache().extend(old);
            let t = 1_700_000_000_000;
            let jobs = [NewJob::new("a", "t", ""), NewJob::new("b", "t", "")];
            store.add_jobs(&jobs, t).await.unwrap();
            let lease = Duration::from_secs(60);
            let claimed = store.claim_jobs("t", 2, "o", lease, t).await.unwrap();
            assert_eq!(claimed.len(), 2);
            let cache = store.cache();
            assert!(cache.len() <= super::CACHE_MAX, "{} entries", cache.len());
            assert_eq!(cache.get("a").map(String::as_str), Some("t"));
        });
    }
}
