//! Dependencies: the add of jobs with `depends_on` (stage, link, read,
//! commit), the delivery of ended targets to their waiters, `job_waits`,
//! `waits_of`, `unblock_jobs` and `settle_flows` (the crate docs,
//! "Dependencies", give the commands).
//! A batch or list without flow jobs never comes here.

use std::collections::{HashMap, HashSet};

use jobstore_api::*;
use mongodb::bson::{Bson, Document, doc};
use mongodb::options::Hint;

use crate::conn::SETTLE_INDEX;
use crate::convert::{self, LOCK_STAGED, f};
use crate::store::{MongoStore, RELEASE_COMMAND_BYTES, batch, free_key, pack, recorded, stamped};

/// How old a recorded delivery (or a staged add) must be before
/// `settle_flows` finishes it: twice the default round-trip timeout.
pub(crate) const SETTLE_GRACE_MS: Millis = 60_000;

/// A target that left the live states, with what its waiters are told.
#[derive(Debug, Clone)]
pub(crate) struct Ended {
    pub id: String,
    pub code: ResultCode,
    pub status: u16,
    /// Its waiters (`up`).
    pub up: Vec<String>,
    /// A delete's tombstone: removed once delivered.
    pub gone: bool,
}

impl Ended {
    /// The ended target a document (projected with `_id`, `up`,
    /// `result`, `gone`) describes.
    pub(crate) fn from_doc(d: &Document) -> Result<Ended> {
        let gone = convert::get_flag(d, f::GONE, "job")?;
        let (code, status) = match d.get(f::RESULT) {
            Some(Bson::Document(r)) if !gone => (
                convert::get_str(r, "code", "job result")?
                    .parse::<ResultCode>()
                    .map_err(|_| Error::backend_msg("malformed job result code"))?,
                convert::get_int(r, "status", "job result")?,
            ),
            _ => (ResultCode::Cancelled, 0),
        };
        Ok(Ended {
            id: convert::get_str(d, f::ID, "job")?,
            code,
            status,
            up: convert::str_array(d, f::UP)?,
            gone,
        })
    }
}

/// The projection [`Ended::from_doc`] reads.
pub(crate) fn ended_projection() -> Document {
    doc! {
        f::ID: 1, f::LOCK: 1, f::UP: 1, f::GONE: 1, f::FX: 1,
        f::RESULT: 1, f::OP_TOKS: 1,
    }
}

/// Whether a document carries the flow marker with effects pending.
pub(crate) fn pending_effects(d: &Document) -> bool {
    convert::opt_i64(d, f::FX, "job").ok().flatten() == Some(2)
}

/// The result codes other than `ok`, as stored.
fn failing(code: ResultCode) -> bool {
    code != ResultCode::Ok
}

/// The `$set` of a job archived `cancelled` because `dep` ended `code`.
fn cancelled_set(dep: &str, code: ResultCode, now: Millis, fx: i32) -> Document {
    let note = format!("[jobstore] dependency {dep} ended {code}\n");
    let mut set = doc! {
        f::LOCK: LOCK_DONE,
        f::DONE_DT: now,
        f::DT: now + ARCHIVE_HORIZON_MS,
        f::RESULT: convert::result_doc(&JobResult::cancelled().with_output(note.into_bytes())),
        f::FX: fx,
    };
    if fx == 2 {
        set.insert(f::FX_AT, now);
    }
    set
}

/// The update archiving a waiter `cancelled` because `dep` ended `code`,
/// with `fx` (2: its own waiters are to be told).
fn cancel_update(dep: &str, code: ResultCode, now: Millis, fx: i32, token: &str) -> Document {
    let mut unset = doc! { f::PREV_RESULT: "", f::CANCEL: "" };
    if fx != 2 {
        unset.insert(f::FX_AT, "");
    }
    stamped(
        recorded(
            doc! {
                "$set": cancelled_set(dep, code, now, fx),
                "$unset": unset,
                "$rename": free_key(),
            },
            convert::event_doc(now, "", None, &EventKind::Cancelled),
        ),
        token,
    )
}

