//! [`RedisStore`]: the [`JobStore`] on Redis and Redis Cluster.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::{join_all, try_join_all};
use jobstore_api::*;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::{FromRedisValue, Value};

use crate::conn::Conn;
use crate::error::{malformed, map};
use crate::keys::{Keys, TypeKeys, index_jobtype, index_token, index_value};
use crate::options::{DEFAULT_PREFIX, RedisOptions};
use crate::options::{Target, parse_url, strip_prefix_param, validate_prefix};
use crate::scripts::SCRIPTS;
use crate::watch;

/// How many archived jobs one `purge.lua` call deletes at most.
const PURGE_SLICE: usize = 1_000;
/// Most entries in a handle's id -> jobtype cache (cleared when full).
const CACHE_MAX: usize = 50_000;
/// How many times an add retries ids whose reservation changed under it.
const ADD_ROUNDS: usize = 3;

/// A [`JobStore`] on Redis or Redis Cluster. See the crate docs for the
/// URL form, the key layout and the scripts.
pub struct RedisStore {
    conn: Conn,
    keys: Keys,
    opts: RedisOptions,
    /// Clients for pub/sub and maintenance: the server, or the cluster's
    /// seed nodes.
    nodes: Vec<redis::Client>,
    /// The URLs of `nodes` (may hold credentials: never printed).
    node_urls: Vec<String>,
    cluster: bool,
    /// id -> jobtype of jobs this handle claimed (see `per_jobtype`).
    claimed: Mutex<HashMap<String, String>>,
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
    /// [`DEFAULT_PREFIX`].
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

