//! The id index: which jobtype holds each id (ids are unique across
//! jobtypes, whose keys live in different slots), a handle's cache of the
//! jobs it claimed, and running a script once per jobtype of an id list.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;

use futures::future::{join_all, try_join_all};
use jobstore_api::{Error, Result};

use crate::error::map;
use crate::keys::{index_jobtype, index_value};
use crate::scripts::SCRIPTS;
use crate::store::RedisStore;

/// Most entries in a handle's id -> jobtype cache (cleared when full).
pub(crate) const CACHE_MAX: usize = 50_000;

impl RedisStore {
    /// The jobtype of each id found in the index (one HMGET per touched
    /// bucket, concurrently).
    pub(crate) async fn lookup(&self, ids: &[String]) -> Result<HashMap<String, String>> {
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
    pub(crate) async fn per_jobtype<F, Fut>(
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

    /// [`Self::per_jobtype`], but runs every jobtype's script even when
    /// another fails, and returns what succeeded along with the first
    /// error (so a delete can still unreserve the jobs it did delete).
    pub(crate) async fn per_jobtype_partial<F, Fut>(
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

    pub(crate) fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        // The map holds plain strings: a panic elsewhere cannot leave it torn.
        self.claimed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Deletes the index entries of `deleted` jobs, then reports `err`, the
    /// first failure of the batch that deleted them, if any: the ids of the
    /// jobs it did delete are freed either way.
    pub(crate) async fn unreserve_then(
        &self,
        deleted: &[(String, String, String)],
        err: Option<Error>,
    ) -> Result<()> {
        if !deleted.is_empty() {
            let unreserved = self.unreserve(deleted).await;
            if let Some(e) = err {
                return Err(e);
            }
            unreserved?;
        }
        err.map_or(Ok(()), Err)
    }

    /// Deletes the index entries of deleted jobs: `(id, jobtype, token)`.
    pub(crate) async fn unreserve(&self, deleted: &[(String, String, String)]) -> Result<()> {
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

/// `ids` that are in `done`, once each, in input order.
pub(crate) fn in_order(ids: &[String], done: &HashSet<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    ids.iter()
        .filter(|id| done.contains(*id) && seen.insert(id.as_str()))
        .cloned()
        .collect()
}