/// The four unblock statements over `waiters`: a blocked waiter with
/// nothing open (and, under `cancel`, no failed edge) becomes free at
/// `max(not_before, now)` with the event `Unblocked`. The filter is the
/// rule, so only the first matching update applies it.
fn unblock_statements(waiters: &[&str], now: Millis, token: &str) -> Vec<(Document, usize)> {
    let size = waiters.iter().map(|w| w.len() + 16).sum::<usize>() + 640;
    let event = convert::event_doc(now, "", None, &EventKind::Unblocked);
    let mut out = Vec::with_capacity(4);
    let unguarded = [
        DependencyFailure::Run.name(),
        DependencyFailure::Hold.name(),
    ];
    let guarded = [DependencyFailure::Cancel.name()];
    for (pols, guard) in [(&unguarded[..], false), (&guarded[..], true)] {
        for later in [true, false] {
            let mut q = doc! {
                f::ID: { "$in": waiters },
                f::LOCK: LOCK_BLOCKED,
                f::WAITS: { "$size": 0 },
                f::POL: { "$in": pols },
            };
            if guard {
                q.insert(f::WBAD, doc! { "$exists": false });
            }
            let bound = BLOCKED_BASE_MS + now;
            let u = if later {
                q.insert(f::DT, doc! { "$gt": bound });
                doc! {
                    "$set": { f::LOCK: LOCK_FREE, f::WAKE: token },
                    "$inc": { f::DT: -BLOCKED_BASE_MS },
                }
            } else {
                q.insert(f::DT, doc! { "$lte": bound });
                doc! { "$set": { f::LOCK: LOCK_FREE, f::DT: now, f::WAKE: token } }
            };
            let u = stamped(recorded(u, event.clone()), token);
            out.push((doc! { "q": q, "u": u, "multi": true }, size));
        }
    }
    out
}

/// The statement ending the edges of `waiters` to `target` (those still
/// open only: `$pull` matches once per edge). With `spare_held`, a
/// blocked (or staged) `hold` waiter is left out: its edge is held
/// ([`held_statement`]).
fn resolve_statement(
    waiters: &[&str],
    target: &str,
    code: ResultCode,
    status: u16,
    spare_held: bool,
) -> (Document, usize) {
    let mut u = doc! {
        "$pull": { f::WAITS: target },
        "$push": { f::WDONE: convert::done_edge(target, code, status) },
        "$inc": { f::VER: 1_i64 },
    };
    if failing(code) {
        u.insert("$set", doc! { f::WBAD: target });
    }
    let size = waiters.iter().map(|w| w.len() + 16).sum::<usize>() + 2 * target.len() + 320;
    let mut q = doc! { f::ID: { "$in": waiters }, f::WAITS: target };
    if spare_held {
        q.insert("$nor", vec![holding()]);
    }
    (doc! { "q": q, "u": u, "multi": true }, size)
}

/// The condition of a waiter whose edges a failure holds: under `hold`,
/// blocked or still staged.
fn holding() -> Document {
    doc! {
        f::POL: DependencyFailure::Hold.name(),
        f::LOCK: { "$in": [LOCK_BLOCKED, LOCK_STAGED] },
    }
}

/// The statement holding the edges of the `hold` waiters among `waiters`
/// to `target`, which ended `code` (not `ok`) with `status`: the edge
/// stays in `waits` and the result is pushed to `wheld` (the newest
/// entry of a target is its held result).
fn held_statement(
    waiters: &[&str],
    target: &str,
    code: ResultCode,
    status: u16,
) -> (Document, usize) {
    let mut q = doc! { f::ID: { "$in": waiters }, f::WAITS: target };
    q.extend(holding());
    let u = doc! {
        "$push": { f::WHELD: convert::done_edge(target, code, status) },
        "$inc": { f::VER: 1_i64 },
    };
    let size = waiters.iter().map(|w| w.len() + 16).sum::<usize>() + 2 * target.len() + 320;
    (doc! { "q": q, "u": u, "multi": true }, size)
}