    async fn open(target: Target, url_prefix: Option<String>, opts: RedisOptions) -> Result<Self> {
        let prefix = opts
            .prefix
            .clone()
            .or(url_prefix)
            .unwrap_or_else(|| DEFAULT_PREFIX.to_owned());
        validate_prefix(&prefix)?;
        let node_urls = match &target {
            Target::Single(url) => vec![url.clone()],
            Target::Cluster(urls) => urls.clone(),
        };
        let (conn, nodes, cluster) = match target {
            Target::Single(url) => {
                let client = redis::Client::open(url.as_str()).map_err(|e| map(e, "URL"))?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(opts.connection_timeout))
                    .set_response_timeout(Some(opts.response_timeout))
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_millis(500));
                let manager = ConnectionManager::new_with_config(client.clone(), config)
                    .await
                    .map_err(|e| map(e, "connect"))?;
                (Conn::Single(manager), vec![client], false)
            }
            Target::Cluster(urls) => {
                let clients = urls
                    .iter()
                    .map(|u| redis::Client::open(u.as_str()).map_err(|e| map(e, "URL")))
                    .collect::<Result<Vec<_>>>()?;
                let cc = ClusterClientBuilder::new(urls)
                    .connection_timeout(opts.connection_timeout)
                    .response_timeout(opts.response_timeout)
                    .retries(3)
                    .build()
                    .map_err(|e| map(e, "cluster URL"))?;
                let conn = cc
                    .get_async_connection()
                    .await
                    .map_err(|e| map(e, "connect to cluster"))?;
                (Conn::Cluster(conn), clients, true)
            }
        };
        Ok(RedisStore {
            conn,
            keys: Keys::new(&prefix),
            opts,
            nodes,
            node_urls,
            cluster,
            claimed: Mutex::new(HashMap::new()),
        })
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

    /// URLs of the cluster's primaries, from `CLUSTER NODES`, with the seed
    /// URL's scheme and credentials.
    async fn primary_urls(&self) -> Result<Vec<String>> {
        let seed = &self.node_urls[0];
        let (scheme, rest) = seed.split_once("://").unwrap_or(("redis", seed));
        let userinfo = rest
            .split('/')
            .next()
            .and_then(|a| a.rsplit_once('@'))
            .map(|(u, _)| format!("{u}@"))
            .unwrap_or_default();
        let mut c = self
            .nodes_conn()
            .await
            .map_err(|e| map(e, "connect to node"))?;
        let text: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async(&mut c)
            .await
            .map_err(|e| map(e, "CLUSTER NODES"))?;
        Ok(primary_addrs(&text)
            .into_iter()
            .map(|addr| format!("{scheme}://{userinfo}{addr}/"))
            .collect())
    }

    async fn nodes_conn(&self) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
        let mut last = None;
        for n in &self.nodes {
            match n.get_multiplexed_async_connection().await {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "no node"))
        }))
    }

    // ------------------------------------------------------------ helpers

    fn conn(&self) -> Conn {
        self.conn.clone()
    }

    /// The jobtype of each id found in the index (one HMGET per touched
    /// bucket, concurrently).
    async fn lookup(&self, ids: &[String]) -> Result<HashMap<String, String>> {
        let mut by_bucket: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        let mut seen = HashSet::new();
        for id in ids {
            if seen.insert(id.as_str()) {
                by_bucket
                    .entry(self.keys.bucket(id))
                    .or_default()
                    .push(id.as_str());
            }
        }
        let calls = by_bucket.iter().map(|(bucket, ids)| {
            let mut c = self.conn();
            let mut cmd = redis::cmd("HMGET");
            cmd.arg(bucket).arg(ids);
            async move {
                let vals: Vec<Option<String>> = cmd
                    .query_async(&mut c)
                    .await
                    .map_err(|e| map(e, "HMGET index"))?;
                Ok::<_, Error>(vals)
            }
        });
        let results = try_join_all(calls).await?;
        let mut out = HashMap::new();
        for ((_, ids), vals) in by_bucket.iter().zip(results) {
            for (id, v) in ids.iter().zip(vals) {
                if let Some(v) = v {
                    out.insert((*id).to_owned(), index_jobtype(&v).to_owned());
                }
            }
        }
        Ok(out)
    }

    /// Runs `run(jobtype, ids)` once per jobtype among `ids` (each id once),
    /// concurrently; returns `(id, jobtype, extra)` for what the runs report.
    ///
    /// Jobtypes come from this handle's cache of the jobs it claimed, else
    /// from the index (one HMGET per touched bucket). A cached jobtype can
    /// only be stale if the job was deleted and its id added again under
    /// another jobtype: ids the cached run did not report are looked up in
    /// the index, and run again where it names another jobtype.
    async fn per_jobtype<F, Fut>(
        &self,
        ids: &[String],
        run: F,
    ) -> Result<Vec<(String, String, String)>>
    where
        F: Fn(String, Vec<String>) -> Fut,
        Fut: Future<Output = Result<Vec<(String, String)>>>,
    {
        match self.per_jobtype_partial(ids, run).await {
            (out, None) => Ok(out),
            (_, Some(e)) => Err(e),
        }
    }

    /// Runs the script that `build` prepares for each jobtype's keys once
    /// per jobtype among `ids`, with that jobtype's ids appended as its last
    /// arguments; each script returns the ids it changed. Returns those ids
    /// in the caller's order.
    async fn change_ids<B>(
        &self,
        ids: &[String],
        what: &'static str,
        build: B,
    ) -> Result<Vec<String>>
    where
        B: Fn(&TypeKeys) -> redis::ScriptInvocation<'static>,
    {
        let done = self
            .per_jobtype(ids, |jt, ids| {
                let mut inv = build(&self.keys.jobtype(&jt));
                inv.arg(ids);
                let mut c = self.conn();
                async move {
                    let v: Vec<String> =
                        inv.invoke_async(&mut c).await.map_err(|e| map(e, what))?;
                    Ok(v.into_iter().map(|id| (id, String::new())).collect())
                }
            })
            .await?;
        let done: HashSet<String> = done.into_iter().map(|(id, _, _)| id).collect();
        Ok(in_order(ids, &done))
    }

    /// [`Self::per_jobtype`], but runs every jobtype's script even when
    /// another fails, and returns what succeeded along with the first
    /// error (so a delete can still unreserve the jobs it did delete).
    async fn per_jobtype_partial<F, Fut>(
        &self,
        ids: &[String],
        run: F,
    ) -> (Vec<(String, String, String)>, Option<Error>)
    where
        F: Fn(String, Vec<String>) -> Fut,
        Fut: Future<Output = Result<Vec<(String, String)>>>,
    {
        let mut seen = HashSet::new();
        let mut cached: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut unknown = Vec::new();
        {
            let cache = self.cache();
            for id in ids {
                if !seen.insert(id.as_str()) {
                    continue;
                }
                match cache.get(id) {
                    Some(t) => cached.entry(t.clone()).or_default().push(id.clone()),
                    None => unknown.push(id.clone()),
                }
            }
        }
        let mut groups = cached.clone();
        if !unknown.is_empty() {
            let types = match self.lookup(&unknown).await {
                Ok(t) => t,
                Err(e) => return (Vec::new(), Some(e)),
            };
            for id in unknown {
                if let Some(t) = types.get(&id) {
                    groups.entry(t.clone()).or_default().push(id);
                }
            }
        }
        let (mut out, err) = run_groups(groups, &run).await;
        if cached.is_empty() || err.is_some() {
            return (out, err);
        }
        let missed: Vec<(String, String)> = {
            let hit: HashSet<&str> = out.iter().map(|(id, _, _)| id.as_str()).collect();
            cached
                .into_iter()
                .flat_map(|(t, ids)| ids.into_iter().map(move |id| (id, t.clone())))
                .filter(|(id, _)| !hit.contains(id.as_str()))
                .collect()
        };
        if missed.is_empty() {
            return (out, None);
        }
        let missed_ids: Vec<String> = missed.iter().map(|(id, _)| id.clone()).collect();
        let types = match self.lookup(&missed_ids).await {
            Ok(t) => t,
            Err(e) => return (out, Some(e)),
        };
        let mut again: BTreeMap<String, Vec<String>> = BTreeMap::new();
        {
            let mut cache = self.cache();
            for (id, t) in missed {
                cache.remove(&id);
                if let Some(real) = types.get(&id)
                    && *real != t
                {
                    again.entry(real.clone()).or_default().push(id);
                }
            }
        }
        if !again.is_empty() {
            let (more, err) = run_groups(again, &run).await;
            out.extend(more);
            return (out, err);
        }
        (out, None)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        // The map holds plain strings: a panic elsewhere cannot leave it torn.
        self.claimed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Deletes the index entries of deleted jobs: `(id, jobtype, token)`.
    async fn unreserve(&self, deleted: &[(String, String, String)]) -> Result<()> {
        let mut by_bucket: BTreeMap<String, Vec<(&str, String)>> = BTreeMap::new();
        for (id, jobtype, token) in deleted {
            by_bucket
                .entry(self.keys.bucket(id))
                .or_default()
                .push((id.as_str(), index_value(jobtype, token)));
        }
        let calls = by_bucket.iter().map(|(bucket, entries)| {
            let mut inv = SCRIPTS.unreserve.prepare_invoke();
            inv.key(bucket);
            for (id, v) in entries {
                inv.arg(*id).arg(v);
            }
            let mut c = self.conn();
            async move {
                inv.invoke_async::<()>(&mut c)
                    .await
                    .map_err(|e| map(e, "unreserve"))?;
                Ok::<_, Error>(())
            }
        });
        // Every bucket is tried, even when another fails.
        join_all(calls)
            .await
            .into_iter()
            .collect::<Result<Vec<()>>>()?;
        Ok(())
    }

    /// Every jobtype that ever had a job in this namespace.
    async fn known_jobtypes(&self) -> Result<Vec<String>> {
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

    /// One round of an add: reserve, create; repairs of dangling
    /// reservations. Fills `status` (true new, false existing) for the jobs
    /// at `pending`; returns the indexes to try again.
    async fn add_round(
        &self,
        jobs: &[NewJob],
        pending: &[usize],
        status: &mut [Option<bool>],
        now: Millis,
        first: bool,
    ) -> Result<Vec<usize>> {
        let token = &new_token()[..16];
        // Step 1: reservations, per bucket; and the jobtypes set.
        let mut by_bucket: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for &i in pending {
            by_bucket
                .entry(self.keys.bucket(&jobs[i].id))
                .or_default()
                .push(i);
        }
        let reserves = by_bucket.iter().map(|(bucket, idx)| {
            let mut inv = SCRIPTS.reserve.prepare_invoke();
            inv.key(bucket).arg(token);
            for &i in idx {
                inv.arg(&jobs[i].id).arg(&jobs[i].jobtype);
            }
            let mut c = self.conn();
            async move {
                let v: Vec<String> = inv
                    .invoke_async(&mut c)
                    .await
                    .map_err(|e| map(e, "reserve ids"))?;
                Ok::<_, Error>(v)
            }
        });
        let sadd = async {
            if first {
                let mut types: Vec<&str> =
                    pending.iter().map(|&i| jobs[i].jobtype.as_str()).collect();
                types.sort_unstable();
                types.dedup();
                let mut c = self.conn();
                let _: i64 = redis::cmd("SADD")
                    .arg(self.keys.jobtypes())
                    .arg(types)
                    .query_async(&mut c)
                    .await
                    .map_err(|e| map(e, "SADD jobtypes"))?;
            }
            Ok::<_, Error>(())
        };
        let (reserved, ()) = futures::try_join!(try_join_all(reserves), sadd)?;
        // Per job: None = reserved now ("c"), Some(old value) = reserved
        // before for the same jobtype ("r").
        let mut to_add: BTreeMap<&str, Vec<(usize, Option<String>)>> = BTreeMap::new();
        for ((_, idx), vals) in by_bucket.iter().zip(reserved) {
            if vals.len() != idx.len() {
                return Err(malformed("reserve reply length"));
            }
            for (&i, v) in idx.iter().zip(vals) {
                let jt = jobs[i].jobtype.as_str();
                if v.is_empty() {
                    to_add.entry(jt).or_default().push((i, None));
                } else if index_jobtype(&v) == jt {
                    to_add.entry(jt).or_default().push((i, Some(v)));
                } else {
                    status[i] = Some(false);
                }
            }
        }
        // Step 2: create, per jobtype.
        let results = self.run_add(jobs, &to_add, token, now).await?;
        let mut repair: Vec<(usize, String)> = Vec::new();
        let mut align: Vec<(usize, String, String)> = Vec::new();
        for ((_, entries), flags) in to_add.into_iter().zip(results) {
            for ((i, old), flag) in entries.into_iter().zip(flags) {
                match (flag, old) {
                    (Added::Created, _) => status[i] = Some(true),
                    (Added::Fenced, _) => status[i] = Some(false),
                    (Added::Existing(g), old) => {
                        status[i] = Some(false);
                        let jt = &jobs[i].jobtype;
                        let mine = old.unwrap_or_else(|| index_value(jt, token));
                        let live = index_value(jt, &g);
                        if mine != live {
                            align.push((i, mine, live));
                        }
                    }
                    (Added::Missing, Some(old)) => repair.push((i, old)),
                    (Added::Missing, None) => return Err(malformed("add reply")),
                }
            }
        }
        if repair.is_empty() {
            self.align_index(jobs, align).await?;
            return Ok(Vec::new());
        }
        // Step 3: take dangling reservations over (compare-and-set).
        let mut by_bucket: BTreeMap<String, Vec<(usize, String)>> = BTreeMap::new();
        for (i, old) in repair {
            by_bucket
                .entry(self.keys.bucket(&jobs[i].id))
                .or_default()
                .push((i, old));
        }
        let swapped = self
            .cas_index(jobs, &by_bucket, |i| index_value(&jobs[i].jobtype, token))
            .await?;
        let mut again = Vec::new();
        let mut to_add: BTreeMap<&str, Vec<(usize, Option<String>)>> = BTreeMap::new();
        for ((_, entries), flags) in by_bucket.iter().zip(swapped) {
            for ((i, _), flag) in entries.iter().zip(flags) {
                if flag == 1 {
                    to_add
                        .entry(jobs[*i].jobtype.as_str())
                        .or_default()
                        .push((*i, None));
                } else {
                    again.push(*i);
                }
            }
        }
        // Step 4: create under the new reservation.
        let results = self.run_add(jobs, &to_add, token, now).await?;
        for ((_, entries), flags) in to_add.into_iter().zip(results) {
            for ((i, _), flag) in entries.into_iter().zip(flags) {
                status[i] = Some(matches!(flag, Added::Created));
                if let Added::Existing(g) = flag {
                    let jt = &jobs[i].jobtype;
                    let (mine, live) = (index_value(jt, token), index_value(jt, &g));
                    if mine != live {
                        align.push((i, mine, live));
                    }
                }
            }
        }
        self.align_index(jobs, align).await?;
        Ok(again)
    }

    /// Compare-and-set of index entries, per bucket: for each `(i, old)`,
    /// the entry of `jobs[i].id` becomes `new(i)` if it still is `old`.
    /// Returns 1/0 per entry, bucket by bucket.
    async fn cas_index(
        &self,
        jobs: &[NewJob],
        by_bucket: &BTreeMap<String, Vec<(usize, String)>>,
        new: impl Fn(usize) -> String,
    ) -> Result<Vec<Vec<i64>>> {
        let cas = by_bucket.iter().map(|(bucket, entries)| {
            let mut inv = SCRIPTS.rereserve.prepare_invoke();
            inv.key(bucket);
            for (i, old) in entries {
                inv.arg(&jobs[*i].id).arg(old).arg(new(*i));
            }
            let mut c = self.conn();
            async move {
                let v: Vec<i64> = inv
                    .invoke_async(&mut c)
                    .await
                    .map_err(|e| map(e, "rereserve ids"))?;
                Ok::<_, Error>(v)
            }
        });
        try_join_all(cas).await
    }

    /// An add found the job already there with another reservation token
    /// than the index entry it relied on (two adds of one id raced, and the
    /// other one created the job under the older token): the index entry is
    /// set to the live job's token, if it still holds the one this add
    /// relied on. `(i, index value relied on, "<T> <job's token>")`.
    async fn align_index(
        &self,
        jobs: &[NewJob],
        align: Vec<(usize, String, String)>,
    ) -> Result<()> {
        if align.is_empty() {
            return Ok(());
        }
        let mut by_bucket: BTreeMap<String, Vec<(usize, String)>> = BTreeMap::new();
        let mut live: HashMap<usize, String> = HashMap::new();
        for (i, mine, g) in align {
            by_bucket
                .entry(self.keys.bucket(&jobs[i].id))
                .or_default()
                .push((i, mine));
            live.insert(i, g);
        }
        self.cas_index(jobs, &by_bucket, |i| live[&i].clone())
            .await?;
        Ok(())
    }

    /// `add.lua` once per jobtype, concurrently; the flags per job.
    async fn run_add(
        &self,
        jobs: &[NewJob],
        groups: &BTreeMap<&str, Vec<(usize, Option<String>)>>,
        token: &str,
        now: Millis,
    ) -> Result<Vec<Vec<Added>>> {
        let channel = self.keys.channel();
        let calls = groups.iter().map(|(jt, entries)| {
            let k = self.keys.jobtype(jt);
            let mut inv = SCRIPTS.add.prepare_invoke();
            inv.key(&k.ready)
                .key(&k.sched)
                .key(&k.fence)
                .arg(&k.job)
                .arg(padded(now))
                .arg(&channel)
                .arg(*jt)
                .arg(token);
            for (i, old) in entries {
                let job = &jobs[*i];
                inv.arg(&job.id);
                match old {
                    // mode r: the token of the reservation found, fenced if
                    // the job is missing (see add.lua); no data needed
                    Some(old) => inv.arg("r").arg(index_token(old)),
                    None => inv.arg("c").arg(&job.data[..]),
                };
                inv.arg(job.priority)
                    .arg(-i64::from(job.priority))
                    .arg(padded(job.run_at.unwrap_or(now)));
            }
            let n = entries.len();
            let mut c = self.conn();
            async move {
                let v: Vec<Value> = inv
                    .invoke_async(&mut c)
                    .await
                    .map_err(|e| map(e, "add jobs"))?;
                if v.len() != n {
                    return Err(malformed("add reply length"));
                }
                v.into_iter()
                    .map(|f| match f {
                        Value::Int(1) => Ok(Added::Created),
                        Value::Int(2) => Ok(Added::Missing),
                        Value::Int(3) => Ok(Added::Fenced),
                        Value::BulkString(g) => String::from_utf8(g)
                            .map(Added::Existing)
                            .map_err(|_| malformed("add reply token")),
                        _ => Err(malformed("add reply")),
                    })
                    .collect()
            }
        });
        try_join_all(calls).await
    }
}

/// The `host:port` of each primary that a `CLUSTER NODES` reply lists as
/// reachable: flagged `master`, and neither `fail`, `fail?` nor `noaddr`.
fn primary_addrs(nodes: &str) -> Vec<&str> {
    nodes
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let flags = f.get(2)?.split(',');
            let mut primary = false;
            for flag in flags {
                match flag {
                    "master" => primary = true,
                    "fail" | "fail?" | "noaddr" => return None,
                    _ => {}
                }
            }
            // `ip:port@cport` or `ip:port@cport,hostname`
            let addr = f[1].split('@').next().unwrap_or("");
            (primary && !addr.is_empty()).then_some(addr)
        })
        .collect()
}

