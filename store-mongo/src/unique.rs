//! Unique keys: the add of a batch holding keyed jobs (the crate docs,
//! "Unique keys", give the commands). A batch without keys never comes
//! here.

use std::collections::{HashMap, HashSet};

use futures::TryStreamExt;
use jobstore_api::history::EventKind;
use jobstore_api::*;
use mongodb::bson::{Bson, Document, doc};
use mongodb::options::Hint;

use crate::conn::UKEY_DONE_INDEX;
use crate::convert::{self, f};
use crate::store::{MongoStore, RELEASE_COMMAND_BYTES, pack, recorded, stamped};

/// How many times an add tries the jobs whose holder left (archived or
/// deleted) between their insert and the read naming it.
const ADD_ROUNDS: usize = 3;

/// What became of one job of a keyed batch.
#[derive(Debug, Clone)]
enum Fate {
    New,
    Existing,
    /// Not stored: `existing` holds its key; `free` when that is a live
    /// job read free (lock `""`), which a `ReplaceData` may replace.
    Duplicate {
        existing: String,
        free: bool,
    },
}

impl MongoStore {
    /// Adds `jobs` (validated, at least one keyed): rounds of the window's
    /// look-up, the insert, the read of the refused jobs' ids and holders
    /// and the window's look-up again for the windowed jobs stored (taking
    /// back those let in past a holder archived inside their window); then
    /// the `ReplaceData` payloads.
    pub(crate) async fn add_keyed(&self, jobs: &[NewJob], now: Millis) -> Result<AddOutcome> {
        let token = new_token();
        let docs: Vec<Document> = jobs
            .iter()
            .map(|j| {
                let mut d = convert::new_job_doc(j, now);
                d.insert(f::ADD_TOK, &token);
                d
            })
            .collect();
        let ukeys: Vec<Option<String>> = jobs
            .iter()
            .map(|j| j.unique_key().map(|u| convert::ukey(&j.jobtype, &u.key)))
            .collect();
        let index_of: HashMap<&str, usize> = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| (j.id.as_str(), i))
            .collect();
        let mut fates: Vec<Option<Fate>> = vec![None; jobs.len()];
        let mut pending: Vec<usize> = (0..jobs.len()).collect();
        for _ in 0..ADD_ROUNDS {
            let round = pending.clone();
            // (0) The newest archive of each windowed key: a job whose
            // newest archive is inside its window is held out.
            let mut held_out: HashMap<usize, String> = HashMap::new();
            let windowed: Vec<(usize, Millis)> = pending
                .iter()
                .filter_map(|i| {
                    let window = jobs[*i].unique_key()?.window?;
                    Some((*i, now.saturating_sub(duration_ms(window))))
                })
                .collect();
            if !windowed.is_empty() {
                let keys: Vec<&str> = windowed
                    .iter()
                    .filter_map(|(i, _)| ukeys[*i].as_deref())
                    .collect();
                let newest = self.newest_archives(&keys).await?;
                self.after_round_trip("add (window)", 1).await?;
                for &(i, since) in &windowed {
                    let archived = ukeys[i].as_ref().and_then(|k| newest.get(k));
                    if let Some((id, _)) = archived.filter(|(_, done)| *done > since) {
                        held_out.insert(i, id.clone());
                    }
                }
            }
            // (1) The insert of the others.
            let sent: Vec<usize> = pending
                .iter()
                .copied()
                .filter(|i| !held_out.contains_key(i))
                .collect();
            let (refused, resent) = if sent.is_empty() {
                (HashSet::new(), false)
            } else {
                let batch: Vec<Document> = sent.iter().map(|i| docs[*i].clone()).collect();
                let (refused, resent) = self.insert_keyed(&batch).await?;
                let refused: HashSet<usize> = refused.into_iter().map(|at| sent[at]).collect();
                (refused, resent)
            };
            let mut ask: Vec<usize> = Vec::new();
            for &i in &pending {
                if held_out.contains_key(&i) {
                    ask.push(i);
                } else if !refused.contains(&i) {
                    fates[i] = Some(Fate::New);
                } else if resent || ukeys[i].is_some() {
                    ask.push(i);
                } else {
                    // A plain job refuses only on `_id`.
                    fates[i] = Some(Fate::Existing);
                }
            }
            let mut next = Vec::new();
            if !ask.is_empty() {
                self.read_holders(
                    jobs, &ukeys, &index_of, &token, &held_out, ask, &mut fates, &mut next,
                )
                .await?;
            }
            // (2b) The look-up again for the windowed jobs just stored: a
            // holder archived between (0) and (1) freed the key for the
            // insert although its archive is inside the window. Such a job
            // is taken back while untouched and named a duplicate of that
            // archive; a later job of the batch that named it goes to the
            // next round.
            let fresh: Vec<(usize, Millis)> = windowed
                .iter()
                .copied()
                .filter(|(i, _)| matches!(fates[*i], Some(Fate::New)))
                .collect();
            if !fresh.is_empty() {
                let undone = self.undo_covered(jobs, &ukeys, &fresh, &token).await?;
                let undone_ids: HashSet<&str> =
                    undone.keys().map(|i| jobs[*i].id.as_str()).collect();
                for &i in &round {
                    let named_undone = matches!(
                        &fates[i],
                        Some(Fate::Duplicate { existing, .. }) if undone_ids.contains(existing.as_str())
                    );
                    if named_undone {
                        fates[i] = None;
                        next.push(i);
                    }
                }
                for (i, archived) in undone {
                    fates[i] = Some(Fate::Duplicate {
                        existing: archived,
                        free: false,
                    });
                }
                next.sort_unstable();
            }
            pending = next;
            if pending.is_empty() {
                break;
            }
        }
        if !pending.is_empty() {
            return Err(Error::unavailable(
                "MongoDB add: the holders of some unique keys kept changing; try again",
                "unique key contention",
            ));
        }
        // (3) The payloads of `ReplaceData` duplicates of free holders.
        let replace: Vec<(usize, &str)> = fates
            .iter()
            .enumerate()
            .filter_map(|(i, fate)| match fate {
                Some(Fate::Duplicate {
                    existing,
                    free: true,
                }) if jobs[i]
                    .unique_key()
                    .is_some_and(|u| u.on_conflict == OnConflict::ReplaceData) =>
                {
                    Some((i, existing.as_str()))
                }
                _ => None,
            })
            .collect();
        let replaced = self.replace_data(jobs, &ukeys, &replace, now).await?;
        let mut out = AddOutcome::default();
        for (i, (job, fate)) in jobs.iter().zip(fates).enumerate() {
            match fate {
                Some(Fate::New) => out.new.push(job.id.clone()),
                Some(Fate::Existing) => out.existing.push(job.id.clone()),
                Some(Fate::Duplicate { existing, .. }) => out.duplicates.push(Duplicate {
                    id: job.id.clone(),
                    existing,
                    replaced: replaced.contains(&i),
                }),
                None => unreachable!("every job of the batch has a fate"),
            }
        }
        Ok(out)
    }

    /// (2) Who holds the ids and keys of the refused and held-out jobs of
    /// `ask`: one `find`. Each gets its fate, or goes to `next` when its
    /// holder left between the insert and this read.
    #[allow(clippy::too_many_arguments)]
    async fn read_holders(
        &self,
        jobs: &[NewJob],
        ukeys: &[Option<String>],
        index_of: &HashMap<&str, usize>,
        token: &str,
        held_out: &HashMap<usize, String>,
        ask: Vec<usize>,
        fates: &mut [Option<Fate>],
        next: &mut Vec<usize>,
    ) -> Result<()> {
        let ids: Vec<&str> = ask.iter().map(|i| jobs[*i].id.as_str()).collect();
        let keys: Vec<&str> = ask.iter().filter_map(|i| ukeys[*i].as_deref()).collect();
        let found = self
            .find_jobs(
                "add (holders)",
                doc! { "$or": [
                    { f::ID: { "$in": &ids } },
                    { f::UKEY: { "$in": &keys } },
                ] },
                doc! { f::ID: 1, f::UKEY: 1, f::LOCK: 1, f::ADD_TOK: 1 },
                ids.len() + keys.len(),
            )
            .await?;
        let mut by_id: HashMap<String, bool> = HashMap::new();
        let mut holders: HashMap<String, (String, bool)> = HashMap::new();
        for d in &found {
            let id = convert::get_str(d, f::ID, "job")?;
            if let Some(Bson::String(ukey)) = d.get(f::UKEY) {
                let free = matches!(d.get(f::LOCK), Some(Bson::String(l)) if l == LOCK_FREE);
                holders.insert(ukey.clone(), (id.clone(), free));
            }
            let ours = matches!(d.get(f::ADD_TOK), Some(Bson::String(t)) if *t == *token);
            by_id.insert(id, ours);
        }
        for i in ask {
            if let Some(ours) = by_id.get(&jobs[i].id) {
                fates[i] = Some(if *ours { Fate::New } else { Fate::Existing });
                continue;
            }
            let holder = ukeys[i].as_ref().and_then(|k| holders.get(k));
            // A later job of this batch is no holder for a held-out
            // job: in batch order the held-out job came first.
            let holder = holder.filter(|(id, _)| {
                !held_out.contains_key(&i) || index_of.get(id.as_str()).is_none_or(|k| *k < i)
            });
            if let Some((id, free)) = holder {
                fates[i] = Some(Fate::Duplicate {
                    existing: id.clone(),
                    free: *free,
                });
            } else if let Some(id) = held_out.get(&i) {
                fates[i] = Some(Fate::Duplicate {
                    existing: id.clone(),
                    free: false,
                });
            } else {
                // Its holder left between the insert and the read.
                next.push(i);
            }
        }
        Ok(())
    }

    /// (2b) Of the jobs of `fresh` (batch index, start of its window) this
    /// call just stored, those whose key now has its newest archive inside
    /// the window (not the job itself, archived already): the look-up (0)
    /// did not see that archive, so the holder was archived between (0)
    /// and the insert. Each is deleted while it is untouched (this call's
    /// `add_tok`, free, never claimed); a job claimed meanwhile stays (it
    /// is new). One aggregation, and one `delete` only when a key is
    /// covered (one `find` more when it deleted some but not all of them,
    /// or was sent twice). The batch indexes deleted, each with the
    /// archived job that covers it.
    async fn undo_covered(
        &self,
        jobs: &[NewJob],
        ukeys: &[Option<String>],
        fresh: &[(usize, Millis)],
        token: &str,
    ) -> Result<HashMap<usize, String>> {
        const WHAT: &str = "add (undo)";
        let keys: Vec<&str> = fresh
            .iter()
            .filter_map(|(i, _)| ukeys[*i].as_deref())
            .collect();
        let newest = self.newest_archives(&keys).await?;
        self.after_round_trip("add (window)", 2).await?;
        let covered: Vec<(usize, &str)> = fresh
            .iter()
            .filter_map(|&(i, since)| {
                let (id, done) = newest.get(ukeys[i].as_deref()?)?;
                (*done > since && *id != jobs[i].id).then_some((i, id.as_str()))
            })
            .collect();
        if covered.is_empty() {
            return Ok(HashMap::new());
        }
        let ids: Vec<&str> = covered.iter().map(|(i, _)| jobs[*i].id.as_str()).collect();
        let filter = doc! {
            f::ID: { "$in": &ids },
            f::ADD_TOK: token,
            f::LOCK: LOCK_FREE,
            f::ATTEMPTS: 0_i64,
        };
        let send = || self.call(WHAT, self.jobs.delete_many(filter.clone()));
        let deleted = match send().await {
            Ok(r) => Some(r.deleted_count),
            // Idempotent (only this call's untouched documents match):
            // sent once more after a failure that may have applied; the
            // read below tells.
            Err(e) if e.is_retryable() => {
                send().await?;
                None
            }
            Err(e) => return Err(e),
        };
        let undone = |kept: &HashSet<String>| {
            covered
                .iter()
                .filter(|(i, _)| !kept.contains(&jobs[*i].id))
                .map(|(i, archived)| (*i, (*archived).to_owned()))
                .collect()
        };
        if deleted == Some(0) {
            return Ok(HashMap::new());
        }
        if deleted == Some(ids.len() as u64) {
            return Ok(undone(&HashSet::new()));
        }
        // Some were claimed before the delete: those still there with
        // this call's token stayed.
        let kept: HashSet<String> = self
            .find_jobs(
                WHAT,
                doc! { f::ID: { "$in": &ids }, f::ADD_TOK: token },
                doc! { f::ID: 1 },
                ids.len(),
            )
            .await?
            .iter()
            .map(|d| convert::get_str(d, f::ID, "job"))
            .collect::<Result<_>>()?;
        Ok(undone(&kept))
    }

    /// The newest archived job (id, `done_dt`) of each of `keys` (stored
    /// form) that has one: one aggregation over the `ukey_done` index, a
    /// distinct scan of one key each.
    async fn newest_archives(&self, keys: &[&str]) -> Result<HashMap<String, (String, Millis)>> {
        let pipeline = [
            doc! { "$match": { f::UKEY_DONE: { "$in": keys } } },
            doc! { "$sort": { f::UKEY_DONE: 1, f::DONE_DT: -1, f::JOB_ID: -1 } },
            doc! { "$group": {
                "_id": format!("${}", f::UKEY_DONE),
                "id": { "$first": "$_id" },
                "done_dt": { "$first": format!("${}", f::DONE_DT) },
            } },
        ];
        let docs: Vec<Document> = self
            .read("add (window)", async {
                self.jobs
                    .aggregate(pipeline)
                    .hint(Hint::Name(UKEY_DONE_INDEX.to_owned()))
                    .await?
                    .try_collect()
                    .await
            })
            .await?;
        docs.iter()
            .map(|d| {
                Ok((
                    convert::get_str(d, "_id", "window")?,
                    (
                        convert::get_str(d, "id", "window")?,
                        convert::get_i64(d, "done_dt", "window")?,
                    ),
                ))
            })
            .collect()
    }

    /// The unordered insert of `docs`, sent once more after a failure that
    /// may have applied: the positions refused with a duplicate key (on
    /// `_id` or `ukey`), and whether it was sent twice (then a refused
    /// document may be one the first attempt stored).
    pub(crate) async fn insert_keyed(&self, docs: &[Document]) -> Result<(HashSet<usize>, bool)> {
        let first = match self.insert_jobs(docs).await {
            Ok(refused) => self.after_round_trip("add", 1).await.map(|()| refused),
            Err(e) => Err(e),
        };
        match first {
            Ok(refused) => Ok((refused, false)),
            Err(e) if e.is_retryable() => {
                tracing::debug!(error = %e, "add: sending the insert once more");
                Ok((self.insert_jobs(docs).await?, true))
            }
            Err(e) => Err(e),
        }
    }

    /// Gives each free holder of `replace` (batch index, holder id) the
    /// payload of that job and the event `Edited`: one ordered `update`
    /// command, one statement (and token) per duplicate, each applying
    /// only while the holder still holds the key and is free. The batch
    /// indexes whose holder was replaced.
    async fn replace_data(
        &self,
        jobs: &[NewJob],
        ukeys: &[Option<String>],
        replace: &[(usize, &str)],
        now: Millis,
    ) -> Result<HashSet<usize>> {
        const WHAT: &str = "add (replace data)";
        if replace.is_empty() {
            return Ok(HashSet::new());
        }
        let tokens: Vec<String> = replace.iter().map(|_| new_token()).collect();
        let statements: Vec<(Document, usize)> = replace
            .iter()
            .zip(&tokens)
            .map(|((i, holder), token)| {
                let job = &jobs[*i];
                let ukey = ukeys[*i].as_deref().unwrap_or_default();
                let statement = doc! {
                    "q": { f::ID: *holder, f::UKEY: ukey, f::LOCK: LOCK_FREE },
                    "u": stamped(
                        recorded(
                            doc! { "$set": {
                                f::DATA: convert::binary(&job.data),
                                f::WAKE: token,
                            } },
                            convert::event_doc(now, "", None, &EventKind::Edited),
                        ),
                        token,
                    ),
                };
                let size = holder.len() + ukey.len() + job.data.len() + 640;
                (statement, size)
            })
            .collect();
        let commands = pack(statements, RELEASE_COMMAND_BYTES);
        if let Some((n, _)) = self.send_updates_once_more(WHAT, &commands, true).await? {
            if n == replace.len() as u64 {
                return Ok(replace.iter().map(|(i, _)| *i).collect());
            }
            if n == 0 {
                return Ok(HashSet::new());
            }
        }
        // Some holders were taken (claimed, archived) in between: the
        // tokens they carry say which were replaced.
        let holders: Vec<&str> = replace.iter().map(|(_, h)| *h).collect();
        let found = self
            .find_jobs(
                WHAT,
                doc! { f::ID: { "$in": &holders }, f::OP_TOKS: { "$in": &tokens } },
                doc! { f::ID: 1, f::OP_TOKS: 1 },
                holders.len(),
            )
            .await?;
        let carried: HashSet<&str> = found
            .iter()
            .filter_map(|d| match d.get(f::OP_TOKS) {
                Some(Bson::Array(a)) => Some(a.iter().filter_map(Bson::as_str)),
                _ => None,
            })
            .flatten()
            .collect();
        Ok(replace
            .iter()
            .zip(&tokens)
            .filter(|(_, t)| carried.contains(t.as_str()))
            .map(|((i, _), _)| *i)
            .collect())
    }
}
