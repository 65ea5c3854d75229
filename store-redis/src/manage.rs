//! The management operations: listing (`list.lua` per jobtype, merged
//! here in the query's order), running archived jobs again (`rerun.lua`),
//! deleting and editing by id (`delete.lua`, `edit.lua`), pausing
//! (`pause.lua` and the namespace's set of paused jobtypes).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use futures::future::try_join_all;
use jobstore_api::limits::MAX_CLAIM;
use jobstore_api::{
    DeleteOutcome, Job, JobEdit, JobPage, JobQuery, JobState, JobtypeFilter, Millis, Result,
    duration_ms,
};
use redis::Value;

use crate::decode::{bytes, int, job_from_hash, string};
use crate::error::{malformed, map};
use crate::index::in_order;
use crate::keys::TypeKeys;
use crate::scripts::{SCRIPTS, padded};
use crate::store::RedisStore;

/// The job hash fields `list.lua` returns after each id, in its order.
const LIST_FIELDS: [&str; 19] = [
    "d", "p", "dt", "l", "a", "c", "dd", "rc", "rs", "ro", "x", "h", "t", "ca", "cb", "tc", "r",
    "uk", "rp",
];

/// The keys of the scripts that touch every set of archived jobs: ready,
/// sched, then `extra`, then the six sets per code and the old set.
fn with_archive_sets(inv: &mut redis::ScriptInvocation<'static>, k: &TypeKeys, extra: &[&String]) {
    inv.key(&k.ready).key(&k.sched);
    for key in extra {
        inv.key(*key);
    }
    for done in &k.done {
        inv.key(done);
    }
    inv.key(&k.done_before_codes);
}

fn opt_time(t: Option<Millis>) -> String {
    t.map(|t| t.to_string()).unwrap_or_default()
}

impl RedisStore {
    /// The jobtypes a query reads: the known jobtypes of the namespace, or
    /// those given, or the known ones with the prefix.
    pub(crate) async fn query_jobtypes(&self, filter: &JobtypeFilter) -> Result<Vec<String>> {
        Ok(match filter {
            JobtypeFilter::All => self.known_jobtypes().await?,
            JobtypeFilter::Exact(list) => list.clone(),
            JobtypeFilter::Prefix(prefix) => {
                let bound = JobtypeFilter::prefix_bound(prefix);
                self.known_jobtypes()
                    .await?
                    .into_iter()
                    .filter(|t| t.as_str() >= prefix.as_str() && t.as_str() < bound.as_str())
                    .collect()
            }
        })
    }

    /// One page of `query`: `list.lua` on every jobtype concurrently, each
    /// reading up to `limit + 1` jobs after the cursor in the query's
    /// order; the union sorted and cut here.
    pub(crate) async fn list(&self, query: &JobQuery, now: Millis) -> Result<JobPage> {
        let after = query.resume_after()?.cloned();
        let types = self.query_jobtypes(&query.jobtypes).await?;
        let n = query.limit + 1;
        let state = match query.state {
            // No job is blocked before dependencies are declared.
            JobState::Blocked => return Ok(JobPage::from_sorted(query, Vec::new())),
            JobState::Waiting => "w",
            JobState::Expired => "e",
            JobState::Scheduled => "s",
            JobState::Running => "r",
            JobState::Archived => "a",
        };
        let codes = if query.state == JobState::Archived {
            query.code_set()
        } else {
            Vec::new()
        };
        let slice = self.opts.promote_slice.max(MAX_CLAIM);
        let (now_arg, nowp) = (now.to_string(), padded(now));
        let calls = types.iter().map(|jt| {
            let k = self.keys.jobtype(jt);
            let mut inv = SCRIPTS.list.prepare_invoke();
            inv.key(&k.ready).key(&k.sched).key(&k.lock);
            for done in &k.done {
                inv.key(done);
            }
            inv.key(&k.done_before_codes)
                .arg(&k.job)
                .arg(state)
                .arg(&now_arg)
                .arg(&nowp)
                .arg(n)
                .arg(if query.with_data { "1" } else { "0" })
                .arg(slice);
            match &after {
                Some(key) => inv.arg("1").arg(key.priority).arg(key.dt).arg(&key.id),
                None => inv.arg("0").arg(0).arg(0).arg(""),
            };
            inv.arg(opt_time(query.created.from))
                .arg(opt_time(query.created.to))
                .arg(opt_time(query.archived.from))
                .arg(opt_time(query.archived.to))
                .arg(query.tag.as_deref().unwrap_or(""));
            for code in &codes {
                inv.arg(code.as_str());
            }
            let mut c = self.conn();
            async move {
                // Again while the promotion of due jobs is not finished:
                // each call moves up to `slice` of them.
                loop {
                    let v: Vec<Value> = inv
                        .invoke_async(&mut c)
                        .await
                        .map_err(|e| map(e, "list jobs"))?;
                    let Some((more, rest)) = v.split_first() else {
                        return Err(malformed("list reply length"));
                    };
                    if int(more, "list reply")? == 1 {
                        continue;
                    }
                    return list_jobs(jt, rest.to_vec());
                }
            }
        });
        let mut jobs: Vec<Job> = try_join_all(calls)
            .await?
            .into_iter()
            .flatten()
            .filter(|j| query.matches(j, now) && query.after_cursor(j))
            .collect();
        jobs.sort_by(|a, b| query.compare(&query.key_of(a), &query.key_of(b)));
        jobs.truncate(n);
        Ok(JobPage::from_sorted(query, jobs))
    }

