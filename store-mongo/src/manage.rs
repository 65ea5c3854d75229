//! The management operations of [`MongoStore`]: listing jobs, running
//! archived jobs again, deleting and editing jobs by id, cancel marks (and
//! the renewals that report them), and paused jobtypes. The crate docs
//! ("Operations and round trips") give the commands each one sends.

use std::collections::{BTreeMap, HashMap, HashSet};

use futures::{StreamExt, TryStreamExt};
use jobstore_api::*;
use mongodb::bson::{Bson, Document, doc};
use mongodb::options::Hint;

use crate::conn::{ARCHIVED_INDEX, DUE_INDEX};
use crate::convert::{self, LOCK_STAGED, f};
use crate::deps::{Ended, ended_projection, pending_effects};
use crate::error;
use crate::store::{
    MongoStore, RELEASE_COMMAND_BYTES, batch, claim_index, free_key, pack, recorded, stamped,
};

/// How many jobtypes one listing query names (`jobtype: {$in: ...}` on
/// the first key of the index it reads). MongoDB reads the index range of
/// each named jobtype in order and merges them ("explode for sort") for
/// up to 200 ranges in all; a waiting query's keyset `$or` has three
/// branches, so 64 jobtypes stay under that.
const LIST_JOBTYPES_PER_QUERY: usize = 64;

/// How many listing queries of one page run at once.
const LIST_CONCURRENCY: usize = 4;

/// How many times a run again reads and updates the jobs whose attempts
/// changed between its read and its update.
const RERUN_ROUNDS: usize = 3;

/// The lock values of free and archived jobs.
fn unlocked() -> Bson {
    Bson::Array(vec![LOCK_FREE.into(), LOCK_DONE.into()])
}

/// The lock values that are not an owner's: free, archived, blocked.
fn not_owned() -> Bson {
    Bson::Array(vec![
        LOCK_FREE.into(),
        LOCK_DONE.into(),
        LOCK_BLOCKED.into(),
        LOCK_STAGED.into(),
    ])
}

/// `{from, to}` as a half-open range condition, or `None` when open.
fn range(r: &TimeRange) -> Option<Document> {
    let mut d = Document::new();
    if let Some(from) = r.from {
        d.insert("$gte", from);
    }
    if let Some(to) = r.to {
        d.insert("$lt", to);
    }
    (!d.is_empty()).then_some(d)
}

/// `filter` restricted to the jobs after `key` in the query's order: one
/// `$or` branch per position in the sort key, each `filter` and the
/// branch's condition (`$and`), so each branch is a range of the index.
fn after_key(state: JobState, filter: Document, key: Option<&SortKey>) -> Document {
    let Some(key) = key else {
        return filter;
    };
    let branches = match state {
        JobState::Waiting | JobState::Expired => vec![
            doc! { f::PRIORITY: key.priority, f::DT: key.dt, f::JOB_ID: { "$gt": &key.id } },
            doc! { f::PRIORITY: key.priority, f::DT: { "$gt": key.dt } },
            doc! { f::PRIORITY: { "$lt": key.priority } },
        ],
        JobState::Scheduled | JobState::Running => vec![
            doc! { f::DT: key.dt, f::JOB_ID: { "$gt": &key.id } },
            doc! { f::DT: { "$gt": key.dt } },
        ],
        // Stored as `BLOCKED_BASE_MS + not_before`; the key holds the
        // not-before time as read.
        JobState::Blocked => vec![
            doc! { f::DT: BLOCKED_BASE_MS + key.dt, f::JOB_ID: { "$gt": &key.id } },
            doc! { f::DT: { "$gt": BLOCKED_BASE_MS + key.dt } },
        ],
        JobState::Archived => vec![
            doc! { f::DONE_DT: key.dt, f::JOB_ID: { "$lt": &key.id } },
            doc! { f::DONE_DT: { "$lt": key.dt } },
        ],
    };
    let branches: Vec<Document> = branches
        .into_iter()
        .map(|b| doc! { "$and": [filter.clone(), b] })
        .collect();
    doc! { "$or": branches }
}

/// The sort of a state's order (see `JobQuery`) and the index that
/// holds it.
fn order(state: JobState) -> (Document, Hint) {
    let named = |name: &str| Hint::Name(name.to_owned());
    match state {
        JobState::Waiting => (
            doc! { f::PRIORITY: -1, f::DT: 1, f::JOB_ID: 1 },
            claim_index(),
        ),
        JobState::Expired => (
            doc! { f::PRIORITY: -1, f::DT: 1, f::JOB_ID: 1 },
            named(DUE_INDEX),
        ),
        JobState::Scheduled | JobState::Running | JobState::Blocked => {
            (doc! { f::DT: 1, f::JOB_ID: 1 }, named(DUE_INDEX))
        }
        JobState::Archived => (
            doc! { f::DONE_DT: -1, f::JOB_ID: -1 },
            named(ARCHIVED_INDEX),
        ),
    }
}