impl MongoStore {
    /// Tells the waiters of `ended` (targets that left the live states)
    /// and acknowledges them, in rounds while waiters are cancelled by
    /// policy (a cascade). Idempotent: every edge ends once.
    pub(crate) async fn deliver(&self, mut ended: Vec<Ended>, now: Millis) -> Result<u64> {
        const WHAT: &str = "deliver";
        let mut delivered = 0;
        while !ended.is_empty() {
            let token = new_token();
            let mut statements: Vec<(Document, usize)> = Vec::new();
            let mut waiters: HashSet<&str> = HashSet::new();
            let mut cancelling: HashSet<&str> = HashSet::new();
            for e in &ended {
                if e.up.is_empty() {
                    continue;
                }
                let up: Vec<&str> = e.up.iter().map(String::as_str).collect();
                if failing(e.code) {
                    let size = up.iter().map(|w| w.len() + 16).sum::<usize>() + 1024;
                    let mut q = doc! {
                        f::ID: { "$in": &up },
                        f::WAITS: &e.id,
                        f::LOCK: LOCK_BLOCKED,
                        f::POL: "cancel",
                    };
                    q.insert(f::FX, doc! { "$exists": true });
                    let mut u = cancel_update(&e.id, e.code, now, 2, &token);
                    let mut pull = doc! { f::WAITS: &e.id };
                    if let Some(Bson::Document(p)) = u.remove("$pull") {
                        pull.extend(p);
                    }
                    u.insert("$pull", pull);
                    if let Ok(push) = u.get_document_mut("$push") {
                        push.insert(f::WDONE, convert::done_edge(&e.id, e.code, e.status));
                    }
                    if let Ok(set) = u.get_document_mut("$set") {
                        set.insert(f::WBAD, &e.id);
                    }
                    statements.push((doc! { "q": q, "u": u, "multi": true }, size));
                    cancelling.extend(up.iter().copied());
                    statements.push(held_statement(&up, &e.id, e.code, e.status));
                }
                statements.push(resolve_statement(
                    &up,
                    &e.id,
                    e.code,
                    e.status,
                    failing(e.code),
                ));
                waiters.extend(up);
            }
            let waiters: Vec<&str> = waiters.into_iter().collect();
            if !waiters.is_empty() {
                statements.extend(unblock_statements(&waiters, now, &token));
            }
            let kept: Vec<&str> = ended
                .iter()
                .filter(|e| !e.gone)
                .map(|e| e.id.as_str())
                .collect();
            if !kept.is_empty() {
                statements.push((
                    doc! {
                        "q": { f::ID: { "$in": &kept }, f::FX: 2 },
                        "u": { "$set": { f::FX: 1 }, "$unset": { f::FX_AT: "" } },
                        "multi": true,
                    },
                    kept.iter().map(|w| w.len() + 16).sum::<usize>() + 128,
                ));
            }
            let commands = pack(statements, RELEASE_COMMAND_BYTES);
            // Tests stop a delivery here (a crash after the record).
            self.after_round_trip("deliver (before)", 0).await?;
            self.send_updates_once_more(WHAT, &commands, true).await?;
            let gone: Vec<&str> = ended
                .iter()
                .filter(|e| e.gone)
                .map(|e| e.id.as_str())
                .collect();
            if !gone.is_empty() {
                self.call(
                    "deliver (delete)",
                    self.jobs.delete_many(
                        doc! { f::ID: { "$in": &gone }, f::GONE: true, f::LOCK: LOCK_DONE },
                    ),
                )
                .await?;
            }
            delivered += ended.len() as u64;
            // The waiters cancelled by policy (by this round, or by another
            // caller's: delivering again is harmless) are the next round.
            ended = if cancelling.is_empty() {
                Vec::new()
            } else {
                let ids: Vec<&str> = cancelling.into_iter().collect();
                let docs = self
                    .find_jobs(
                        "deliver (cascade)",
                        doc! { f::ID: { "$in": &ids }, f::FX: 2, f::LOCK: LOCK_DONE },
                        ended_projection(),
                        ids.len(),
                    )
                    .await?;
                docs.iter().map(Ended::from_doc).collect::<Result<_>>()?
            };
        }
        Ok(delivered)
    }