    /// `rerun.lua` once per jobtype of `ids`.
    pub(crate) async fn rerun(
        &self,
        ids: &[String],
        delay: Duration,
        now: Millis,
    ) -> Result<Vec<String>> {
        let channel = self.keys.channel();
        let (nowp, dtp) = (padded(now), padded(now + duration_ms(delay)));
        let done = self
            .per_jobtype(ids, |jt, ids| {
                let k = self.keys.jobtype(&jt);
                let mut inv = SCRIPTS.rerun.prepare_invoke();
                with_archive_sets(&mut inv, &k, &[&k.codes]);
                inv.arg(&k.job)
                    .arg(&nowp)
                    .arg(&dtp)
                    .arg(&channel)
                    .arg(&jt)
                    .arg(ids);
                let mut c = self.conn();
                async move {
                    let v: Vec<String> = inv
                        .invoke_async(&mut c)
                        .await
                        .map_err(|e| map(e, "rerun jobs"))?;
                    Ok(v.into_iter().map(|id| (id, String::new())).collect())
                }
            })
            .await?;
        let done: HashSet<String> = done.into_iter().map(|(id, _, _)| id).collect();
        Ok(in_order(ids, &done))
    }

    /// `delete.lua` once per jobtype of `ids`, then the index entries of
    /// the deleted jobs (also when another jobtype's script failed).
    pub(crate) async fn delete(&self, ids: &[String]) -> Result<DeleteOutcome> {
        let (got, err) = self
            .per_jobtype_partial(ids, |jt, ids| {
                let k = self.keys.jobtype(&jt);
                let mut inv = SCRIPTS.delete.prepare_invoke();
                with_archive_sets(&mut inv, &k, &[&k.codes]);
                inv.arg(&k.job).arg(ids);
                let mut c = self.conn();
                async move {
                    let v: Vec<String> = inv
                        .invoke_async(&mut c)
                        .await
                        .map_err(|e| map(e, "delete jobs"))?;
                    if !v.len().is_multiple_of(3) {
                        return Err(malformed("delete reply length"));
                    }
                    // extra: the kind ("d" or "r") followed by the token
                    Ok(v.chunks(3)
                        .map(|t| (t[0].clone(), format!("{}{}", t[1], t[2])))
                        .collect())
                }
            })
            .await;
        let deleted: Vec<(String, String, String)> = got
            .iter()
            .filter_map(|(id, jt, extra)| {
                extra
                    .strip_prefix('d')
                    .map(|token| (id.clone(), jt.clone(), token.to_owned()))
            })
            .collect();
        {
            let mut cache = self.cache();
            for (id, _, _) in &deleted {
                cache.remove(id);
            }
        }
        self.unreserve_then(&deleted, err).await?;
        let of = |kind: char| -> HashSet<String> {
            got.iter()
                .filter(|(_, _, extra)| extra.starts_with(kind))
                .map(|(id, _, _)| id.clone())
                .collect()
        };
        Ok(DeleteOutcome {
            deleted: in_order(ids, &of('d')),
            running: in_order(ids, &of('r')),
        })
    }

    /// `edit.lua` once per jobtype of the edited ids.
    pub(crate) async fn edit(&self, edits: &[JobEdit], now: Millis) -> Result<Vec<String>> {
        let by_id: HashMap<&str, &JobEdit> = edits.iter().map(|e| (e.id.as_str(), e)).collect();
        let ids: Vec<String> = edits.iter().map(|e| e.id.clone()).collect();
        let channel = self.keys.channel();
        let nowp = padded(now);
        let done = self
            .per_jobtype(&ids, |jt, ids| {
                let k = self.keys.jobtype(&jt);
                let mut inv = SCRIPTS.edit.prepare_invoke();
                inv.key(&k.ready)
                    .key(&k.sched)
                    .arg(&k.job)
                    .arg(&nowp)
                    .arg(&channel)
                    .arg(&jt);
                for id in &ids {
                    let Some(e) = by_id.get(id.as_str()) else {
                        continue;
                    };
                    inv.arg(id)
                        .arg(e.priority.map(|p| p.to_string()).unwrap_or_default())
                        .arg(e.run_at.map(padded).unwrap_or_default());
                    match &e.data {
                        Some(d) => inv.arg("1").arg(d.as_slice()),
                        None => inv.arg("0").arg(""),
                    };
                }
                let mut c = self.conn();
                async move {
                    let v: Vec<String> = inv
                        .invoke_async(&mut c)
                        .await
                        .map_err(|e| map(e, "edit jobs"))?;
                    Ok(v.into_iter().map(|id| (id, String::new())).collect())
                }
            })
            .await?;
        let done: HashSet<String> = done.into_iter().map(|(id, _, _)| id).collect();
        Ok(in_order(&ids, &done))
    }