/// The conditions of a state other than archived at `now`, for the
/// jobtypes of `jobtypes`.
fn state_filter(state: JobState, jobtypes: &[String], now: Millis) -> Document {
    let mut filter = doc! { f::JOBTYPE: { "$in": jobtypes } };
    match state {
        JobState::Waiting => {
            filter.insert(f::LOCK, LOCK_FREE);
            filter.insert(f::DT, doc! { "$lte": now });
        }
        JobState::Scheduled => {
            filter.insert(f::LOCK, LOCK_FREE);
            filter.insert(f::DT, doc! { "$gt": now });
        }
        JobState::Running => {
            filter.insert(f::LOCK, doc! { "$nin": not_owned() });
            filter.insert(f::DT, doc! { "$gt": now });
        }
        JobState::Expired => {
            filter.insert(f::LOCK, doc! { "$nin": not_owned() });
            filter.insert(f::DT, doc! { "$lte": now });
        }
        JobState::Blocked => {
            filter.insert(f::LOCK, LOCK_BLOCKED);
        }
        JobState::Archived => {
            filter.insert(f::LOCK, LOCK_DONE);
        }
    }
    filter
}

/// The conditions of an archived query: its codes (every code when none
/// is given), its jobtypes and its archive range.
fn archived_filter(query: &JobQuery) -> Document {
    let codes: Vec<&str> = query.code_set().iter().map(|c| c.as_str()).collect();
    // `$exists` spells out what the partial index holds.
    let mut filter = doc! {
        "result.code": { "$exists": true, "$in": codes },
        f::LOCK: LOCK_DONE,
    };
    match &query.jobtypes {
        JobtypeFilter::All => {}
        JobtypeFilter::Exact(list) => {
            filter.insert(f::JOBTYPE, doc! { "$in": list });
        }
        JobtypeFilter::Prefix(prefix) => {
            let bound = JobtypeFilter::prefix_bound(prefix);
            filter.insert(f::JOBTYPE, doc! { "$gte": prefix, "$lt": bound });
        }
    }
    if let Some(r) = range(&query.archived) {
        filter.insert(f::DONE_DT, r);
    }
    filter
}

/// Whether a read-back document carries the cancel mark (a boolean, or
/// the integer some servers and emulators store for `true`).
fn marked(d: &Document) -> bool {
    matches!(
        d.get(f::CANCEL),
        Some(Bson::Boolean(true)) | Some(Bson::Int32(1..)) | Some(Bson::Int64(1..))
    )
}

impl MongoStore {
    /// The jobtypes with any job (of those starting with `prefix`, if
    /// given): a `$sort` then `$group` on the claim index's first key,
    /// which MongoDB answers with a distinct scan (one key per jobtype).
    /// (Not the `distinct` command: its answer is an array of values,
    /// which some servers and emulators hand back parsed, `"null"` as
    /// null.)
    pub(crate) async fn jobtypes_in(&self, prefix: Option<&str>) -> Result<Vec<String>> {
        let mut pipeline = Vec::with_capacity(3);
        if let Some(prefix) = prefix {
            let bound = JobtypeFilter::prefix_bound(prefix);
            pipeline.push(doc! { "$match": { f::JOBTYPE: { "$gte": prefix, "$lt": bound } } });
        }
        pipeline.push(doc! { "$sort": { f::JOBTYPE: 1 } });
        pipeline.push(doc! { "$group": { "_id": format!("${}", f::JOBTYPE) } });
        let docs: Vec<Document> = self
            .read("list jobtypes", async {
                self.jobs
                    .aggregate(pipeline)
                    .hint(claim_index())
                    .await?
                    .try_collect()
                    .await
            })
            .await?;
        docs.iter()
            .map(|d| convert::get_str(d, "_id", "jobtype list"))
            .collect()
    }

    /// The paused jobtypes.
    pub(crate) async fn paused_set(&self) -> Result<HashSet<String>> {
        Ok(self.paused_list().await?.into_iter().collect())
    }

    /// The paused jobtypes, sorted.
    pub(crate) async fn paused_list(&self) -> Result<Vec<String>> {
        let docs: Vec<Document> = self
            .read("list paused jobtypes", async {
                self.paused
                    .find(doc! {})
                    .sort(doc! { "_id": 1 })
                    .await?
                    .try_collect()
                    .await
            })
            .await?;
        docs.iter()
            .map(|d| convert::get_str(d, "_id", "paused jobtype"))
            .collect()
    }

