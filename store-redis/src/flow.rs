//! Dependencies across slots (see README, "Dependencies"): delivering
//! outbox entries to their waiters (`resolve.lua`) and acknowledging them,
//! linking and committing the staged jobs of an add (`link.lua`,
//! `commit.lua`), `settle_flows` (`settle.lua`) and `job_waits`
//! (`waits.lua`).

use std::collections::{BTreeMap, HashMap, HashSet};

use futures::future::try_join_all;
use jobstore_api::{
    ARCHIVE_HORIZON_MS, EdgeState, Error, Millis, Result, ResultCode, WaitEdge, Waits,
};
use redis::Value;

use crate::decode::{bytes, pairs, string};
use crate::error::{malformed, map};
use crate::index::in_order;
use crate::scripts::{SCRIPTS, padded};
use crate::store::RedisStore;

/// How old an outbox entry or a staged job must be before `settle_flows`
/// finishes it: twice a generous round trip, so a release or an add still
/// under way is not raced for nothing (racing it would be harmless).
pub(crate) const FLOW_GRACE_MS: Millis = 60_000;

/// The lock of a job an add has staged and not yet committed.
pub(crate) const LOCK_STAGED: &str = "__staged";

/// An outbox entry: recorded in the slot of jobtype `source` (its
/// target's), for a waiter of jobtype `waiter_type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub source: String,
    pub member: String,
    pub waiter_type: String,
}

impl Entry {
    /// `member` is `"<code> <status> <Tw> <X>\n<W>"`.
    pub(crate) fn parse(source: &str, member: String) -> Result<Self> {
        let bad = || malformed("outbox entry");
        let mut it = member.splitn(4, ' ');
        let (_code, _status, tw) = (
            it.next().ok_or_else(bad)?,
            it.next().ok_or_else(bad)?,
            it.next().ok_or_else(bad)?,
        );
        let rest = it.next().ok_or_else(bad)?;
        if !rest.contains('\n') {
            return Err(bad());
        }
        Ok(Entry {
            source: source.to_owned(),
            waiter_type: tw.to_owned(),
            member,
        })
    }
}

/// A staged job to link and commit: its jobtype and id, whether its
/// policy is `hold` (its targets register it in `uh:<X>`), the targets to
/// link (`(Tx, X)`), and what is already known of others (`(X, state)`,
/// state `m`: not a job).
#[derive(Debug, Clone)]
pub(crate) struct Staged {
    pub jobtype: String,
    pub id: String,
    pub hold: bool,
    pub links: Vec<(String, String)>,
    pub known: Vec<(String, String)>,
}

/// What a commit did with a staged job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Committed {
    /// Stored: blocked, free or archived.
    Stored,
    /// No longer staged (committed by another caller, or gone).
    NotStaged,
    /// Refused: its dependency at this position (and id) is not a job;
    /// the job is gone, its reservation `token` is to be given back.
    Refused {
        position: usize,
        dependency: String,
        token: String,
    },
}