    /// [`deliver`](Self::deliver) after an operation that already
    /// happened: a failure is logged, not returned (the effects stay
    /// recorded, and `settle_flows` finishes them).
    pub(crate) async fn deliver_after(&self, ended: Vec<Ended>, now: Millis) {
        if ended.is_empty() {
            return;
        }
        if let Err(e) = self.deliver(ended, now).await {
            tracing::warn!(error = %e, "delivering ended dependencies failed; settle_flows will finish it");
        }
    }

    /// Adds jobs with dependencies (validated; none of them in `batch_new`,
    /// the ids this call stored just before): stage, link, read, commit.
    /// Returns each job's fate by id.
    pub(crate) async fn add_waiters(
        &self,
        jobs: &[&NewJob],
        batch_new: &HashSet<String>,
        now: Millis,
    ) -> Result<HashMap<String, Fate>> {
        let token = new_token();
        let docs: Vec<Document> = jobs
            .iter()
            .map(|j| {
                let mut d = convert::new_job_doc(j, now);
                d.insert(f::ADD_TOK, &token);
                d.insert(f::LOCK, LOCK_STAGED);
                d.insert(f::DT, BLOCKED_BASE_MS + j.run_at.unwrap_or(now));
                d.insert(f::WAITS, j.dependencies());
                d.insert(f::WDONE, Bson::Array(Vec::new()));
                d.insert(f::POL, policy(j).name());
                if j.flow.as_ref().is_some_and(|fl| fl.with_outputs) {
                    d.insert(f::WOUT, true);
                }
                d.insert(f::FX, 1_i32);
                d.insert(f::FX_AT, now);
                d
            })
            .collect();
        let mut fates: HashMap<String, Fate> = HashMap::new();
        // (1) Stage.
        let (refused, resent) = self.insert_keyed(&docs).await?;
        if !refused.is_empty() {
            let ids: Vec<&str> = refused.iter().map(|i| jobs[*i].id.as_str()).collect();
            let ukeys: Vec<String> = refused
                .iter()
                .filter_map(|i| {
                    jobs[*i]
                        .unique_key()
                        .map(|u| convert::ukey(&jobs[*i].jobtype, &u.key))
                })
                .collect();
            let found = self
                .find_jobs(
                    "add (read back)",
                    doc! { "$or": [ { f::ID: { "$in": &ids } }, { f::UKEY: { "$in": &ukeys } } ] },
                    doc! { f::ID: 1, f::UKEY: 1, f::ADD_TOK: 1 },
                    ids.len() + ukeys.len(),
                )
                .await?;
            let mut by_id: HashMap<String, bool> = HashMap::new();
            let mut by_key: HashMap<String, String> = HashMap::new();
            for d in &found {
                let id = convert::get_str(d, f::ID, "job")?;
                if let Some(k) = convert::opt_str(d, f::UKEY, "job")? {
                    by_key.insert(k, id.clone());
                }
                let ours =
                    resent && convert::opt_str(d, f::ADD_TOK, "job")?.as_deref() == Some(&token);
                by_id.insert(id, ours);
            }
            for i in &refused {
                let job = jobs[*i];
                match by_id.get(&job.id) {
                    Some(true) => {}
                    Some(false) => {
                        fates.insert(job.id.clone(), Fate::Existing);
                    }
                    None => {
                        let holder = job
                            .unique_key()
                            .and_then(|u| by_key.get(&convert::ukey(&job.jobtype, &u.key)));
                        match holder {
                            Some(h) => {
                                fates.insert(job.id.clone(), Fate::Duplicate(h.clone()));
                            }
                            None => {
                                return Err(Error::unavailable(
                                    "MongoDB add: the holder of a unique key changed; try again",
                                    "unique key contention",
                                ));
                            }
                        }
                    }
                }
            }
        }
        let staged: Vec<&NewJob> = jobs
            .iter()
            .copied()
            .filter(|j| !fates.contains_key(&j.id))
            .collect();
        if staged.is_empty() {
            return Ok(fates);
        }
        // (2) Link: each target (live, not staged) learns its waiters
        // (`$push`, not `$addToSet`, which the test emulator ignores on a
        // missing array; a waiter listed twice is told twice, and its
        // `$pull` counts once).
        // `hold` waiters are linked to archived targets too: the target's
        // end after a run again resolves their held edge.
        let holds: HashSet<&str> = staged
            .iter()
            .filter(|j| policy(j) == DependencyFailure::Hold)
            .map(|j| j.id.as_str())
            .collect();
        let mut by_target: Vec<(&str, Vec<&str>)> = Vec::new();
        let mut at: HashMap<&str, usize> = HashMap::new();
        for j in &staged {
            for dep in j.dependencies() {
                let i = *at.entry(dep.as_str()).or_insert_with(|| {
                    by_target.push((dep.as_str(), Vec::new()));
                    by_target.len() - 1
                });
                by_target[i].1.push(j.id.as_str());
            }
        }
        let mut links: Vec<(Document, usize)> = Vec::new();
        for (x, ws) in &by_target {
            let (hold, other): (Vec<&str>, Vec<&str>) =
                ws.iter().copied().partition(|w| holds.contains(w));
            for (ws, lock) in [
                (other, doc! { "$nin": [LOCK_DONE, LOCK_STAGED] }),
                (hold, doc! { "$ne": LOCK_STAGED }),
            ] {
                if ws.is_empty() {
                    continue;
                }
                let size = ws.iter().map(|w| w.len() + 16).sum::<usize>() + x.len() + 200;
                links.push((
                    doc! {
                        "q": { f::ID: *x, f::LOCK: lock },
                        "u": { "$push": { f::UP: { "$each": ws } }, "$max": { f::FX: 1_i32 } },
                    },
                    size,
                ));
            }
        }
        self.send_updates_once_more("add (link)", &pack(links, RELEASE_COMMAND_BYTES), false)
            .await?;
        // (3) Read the targets.
        let targets: Vec<&str> = by_target.iter().map(|(x, _)| *x).collect();
        let docs = self
            .find_jobs(
                "add (targets)",
                doc! { f::ID: { "$in": &targets } },
                doc! { f::ID: 1, f::LOCK: 1, f::RESULT: 1 },
                targets.len(),
            )
            .await?;
        // Per target: live, or archived with (code, status).
        let mut state: HashMap<String, Option<(ResultCode, u16)>> = HashMap::new();
        for d in &docs {
            let id = convert::get_str(d, f::ID, "job")?;
            let lock = convert::get_str(d, f::LOCK, "job")?;
            if lock == LOCK_STAGED {
                continue;
            }
            if lock == LOCK_DONE {
                // A tombstone (no result) is a job being deleted: unknown.
                let Some(Bson::Document(r)) = d.get(f::RESULT) else {
                    continue;
                };
                let code = convert::get_str(r, "code", "job result")?
                    .parse::<ResultCode>()
                    .map_err(|_| Error::backend_msg("malformed job result code"))?;
                state.insert(
                    id,
                    Some((code, convert::get_int(r, "status", "job result")?)),
                );
            } else {
                state.insert(id, None);
            }
        }
        let mut refused: Vec<&str> = Vec::new();
        let mut ready: Vec<&NewJob> = Vec::new();
        for j in &staged {
            let unknown = j
                .dependencies()
                .iter()
                .enumerate()
                .find(|(_, d)| batch_new.contains(*d) || !state.contains_key(*d));
            match unknown {
                Some((i, dep)) => {
                    fates.insert(
                        j.id.clone(),
                        Fate::Refused(Refusal::unknown_dependency(&j.id, i, dep)),
                    );
                    refused.push(j.id.as_str());
                }
                None => ready.push(j),
            }
        }
        if !refused.is_empty() {
            self.call(
                "add (refused)",
                self.jobs.delete_many(
                    doc! { f::ID: { "$in": &refused }, f::LOCK: LOCK_STAGED, f::ADD_TOK: &token },
                ),
            )
            .await?;
        }
        if ready.is_empty() {
            return Ok(fates);
        }
        // (4) Commit.
        let commit_tok = new_token();
        let mut statements: Vec<(Document, usize)> = Vec::new();
        for (x, ws) in &by_target {
            if let Some(Some((code, status))) = state.get(*x) {
                let ws: Vec<&str> = ws
                    .iter()
                    .copied()
                    .filter(|w| !refused.contains(w))
                    .collect();
                let (hold, ws): (Vec<&str>, Vec<&str>) = if failing(*code) {
                    ws.into_iter().partition(|w| holds.contains(w))
                } else {
                    (Vec::new(), ws)
                };
                if !hold.is_empty() {
                    statements.push(held_statement(&hold, x, *code, *status));
                }
                if !ws.is_empty() {
                    statements.push(resolve_statement(&ws, x, *code, *status, false));
                }
            }
        }
        let mut blocked: Vec<&str> = Vec::new();
        let mut watch_cancel: Vec<&str> = Vec::new();
        for j in &ready {
            let deps = j.dependencies();
            let cancel = policy(j) == DependencyFailure::Cancel;
            let failed = deps.iter().find_map(|d| match state.get(d) {
                Some(Some((code, _))) if failing(*code) => Some((d.as_str(), *code)),
                _ => None,
            });
            let held = failed.is_some() && policy(j) == DependencyFailure::Hold;
            let all_ended = !held && deps.iter().all(|d| matches!(state.get(d), Some(Some(_))));
            let q = doc! { f::ID: &j.id, f::LOCK: LOCK_STAGED };
            if let (true, Some((dep, code))) = (cancel, failed) {
                let u = cancel_update(dep, code, now, 1, &commit_tok);
                statements.push((doc! { "q": q, "u": u }, 2048));
            } else if all_ended {
                let u = stamped(
                    doc! {
                        "$set": { f::LOCK: LOCK_FREE, f::DT: j.run_at.unwrap_or(now), f::WAKE: &commit_tok },
                        "$unset": { f::FX_AT: "" },
                    },
                    &commit_tok,
                );
                statements.push((doc! { "q": q, "u": u }, 512));
            } else {
                blocked.push(j.id.as_str());
                if cancel {
                    watch_cancel.push(j.id.as_str());
                }
            }
        }
        if !blocked.is_empty() {
            statements.push((
                doc! {
                    "q": { f::ID: { "$in": &blocked }, f::LOCK: LOCK_STAGED },
                    "u": stamped(
                        doc! { "$set": { f::LOCK: LOCK_BLOCKED }, "$unset": { f::FX_AT: "" } },
                        &commit_tok,
                    ),
                    "multi": true,
                },
                blocked.iter().map(|w| w.len() + 16).sum::<usize>() + 256,
            ));
            statements.extend(unblock_statements(&blocked, now, &commit_tok));
        }
        self.send_updates_once_more(
            "add (commit)",
            &pack(statements, RELEASE_COMMAND_BYTES),
            true,
        )
        .await?;
        for j in &ready {
            fates.insert(j.id.clone(), Fate::New);
        }
        // (5) A blocked `cancel` waiter told of a failure while staged.
        if !watch_cancel.is_empty() {
            let docs = self
                .find_jobs(
                    "add (failed while staged)",
                    doc! {
                        f::ID: { "$in": &watch_cancel },
                        f::LOCK: LOCK_BLOCKED,
                        f::WBAD: { "$exists": true },
                    },
                    doc! { f::ID: 1, f::WBAD: 1, f::WDONE: 1 },
                    watch_cancel.len(),
                )
                .await?;
            if !docs.is_empty() {
                let tok = new_token();
                let mut statements = Vec::new();
                let mut ids = Vec::new();
                for d in &docs {
                    let id = convert::get_str(d, f::ID, "job")?;
                    let bad = convert::get_str(d, f::WBAD, "job")?;
                    let code = convert::str_array(d, f::WDONE)?
                        .iter()
                        .filter_map(|e| convert::parse_done_edge(e).ok())
                        .find(|(t, _, _)| *t == bad)
                        .map_or(ResultCode::Cancelled, |(_, c, _)| c);
                    let u = cancel_update(&bad, code, now, 2, &tok);
                    statements.push((
                        doc! { "q": { f::ID: &id, f::LOCK: LOCK_BLOCKED }, "u": u },
                        2048,
                    ));
                    ids.push(id);
                }
                self.send_updates_once_more(
                    "add (cancel)",
                    &pack(statements, RELEASE_COMMAND_BYTES),
                    false,
                )
                .await?;
                let docs = self
                    .find_jobs(
                        "add (cancelled)",
                        doc! { f::ID: { "$in": &ids }, f::FX: 2, f::LOCK: LOCK_DONE },
                        ended_projection(),
                        ids.len(),
                    )
                    .await?;
                let ended = docs.iter().map(Ended::from_doc).collect::<Result<_>>()?;
                self.deliver_after(ended, now).await;
            }
        }
        Ok(fates)
    }