    /// Whether `jobtype` is paused: one lookup by `_id` in the small
    /// `paused` collection.
    pub(crate) async fn is_paused(&self, jobtype: &str) -> Result<bool> {
        let found = self
            .read(
                "claim (paused)",
                self.paused
                    .find_one(doc! { "_id": jobtype })
                    .projection(doc! { "_id": 1 }),
            )
            .await?;
        Ok(found.is_some())
    }

    /// Pauses (inserts the jobtype's document) or resumes (deletes it)
    /// `jobtype`; whether anything changed.
    pub(crate) async fn set_paused(
        &self,
        jobtype: &str,
        paused: bool,
        now: Millis,
    ) -> Result<bool> {
        if !paused {
            let r = self
                .call(
                    "resume jobtype",
                    self.paused.delete_one(doc! { "_id": jobtype }),
                )
                .await?;
            return Ok(r.deleted_count == 1);
        }
        let insert = self.paused.insert_one(doc! { "_id": jobtype, f::DT: now });
        match tokio::time::timeout(self.timeout(), insert).await {
            Ok(Ok(_)) => Ok(true),
            // Paused already: the `_id` exists.
            Ok(Err(e)) if error::is_duplicate_key(&e) => Ok(false),
            Ok(Err(e)) => Err(error::map("pause jobtype", e)),
            Err(elapsed) => Err(Error::unavailable(
                "MongoDB pause jobtype failed: no answer in time",
                elapsed,
            )),
        }
    }

    /// Renews the jobs of `ids` locked by `owner` until `until`, and
    /// reports the marked ones among them: one `update` command (ordered)
    /// of two statements, the renewal (stamping a fresh token) and a
    /// statement that matches the marked jobs the renewal just changed
    /// and changes nothing, so the reply's `nModified` counts the jobs
    /// renewed and `n - nModified` the marked ones. Only when some were
    /// not renewed, or some are marked, the token's read-back (with the
    /// mark) says which.
    pub(crate) async fn renew_owned(
        &self,
        ids: &[&str],
        owner: &str,
        until: Millis,
    ) -> Result<Renewal> {
        const WHAT: &str = "renew";
        if ids.is_empty() {
            return Ok(Renewal::default());
        }
        let token = new_token();
        let statements = vec![
            doc! {
                "q": { f::ID: { "$in": ids }, f::LOCK: owner },
                "u": stamped(doc! { "$set": { f::DT: until } }, &token),
                "multi": true,
            },
            doc! {
                "q": { f::ID: { "$in": ids }, f::OP_TOKS: &token, f::CANCEL: true },
                "u": { "$set": { f::CANCEL: true } },
                "multi": true,
            },
        ];
        let all = ids.len() as u64;
        match self
            .send_updates_once_more(WHAT, &[statements], true)
            .await?
        {
            Some((_, 0)) => return Ok(Renewal::default()),
            Some((matched, renewed)) if renewed == all && matched == all => {
                return Ok(Renewal {
                    renewed: ids.iter().map(|i| (*i).to_owned()).collect(),
                    cancelled: Vec::new(),
                });
            }
            _ => {}
        }
        let docs = self
            .find_with_token(ids, &[&token], doc! { f::ID: 1, f::CANCEL: 1 })
            .await?;
        let mut found: HashMap<String, bool> = HashMap::with_capacity(docs.len());
        for d in &docs {
            found.insert(convert::get_str(d, f::ID, "job")?, marked(d));
        }
        let mut renewal = Renewal::default();
        for id in ids {
            if let Some(mark) = found.get(*id) {
                renewal.renewed.push((*id).to_owned());
                if *mark {
                    renewal.cancelled.push((*id).to_owned());
                }
            }
        }
        Ok(renewal)
    }

    /// The documents among `ids` that carry one of `tokens` in
    /// `op_toks`, projected by `projection` (`op_toks` always included).
    async fn find_with_token(
        &self,
        ids: &[&str],
        tokens: &[&str],
        mut projection: Document,
    ) -> Result<Vec<Document>> {
        projection.insert(f::OP_TOKS, 1);
        self.read("find", async {
            self.jobs
                .find(doc! { f::ID: { "$in": ids }, f::OP_TOKS: { "$in": tokens } })
                .projection(projection)
                .batch_size(batch(ids.len()))
                .await?
                .try_collect()
                .await
        })
        .await
    }