    /// Pauses or resumes `jobtype`: its `{P:T}:paused` flag (what claims
    /// and waiting counts read) through `pause.lua`, and its membership of
    /// `{P}:paused` (what `paused_jobtypes` reads), in an order that keeps
    /// the set a superset of the flags (see the README).
    pub(crate) async fn pause(&self, jobtype: &str, paused: bool) -> Result<bool> {
        let k = self.keys.jobtype(jobtype);
        let set = self.keys.paused();
        let mut c = self.conn();
        let member = |add: bool| {
            let mut cmd = redis::cmd(if add { "SADD" } else { "SREM" });
            cmd.arg(&set).arg(jobtype);
            cmd
        };
        if paused {
            member(true)
                .query_async::<i64>(&mut c)
                .await
                .map_err(|e| map(e, "SADD paused"))?;
        }
        let mut inv = SCRIPTS.pause.prepare_invoke();
        inv.key(&k.paused)
            .arg(if paused { "p" } else { "r" })
            .arg(self.keys.channel())
            .arg(jobtype);
        let changed: i64 = inv
            .invoke_async(&mut c)
            .await
            .map_err(|e| map(e, "pause jobtype"))?;
        if paused {
            // Again after the flag: a resume racing this pause may have
            // taken the member out before the flag was set.
            member(true)
                .query_async::<i64>(&mut c)
                .await
                .map_err(|e| map(e, "SADD paused"))?;
        } else {
            member(false)
                .query_async::<i64>(&mut c)
                .await
                .map_err(|e| map(e, "SREM paused"))?;
            // A pause racing this resume may have set the flag again.
            let flagged: bool = redis::cmd("EXISTS")
                .arg(&k.paused)
                .query_async(&mut c)
                .await
                .map_err(|e| map(e, "EXISTS paused"))?;
            if flagged {
                member(true)
                    .query_async::<i64>(&mut c)
                    .await
                    .map_err(|e| map(e, "SADD paused"))?;
            }
        }
        Ok(changed == 1)
    }

    /// The members of `{P}:paused` whose flag is set, sorted.
    pub(crate) async fn paused(&self) -> Result<Vec<String>> {
        let mut c = self.conn();
        let mut members: Vec<String> = redis::cmd("SMEMBERS")
            .arg(self.keys.paused())
            .query_async(&mut c)
            .await
            .map_err(|e| map(e, "SMEMBERS paused"))?;
        members.sort();
        let checks = members.iter().map(|t| {
            let key = self.keys.jobtype(t).paused;
            let mut c = self.conn();
            async move {
                redis::cmd("EXISTS")
                    .arg(key)
                    .query_async::<bool>(&mut c)
                    .await
                    .map_err(|e| map(e, "EXISTS paused"))
            }
        });
        let flags = try_join_all(checks).await?;
        Ok(members
            .into_iter()
            .zip(flags)
            .filter_map(|(t, on)| on.then_some(t))
            .collect())
    }
}

/// The jobs of one `list.lua` reply (after its first value): groups of an
/// id and [`LIST_FIELDS`].
fn list_jobs(jobtype: &str, reply: Vec<Value>) -> Result<Vec<Job>> {
    let width = 1 + LIST_FIELDS.len();
    if !reply.len().is_multiple_of(width) {
        return Err(malformed("list reply length"));
    }
    let mut jobs = Vec::with_capacity(reply.len() / width);
    let mut it = reply.into_iter();
    while let Some(id) = it.next() {
        let id = string(id, "listed id")?;
        let mut h = HashMap::with_capacity(LIST_FIELDS.len());
        for field in LIST_FIELDS {
            match it.next() {
                Some(Value::Nil) => {}
                Some(v) => {
                    h.insert(field.to_owned(), bytes(v, field)?);
                }
                None => return Err(malformed("list reply length")),
            }
        }
        jobs.push(job_from_hash(&id, jobtype, h)?);
    }
    Ok(jobs)
}
