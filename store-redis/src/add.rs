//! Adds: ids reserved in the index, then jobs created per jobtype
//! (`reserve.lua`, `add.lua`), with the repairs of dangling reservations
//! (`rereserve.lua`).

use std::collections::{BTreeMap, HashMap};

use futures::future::try_join_all;
use jobstore_api::{
    DependencyFailure, Error, Millis, NewJob, OnConflict, Refusal, Result, duration_ms, new_token,
};
use redis::Value;

use crate::error::{malformed, map};
use crate::flow::{Committed, Staged};
use crate::keys::{index_jobtype, index_token, index_value};
use crate::scripts::{SCRIPTS, padded};
use crate::store::RedisStore;

/// How many times an add retries ids whose reservation changed under it.
pub(crate) const ADD_ROUNDS: usize = 3;

impl RedisStore {
    /// One round of an add: reserve, create; repairs of dangling
    /// reservations. Fills `status` for the jobs at `pending`; returns the
    /// indexes to try again.
    pub(crate) async fn add_round(
        &self,
        jobs: &[NewJob],
        pending: &[usize],
        status: &mut [Option<Status>],
        now: Millis,
        first: bool,
        deps: &HashMap<String, String>,
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
                    status[i] = Some(Status::Existing);
                }
            }
        }
        // Step 2: create, per jobtype, in batch order (the first of two
        // jobs with one unique key is the one added).
        to_add
            .values_mut()
            .for_each(|v| v.sort_unstable_by_key(|e| e.0));
        let results = self.run_add(jobs, &to_add, token, now, deps).await?;
        let mut repair: Vec<(usize, String)> = Vec::new();
        let mut align: Vec<(usize, String, String)> = Vec::new();
        for ((_, entries), flags) in to_add.into_iter().zip(results) {
            for ((i, old), flag) in entries.into_iter().zip(flags) {
                match (flag, old) {
                    (Added::Created, _) => status[i] = Some(Status::New),
                    (Added::Fenced, _) => status[i] = Some(Status::Existing),
                    (Added::Duplicate(existing, replaced), _) => {
                        status[i] = Some(Status::duplicate(existing, replaced, token));
                    }
                    (Added::Existing(g), old) => {
                        status[i] = Some(Status::Existing);
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
        // Step 4: create under the new reservation, in batch order.
        to_add
            .values_mut()
            .for_each(|v| v.sort_unstable_by_key(|e| e.0));
        let results = self.run_add(jobs, &to_add, token, now, deps).await?;
        for ((_, entries), flags) in to_add.into_iter().zip(results) {
            for ((i, _), flag) in entries.into_iter().zip(flags) {
                status[i] = Some(match flag {
                    Added::Created => Status::New,
                    Added::Duplicate(existing, replaced) => {
                        Status::duplicate(existing, replaced, token)
                    }
                    Added::Existing(g) => {
                        let jt = &jobs[i].jobtype;
                        let (mine, live) = (index_value(jt, token), index_value(jt, &g));
                        if mine != live {
                            align.push((i, mine, live));
                        }
                        Status::Existing
                    }
                    Added::Missing | Added::Fenced => Status::Existing,
                });
            }
        }
        self.align_index(jobs, align).await?;
        Ok(again)
    }

    /// Compare-and-set of index entries, per bucket: for each `(i, old)`,
    /// the entry of `jobs[i].id` becomes `new(i)` if it still is `old`.
    /// Returns 1/0 per entry, bucket by bucket.
    pub(crate) async fn cas_index(
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
    pub(crate) async fn align_index(
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

    /// `add.lua` once per jobtype, concurrently; the flags per job. `deps`
    /// is the jobtype of each dependency the id index knows.
    pub(crate) async fn run_add(
        &self,
        jobs: &[NewJob],
        groups: &BTreeMap<&str, Vec<(usize, Option<String>)>>,
        token: &str,
        now: Millis,
        deps: &HashMap<String, String>,
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
                // mode k: a job with a unique key, created only if its key
                // is free (its group has 4 more values, below); mode p: a
                // job with a repeat rule and no key (1 more value)
                let unique = job.unique_key().filter(|_| old.is_none());
                let rule = job
                    .repeat_rule()
                    .filter(|_| old.is_none())
                    .map(|r| r.to_text());
                let targets = job.dependencies();
                let staged = old.is_none() && !targets.is_empty();
                match (old, unique, &rule) {
                    // mode r: the token of the reservation found, fenced if
                    // the job is missing (see add.lua); no data needed
                    (Some(old), _, _) => inv.arg("r").arg(index_token(old)),
                    // mode f: a job with dependencies, stored staged
                    _ if staged => inv.arg("f").arg(&job.data[..]),
                    (None, None, None) => inv.arg("c").arg(&job.data[..]),
                    (None, None, Some(_)) => inv.arg("p").arg(&job.data[..]),
                    (None, Some(_), _) => inv.arg("k").arg(&job.data[..]),
                };
                inv.arg(job.priority)
                    .arg(-i64::from(job.priority))
                    .arg(padded(job.run_at.unwrap_or(now)));
                match old {
                    Some(_) => inv.arg("").arg(""),
                    None => inv.arg(tags_json(&job.tags)).arg(trace_field(job)),
                };
                if staged {
                    let (key, since, replace) = match unique {
                        Some(u) => (
                            u.key.as_str(),
                            u.window
                                .map(|w| (now - duration_ms(w)).to_string())
                                .unwrap_or_default(),
                            u.on_conflict == OnConflict::ReplaceData,
                        ),
                        None => ("", String::new(), false),
                    };
                    let policy = dep_field_policy(job.flow.as_deref());
                    inv.arg(key)
                        .arg(since)
                        .arg(if replace { "1" } else { "0" })
                        .arg(rule.as_deref().unwrap_or(""))
                        .arg(policy)
                        .arg(targets.len());
                    for x in targets {
                        inv.arg(deps.get(x).map_or("", String::as_str)).arg(x);
                    }
                } else if let Some(u) = unique {
                    let since = u
                        .window
                        .map(|w| (now - duration_ms(w)).to_string())
                        .unwrap_or_default();
                    let replace = u.on_conflict == OnConflict::ReplaceData;
                    inv.arg(&u.key)
                        .arg(since)
                        .arg(if replace { "1" } else { "0" })
                        .arg(rule.as_deref().unwrap_or(""));
                } else if let Some(rule) = &rule {
                    inv.arg(rule.as_str());
                }
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
                        Value::Array(d) => match <[Value; 2]>::try_from(d) {
                            Ok([Value::BulkString(id), Value::Int(r)]) => String::from_utf8(id)
                                .map(|id| Added::Duplicate(id, r == 1))
                                .map_err(|_| malformed("add reply holder")),
                            _ => Err(malformed("add reply duplicate")),
                        },
                        _ => Err(malformed("add reply")),
                    })
                    .collect()
            }
        });
        try_join_all(calls).await
    }
}