    /// Cancels the jobs of `ids`: one `update` command of two statements,
    /// archiving the free ones (stamping one token) and marking the
    /// locked ones (stamping another); then, if anything matched, the
    /// tokens' read-back says which was which.
    pub(crate) async fn cancel_ids(&self, ids: &[&str], now: Millis) -> Result<CancelOutcome> {
        if ids.is_empty() {
            return Ok(CancelOutcome::default());
        }
        let (done_tok, mark_tok) = (new_token(), new_token());
        let archive = doc! {
            "$set": {
                f::LOCK: LOCK_DONE,
                f::DONE_DT: now,
                f::DT: now + ARCHIVE_HORIZON_MS,
                f::RESULT: convert::result_doc(&JobResult::cancelled()),
            },
            "$unset": { f::PREV_RESULT: "", f::CANCEL: "" },
            "$rename": free_key(),
        };
        let mut flow_archive = archive.clone();
        if let Ok(set) = flow_archive.get_document_mut("$set") {
            set.insert(f::FX, 2_i32);
            set.insert(f::FX_AT, now);
        }
        let statements = vec![
            doc! {
                "q": { f::ID: { "$in": ids }, f::LOCK: LOCK_FREE, f::FX: { "$exists": false } },
                "u": stamped(
                    recorded(archive, convert::event_doc(now, "", None, &EventKind::Cancelled)),
                    &done_tok,
                ),
                "multi": true,
            },
            // Flow jobs, free or blocked: their waiters are told after.
            doc! {
                "q": {
                    f::ID: { "$in": ids },
                    f::LOCK: { "$in": [LOCK_FREE, LOCK_BLOCKED] },
                    f::FX: { "$exists": true },
                },
                "u": stamped(
                    recorded(flow_archive, convert::event_doc(now, "", None, &EventKind::Cancelled)),
                    &done_tok,
                ),
                "multi": true,
            },
            doc! {
                "q": { f::ID: { "$in": ids }, f::LOCK: { "$nin": not_owned() } },
                "u": stamped(
                    recorded(
                        doc! { "$set": { f::CANCEL: true } },
                        convert::event_doc(now, "", None, &EventKind::CancelRequested),
                    ),
                    &mark_tok,
                ),
                "multi": true,
            },
        ];
        let counts = self
            .send_updates_once_more("cancel", &[statements], false)
            .await?;
        if counts.is_some_and(|(n, _)| n == 0) {
            return Ok(CancelOutcome::default());
        }
        let docs = self
            .find_with_token(ids, &[&done_tok, &mark_tok], ended_projection())
            .await?;
        let mut by_id: HashMap<String, (bool, bool)> = HashMap::with_capacity(docs.len());
        let mut ended = Vec::new();
        for d in &docs {
            let toks: Vec<&str> = match d.get(f::OP_TOKS) {
                Some(Bson::Array(a)) => a.iter().filter_map(Bson::as_str).collect(),
                _ => Vec::new(),
            };
            if toks.contains(&done_tok.as_str()) && pending_effects(d) {
                ended.push(Ended::from_doc(d)?);
            }
            by_id.insert(
                convert::get_str(d, f::ID, "job")?,
                (
                    toks.contains(&done_tok.as_str()),
                    toks.contains(&mark_tok.as_str()),
                ),
            );
        }
        let mut out = CancelOutcome::default();
        for id in ids {
            match by_id.get(*id) {
                Some((true, _)) => out.cancelled.push((*id).to_owned()),
                Some((false, true)) => out.marked.push((*id).to_owned()),
                _ => {}
            }
        }
        self.deliver_after(ended, now).await;
        Ok(out)
    }