    /// `job_waits`: one read of the waiter's document.
    pub(crate) async fn waits_of(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<Waits>> {
        let d = self
            .read(
                "job waits",
                self.jobs
                    .find_one(doc! { f::ID: id })
                    .projection(waits_projection()),
            )
            .await?;
        let Some(d) = d else { return Ok(None) };
        if convert::get_str(&d, f::LOCK, "job")? == LOCK_STAGED {
            return Ok(None);
        }
        Ok(Some(Waits::page(id, edges_of(&d)?, after, limit)))
    }

    /// `waits_of`: one read of the documents of `ids` with edges, each
    /// paged as `job_waits`' first page.
    pub(crate) async fn waits_of_many(&self, ids: &[&str], limit: usize) -> Result<Vec<Waits>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let docs = self
            .find_jobs(
                "waits of",
                doc! { f::ID: { "$in": ids }, f::POL: { "$exists": true } },
                waits_projection(),
                ids.len(),
            )
            .await?;
        let mut out = Vec::with_capacity(docs.len());
        for d in &docs {
            if convert::get_str(d, f::LOCK, "job")? == LOCK_STAGED {
                continue;
            }
            let id = convert::get_str(d, f::ID, "job")?;
            let edges = edges_of(d)?;
            if !edges.is_empty() {
                out.push(Waits::page(&id, edges, None, limit));
            }
        }
        Ok(out)
    }