/// What `add.lua` did with one job.
enum Added {
    /// Created now.
    Created,
    /// Missing, not created (mode `r`).
    Missing,
    /// Already there, with this reservation token.
    Existing(String),
    /// Not created: this add's reservation was taken over by another add
    /// (which creates the job), so it is reported existing.
    Fenced,
}

/// `run` once per group, concurrently; results tagged with the jobtype.
/// Runs every group to its end, even when some fail: returns what the
/// successful runs report and the first error, if any.
async fn run_groups<F, Fut>(
    groups: BTreeMap<String, Vec<String>>,
    run: &F,
) -> (Vec<(String, String, String)>, Option<Error>)
where
    F: Fn(String, Vec<String>) -> Fut,
    Fut: Future<Output = Result<Vec<(String, String)>>>,
{
    let calls = groups.into_iter().map(|(jt, ids)| {
        let fut = run(jt.clone(), ids);
        async move {
            let pairs = fut.await?;
            Ok::<_, Error>(
                pairs
                    .into_iter()
                    .map(|(id, extra)| (id, jt.clone(), extra))
                    .collect::<Vec<_>>(),
            )
        }
    });
    let mut out = Vec::new();
    let mut first = None;
    for r in join_all(calls).await {
        match r {
            Ok(v) => out.extend(v),
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    (out, first)
}

/// The cluster slot of a key (CRC16/XMODEM of its hash tag, mod 16384).
fn key_slot(key: &str) -> u16 {
    let b = key.as_bytes();
    let tagged = b.iter().position(|&c| c == b'{').and_then(|open| {
        b[open + 1..]
            .iter()
            .position(|&c| c == b'}')
            .filter(|&len| len > 0)
            .map(|len| &b[open + 1..open + 1 + len])
    });
    let data = tagged.unwrap_or(b);
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

fn int(v: &Value, what: &str) -> Result<i64> {
    match v {
        Value::Int(n) => Ok(*n),
        Value::BulkString(b) => parse_int(b, what),
        Value::SimpleString(s) => parse_int(s.as_bytes(), what),
        _ => Err(malformed(what)),
    }
}

fn parse_int(b: &[u8], what: &str) -> Result<i64> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| malformed(what))
}

/// A score as Redis prints it (`%.17g`); ours are integers.
fn parse_score(b: &[u8], what: &str) -> Result<i64> {
    let s = std::str::from_utf8(b).map_err(|_| malformed(what))?;
    if let Ok(n) = s.parse::<i64>() {
        return Ok(n);
    }
    let f: f64 = s.parse().map_err(|_| malformed(what))?;
    if f.fract() != 0.0 || !f.is_finite() {
        return Err(malformed(what));
    }
    Ok(f as i64)
}

fn bytes(v: Value, what: &str) -> Result<Vec<u8>> {
    match v {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.into_bytes()),
        Value::Int(n) => Ok(n.to_string().into_bytes()),
        _ => Err(malformed(what)),
    }
}