    /// Runs the archived jobs of `ids` again, due at `dt`: one read of
    /// their attempts, then one `update` command with one statement per
    /// distinct attempts value (each event keeps the attempts its run again
    /// reset), and the token's read-back when not all matched. The last
    /// result moves to `prev_result`, where it stays readable and out of
    /// the indexes of archived jobs.
    pub(crate) async fn rerun_ids(
        &self,
        ids: &[&str],
        now: Millis,
        delay_ms: u64,
    ) -> Result<Vec<String>> {
        const WHAT: &str = "rerun";
        let dt = now.saturating_add(i64::try_from(delay_ms).unwrap_or(i64::MAX));
        let event = convert::event_doc(now, "", Some(0), &EventKind::Rerun { delay_ms });
        let mut rerun: Vec<String> = Vec::new();
        let mut left: Vec<&str> = ids.to_vec();
        // A job re-archived with other attempts between the read and the
        // update (run again, claimed and archived by others meanwhile) is
        // read again; a few rounds, then it is left as not run again.
        for _ in 0..RERUN_ROUNDS {
            // The archived jobs' attempts, which the run again resets: its
            // event keeps them, so the events before it count their
            // attempts back from there once `added` has left the history.
            let asked: HashSet<&str> = left.iter().copied().collect();
            let mut by_attempts: BTreeMap<i64, Vec<&str>> = BTreeMap::new();
            // Keyed jobs, each its own statement (one refused by the key
            // index fails alone), in the order of the call's ids.
            let mut keyed: HashMap<&str, (i64, String)> = HashMap::new();
            for (id, attempts, ukey) in self.archived_attempts(&left).await? {
                if let Some(id) = asked.get(id.as_str()) {
                    match ukey {
                        Some(ukey) => {
                            keyed.insert(id, (attempts, ukey));
                        }
                        None => by_attempts.entry(attempts).or_default().push(id),
                    }
                }
            }
            self.after_round_trip("rerun read", 1).await?;
            let keyed: Vec<(&str, i64, String)> = left
                .iter()
                .filter_map(|id| keyed.remove(id).map(|(a, u)| (*id, a, u)))
                .collect();
            let found: Vec<&str> = by_attempts
                .values()
                .flatten()
                .copied()
                .chain(keyed.iter().map(|(id, _, _)| *id))
                .collect();
            if found.is_empty() {
                break;
            }
            let token = new_token();
            let update = |attempts: i64, ukey: Option<&str>| {
                let mut set = doc! { f::LOCK: LOCK_FREE, f::DT: dt, f::ATTEMPTS: 0_i64 };
                let mut unset = doc! { f::DONE_DT: "", f::CANCEL: "" };
                // The key back (not `$rename`, which the test emulator
                // applies into a unique-index conflict without failing).
                if let Some(ukey) = ukey {
                    set.insert(f::UKEY, ukey);
                    unset.insert(f::UKEY_DONE, "");
                }
                stamped(
                    recorded(
                        doc! {
                            "$set": set,
                            "$unset": unset,
                            "$rename": { f::RESULT: f::PREV_RESULT },
                        },
                        convert::with_attempts_before(event.clone(), attempts),
                    ),
                    &token,
                )
            };
            let filter = |ids: Bson, attempts: i64| {
                doc! {
                    f::ID: ids,
                    f::LOCK: LOCK_DONE,
                    f::RESULT: { "$exists": true },
                    f::ATTEMPTS: attempts,
                }
            };
            let mut statements: Vec<(Document, usize)> = by_attempts
                .iter()
                .map(|(attempts, group)| {
                    let statement = doc! {
                        "q": filter(doc! { "$in": group }.into(), *attempts),
                        "u": update(*attempts, None),
                        "multi": true,
                    };
                    (
                        statement,
                        group.iter().map(|id| id.len() + 16).sum::<usize>() + 512,
                    )
                })
                .collect();
            let first_keyed = statements.len();
            statements.extend(keyed.iter().map(|(id, attempts, ukey)| {
                let mut q = filter((*id).into(), *attempts);
                q.insert(f::UKEY_DONE, ukey.as_str());
                let statement = doc! { "q": q, "u": update(*attempts, Some(ukey)) };
                (statement, id.len() + 2 * ukey.len() + 640)
            }));
            let commands = pack(statements, RELEASE_COMMAND_BYTES);
            let (matched, refused_at) = if keyed.is_empty() {
                let matched = self
                    .send_updates_once_more(WHAT, &commands, false)
                    .await?
                    .map(|(n, _)| n);
                (matched, Vec::new())
            } else {
                self.send_updates_refusing_keys(WHAT, &commands).await?
            };
            // Keyed jobs whose key another live job holds: left archived,
            // not tried again.
            let refused: HashSet<&str> = refused_at
                .iter()
                .filter_map(|at| at.checked_sub(first_keyed))
                .filter_map(|i| keyed.get(i).map(|(id, _, _)| *id))
                .collect();
            let found: Vec<&str> = found
                .into_iter()
                .filter(|i| !refused.contains(*i))
                .collect();
            let done: HashSet<&str> = match matched {
                Some(n) if n == found.len() as u64 => found.iter().copied().collect(),
                _ => {
                    let with = self.ids_with_token(&found, &token).await?;
                    found
                        .iter()
                        .copied()
                        .filter(|i| with.contains(*i))
                        .collect()
                }
            };
            rerun.extend(
                found
                    .iter()
                    .filter(|i| done.contains(**i))
                    .map(|i| (*i).to_owned()),
            );
            left = found.into_iter().filter(|i| !done.contains(*i)).collect();
            if left.is_empty() {
                break;
            }
        }
        Ok(rerun)
    }