    /// `unblock_jobs`: one `update` command of two statements (by
    /// not-before time) over the blocked jobs of `ids` with an open edge,
    /// renaming `waits` to `wskip`; the token's read-back only when not
    /// every id matched.
    pub(crate) async fn unblock(&self, ids: &[&str], now: Millis) -> Result<Vec<String>> {
        const WHAT: &str = "unblock";
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let token = new_token();
        let event = convert::event_doc(now, "", None, &EventKind::Unblocked);
        let size = ids.iter().map(|w| w.len() + 16).sum::<usize>() + 640;
        let bound = BLOCKED_BASE_MS + now;
        let statements: Vec<(Document, usize)> = [true, false]
            .into_iter()
            .map(|later| {
                let mut q = doc! {
                    f::ID: { "$in": ids },
                    f::LOCK: LOCK_BLOCKED,
                    f::WAITS: { "$exists": true },
                    "$nor": [ { f::WAITS: { "$size": 0 } } ],
                };
                let u = if later {
                    q.insert(f::DT, doc! { "$gt": bound });
                    doc! {
                        "$set": { f::LOCK: LOCK_FREE, f::WAKE: &token },
                        "$inc": { f::DT: -BLOCKED_BASE_MS },
                        "$rename": { f::WAITS: f::WSKIP },
                    }
                } else {
                    q.insert(f::DT, doc! { "$lte": bound });
                    doc! {
                        "$set": { f::LOCK: LOCK_FREE, f::DT: now, f::WAKE: &token },
                        "$rename": { f::WAITS: f::WSKIP },
                    }
                };
                let u = stamped(recorded(u, event.clone()), &token);
                (doc! { "q": q, "u": u, "multi": true }, size)
            })
            .collect();
        let matched = self
            .send_updates_once_more(WHAT, &pack(statements, RELEASE_COMMAND_BYTES), false)
            .await?;
        match matched {
            Some((0, _)) => Ok(Vec::new()),
            Some((n, _)) if n == ids.len() as u64 => {
                Ok(ids.iter().map(|id| (*id).to_owned()).collect())
            }
            _ => {
                let with = self.ids_with_token(ids, &token).await?;
                Ok(ids
                    .iter()
                    .filter(|id| with.contains(**id))
                    .map(|id| (*id).to_owned())
                    .collect())
            }
        }
    }