fn string(v: Value, what: &str) -> Result<String> {
    String::from_utf8(bytes(v, what)?).map_err(|_| malformed(what))
}

fn from_value<T: FromRedisValue>(v: Value, what: &str) -> Result<T> {
    T::from_redis_value(v).map_err(|_| malformed(what))
}

/// A job from its hash (`HGETALL`).
fn job_from_hash(id: &str, jobtype: &str, mut h: HashMap<String, Vec<u8>>) -> Result<Job> {
    let mut take = |f: &str| h.remove(f);
    let num = |v: Option<Vec<u8>>, f: &str| -> Result<i64> {
        parse_int(&v.ok_or_else(|| malformed(f))?, f)
    };
    let data = take("d").ok_or_else(|| malformed("job data"))?;
    let priority = num(take("p"), "priority")?;
    let dt = num(take("dt"), "dt")?;
    let lock = String::from_utf8(take("l").ok_or_else(|| malformed("lock"))?)
        .map_err(|_| malformed("lock"))?;
    let attempts = num(take("a"), "attempts")?;
    let create_dt = num(take("c"), "create_dt")?;
    let done_dt = take("dd").map(|v| parse_int(&v, "done_dt")).transpose()?;
    let result = match take("rc") {
        None => None,
        Some(code) => {
            let code: ResultCode = std::str::from_utf8(&code)
                .ok()
                .and_then(|c| c.parse().ok())
                .ok_or_else(|| malformed("result code"))?;
            let status = num(take("rs"), "status")?;
            Some(JobResult {
                code,
                status: u16::try_from(status).map_err(|_| malformed("status"))?,
                output: take("ro").unwrap_or_default(),
            })
        }
    };
    Ok(Job {
        id: id.to_owned(),
        jobtype: jobtype.to_owned(),
        data,
        priority: i32::try_from(priority).map_err(|_| malformed("priority"))?,
        dt,
        lock,
        attempts: u32::try_from(attempts).map_err(|_| malformed("attempts"))?,
        create_dt,
        done_dt,
        result,
    })
}