impl RedisStore {
    /// Delivers outbox entries (`resolve.lua` once per waiter jobtype,
    /// concurrently), acknowledges them in their source slots, and goes on
    /// with the entries of cascades until none is left. Returns how many
    /// entries were delivered.
    pub(crate) async fn deliver(&self, mut entries: Vec<Entry>, now: Millis) -> Result<u64> {
        let channel = self.keys.channel();
        let (nowp, adt) = (padded(now), padded(now + ARCHIVE_HORIZON_MS));
        let mut delivered = 0;
        while !entries.is_empty() {
            let mut by_waiter: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
            for e in &entries {
                by_waiter
                    .entry(e.waiter_type.as_str())
                    .or_default()
                    .push(e.member.as_str());
            }
            let calls = by_waiter.iter().map(|(tw, members)| {
                let k = self.keys.jobtype(tw);
                let mut inv = SCRIPTS.resolve.prepare_invoke();
                inv.key(&k.ready)
                    .key(&k.sched)
                    .key(&k.blocked)
                    .key(k.done_of(ResultCode::Cancelled))
                    .key(&k.codes)
                    .key(&k.fx)
                    .arg(&k.job)
                    .arg(&nowp)
                    .arg(&adt)
                    .arg(&channel)
                    .arg(*tw);
                for m in members {
                    inv.arg(*m);
                }
                let mut c = self.conn();
                async move {
                    let v: Vec<String> = inv
                        .invoke_async(&mut c)
                        .await
                        .map_err(|e| map(e, "resolve dependencies"))?;
                    v.into_iter()
                        .map(|m| Entry::parse(tw, m))
                        .collect::<Result<Vec<_>>>()
                }
            });
            let next: Vec<Entry> = try_join_all(calls).await?.into_iter().flatten().collect();
            self.acknowledge(&entries).await?;
            delivered += entries.len() as u64;
            entries = next;
        }
        Ok(delivered)
    }

    /// Removes delivered entries from their outboxes: one `ZREM` per
    /// source slot, concurrently.
    async fn acknowledge(&self, entries: &[Entry]) -> Result<()> {
        let mut by_source: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for e in entries {
            by_source
                .entry(e.source.as_str())
                .or_default()
                .push(e.member.as_str());
        }
        let calls = by_source.iter().map(|(src, members)| {
            let mut cmd = redis::cmd("ZREM");
            cmd.arg(self.keys.jobtype(src).fx).arg(members);
            let mut c = self.conn();
            async move {
                cmd.query_async::<i64>(&mut c)
                    .await
                    .map_err(|e| map(e, "acknowledge outbox entries"))
            }
        });
        try_join_all(calls).await?;
        Ok(())
    }

    /// Delivers what a release, cancel or delete recorded; a failure is
    /// logged, not returned: the change it follows happened, and
    /// `settle_flows` delivers the entries later.
    pub(crate) async fn deliver_after(&self, entries: Vec<Entry>, now: Millis) {
        if entries.is_empty() || !self.flows_on() {
            return;
        }
        if let Err(e) = self.deliver(entries, now).await {
            tracing::warn!("redis: delivery to waiters failed, left to settle_flows: {e}");
        }
    }