    /// `settle_flows`: the deliveries recorded before `now - grace`, and
    /// the staged documents of adds that died.
    pub(crate) async fn settle(&self, now: Millis, limit: usize) -> Result<u64> {
        if limit == 0 {
            return Ok(0);
        }
        let since = now - SETTLE_GRACE_MS;
        let docs: Vec<Document> = self
            .read("settle (find)", async {
                use futures::TryStreamExt;
                self.jobs
                    .find(doc! { f::FX_AT: { "$lt": since } })
                    .hint(Hint::Name(SETTLE_INDEX.to_owned()))
                    .limit(i64::try_from(limit).unwrap_or(i64::MAX))
                    .batch_size(batch(limit))
                    .projection(ended_projection())
                    .await?
                    .try_collect()
                    .await
            })
            .await?;
        let mut staged = Vec::new();
        let mut ended = Vec::new();
        for d in &docs {
            let lock = convert::get_str(d, f::LOCK, "job")?;
            if lock == LOCK_STAGED {
                staged.push(convert::get_str(d, f::ID, "job")?);
            } else if lock == LOCK_DONE && pending_effects(d) {
                ended.push(Ended::from_doc(d)?);
            }
        }
        if !staged.is_empty() {
            self.call(
                "settle (staged)",
                self.jobs.delete_many(doc! {
                    f::ID: { "$in": &staged },
                    f::LOCK: LOCK_STAGED,
                    f::FX_AT: { "$lt": since },
                }),
            )
            .await?;
        }
        if ended.is_empty() {
            return Ok(0);
        }
        self.deliver(ended, now).await
    }
}