/// What `add.lua` did with one job.
pub(crate) enum Added {
    /// Created now.
    Created,
    /// Missing, not created (mode `r`).
    Missing,
    /// Already there, with this reservation token.
    Existing(String),
    /// Not created: this add's reservation was taken over by another add
    /// (which creates the job), so it is reported existing.
    Fenced,
    /// Not created: the job holding its unique key (live, or archived
    /// inside the window), and whether that job got its payload.
    Duplicate(String, bool),
}

/// What an add did with one job of the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Status {
    New,
    Existing,
    /// Not stored: another job holds its unique key. `token` is the
    /// reservation this add made for the id, which it gives back.
    Duplicate {
        existing: String,
        replaced: bool,
        token: String,
    },
    /// Not stored: a dependency is not a job. `token` is the reservation
    /// this add made for the id, which it gives back.
    Refused {
        refusal: Refusal,
        token: String,
    },
}

impl Status {
    fn duplicate(existing: String, replaced: bool, token: &str) -> Self {
        Status::Duplicate {
            existing,
            replaced,
            token: token.to_owned(),
        }
    }
}

/// The trace context of a new job as stored (hash field `tc`): its
/// traceparent, then a space and its tracestate if it has one (a
/// traceparent holds no space); `""` for none (the field is then left out).
fn trace_field(job: &NewJob) -> String {
    match &job.trace {
        None => String::new(),
        Some(t) => match &t.tracestate {
            None => t.traceparent.clone(),
            Some(state) => format!("{} {state}", t.traceparent),
        },
    }
}