    /// Links the targets of staged jobs (`link.lua` once per target
    /// jobtype) and commits them (`commit.lua` once per waiter jobtype).
    pub(crate) async fn link_commit(
        &self,
        staged: Vec<Staged>,
        now: Millis,
    ) -> Result<HashMap<(String, String), Committed>> {
        if staged.is_empty() {
            return Ok(HashMap::new());
        }
        // link: (X, "<Tw> <W>") per target jobtype, and who asked
        let mut links: BTreeMap<&str, Vec<(&str, String, usize)>> = BTreeMap::new();
        for (n, s) in staged.iter().enumerate() {
            for (tx, x) in &s.links {
                links.entry(tx.as_str()).or_default().push((
                    x.as_str(),
                    format!("{} {}", s.jobtype, s.id),
                    n,
                ));
            }
        }
        let calls = links.iter().map(|(tx, items)| {
            let k = self.keys.jobtype(tx);
            let mut inv = SCRIPTS.link.prepare_invoke();
            inv.key(&k.blocked).arg(&k.job);
            for (x, member, n) in items {
                let policy = if staged[*n].hold { "h" } else { "c" };
                inv.arg(*x).arg(member).arg(policy);
            }
            let n = items.len();
            let mut c = self.conn();
            async move {
                let v: Vec<String> = inv
                    .invoke_async(&mut c)
                    .await
                    .map_err(|e| map(e, "link dependencies"))?;
                if v.len() != n {
                    return Err(malformed("link reply length"));
                }
                Ok::<_, Error>(v)
            }
        });
        let answers = try_join_all(calls).await?;
        let mut found: Vec<Vec<(&str, String)>> = staged
            .iter()
            .map(|s| {
                s.known
                    .iter()
                    .map(|(x, st)| (x.as_str(), st.clone()))
                    .collect()
            })
            .collect();
        for ((_, items), states) in links.iter().zip(answers) {
            for ((x, _, n), st) in items.iter().zip(states) {
                found[*n].push((x, st));
            }
        }
        // commit, per waiter jobtype
        let mut by_type: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (n, s) in staged.iter().enumerate() {
            by_type.entry(s.jobtype.as_str()).or_default().push(n);
        }
        let channel = self.keys.channel();
        let (nowp, adt) = (padded(now), padded(now + ARCHIVE_HORIZON_MS));
        let calls = by_type.iter().map(|(tw, ns)| {
            let k = self.keys.jobtype(tw);
            let mut inv = SCRIPTS.commit.prepare_invoke();
            inv.key(&k.ready)
                .key(&k.sched)
                .key(&k.blocked)
                .key(k.done_of(ResultCode::Cancelled))
                .key(&k.codes)
                .key(&k.staged)
                .key(&k.fx)
                .arg(&k.job)
                .arg(&nowp)
                .arg(&adt)
                .arg(&channel)
                .arg(*tw);
            for &n in ns {
                inv.arg(&staged[n].id).arg(found[n].len());
                for (x, st) in &found[n] {
                    inv.arg(*x).arg(st);
                }
            }
            let tw = tw.to_string();
            let mut c = self.conn();
            async move {
                let v: Vec<String> = inv
                    .invoke_async(&mut c)
                    .await
                    .map_err(|e| map(e, "commit dependencies"))?;
                if !v.len().is_multiple_of(5) {
                    return Err(malformed("commit reply length"));
                }
                v.chunks(5)
                    .map(|g| {
                        let how = match g[1].as_str() {
                            "n" => Committed::Stored,
                            "x" => Committed::NotStaged,
                            "r" => Committed::Refused {
                                position: g[2].parse().map_err(|_| malformed("commit reply"))?,
                                dependency: g[3].clone(),
                                token: g[4].clone(),
                            },
                            _ => return Err(malformed("commit reply")),
                        };
                        Ok(((tw.clone(), g[0].clone()), how))
                    })
                    .collect::<Result<Vec<_>>>()
            }
        });
        Ok(try_join_all(calls).await?.into_iter().flatten().collect())
    }

    /// `settle_flows`: per known jobtype, the outbox entries and staged
    /// jobs recorded before `now - FLOW_GRACE_MS` (at most `limit` in
    /// all), delivered and committed; returns how many.
    pub(crate) async fn settle(&self, now: Millis, limit: usize) -> Result<u64> {
        if limit == 0 {
            return Ok(0);
        }
        let before = now - FLOW_GRACE_MS;
        let types = self.known_jobtypes().await?;
        let calls = types.iter().map(|jt| {
            let k = self.keys.jobtype(jt);
            let mut inv = SCRIPTS.settle.prepare_invoke();
            inv.key(&k.fx)
                .key(&k.staged)
                .arg(&k.job)
                .arg(before)
                .arg(limit);
            let mut c = self.conn();
            async move {
                let v: Vec<String> = inv
                    .invoke_async(&mut c)
                    .await
                    .map_err(|e| map(e, "settle flows"))?;
                Ok::<_, Error>(v)
            }
        });
        let mut entries = Vec::new();
        let mut staged = Vec::new();
        for (jt, v) in types.iter().zip(try_join_all(calls).await?) {
            let mut it = v.into_iter().peekable();
            while let Some(m) = it.next_if(|m| !m.is_empty()) {
                entries.push(Entry::parse(jt, m)?);
            }
            while it.next().is_some() {
                let id = it.next().ok_or_else(|| malformed("settle reply"))?;
                let hold = it.next().ok_or_else(|| malformed("settle reply"))? == "h";
                let mut links = Vec::new();
                while let Some(t) = it.next_if(|m| !m.is_empty()) {
                    let (tx, x) = t.split_once(' ').ok_or_else(|| malformed("settle reply"))?;
                    links.push((tx.to_owned(), x.to_owned()));
                }
                staged.push(Staged {
                    jobtype: jt.clone(),
                    id,
                    hold,
                    links,
                    known: Vec::new(),
                });
            }
        }
        // at most `limit` in all: entries first, then staged jobs; the
        // entries of cascades they cause are delivered too, uncounted
        entries.truncate(limit);
        staged.truncate(limit - entries.len());
        let mut done = entries.len() as u64;
        self.deliver(entries, now).await?;
        let committed = self.link_commit(staged, now).await?;
        let mut refused = Vec::new();
        for ((jt, id), how) in committed {
            match how {
                Committed::Stored => done += 1,
                Committed::NotStaged => {}
                Committed::Refused { token, .. } => {
                    done += 1;
                    refused.push((id, jt, token));
                }
            }
        }
        if !refused.is_empty() {
            self.unreserve(&refused).await?;
        }
        Ok(done)
    }