    /// The attempts of each archived job of `ids` (with a result), and its
    /// stored unique key (`ukey_done`) if it has one.
    async fn archived_attempts(&self, ids: &[&str]) -> Result<Vec<(String, i64, Option<String>)>> {
        let filter =
            doc! { f::ID: { "$in": ids }, f::LOCK: LOCK_DONE, f::RESULT: { "$exists": true } };
        let docs = self
            .find_jobs(
                "find archived",
                filter,
                doc! { f::ID: 1, f::ATTEMPTS: 1, f::UKEY_DONE: 1 },
                ids.len(),
            )
            .await?;
        docs.iter()
            .map(|d| {
                let ukey = match d.get(f::UKEY_DONE) {
                    None | Some(Bson::Null) => None,
                    Some(_) => Some(convert::get_str(d, f::UKEY_DONE, "job")?),
                };
                Ok((
                    convert::get_str(d, f::ID, "job")?,
                    convert::get_i64(d, f::ATTEMPTS, "job")?,
                    ukey,
                ))
            })
            .collect()
    }

    /// Deletes the jobs of `ids` that are not locked: (1) reads their
    /// locks (and flow markers), (2) one `delete_many` of the free and
    /// archived plain ones, still free or archived; (3) only if it deleted
    /// fewer than it was given, reads which are still there. Flow jobs go
    /// through [`delete_flow`](Self::delete_flow).
    pub(crate) async fn delete_ids(&self, ids: &[&str], now: Millis) -> Result<DeleteOutcome> {
        if ids.is_empty() {
            return Ok(DeleteOutcome::default());
        }
        let docs = self
            .find_jobs(
                "find locks",
                doc! { f::ID: { "$in": ids } },
                doc! { f::ID: 1, f::LOCK: 1, f::FX: 1 },
                ids.len(),
            )
            .await?;
        let mut locks: HashMap<String, (String, bool)> = HashMap::with_capacity(docs.len());
        for d in &docs {
            locks.insert(
                convert::get_str(d, f::ID, "job")?,
                (
                    convert::get_str(d, f::LOCK, "job")?,
                    !matches!(d.get(f::FX), None | Some(Bson::Null)),
                ),
            );
        }
        let mut out = DeleteOutcome::default();
        let mut free: Vec<&str> = Vec::with_capacity(ids.len());
        let mut flow: Vec<&str> = Vec::new();
        for id in ids {
            match locks.get(*id) {
                None => {}
                Some((lock, _)) if lock == LOCK_STAGED => {}
                Some((lock, _)) if is_locked(lock) => out.running.push((*id).to_owned()),
                Some((_, true)) => flow.push(id),
                Some(_) => free.push(id),
            }
        }
        if !flow.is_empty() {
            let (deleted, running) = self.delete_flow(&flow, now).await?;
            out.deleted.extend(deleted);
            out.running.extend(running);
        }
        if free.is_empty() {
            return Ok(out);
        }
        // A job linked to a waiter since (1) has `fx` now: not deleted here.
        let filter = doc! {
            f::ID: { "$in": &free },
            f::LOCK: { "$in": unlocked() },
            f::FX: { "$exists": false },
        };
        let send = || self.call("delete jobs", self.jobs.delete_many(filter.clone()));
        let deleted = match send().await {
            Ok(r) => Some(r.deleted_count),
            // Idempotent: sent once more after a failure that may have
            // deleted part of them; the read below tells.
            Err(e) if e.is_retryable() => {
                send().await?;
                None
            }
            Err(e) => return Err(e),
        };
        if deleted == Some(free.len() as u64) {
            out.deleted.extend(free.into_iter().map(str::to_owned));
            return Ok(out);
        }
        // Some changed between (1) and (2): taken by a claimer (refused
        // now), deleted by another caller, or linked to a waiter.
        let left = self.locks_of(&free).await?;
        let mut linked = Vec::new();
        for id in free {
            match left.get(id) {
                None => out.deleted.push(id.to_owned()),
                Some(lock) if is_locked(lock) => out.running.push(id.to_owned()),
                Some(_) => linked.push(id),
            }
        }
        if !linked.is_empty() {
            let (deleted, running) = self.delete_flow(&linked, now).await?;
            out.deleted.extend(deleted);
            out.running.extend(running);
        }
        Ok(out)
    }