/// The tags of a new job as stored (hash field `t`): their JSON array, or
/// `""` for none (the field is then left out).
fn tags_json(tags: &[String]) -> String {
    if tags.is_empty() {
        return String::new();
    }
    serde_json::to_string(tags).unwrap_or_default()
}

impl RedisStore {
    /// The link and commit steps of the jobs this add staged (see README,
    /// "Dependencies"): a dependency that is a job new in this batch, or
    /// that the id index does not know, is not a job; the deps after the
    /// first such one are not linked (the refusal names the first).
    pub(crate) async fn commit_added(
        &self,
        jobs: &[NewJob],
        status: &mut [Option<Status>],
        dep_types: &HashMap<String, String>,
        now: Millis,
    ) -> Result<()> {
        let new_ids: std::collections::HashSet<&str> = jobs
            .iter()
            .zip(status.iter())
            .filter(|(_, s)| matches!(s, Some(Status::New)))
            .map(|(j, _)| j.id.as_str())
            .collect();
        let mut staged = Vec::new();
        let mut at = HashMap::new();
        for (i, job) in jobs.iter().enumerate() {
            if job.dependencies().is_empty() || !matches!(status[i], Some(Status::New)) {
                continue;
            }
            let (mut links, mut known) = (Vec::new(), Vec::new());
            for dep in job.dependencies() {
                if new_ids.contains(dep.as_str()) {
                    known.push((dep.clone(), "m".to_owned()));
                    break;
                }
                match dep_types.get(dep) {
                    Some(tx) => links.push((tx.clone(), dep.clone())),
                    None => break,
                }
            }
            at.insert((job.jobtype.clone(), job.id.clone()), i);
            staged.push(Staged {
                jobtype: job.jobtype.clone(),
                id: job.id.clone(),
                hold: job
                    .flow
                    .as_ref()
                    .is_some_and(|f| f.on_dependency_failure == DependencyFailure::Hold),
                links,
                known,
            });
        }
        for (key, how) in self.link_commit(staged, now).await? {
            if let (
                Some(&i),
                Committed::Refused {
                    position,
                    dependency,
                    token,
                },
            ) = (at.get(&key), how)
            {
                status[i] = Some(Status::Refused {
                    refusal: Refusal::unknown_dependency(&jobs[i].id, position, &dependency),
                    token,
                });
            }
        }
        Ok(())
    }
}

/// The policy part of a job's `dp` field (see README, "Dependencies"): its
/// letter (`c` cancel, `r` run, `h` hold), then ` o` when it was added
/// `with_outputs`.
fn dep_field_policy(flow: Option<&jobstore_api::JobFlow>) -> &'static str {
    let policy = flow.map_or_else(DependencyFailure::default, |f| f.on_dependency_failure);
    let outputs = flow.is_some_and(|f| f.with_outputs);
    match (policy, outputs) {
        (DependencyFailure::Run, false) => "r",
        (DependencyFailure::Run, true) => "r o",
        (DependencyFailure::Hold, false) => "h",
        (DependencyFailure::Hold, true) => "h o",
        (_, false) => "c",
        (_, true) => "c o",
    }
}