    /// `waits_of`: `waits_of.lua` once per jobtype of `ids` (concurrently),
    /// which counts each job's edges and returns its first page (and one
    /// edge more, which tells whether more follow).
    pub(crate) async fn waits_many(&self, ids: &[String], limit: usize) -> Result<Vec<Waits>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let got = self
            .per_jobtype(ids, |jt, ids| {
                let k = self.keys.jobtype(&jt);
                let mut inv = SCRIPTS.waits_of.prepare_invoke();
                inv.key(&k.blocked).arg(&k.job).arg(limit).arg(ids);
                let mut c = self.conn();
                async move {
                    let v: Vec<String> = inv
                        .invoke_async(&mut c)
                        .await
                        .map_err(|e| map(e, "waits of jobs"))?;
                    if !v.len().is_multiple_of(3) {
                        return Err(malformed("waits_of reply length"));
                    }
                    // (id, "counts\0page"): per_jobtype takes one value per id
                    let mut it = v.into_iter();
                    let mut out = Vec::new();
                    while let (Some(id), Some(counts), Some(page)) =
                        (it.next(), it.next(), it.next())
                    {
                        out.push((id, format!("{counts}\0{page}")));
                    }
                    Ok(out)
                }
            })
            .await?;
        let mut out = Vec::new();
        for (id, _, text) in got {
            let (counts, page) = text
                .split_once('\0')
                .ok_or_else(|| malformed("waits_of reply"))?;
            if page.is_empty() {
                continue;
            }
            let mut waits = Waits {
                id,
                ..Waits::default()
            };
            let mut it = counts.split_terminator('\n');
            while let Some(kind) = it.next() {
                let n: u64 = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| malformed("waits_of counts"))?;
                let state = match kind {
                    "p" => EdgeState::Pending,
                    "s" => EdgeState::Skipped,
                    // the count of held edges, whatever their results
                    "h" => EdgeState::Held {
                        code: ResultCode::Ok,
                        status: 0,
                    },
                    _ => {
                        let code = kind
                            .strip_prefix("d ")
                            .and_then(|c| c.parse().ok())
                            .ok_or_else(|| malformed("waits_of counts"))?;
                        EdgeState::Done { code, status: 0 }
                    }
                };
                waits.count(state, n);
            }
            let mut edges = edges_of(page)?;
            edges.sort_by(|a, b| a.target.cmp(&b.target));
            waits.edges = edges;
            waits.end_page(limit);
            out.push(waits);
        }
        Ok(out)
    }

    /// `unblock_jobs`: `unblock.lua` once per jobtype of `ids`
    /// (concurrently); the ids it unblocked.
    pub(crate) async fn unblock(&self, ids: &[String], now: Millis) -> Result<Vec<String>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let channel = self.keys.channel();
        let got = self
            .per_jobtype(ids, |jt, ids| {
                let k = self.keys.jobtype(&jt);
                let mut inv = SCRIPTS.unblock.prepare_invoke();
                inv.key(&k.ready)
                    .key(&k.sched)
                    .key(&k.blocked)
                    .arg(&k.job)
                    .arg(padded(now))
                    .arg(&channel)
                    .arg(&jt)
                    .arg(ids);
                let mut c = self.conn();
                async move {
                    let v: Vec<String> = inv
                        .invoke_async(&mut c)
                        .await
                        .map_err(|e| map(e, "unblock jobs"))?;
                    pairs(v, "unblock reply length")
                }
            })
            .await?;
        let unblocked: HashSet<String> = got
            .into_iter()
            .filter(|(_, _, how)| how == "u")
            .map(|(id, _, _)| id)
            .collect();
        Ok(in_order(ids, &unblocked))
    }

    /// `job_waits`: the edges of waiter `id` (`waits.lua` on its slot),
    /// sorted by target id and paged here (at most `MAX_DEPENDENCIES`).
    pub(crate) async fn waits(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<Waits>> {
        let ids = [id.to_owned()];
        let Some(jt) = self.lookup(&ids).await?.remove(id) else {
            return Ok(None);
        };
        let k = self.keys.jobtype(&jt);
        let mut inv = SCRIPTS.waits.prepare_invoke();
        inv.key(format!("{}{id}", k.job)).key(k.edges(id));
        let mut c = self.conn();
        let v: Vec<Value> = inv
            .invoke_async(&mut c)
            .await
            .map_err(|e| map(e, "job waits"))?;
        let mut it = v.into_iter();
        let lock = match it.next() {
            Some(Value::Nil) | None => return Ok(None),
            Some(l) => string(l, "lock")?,
        };
        if lock == LOCK_STAGED {
            return Ok(None);
        }
        let mut edges = Vec::new();
        while let (Some(x), Some(v)) = (it.next(), it.next()) {
            let target = string(x, "edge target")?;
            let v = String::from_utf8(bytes(v, "edge")?).map_err(|_| malformed("edge"))?;
            edges.push(WaitEdge {
                target,
                state: edge_state(&v)?,
            });
        }
        Ok(Some(Waits::page(id, edges, after, limit)))
    }
}