    /// Deletes the flow jobs of `ids` not locked: the live ones become
    /// tombstones recording their effects (`fx: 2`, `gone`), then every
    /// one still unlocked is read, its waiters told (a live one ended
    /// `cancelled`, 0) and it is deleted. Returns the ids deleted and
    /// those found locked.
    async fn delete_flow(&self, ids: &[&str], now: Millis) -> Result<(Vec<String>, Vec<String>)> {
        let token = new_token();
        let tombstone = doc! {
            "q": {
                f::ID: { "$in": ids },
                f::LOCK: { "$in": [LOCK_FREE, LOCK_BLOCKED] },
                f::FX: { "$exists": true },
            },
            "u": stamped(
                doc! {
                    "$set": {
                        f::LOCK: LOCK_DONE,
                        f::DT: now + ARCHIVE_HORIZON_MS,
                        f::FX: 2_i32,
                        f::FX_AT: now,
                        f::GONE: true,
                    },
                    "$unset": { f::UKEY: "" },
                },
                &token,
            ),
            "multi": true,
        };
        self.send_updates_once_more("delete (flow)", &[vec![tombstone]], false)
            .await?;
        let docs = self
            .find_jobs(
                "delete (flow read)",
                doc! { f::ID: { "$in": ids } },
                ended_projection(),
                ids.len(),
            )
            .await?;
        let mut deleted = Vec::new();
        let mut running = Vec::new();
        let mut ended = Vec::new();
        let mut archived = Vec::new();
        for d in &docs {
            let id = convert::get_str(d, f::ID, "job")?;
            let lock = convert::get_str(d, f::LOCK, "job")?;
            if is_locked(&lock) && lock != LOCK_STAGED {
                running.push(id);
                continue;
            }
            if lock != LOCK_DONE {
                continue;
            }
            if pending_effects(d) {
                let mut e = Ended::from_doc(d)?;
                // Delivered here, then deleted below with the others.
                e.gone = false;
                ended.push(e);
            }
            archived.push(id);
        }
        if !ended.is_empty() {
            self.deliver(ended, now).await?;
        }
        if !archived.is_empty() {
            self.call(
                "delete (flow)",
                self.jobs
                    .delete_many(doc! { f::ID: { "$in": &archived }, f::LOCK: LOCK_DONE }),
            )
            .await?;
            deleted = archived;
        }
        Ok((deleted, running))
    }

    /// The lock of each job of `ids` that exists.
    async fn locks_of(&self, ids: &[&str]) -> Result<HashMap<String, String>> {
        let filter = doc! { f::ID: { "$in": ids } };
        self.ids_with("find locks", filter, f::LOCK, ids.len(), convert::get_str)
            .await
    }

    /// Edits the free jobs of `edits`: one `update` command with one
    /// statement per distinct edit (priority, due time, payload), each
    /// stamping the call's token; the token's read-back when not all
    /// matched. An edit that may leave its job due sets `wake` (the
    /// change stream wakes watchers on it).
    pub(crate) async fn edit_ids(&self, edits: &[JobEdit], now: Millis) -> Result<Vec<String>> {
        const WHAT: &str = "edit";
        if edits.is_empty() {
            return Ok(Vec::new());
        }
        let token = new_token();
        type Key<'a> = (Option<i32>, Option<Millis>, Option<&'a [u8]>);
        let mut groups: Vec<(Key<'_>, Vec<&str>)> = Vec::new();
        let mut index: HashMap<Key<'_>, usize> = HashMap::new();
        for e in edits {
            let key = (e.priority, e.run_at, e.data.as_deref());
            let i = *index.entry(key).or_insert_with(|| {
                groups.push((key, Vec::new()));
                groups.len() - 1
            });
            groups[i].1.push(e.id.as_str());
        }
        let statements: Vec<(Document, usize)> = groups
            .into_iter()
            .flat_map(|((priority, run_at, data), ids)| {
                let mut set = Document::new();
                if let Some(p) = priority {
                    set.insert(f::PRIORITY, p);
                }
                if let Some(data) = data {
                    set.insert(f::DATA, convert::binary(data));
                }
                let size = ids.iter().map(|id| id.len() + 16).sum::<usize>()
                    + data.map_or(0, <[u8]>::len)
                    + 512;
                let statement = |lock: Bson, set: Document| {
                    doc! {
                        "q": { f::ID: { "$in": &ids }, f::LOCK: lock },
                        "u": stamped(
                            recorded(
                                doc! { "$set": set },
                                convert::event_doc(now, "", None, &EventKind::Edited),
                            ),
                            &token,
                        ),
                        "multi": true,
                    }
                };
                let mut free = set.clone();
                if let Some(dt) = run_at {
                    free.insert(f::DT, dt);
                }
                if run_at.is_none_or(|dt| dt <= now) {
                    free.insert(f::WAKE, &token);
                }
                match run_at {
                    // Free and blocked jobs alike (a blocked job's
                    // not-before time is kept in `dt` with an offset).
                    None => vec![(
                        statement(
                            Bson::Document(doc! { "$in": [LOCK_FREE, LOCK_BLOCKED] }),
                            free,
                        ),
                        size,
                    )],
                    Some(dt) => {
                        let mut blocked = set;
                        blocked.insert(f::DT, BLOCKED_BASE_MS + dt);
                        vec![
                            (statement(LOCK_FREE.into(), free), size),
                            (statement(LOCK_BLOCKED.into(), blocked), size),
                        ]
                    }
                }
            })
            .collect();
        let commands = pack(statements, RELEASE_COMMAND_BYTES);
        let ids: Vec<&str> = edits.iter().map(|e| e.id.as_str()).collect();
        let edited: Vec<&str> = match self.send_updates_once_more(WHAT, &commands, false).await? {
            Some((0, _)) => Vec::new(),
            Some((n, _)) if n == ids.len() as u64 => ids,
            _ => {
                let found = self.ids_with_token(&ids, &token).await?;
                ids.into_iter().filter(|i| found.contains(*i)).collect()
            }
        };
        Ok(edited.into_iter().map(str::to_owned).collect())
    }