/// The fields [`edges_of`] reads.
fn waits_projection() -> Document {
    doc! {
        f::ID: 1, f::LOCK: 1, f::WAITS: 1, f::WDONE: 1, f::WHELD: 1, f::WSKIP: 1,
    }
}

/// The edges a waiter's document records: `waits` pending, or held with
/// the newest `wheld` entry of their target; `wskip` skipped; `wdone`
/// done.
fn edges_of(d: &Document) -> Result<Vec<WaitEdge>> {
    let mut held: HashMap<String, (ResultCode, u16)> = HashMap::new();
    for e in convert::str_array(d, f::WHELD)? {
        let (target, code, status) = convert::parse_done_edge(&e)?;
        held.insert(target, (code, status));
    }
    let mut edges: Vec<WaitEdge> = convert::str_array(d, f::WAITS)?
        .into_iter()
        .map(|target| {
            let state = match held.get(&target) {
                Some(&(code, status)) => EdgeState::Held { code, status },
                None => EdgeState::Pending,
            };
            WaitEdge { target, state }
        })
        .collect();
    edges.extend(
        convert::str_array(d, f::WSKIP)?
            .into_iter()
            .map(|target| WaitEdge {
                target,
                state: EdgeState::Skipped,
            }),
    );
    for e in convert::str_array(d, f::WDONE)? {
        let (target, code, status) = convert::parse_done_edge(&e)?;
        edges.push(WaitEdge {
            target,
            state: EdgeState::Done { code, status },
        });
    }
    Ok(edges)
}

/// The policy a job with dependencies is added with.
fn policy(j: &NewJob) -> DependencyFailure {
    j.flow
        .as_ref()
        .map_or(DependencyFailure::Cancel, |fl| fl.on_dependency_failure)
}

/// What became of one job with dependencies in an add.
#[derive(Debug, Clone)]
pub(crate) enum Fate {
    New,
    Existing,
    Duplicate(String),
    Refused(Refusal),
}