/// An edge's state from its value in `e:<W>`: `"<i> p <Tx>"` pending,
/// `"<i> h <code> <status>"` held, `"<i> d <code> <status>"` done,
/// `"<i> s"` skipped (`"<i> m"` only on a staged job).
fn edge_state(v: &str) -> Result<EdgeState> {
    let bad = || malformed("edge");
    let mut it = v.split(' ');
    let _position = it.next().ok_or_else(bad)?;
    let kind = it.next();
    let mut result = || -> Result<(ResultCode, u16)> {
        let code: ResultCode = it.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
        let status: u16 = it.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
        Ok((code, status))
    };
    match kind {
        Some("p") | Some("m") => Ok(EdgeState::Pending),
        Some("s") => Ok(EdgeState::Skipped),
        Some("d") => {
            let (code, status) = result()?;
            Ok(EdgeState::Done { code, status })
        }
        Some("h") => {
            let (code, status) = result()?;
            Ok(EdgeState::Held { code, status })
        }
        _ => Err(bad()),
    }
}

/// The edges of one job as `waits_of.lua` returns them:
/// `"<target>\n<value>\n"` each.
fn edges_of(text: &str) -> Result<Vec<WaitEdge>> {
    let mut edges = Vec::new();
    let mut it = text.split_terminator('\n');
    while let Some(target) = it.next() {
        let v = it.next().ok_or_else(|| malformed("waits_of reply"))?;
        edges.push(WaitEdge {
            target: target.to_owned(),
            state: edge_state(v)?,
        });
    }
    Ok(edges)
}