    /// One page of `query` at `now` (see the crate docs, "list_jobs").
    pub(crate) async fn list_page(&self, query: &JobQuery, now: Millis) -> Result<JobPage> {
        let after = query.resume_after()?;
        let want = query.limit + 1;
        let docs: Vec<Document> = if query.state == JobState::Archived {
            self.list_query(query, archived_filter(query), after, want)
                .await?
        } else {
            let jobtypes = match &query.jobtypes {
                JobtypeFilter::Exact(list) => list.clone(),
                JobtypeFilter::Prefix(prefix) => self.jobtypes_in(Some(prefix)).await?,
                JobtypeFilter::All => self.jobtypes_in(None).await?,
            };
            let filters: Vec<Document> = jobtypes
                .chunks(LIST_JOBTYPES_PER_QUERY)
                .map(|chunk| state_filter(query.state, chunk, now))
                .collect();
            let pages: Vec<Vec<Document>> = futures::stream::iter(filters)
                .map(|filter| self.list_query(query, filter, after, want))
                .buffer_unordered(LIST_CONCURRENCY)
                .try_collect()
                .await?;
            pages.into_iter().flatten().collect()
        };
        let mut jobs = docs
            .into_iter()
            .map(|mut d| {
                if !query.with_data {
                    d.insert(f::DATA, convert::binary(&[]));
                }
                convert::job_from_doc(&d)
            })
            .collect::<Result<Vec<Job>>>()?;
        jobs.sort_by(|a, b| query.compare(&query.key_of(a), &query.key_of(b)));
        jobs.truncate(want);
        Ok(JobPage::from_sorted(query, jobs))
    }

    /// One listing `find`: `filter` with the query's created range, after
    /// the cursor's key, in the state's order on its index, at most
    /// `want` documents (without payloads unless asked for).
    async fn list_query(
        &self,
        query: &JobQuery,
        mut filter: Document,
        after: Option<&SortKey>,
        want: usize,
    ) -> Result<Vec<Document>> {
        if let Some(r) = range(&query.created) {
            filter.insert(f::CREATE_DT, r);
        }
        if let Some(tag) = &query.tag {
            filter.insert(f::TAGS, tag.as_str());
        }
        let filter = after_key(query.state, filter, after);
        let (sort, hint) = order(query.state);
        let mut projection = doc! { f::OP_TOKS: 0 };
        if !query.with_data {
            projection.insert(f::DATA, 0);
        }
        self.read("list jobs", async {
            self.jobs
                .find(filter)
                .sort(sort)
                .hint(hint)
                .projection(projection)
                .limit(i64::try_from(want).unwrap_or(i64::MAX))
                .batch_size(batch(want))
                .await?
                .try_collect()
                .await
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyset_branches_follow_each_order() {
        let key = SortKey {
            priority: 2,
            dt: 5,
            id: "k".into(),
        };
        let base = doc! { "x": 1 };
        let or = |state| {
            after_key(state, base.clone(), Some(&key))
                .get_array("$or")
                .unwrap()
                .len()
        };
        assert_eq!(or(JobState::Waiting), 3);
        assert_eq!(or(JobState::Expired), 3);
        assert_eq!(or(JobState::Running), 2);
        assert_eq!(or(JobState::Archived), 2);
        assert_eq!(after_key(JobState::Waiting, base.clone(), None), base);
    }

    #[test]
    fn ranges_are_half_open_and_open_ranges_filter_nothing() {
        assert_eq!(range(&TimeRange::default()), None);
        assert_eq!(
            range(&TimeRange::new(Some(1), Some(3))),
            Some(doc! { "$gte": 1_i64, "$lt": 3_i64 })
        );
        assert_eq!(
            range(&TimeRange::new(None, Some(3))),
            Some(doc! { "$lt": 3_i64 })
        );
    }

    #[test]
    fn marks_read_as_booleans_or_integers() {
        assert!(marked(&doc! { "cancel": true }));
        assert!(marked(&doc! { "cancel": 1_i32 }));
        assert!(!marked(&doc! { "cancel": false }));
        assert!(!marked(&doc! { "cancel": 0_i64 }));
        assert!(!marked(&doc! {}));
    }
}