/// A time as 15 zero-padded decimal digits, as the scripts compare times
/// (validated times are `0..=MAX_TIME`, 15 digits, and leases or delays
/// on top stay below 10^15), so that they compare as strings.
fn padded(t: Millis) -> String {
    format!("{t:015}")
}

/// `ids` that are in `done`, once each, in input order.
fn in_order(ids: &[String], done: &HashSet<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    ids.iter()
        .filter(|id| done.contains(*id) && seen.insert(id.as_str()))
        .cloned()
        .collect()
}

#[async_trait]
impl JobStore for RedisStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(Self::MAX_PAYLOAD).with_notifications()
    }

    async fn add_jobs(&self, jobs: &[NewJob], now: Millis) -> Result<AddOutcome> {
        validate::new_jobs(jobs, &self.capabilities(), now)?;
        if jobs.is_empty() {
            return Ok(AddOutcome::default());
        }
        let mut status: Vec<Option<bool>> = vec![None; jobs.len()];
        let mut pending: Vec<usize> = (0..jobs.len()).collect();
        for round in 0..ADD_ROUNDS {
            if pending.is_empty() {
                break;
            }
            pending = self
                .add_round(jobs, &pending, &mut status, now, round == 0)
                .await?;
        }
        let mut outcome = AddOutcome::default();
        for (job, s) in jobs.iter().zip(status) {
            if s == Some(true) {
                outcome.new.push(job.id.clone());
            } else {
                outcome.existing.push(job.id.clone());
            }
        }
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
        if !reply.len().is_multiple_of(5) {
            return Err(malformed("claim reply length"));
        }
        let mut jobs = Vec::with_capacity(reply.len() / 5);
        let mut it = reply.into_iter();
        while let (Some(id), Some(data), Some(p), Some(c), Some(a)) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        {
            jobs.push(Job {
                id: string(id, "claimed id")?,
                jobtype: jobtype.to_owned(),
                data: bytes(data, "claimed data")?,
                priority: i32::try_from(int(&p, "priority")?).map_err(|_| malformed("priority"))?,
                dt: expiry,
                lock: owner.to_owned(),
                attempts: u32::try_from(int(&a, "attempts")?).map_err(|_| malformed("attempts"))?,
                create_dt: int(&c, "create_dt")?,
                done_dt: None,
                result: None,
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
    ) -> Result<Vec<String>> {
        validate::renew(ids, owner, lease, now)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let expiry = now + duration_ms(lease);
        self.change_ids(ids, "renew locks", |k| {
            let mut inv = SCRIPTS.renew.prepare_invoke();
            inv.key(&k.ready)
                .key(&k.lock)
                .arg(&k.job)
                .arg(owner)
                .arg(expiry);
            inv
        })
        .await
    }

    async fn release_jobs(
        &self,
        releases: &[JobRelease],
        owner: &str,
        now: Millis,
    ) -> Result<Vec<String>> {
        validate::release(releases, owner, now)?;
        if releases.is_empty() {
            return Ok(Vec::new());
        }
        let how: HashMap<&str, &Release> =
            releases.iter().map(|r| (r.id.as_str(), &r.how)).collect();
        let ids: Vec<String> = releases.iter().map(|r| r.id.clone()).collect();
        let channel = self.keys.channel();
        let (now_arg, archive_dt) = (padded(now), padded(now + ARCHIVE_HORIZON_MS));
        let (released, err) = self
            .per_jobtype_partial(&ids, |jt, ids| {
                let k = self.keys.jobtype(&jt);
                let mut inv = SCRIPTS.release.prepare_invoke();
                inv.key(&k.ready)
                    .key(&k.sched)
                    .key(&k.lock)
                    .key(&k.done)
                    .key(&k.codes)
                    .arg(&k.job)
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
                            inv.arg("r").arg(padded(now + duration_ms(*delay)));
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
        if !deleted.is_empty() {
            let unreserved = self.unreserve(&deleted).await;
            if let Some(e) = err {
                return Err(e);
            }
            unreserved?;
        }
        if let Some(e) = err {
            return Err(e);
        }
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

    async fn cancel_jobs(&self, ids: &[String], now: Millis) -> Result<Vec<String>> {
        validate::cancel(ids, now)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.change_ids(ids, "cancel jobs", |k| {
            let mut inv = SCRIPTS.cancel.prepare_invoke();
            inv.key(&k.ready)
                .key(&k.sched)
                .key(&k.done)
                .key(&k.codes)
                .arg(&k.job)
                .arg(now)
                .arg(now + ARCHIVE_HORIZON_MS);
            inv
        })
        .await
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
        if h.is_empty() {
            return Ok(None);
        }
        job_from_hash(id, &jt, h).map(Some)
    }

    async fn purge_archived(&self, before: Millis) -> Result<u64> {
        validate::time("before", before)?;
        let types = self.known_jobtypes().await?;
        let calls = types.iter().map(|jt| {
            let k = self.keys.jobtype(jt);
            let mut c = self.conn();
            async move {
                let mut purged = 0u64;
                loop {
                    let mut inv = SCRIPTS.purge.prepare_invoke();
                    inv.key(&k.done)
                        .key(&k.codes)
                        .arg(&k.job)
                        .arg(before)
                        .arg(PURGE_SLICE);
                    let v: Vec<String> = inv
                        .invoke_async(&mut c)
                        .await
                        .map_err(|e| map(e, "purge archived"))?;
                    if !v.len().is_multiple_of(2) {
                        return Err(malformed("purge reply length"));
                    }
                    let n = v.len() / 2;
                    let deleted: Vec<(String, String, String)> = v
                        .chunks(2)
                        .map(|p| (p[0].clone(), jt.clone(), p[1].clone()))
                        .collect();
                    // Unreserve each slice right away: bounded work per
                    // step, and a later failure cannot strand its tokens.
                    if !deleted.is_empty() {
                        self.unreserve(&deleted).await?;
                    }
                    purged += n as u64;
                    if n < PURGE_SLICE {
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
            if v.len() < 3 || v.len() % 2 != 1 {
                return Err(malformed("counts reply length"));
            }
            let mut c = JobCounts {
                jobtype,
                waiting: int(&v[0], "waiting")? as u64,
                scheduled: int(&v[1], "scheduled")? as u64,
                running: int(&v[2], "running")? as u64,
                archived: BTreeMap::new(),
            };
            let mut it = v.into_iter().skip(3);
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

fn handler_version(jobtype: String, id: Value, dt: Value, json: Value) -> Result<HandlerVersion> {
    let id: String = from_value(id, "handler version id")?;
    let dt = parse_score(&bytes(dt, "handler dt")?, "handler dt")?;
    let json = bytes(json, "handler")?;
    let handler: Handler = serde_json::from_slice(&json)
        .map_err(|e| Error::backend("redis: stored handler is not valid JSON", e))?;
    Ok(HandlerVersion {
        id,
        jobtype,
        dt,
        handler,
    })
}

#[cfg(test)]
mod tests {
    use super::{bytes, handler_version, int, key_slot, parse_score, string};
    use jobstore_api::{Handler, HandlerLimits};
    use redis::Value;

    /// Replies are read as what they mean, whatever string or number form
    /// the server sends them in; anything else is a malformed reply.
    #[test]
    fn replies_decode_from_every_form_they_come_in() {
        assert_eq!(
            bytes(Value::BulkString(b"a\0b".to_vec()), "x").unwrap(),
            b"a\0b"
        );
        assert_eq!(bytes(Value::SimpleString("OK".into()), "x").unwrap(), b"OK");
        assert_eq!(bytes(Value::Int(-12), "x").unwrap(), b"-12");
        assert!(bytes(Value::Nil, "x").is_err());
        assert_eq!(
            string(Value::BulkString(b"id-1".to_vec()), "x").unwrap(),
            "id-1"
        );
        assert!(string(Value::BulkString(vec![0xff]), "x").is_err());
        assert_eq!(int(&Value::Int(7), "x").unwrap(), 7);
        assert_eq!(int(&Value::BulkString(b"-3".to_vec()), "x").unwrap(), -3);
        assert_eq!(int(&Value::SimpleString("42".into()), "x").unwrap(), 42);
        assert!(int(&Value::BulkString(b"4x".to_vec()), "x").is_err());
        assert!(int(&Value::Nil, "x").is_err());
        assert_eq!(
            parse_score(b"1700000000000", "x").unwrap(),
            1_700_000_000_000
        );
        assert_eq!(parse_score(b"1.7e+12", "x").unwrap(), 1_700_000_000_000);
        assert!(parse_score(b"1.5", "x").is_err());
        assert!(parse_score(b"inf", "x").is_err());
    }

    #[test]
    fn primaries_are_the_reachable_masters_of_cluster_nodes() {
        let nodes = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host4 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002,host2 master - 0 1426238316232 2 connected 5461-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master,fail - 1426238316232 1426238316232 3 disconnected 10923-16383
824fe116063bc5fcf9f4ffd895bc17aee7731ac3 127.0.0.1:30006@31006 master,fail? - 1426238316232 0 6 connected
5d3ae13c4e5b0c57f5d63e1a6d6c1a9a5c1c3b5e :0@0 master,noaddr - 0 0 7 disconnected
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460
";
        assert_eq!(
            super::primary_addrs(nodes),
            ["127.0.0.1:30002", "127.0.0.1:30001"]
        );
        assert!(super::primary_addrs("").is_empty());
        assert!(super::primary_addrs("abc 127.0.0.1:1@2\n").is_empty());
    }

    #[test]
    fn handlers_stored_before_limits_read_back_without_limits() {
        let old = br#"{"lang":"process","body":"cat","eid":null,"before":null,"before_each":null,"after_each":null}"#;
        let v = handler_version(
            "t".into(),
            Value::BulkString(b"v00000000000000000001".to_vec()),
            Value::BulkString(b"5".to_vec()),
            Value::BulkString(old.to_vec()),
        )
        .unwrap();
        assert_eq!(v.handler, Handler::new("process", "cat"));
        assert_eq!(v.handler.limits, HandlerLimits::default());
    }

    #[test]
    fn slots_follow_hash_tags() {
        // Known values from the Redis cluster spec (CRC16 of "123456789" is 0x31C3).
        assert_eq!(key_slot("123456789"), 0x31C3);
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        // An empty tag is no tag: the whole key is hashed (CRC16/XMODEM
        // of "foo{}{bar}" is 0xE0AB, slot 8363); only the first tag counts.
        assert_eq!(key_slot("foo{}{bar}"), 8363);
        assert_eq!(key_slot("foo{{bar}}zap"), key_slot("{bar"));
        assert_eq!(key_slot("foo{bar}{zap}"), key_slot("bar"));
        assert_ne!(key_slot("{jobs:a}:ready"), key_slot("{jobs:b}:ready"));
    }

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
        use super::Added;
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
                .run_add(&jobs, &groups, "tok", 1_700_000_000_000)
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
