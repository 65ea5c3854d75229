//! [`MongoStore`] and its [`JobStore`] implementation: one query (or a
//! small fixed number) per operation, as the crate docs describe.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use jobstore_api::*;
use jobstore_api::{CancelOutcome, Renewal};
use mongodb::bson::{Bson, Document, doc};
use mongodb::event::EventHandler;
use mongodb::event::command::CommandEvent;
use mongodb::options::{Hint, ReadPreference, ReturnDocument, SelectionCriteria};
use mongodb::{Client, Collection, Database};
use rand::seq::SliceRandom;

use crate::conn::{self, CLAIM_INDEX, CODES_INDEX, PURGE_INDEX};
use crate::convert::{self, LOCK_STAGED, f};
use crate::deps::Fate;
use crate::error::{self, DUPLICATE_KEY, MAX_BSON_DOCUMENT};
use crate::options::MongoOptions;
use crate::stats;
use jobstore_api::limits::DEFAULT_POLL_INTERVAL;

/// Called by a store after some of an operation's round trips, with the
/// operation's name and the number of the round trip just finished; the
/// operation continues when the returned future completes, and fails as if
/// that round trip had failed when it gives an error. Tests use it to place
/// another caller's operations between two round trips of one call, and to
/// fail or cancel a call at a chosen point.
#[doc(hidden)]
pub type RoundTripHook =
    Arc<dyn Fn(&'static str, usize) -> BoxFuture<'static, Result<()>> + Send + Sync>;

/// A [`JobStore`](jobstore_api::JobStore) on MongoDB. Cheap to clone: clones
/// share the driver's connection pool.
#[derive(Clone)]
pub struct MongoStore {
    pub(crate) client: Client,
    pub(crate) db: Database,
    pub(crate) prefix: String,
    pub(crate) jobs: Collection<Document>,
    pub(crate) handlers: Collection<Document>,
    pub(crate) sysids: Collection<Document>,
    pub(crate) counters: Collection<Document>,
    /// The paused jobtypes, one document each (`_id` the jobtype).
    pub(crate) paused: Collection<Document>,
    /// The stats buckets, one document per jobtype, resolution and start.
    pub(crate) stats: Collection<Document>,
    /// The stored schedules, one document each (`_id` the name).
    pub(crate) schedules: Collection<Document>,
    pub(crate) hook: Option<RoundTripHook>,
    /// The write concern's `wtimeout`.
    pub(crate) wtimeout: Duration,
    /// The longest one round trip may take.
    pub(crate) timeout: Duration,
    /// The largest payload accepted.
    pub(crate) max_payload: usize,
    /// Whether the server runs `$unionWith` (4.4 and later).
    pub(crate) union_with: bool,
    /// Whether the server offers change streams (a replica set member or
    /// a `mongos`).
    pub(crate) change_streams: bool,
    /// Whether the unique-key indexes exist, so that keyed adds are
    /// offered (false where MongoDB refused them: a sharded `jobs`).
    pub(crate) unique_jobs: bool,
    /// How many job documents that could not be read were skipped.
    pub(crate) skipped: Arc<AtomicU64>,
    /// How many archived jobs one purge round trip deletes.
    pub(crate) purge_batch: usize,
}

impl fmt::Debug for MongoStore {
    // The URL and the client options may hold credentials: show only where
    // the store lives.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MongoStore")
            .field("database", &self.db.name())
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl MongoStore {
    /// Connects to the `mongodb://` or `mongodb+srv://` URL and creates the
    /// indexes (see the crate docs for the URL's form).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, MongoOptions::default()).await
    }

    /// Like [`connect`](Self::connect), with the database and prefix set in
    /// code (each overriding the URL).
    pub async fn connect_with(url: &str, options: MongoOptions) -> Result<Self> {
        let mut store = Self::open(url, options, None).await?;
        store.create_indexes().await?;
        store.probe_server().await?;
        Ok(store)
    }

    /// Like [`connect_with`](Self::connect_with), with every command the
    /// driver sends reported to `events` (tests only: they count round
    /// trips and read the commands' options).
    #[doc(hidden)]
    pub async fn connect_observed(
        url: &str,
        options: MongoOptions,
        events: EventHandler<CommandEvent>,
    ) -> Result<Self> {
        let mut store = Self::open(url, options, Some(events)).await?;
        store.create_indexes().await?;
        store.probe_server().await?;
        Ok(store)
    }

    /// Counts waiting jobs without `$unionWith`, as on servers before 4.4
    /// (tests only: forces the fallback on any server).
    #[doc(hidden)]
    pub fn without_union_with(mut self) -> Self {
        self.union_with = false;
        self
    }

    /// Deletes at most `n` archived jobs per purge round trip (tests only).
    #[doc(hidden)]
    pub fn with_purge_batch(mut self, n: usize) -> Self {
        self.purge_batch = n.max(1);
        self
    }

    pub(crate) fn purge_batch(&self) -> usize {
        self.purge_batch
    }

    /// Tries change streams in `watch` whatever the server's topology
    /// (tests only: shows the fallback where the server refuses them).
    #[doc(hidden)]
    pub fn with_change_streams(mut self) -> Self {
        self.change_streams = true;
        self
    }

    /// Whether `waiting_jobtypes` uses `$unionWith` (the server is 4.4 or
    /// later).
    pub fn uses_union_with(&self) -> bool {
        self.union_with
    }

    /// Whether unique keys are offered (`Capabilities::unique_jobs`): the
    /// connect created the `ukey` index. MongoDB refuses it on a `jobs`
    /// collection sharded on a key that is not its prefix; the store then
    /// answers a keyed add with `Unsupported`.
    pub fn uses_unique_keys(&self) -> bool {
        self.unique_jobs
    }

    /// Whether `watch` follows a change stream (the server is a replica set
    /// or a `mongos`) rather than polling.
    pub fn uses_change_streams(&self) -> bool {
        self.change_streams
    }

    pub(crate) fn max_payload(&self) -> usize {
        self.max_payload
    }

    pub(crate) fn count_skipped(&self) {
        self.skipped.fetch_add(1, Ordering::Relaxed);
    }

    /// How many job documents that could not be read (a field missing or
    /// of another type) claims have skipped since this store was
    /// connected (shared by its clones). Each is also logged as a
    /// `tracing` warning with its id.
    pub fn skipped_documents(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    /// Installs a [`RoundTripHook`] (tests only).
    #[doc(hidden)]
    pub fn with_round_trip_hook(mut self, hook: RoundTripHook) -> Self {
        self.hook = Some(hook);
        self
    }

    /// The database the store lives in.
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// The prefix of the store's collection names (empty when the store has
    /// the whole database).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The driver's client (shares the store's pool).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Drops the store's seven collections, and with them every job,
    /// handler, sysid, paused jobtype, stats bucket and schedule of this
    /// namespace.
    /// Other collections of the database are left alone.
    pub async fn drop_collections(&self) -> Result<()> {
        for coll in [
            &self.jobs,
            &self.handlers,
            &self.sysids,
            &self.counters,
            &self.paused,
            &self.stats,
            &self.schedules,
        ] {
            coll.drop()
                .await
                .map_err(|e| error::map("drop collection", e))?;
        }
        Ok(())
    }
}

/// The largest payload: MongoDB's 16 MiB document limit less 1 MiB for the
/// other fields (ids and jobtype of at most 200 bytes each, a result with
/// at most 64 KiB of output, BSON overhead).
pub const MAX_PAYLOAD: usize = MAX_BSON_DOCUMENT - (1 << 20);

/// Waiting counts stop at this number (one claim's maximum).
pub const WAITING_COUNT_CAP: u64 = 1_000;

/// Most find/update/read-back rounds in one claim.
const CLAIM_ROUNDS: usize = 4;

/// How many jobtypes one `waiting_jobtypes` aggregation counts: one
/// `$unionWith` stage each, well under MongoDB's limit of 1000 stages in a
/// pipeline (even counting the three stages of each sub-pipeline).
const JOBTYPES_PER_COUNT: usize = 200;

/// How many archived jobs one purge round trip deletes.
pub(crate) const PURGE_BATCH: usize = 1_000;

/// How many `waiting_jobtypes` aggregations run at once.
const COUNT_CONCURRENCY: usize = 4;

/// The filter of eligible jobs (waiting or expired) at `now`.
fn eligible(now: Millis) -> Document {
    doc! { f::DT: { "$lte": now }, f::LOCK: { "$ne": LOCK_DONE } }
}

/// The ids, each once, in their first order.
pub(crate) fn distinct(ids: &[String]) -> Vec<&str> {
    let mut seen = HashSet::with_capacity(ids.len());
    ids.iter()
        .map(String::as_str)
        .filter(|i| seen.insert(*i))
        .collect()
}

/// What a claim's candidate query gives: the sort key of one job.
struct Candidate {
    id: String,
    priority: i32,
    dt: Millis,
}

/// Fewest extra candidates a claim round reads beyond what it wants, so
/// that claimers of one jobtype can spread over them.
const SPREAD_MIN: usize = 64;

/// How many capped counts run at once when `$unionWith` is missing.
const FALLBACK_CONCURRENCY: usize = 16;

/// How many operation tokens a job keeps (`op_toks`, newest last): a
/// renew, release or cancel finds its own token in the read-back unless
/// this many later operations changed the same job in between.
const OP_TOKS_KEPT: i32 = 16;

/// The update that appends `token` to a job's `op_toks`, keeping the last
/// [`OP_TOKS_KEPT`].
fn push_op_token(token: &str) -> Document {
    doc! { f::OP_TOKS: { "$each": [token], "$slice": -OP_TOKS_KEPT } }
}

/// `update` that also appends `token` to `op_toks` and increments `ver`
/// (merged into its own `$inc` and `$push`, if any).
pub(crate) fn stamped(mut update: Document, token: &str) -> Document {
    let mut inc = match update.remove("$inc") {
        Some(Bson::Document(inc)) => inc,
        _ => Document::new(),
    };
    inc.insert(f::VER, 1_i64);
    update.insert("$inc", inc);
    let mut push = match update.remove("$push") {
        Some(Bson::Document(push)) => push,
        _ => Document::new(),
    };
    push.extend(push_op_token(token));
    update.insert("$push", push);
    update
}

/// The `$rename` of every archive: a keyed job's `ukey` becomes
/// `ukey_done`, which frees the key in the update that archives the job
/// (nothing on a plain job, which has no `ukey`).
pub(crate) fn free_key() -> Document {
    doc! { f::UKEY: f::UKEY_DONE }
}

/// `update` that also appends `event` to the job's history.
pub(crate) fn recorded(mut update: Document, event: Document) -> Document {
    let mut push = match update.remove("$push") {
        Some(Bson::Document(push)) => push,
        _ => Document::new(),
    };
    push.insert(f::HISTORY, convert::push_event(event));
    update.insert("$push", push);
    update
}

/// The jobs one claim round locked and has not handed out yet: while armed,
/// dropping it (the caller's future was cancelled) gives them back from a
/// spawned task; [`undo`](Self::undo) gives them back in place.
struct Unclaim {
    jobs: Collection<Document>,
    timeout: Duration,
    filter: Document,
    update: Document,
    armed: bool,
}

impl Unclaim {
    /// The jobs among `ids` that the claim with `token` locked for `owner`.
    fn new(store: &MongoStore, ids: &[&str], token: &str, owner: &str, now: Millis) -> Self {
        Unclaim {
            jobs: store.jobs.clone(),
            timeout: store.timeout(),
            filter: doc! { f::ID: { "$in": ids }, f::CLAIM_TOK: token, f::LOCK: owner },
            // As `Release::Unget`: free again at once, the attempt uncounted.
            update: recorded(
                doc! {
                    "$set": { f::LOCK: LOCK_FREE, f::DT: now },
                    "$inc": { f::ATTEMPTS: -1_i64, f::VER: 1_i64 },
                },
                convert::event_doc(now, owner, None, &EventKind::HandedBack),
            ),
            armed: true,
        }
    }

    /// Gives the jobs back now (best effort: a failure is logged, and the
    /// jobs come back when their lease runs out).
    async fn undo(&mut self) {
        let r = conn::bounded(
            self.timeout,
            "claim (give back)",
            self.jobs
                .update_many(self.filter.clone(), self.update.clone()),
        )
        .await;
        self.armed = false;
        if let Err(e) = r {
            tracing::warn!(error = %e, "could not give back the jobs of a failed claim; they come back after their lease");
        }
    }

    /// The jobs were handed out: nothing to give back.
    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for Unclaim {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (jobs, filter, update) = (self.jobs.clone(), self.filter.clone(), self.update.clone());
        let timeout = self.timeout;
        runtime.spawn(async move {
            let give_back = jobs.update_many(filter, update);
            if let Err(e) = conn::bounded(timeout, "claim (give back)", give_back).await {
                tracing::warn!(error = %e, "could not give back the jobs of a cancelled claim; they come back after their lease");
            }
        });
    }
}

/// Most bytes of update statements in one release `update` command (a
/// command document may not exceed 16 MiB): only lists with more than
/// about this much result output need a second command.
pub(crate) const RELEASE_COMMAND_BYTES: usize = 8 << 20;

/// What a release does to a job; entries with equal outcomes share one
/// update statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Outcome<'a> {
    /// Free again, eligible at this `dt`; the status of the run.
    Retry(Millis, Option<u16>),
    /// Free again at `now`, the attempt taken back.
    Unget,
    /// Archived with this result.
    Archive(ResultCode, u16, &'a [u8]),
    /// A tombstone (archived, no result), deleted after.
    Delete,
    /// Free again, due at this `dt`, attempts back to 0, with this result
    /// as its last (code, status, output) and, when given, this payload.
    Repeat(Millis, ResultCode, u16, &'a [u8], Option<&'a [u8]>),
}

impl Outcome<'_> {
    /// Whether this outcome ends the job (its waiters are to be told).
    fn ends(&self) -> bool {
        matches!(self, Outcome::Archive(..) | Outcome::Delete)
    }

    /// The update statement applying this outcome to the jobs of `ids`
    /// still locked by `owner`, stamping `token`. An ending outcome
    /// applies to plain jobs only (no `fx`), or with `flow` to flow jobs
    /// only, recording their effects (`fx: 2`).
    fn statement(
        &self,
        ids: &[&str],
        owner: &str,
        token: &str,
        now: Millis,
        flow: bool,
    ) -> Document {
        let archived = |result: Option<Document>| {
            let mut set = doc! {
                f::LOCK: LOCK_DONE,
                f::DONE_DT: now,
                f::DT: now + ARCHIVE_HORIZON_MS,
            };
            if let Some(result) = result {
                set.insert(f::RESULT, result);
            }
            set
        };
        let (set, inc) = match *self {
            Outcome::Retry(dt, _) => (doc! { f::LOCK: LOCK_FREE, f::DT: dt }, None),
            Outcome::Unget => (
                doc! { f::LOCK: LOCK_FREE, f::DT: now },
                Some(doc! { f::ATTEMPTS: -1_i64 }),
            ),
            Outcome::Archive(code, status, output) => (
                archived(Some(doc! {
                    "code": code.as_str(),
                    "status": i32::from(status),
                    "output": convert::binary(output),
                })),
                None,
            ),
            Outcome::Delete => (archived(None), None),
            // The last result goes to `prev_result` (as a run again's),
            // never `result`: the job is not archived, so it stays out of
            // the indexes and counts of archived jobs.
            Outcome::Repeat(at, code, status, output, data) => {
                let mut set = doc! {
                    f::LOCK: LOCK_FREE,
                    f::DT: at,
                    f::ATTEMPTS: 0_i64,
                    f::PREV_RESULT: {
                        "code": code.as_str(),
                        "status": i32::from(status),
                        "output": convert::binary(output),
                    },
                };
                if let Some(data) = data {
                    set.insert(f::DATA, convert::binary(data));
                }
                (set, None)
            }
        };
        let mut inc = inc.unwrap_or_default();
        inc.insert(f::VER, 1_i64);
        // Letting go clears the cancel mark; archiving replaces the result
        // a job run again kept.
        // An archive frees a unique key (`ukey` becomes `ukey_done`, kept
        // for reads and windows); a delete's tombstone drops it (a deleted
        // job counts for no window). On a plain job both name a missing
        // field: MongoDB leaves the document as it is.
        let unset = match self {
            Outcome::Retry(..) | Outcome::Unget | Outcome::Repeat(..) => doc! { f::CANCEL: "" },
            Outcome::Archive(..) => doc! { f::CANCEL: "", f::PREV_RESULT: "" },
            Outcome::Delete => doc! { f::CANCEL: "", f::PREV_RESULT: "", f::UKEY: "" },
        };
        let event = match *self {
            Outcome::Retry(dt, status) => Some(EventKind::Retried {
                delay_ms: u64::try_from(dt - now).unwrap_or(0),
                status,
            }),
            Outcome::Unget => Some(EventKind::HandedBack),
            Outcome::Archive(code, status, _) => Some(EventKind::Archived { code, status }),
            Outcome::Delete => None,
            Outcome::Repeat(at, code, status, ..) => Some(EventKind::Repeated {
                code,
                status,
                next_ms: at,
            }),
        };
        let mut push = push_op_token(token);
        if let Some(what) = event {
            push.insert(
                f::HISTORY,
                convert::push_event(convert::event_doc(now, owner, None, &what)),
            );
        }
        let mut update = doc! {
            "$set": set,
            "$unset": unset,
            "$push": push,
            "$inc": inc,
        };
        if let Outcome::Archive(..) = self {
            update.insert("$rename", free_key());
        }
        let mut q = doc! { f::ID: { "$in": ids }, f::LOCK: owner };
        if self.ends() {
            q.insert(f::FX, doc! { "$exists": flow });
            if flow && let Ok(set) = update.get_document_mut("$set") {
                set.insert(f::FX, 2_i32);
                set.insert(f::FX_AT, now);
                if let Outcome::Delete = self {
                    set.insert(f::GONE, true);
                }
            }
        }
        doc! { "q": q, "u": update, "multi": true }
    }
}

impl Outcome<'_> {
    /// An upper bound of the BSON size of [`statement`](Self::statement)
    /// for `ids`: the ids (each an array element with its index key), the
    /// output, the owner (filter and event), and room for the fixed fields.
    fn size(&self, ids: &[&str], owner: &str) -> usize {
        let output = match self {
            Outcome::Archive(_, _, output) => output.len(),
            Outcome::Repeat(_, _, _, output, data) => output.len() + data.map_or(0, <[u8]>::len),
            _ => 0,
        };
        ids.iter().map(|id| id.len() + 16).sum::<usize>() + output + 2 * owner.len() + 640
    }
}

/// The distinct outcomes of `releases`, each with its ids, in the order
/// they first appear.
fn outcomes(releases: &[JobRelease], now: Millis) -> Vec<(Outcome<'_>, Vec<&str>)> {
    let mut groups: Vec<(Outcome<'_>, Vec<&str>)> = Vec::new();
    let mut index: HashMap<Outcome<'_>, usize> = HashMap::new();
    for r in releases {
        let outcome = match &r.how {
            Release::Retry { delay } => Outcome::Retry(now + duration_ms(*delay), r.status),
            Release::Unget => Outcome::Unget,
            Release::Archive(result) => {
                Outcome::Archive(result.code, result.status, result.output.as_slice())
            }
            Release::Delete => Outcome::Delete,
            Release::Repeat { at, result, data } => Outcome::Repeat(
                *at,
                result.code,
                result.status,
                result.output.as_slice(),
                data.as_deref(),
            ),
        };
        let i = *index.entry(outcome).or_insert_with(|| {
            groups.push((outcome, Vec::new()));
            groups.len() - 1
        });
        groups[i].1.push(r.id.as_str());
    }
    groups
}

/// Packs `statements` (each with its size bound) into commands of at most
/// `limit` bytes each (a statement larger than `limit` goes alone).
pub(crate) fn pack(statements: Vec<(Document, usize)>, limit: usize) -> Vec<Vec<Document>> {
    let runs: Vec<usize> = jobstore_api::batch::split_by_size(&statements, limit, |(_, len)| *len)
        .iter()
        .map(|run| run.len())
        .collect();
    let mut docs = statements.into_iter().map(|(st, _)| st);
    runs.into_iter()
        .map(|n| docs.by_ref().take(n).collect())
        .collect()
}

impl MongoStore {
    /// The ids among `ids` whose documents carry `token` in `op_toks`.
    pub(crate) async fn ids_with_token(
        &self,
        ids: &[&str],
        token: &str,
    ) -> Result<HashSet<String>> {
        self.ids_where(ids, f::OP_TOKS, token, "find").await
    }

    /// The ids among `ids` whose documents hold `token` in `field` (an
    /// operation's read-back by its token).
    async fn ids_where(
        &self,
        ids: &[&str],
        field: &str,
        token: &str,
        what: &'static str,
    ) -> Result<HashSet<String>> {
        let docs = self
            .find_jobs(
                what,
                doc! { f::ID: { "$in": ids }, field: token },
                doc! { f::ID: 1 },
                ids.len(),
            )
            .await?;
        docs.iter()
            .map(|d| convert::get_str(d, f::ID, "job"))
            .collect()
    }

    /// The job documents matching `filter`, with the fields of
    /// `projection`, in one read (batches sized for `n` documents).
    pub(crate) async fn find_jobs(
        &self,
        what: &'static str,
        filter: Document,
        projection: Document,
        n: usize,
    ) -> Result<Vec<Document>> {
        self.read(what, async {
            self.jobs
                .find(filter)
                .projection(projection)
                .batch_size(batch(n))
                .await?
                .try_collect()
                .await
        })
        .await
    }

    /// The id and one `field` of each job `filter` matches (`n` expected),
    /// the field read by `get` (`convert::get_str`, `convert::get_i64`).
    pub(crate) async fn ids_with<T, C: FromIterator<(String, T)>>(
        &self,
        what: &'static str,
        filter: Document,
        field: &str,
        n: usize,
        get: fn(&Document, &str, &str) -> Result<T>,
    ) -> Result<C> {
        let docs = self
            .find_jobs(what, filter, doc! { f::ID: 1, field: 1 }, n)
            .await?;
        docs.iter()
            .map(|d| Ok((convert::get_str(d, f::ID, "job")?, get(d, field, "job")?)))
            .collect()
    }

    /// Sends `commands` (each a list of update statements on the jobs
    /// collection) as `update` commands with the store's write concern;
    /// returns the jobs matched (`n`) and changed (`nModified`) by all
    /// statements together. A failed statement fails the call.
    async fn send_updates(
        &self,
        what: &'static str,
        commands: &[Vec<Document>],
        ordered: bool,
    ) -> Result<(u64, u64)> {
        let (matched, modified, _) = self
            .send_updates_with(what, commands, ordered, false)
            .await?;
        Ok((matched, modified))
    }

    /// [`send_updates`](Self::send_updates); with `refused_keys`, a
    /// statement that failed with a duplicate key (11000: a unique key
    /// another job holds) does not fail the call: the positions of those
    /// statements (in `commands` flattened) come back.
    async fn send_updates_with(
        &self,
        what: &'static str,
        commands: &[Vec<Document>],
        ordered: bool,
        refused_keys: bool,
    ) -> Result<(u64, u64, Vec<usize>)> {
        let count = |reply: &Document, field: &str| -> Result<u64> {
            let n = match reply.get(field) {
                None => 0,
                Some(_) => convert::get_i64(reply, field, "update reply")?,
            };
            u64::try_from(n).map_err(|_| Error::backend_msg("negative match count from MongoDB"))
        };
        let (mut matched, mut modified) = (0_u64, 0_u64);
        let mut refused = Vec::new();
        let mut first = 0;
        for command in commands {
            let reply = self
                .call(
                    what,
                    self.db
                        .run_command(doc! {
                            "update": self.jobs.name(),
                            "updates": command,
                            "ordered": ordered,
                            "writeConcern": { "w": "majority", "wtimeout": self.wtimeout_ms() },
                        })
                        .selection_criteria(SelectionCriteria::ReadPreference(
                            ReadPreference::Primary,
                        )),
                )
                .await?;
            match refused_keys
                .then(|| stats::duplicate_key_failures(&reply))
                .flatten()
            {
                Some(at) => refused.extend(at.into_iter().map(|i| first + i)),
                None => error::check_write_reply(what, &reply)?,
            }
            first += command.len();
            matched += u64::try_from(convert::get_i64(&reply, "n", "update reply")?)
                .map_err(|_| Error::backend_msg("negative match count from MongoDB"))?;
            modified += count(&reply, "nModified")?;
        }
        Ok((matched, modified, refused))
    }

    /// [`send_updates_once_more`](Self::send_updates_once_more) for
    /// statements that may be refused by the unique key index: the
    /// positions of the refused statements (of the last attempt: a
    /// statement refused by the first is refused again, one applied by
    /// the first matches nothing the second time), and the jobs matched
    /// (`None` after a second attempt).
    pub(crate) async fn send_updates_refusing_keys(
        &self,
        what: &'static str,
        commands: &[Vec<Document>],
    ) -> Result<(Option<u64>, Vec<usize>)> {
        let first = match self.send_updates_with(what, commands, false, true).await {
            Ok(r) => self.after_round_trip(what, 1).await.map(|()| r),
            Err(e) => Err(e),
        };
        match first {
            Ok((n, _, refused)) => Ok((Some(n), refused)),
            Err(e) if e.is_retryable() => {
                tracing::debug!(error = %e, "{what}: sending the update once more");
                let (_, _, refused) = self.send_updates_with(what, commands, false, true).await?;
                Ok((None, refused))
            }
            Err(e) => Err(e),
        }
    }

    /// [`send_updates`](Self::send_updates), then the round-trip hook; a
    /// failure that may have applied part of the statements sends them
    /// once more and gives `None` (only a read-back can tell what
    /// changed).
    pub(crate) async fn send_updates_once_more(
        &self,
        what: &'static str,
        commands: &[Vec<Document>],
        ordered: bool,
    ) -> Result<Option<(u64, u64)>> {
        let first = match self.send_updates(what, commands, ordered).await {
            Ok(n) => self.after_round_trip(what, 1).await.map(|()| n),
            Err(e) => Err(e),
        };
        match first {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.is_retryable() => {
                tracing::debug!(error = %e, "{what}: sending the update once more");
                self.send_updates(what, commands, ordered).await?;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Lets go of the jobs locked by `owner`, each as its entry says (see
    /// the crate docs, "release_jobs"): one `update` command with one
    /// statement per distinct outcome, all stamping one fresh token; the
    /// token's read-back only when not every entry matched; one
    /// `delete_many` of the tombstones of the delete entries taken.
    async fn release_owned(
        &self,
        releases: &[JobRelease],
        owner: &str,
        now: Millis,
    ) -> Result<Vec<String>> {
        const WHAT: &str = "release";
        if releases.is_empty() {
            return Ok(Vec::new());
        }
        let token = new_token();
        let groups = outcomes(releases, now);
        let statements: Vec<(Document, usize)> = groups
            .iter()
            .map(|(outcome, ids)| {
                let size = outcome.size(ids, owner);
                (outcome.statement(ids, owner, &token, now, false), size)
            })
            .collect();
        let commands = pack(statements, RELEASE_COMMAND_BYTES);
        // `None`: sent again after a failure that may have applied part of
        // the statements; only the token's read-back can tell.
        let matched = self
            .send_updates_once_more(WHAT, &commands, false)
            .await?
            .map(|(n, _)| n);
        let ids: Vec<&str> = releases.iter().map(|r| r.id.as_str()).collect();
        let ends = groups.iter().any(|(o, _)| o.ends());
        let released: Vec<&str> = match matched {
            Some(0) if !ends => Vec::new(),
            Some(n) if n == ids.len() as u64 => ids,
            // Later operations may have changed some of these jobs since;
            // each appended its own token and left this one in place.
            // Ending entries of flow jobs (`fx`) still locked by the owner
            // take the flow path.
            _ => {
                let docs = self
                    .find_jobs(
                        "find",
                        doc! {
                            f::ID: { "$in": &ids },
                            "$or": [
                                { f::OP_TOKS: &token },
                                { f::LOCK: owner, f::FX: { "$exists": true } },
                            ],
                        },
                        doc! { f::ID: 1, f::OP_TOKS: 1 },
                        ids.len(),
                    )
                    .await?;
                let mut found = HashSet::new();
                let mut flow = HashSet::new();
                for d in &docs {
                    let id = convert::get_str(d, f::ID, "job")?;
                    if convert::str_array(d, f::OP_TOKS)?.contains(&token) {
                        found.insert(id);
                    } else {
                        flow.insert(id);
                    }
                }
                let mut released: Vec<&str> =
                    ids.iter().copied().filter(|i| found.contains(*i)).collect();
                if !flow.is_empty() {
                    released.extend(
                        self.release_flow(&groups, &flow, owner, &token, now)
                            .await?,
                    );
                }
                released
            }
        };
        let taken: HashSet<&str> = released.iter().copied().collect();
        let deleted: Vec<&str> = releases
            .iter()
            .filter(|r| matches!(r.how, Release::Delete) && taken.contains(r.id.as_str()))
            .map(|r| r.id.as_str())
            .collect();
        if !deleted.is_empty() {
            let filter = doc! {
                f::ID: { "$in": &deleted },
                f::LOCK: LOCK_DONE,
                f::OP_TOKS: &token,
                f::GONE: { "$exists": false },
            };
            let send = || async {
                self.call("release (delete)", self.jobs.delete_many(filter.clone()))
                    .await?;
                self.after_round_trip(WHAT, 2).await
            };
            // Idempotent: sent once more after a failure that may have
            // deleted part of the tombstones.
            if let Err(e) = send().await {
                if !e.is_retryable() {
                    return Err(e);
                }
                send().await?;
            }
        }
        Ok(released.into_iter().map(str::to_owned).collect())
    }

    /// The ending entries of `groups` whose jobs are flow jobs still
    /// locked by `owner` (`flow`): one more `update` command recording
    /// their effects with the archive, the token's read-back, and the
    /// delivery to their waiters. Returns the ids released.
    async fn release_flow<'a>(
        &self,
        groups: &[(Outcome<'a>, Vec<&'a str>)],
        flow: &HashSet<String>,
        owner: &str,
        token: &str,
        now: Millis,
    ) -> Result<Vec<&'a str>> {
        let statements: Vec<(Document, usize)> = groups
            .iter()
            .filter(|(o, _)| o.ends())
            .filter_map(|(outcome, ids)| {
                let ids: Vec<&str> = ids.iter().copied().filter(|i| flow.contains(*i)).collect();
                (!ids.is_empty()).then(|| {
                    let size = outcome.size(&ids, owner);
                    (outcome.statement(&ids, owner, token, now, true), size)
                })
            })
            .collect();
        if statements.is_empty() {
            return Ok(Vec::new());
        }
        let commands = pack(statements, RELEASE_COMMAND_BYTES);
        self.send_updates_once_more("release (flow)", &commands, false)
            .await?;
        let asked: Vec<&str> = flow.iter().map(String::as_str).collect();
        let docs = self
            .find_jobs(
                "release (flow read)",
                doc! { f::ID: { "$in": &asked }, f::OP_TOKS: token },
                crate::deps::ended_projection(),
                asked.len(),
            )
            .await?;
        let mut done = HashSet::new();
        let mut ended = Vec::new();
        for d in &docs {
            let e = crate::deps::Ended::from_doc(d)?;
            done.insert(e.id.clone());
            if crate::deps::pending_effects(d) {
                ended.push(e);
            }
        }
        self.deliver_after(ended, now).await;
        Ok(groups
            .iter()
            .flat_map(|(_, ids)| ids.iter().copied())
            .filter(|i| done.contains(*i))
            .collect())
    }

    /// One aggregation counting the eligible jobs of each of `jobtypes`
    /// at `now`, each count capped at [`WAITING_COUNT_CAP`]: per jobtype a
    /// `$match` on the claim index's equality and range keys, `$limit` to
    /// the cap and a projection of `jobtype` (covered by the index), the
    /// first inline and the others in `$unionWith` sub-pipelines; then one
    /// `$group` by `jobtype` counts them. Jobtypes with no eligible job
    /// produce no document, so they are left out.
    async fn count_waiting(&self, jobtypes: &[String], now: Millis) -> Result<Vec<WaitingJobtype>> {
        let capped = |jobtype: &str| {
            let mut filter = eligible(now);
            filter.insert(f::JOBTYPE, jobtype);
            [
                doc! { "$match": filter },
                doc! { "$limit": cap_i64() },
                doc! { "$project": { f::ID: 0, f::JOBTYPE: 1 } },
            ]
        };
        let Some((first, rest)) = jobtypes.split_first() else {
            return Ok(Vec::new());
        };
        let mut pipeline: Vec<Document> = capped(first).into();
        for jobtype in rest {
            pipeline.push(doc! { "$unionWith": {
                "coll": self.jobs.name(),
                "pipeline": capped(jobtype).to_vec(),
            } });
        }
        pipeline.push(doc! { "$group": { "_id": "$jobtype", "n": { "$sum": 1 } } });
        let docs: Vec<Document> = self
            .read("count waiting", async {
                // The hint pins the first `$match`; a `$unionWith`
                // sub-pipeline takes none, and its `$match` on the
                // claim index's leading keys is answered from it.
                self.jobs
                    .aggregate(pipeline)
                    .hint(claim_index())
                    .await?
                    .try_collect()
                    .await
            })
            .await?;
        docs.iter()
            .map(|d| {
                let count = u64::try_from(convert::get_i64(d, "n", "waiting count")?)
                    .map_err(|_| Error::backend_msg("negative waiting count from MongoDB"))?;
                Ok(WaitingJobtype {
                    jobtype: convert::get_str(d, "_id", "waiting count")?,
                    count: count.min(WAITING_COUNT_CAP),
                })
            })
            .collect()
    }

    /// The fallback of [`count_waiting`](Self::count_waiting) for servers
    /// without `$unionWith` (before 4.4): one capped `count` per jobtype,
    /// [`FALLBACK_CONCURRENCY`] at a time.
    async fn count_waiting_each(
        &self,
        jobtypes: &[String],
        now: Millis,
    ) -> Result<Vec<WaitingJobtype>> {
        let counts: Vec<Option<WaitingJobtype>> = futures::stream::iter(jobtypes.to_vec())
            .map(|jobtype: String| async move {
                let mut filter = eligible(now);
                filter.insert(f::JOBTYPE, jobtype.as_str());
                let n = self
                    .read("count waiting", async {
                        self.jobs
                            .count_documents(filter)
                            .limit(WAITING_COUNT_CAP)
                            .hint(claim_index())
                            .await
                    })
                    .await?;
                Ok::<_, Error>((n > 0).then_some(WaitingJobtype {
                    jobtype,
                    count: n.min(WAITING_COUNT_CAP),
                }))
            })
            .buffer_unordered(FALLBACK_CONCURRENCY)
            .try_collect()
            .await?;
        Ok(counts.into_iter().flatten().collect())
    }

    /// One claim round: the candidates read whole, the update pinned to
    /// the versions read, and the token's read-back. Returns the jobs
    /// claimed with their sort keys, how many were picked and how many
    /// candidates the query gave; the jobs' [`Unclaim`] goes to `taken`.
    ///
    /// `spread`: read more candidates than wanted and take them in a
    /// random order of this claimer's own rather than the first `want`.
    /// `extra`: read this many more (the unreadable candidates skipped by
    /// earlier rounds).
    ///
    /// Only the update and the read-back can leave jobs locked without
    /// handing them out: if either fails, the round gives back what it may
    /// have locked before returning the error.
    #[allow(clippy::too_many_arguments)]
    async fn claim_round(
        &self,
        jobtype: &str,
        want: usize,
        extra: usize,
        owner: &str,
        until: Millis,
        now: Millis,
        spread: bool,
        taken: &mut Vec<Unclaim>,
    ) -> Result<RoundOutcome> {
        let mut filter = eligible(now);
        filter.insert(f::JOBTYPE, jobtype);
        let fetch = extra
            + if spread {
                want + want.max(SPREAD_MIN)
            } else {
                want
            };
        let docs: Vec<Document> = self
            .read("claim (find)", async {
                self.jobs
                    .find(filter)
                    .sort(doc! { f::PRIORITY: -1, f::DT: 1, f::JOB_ID: 1 })
                    .hint(claim_index())
                    .limit(i64::try_from(fetch).unwrap_or(i64::MAX))
                    .batch_size(batch(fetch))
                    .await?
                    .try_collect()
                    .await
            })
            .await?;
        self.after_round_trip("claim", 1).await?;
        let found = docs.len();
        let mut skipped = 0;
        // Each candidate as read, with the version its update is pinned to.
        let mut read: Vec<(Candidate, Job, Bson)> = Vec::with_capacity(docs.len());
        for d in &docs {
            match convert::job_from_doc(d) {
                Ok(job) => {
                    let c = Candidate {
                        id: job.id.clone(),
                        priority: job.priority,
                        dt: job.dt,
                    };
                    let ver = d.get(f::VER).cloned().unwrap_or(Bson::Null);
                    read.push((c, job, ver));
                }
                Err(e) => {
                    skipped += 1;
                    self.skip(d, &e);
                }
            }
        }
        if spread {
            read.shuffle(&mut rand::rng());
        }
        read.truncate(want);
        let picked = read.len();
        if picked == 0 {
            return Ok(RoundOutcome::empty(found, fetch, skipped));
        }
        let ids: Vec<String> = read.iter().map(|(_, j, _)| j.id.clone()).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let token = new_token();
        // Armed before the update is sent: from here a cancelled future
        // gives back whatever the update may have locked.
        let mut unclaim = Unclaim::new(self, &ids, &token, owner, now);
        match self.lock_and_check(&read, &token, owner, until, now).await {
            Ok(mine) => {
                let claimed: Vec<(Candidate, Job)> = read
                    .into_iter()
                    .filter(|(_, j, _)| mine.contains(j.id.as_str()))
                    .map(|(c, mut job, _)| {
                        // Exactly what this claim's update made of the
                        // job as read (the update was pinned to it).
                        job.claimed_due = Some(job.dt);
                        job.lock = owner.to_owned();
                        job.dt = until;
                        job.attempts += 1;
                        let event = JobEvent::new(now, owner, job.attempts, EventKind::Claimed);
                        jobstore_api::history::push_event(&mut job.history, event);
                        (c, job)
                    })
                    .collect();
                if claimed.is_empty() {
                    unclaim.disarm();
                } else {
                    taken.push(unclaim);
                }
                Ok(RoundOutcome {
                    claimed,
                    picked,
                    found,
                    fetched: fetch,
                    skipped,
                })
            }
            Err(e) => {
                unclaim.undo().await;
                Err(e)
            }
        }
    }

    /// The update of a claim round, pinned to the versions read, and the
    /// ids it took, read back by the token it pushed on `op_toks` (which
    /// stays there even if a later claimer takes the job over after this
    /// claim's lease ran out: the job was this claim's too, and its attempt
    /// is this claim's hand-out).
    async fn lock_and_check(
        &self,
        read: &[(Candidate, Job, Bson)],
        token: &str,
        owner: &str,
        until: Millis,
        now: Millis,
    ) -> Result<HashSet<String>> {
        // Jobs grouped by the version read: one `$in` per distinct version
        // (fresh jobs all have version 0), each job pinned to its own.
        let mut by_ver: Vec<(Bson, Vec<&str>)> = Vec::new();
        for (_, job, ver) in read {
            match by_ver.iter_mut().find(|(v, _)| v == ver) {
                Some((_, ids)) => ids.push(job.id.as_str()),
                None => by_ver.push((ver.clone(), vec![job.id.as_str()])),
            }
        }
        let mut pins: Vec<Document> = by_ver
            .into_iter()
            .map(|(ver, ids)| match ver {
                Bson::Null => doc! { f::ID: { "$in": ids }, f::VER: { "$exists": false } },
                v => doc! { f::ID: { "$in": ids }, f::VER: v },
            })
            .collect();
        let mut filter = eligible(now);
        if pins.len() == 1 {
            filter.extend(pins.remove(0));
        } else {
            filter.insert("$or", pins);
        }
        let r = self
            .call(
                "claim (update)",
                self.jobs.update_many(
                    filter,
                    recorded(
                        doc! {
                            "$set": { f::LOCK: owner, f::DT: until, f::CLAIM_TOK: token },
                            "$inc": { f::ATTEMPTS: 1_i64, f::VER: 1_i64 },
                            "$push": push_op_token(token),
                        },
                        convert::event_doc(now, owner, None, &EventKind::Claimed),
                    ),
                ),
            )
            .await?;
        self.after_round_trip("claim", 2).await?;
        if r.matched_count == 0 {
            return Ok(HashSet::new());
        }
        let ids: Vec<&str> = read.iter().map(|(_, j, _)| j.id.as_str()).collect();
        let mine = self.ids_with_token(&ids, token).await?;
        self.after_round_trip("claim", 3).await?;
        Ok(mine)
    }

    /// Reports a document that cannot be read: skipped, never handed out.
    fn skip(&self, d: &Document, e: &Error) {
        let id = d.get(f::ID).map(ToString::to_string).unwrap_or_default();
        self.count_skipped();
        tracing::warn!(id = %id, error = %e, "skipping a job document that cannot be read");
    }
}

/// What one claim round did.
struct RoundOutcome {
    /// The jobs claimed, with their sort keys.
    claimed: Vec<(Candidate, Job)>,
    /// How many candidates the round picked to update.
    picked: usize,
    /// How many candidates the query gave.
    found: usize,
    /// How many candidates the query asked for.
    fetched: usize,
    /// How many candidates could not be read and were skipped.
    skipped: usize,
}

impl RoundOutcome {
    fn empty(found: usize, fetched: usize, skipped: usize) -> Self {
        RoundOutcome {
            claimed: Vec::new(),
            picked: 0,
            found,
            fetched,
            skipped,
        }
    }
}

/// The hint that pins a query to the claim index.
pub(crate) fn claim_index() -> Hint {
    Hint::Name(CLAIM_INDEX.to_owned())
}

/// A cursor batch size for `n` documents (at least 1).
pub(crate) fn batch(n: usize) -> u32 {
    u32::try_from(n.max(1)).unwrap_or(u32::MAX)
}

/// The job of a document `get_job` and `get_jobs` read, or `None` for a
/// staged one (an add still making its edges has not stored the job yet).
fn stored_job(d: &Document) -> Result<Option<Job>> {
    if d.get_str(f::LOCK).ok() == Some(LOCK_STAGED) {
        return Ok(None);
    }
    convert::job_from_doc(d).map(Some)
}

/// [`WAITING_COUNT_CAP`] as a BSON integer.
fn cap_i64() -> i64 {
    i64::try_from(WAITING_COUNT_CAP).unwrap_or(i64::MAX)
}

impl MongoStore {
    /// Adds `jobs` (validated, none with dependencies): one insert, or the
    /// keyed path.
    pub(crate) async fn add_without_deps(
        &self,
        jobs: &[NewJob],
        now: Millis,
    ) -> Result<AddOutcome> {
        if jobs.is_empty() {
            return Ok(AddOutcome::default());
        }
        if jobs.iter().any(|j| j.unique_key().is_some()) {
            return self.add_keyed(jobs, now).await;
        }
        let token = new_token();
        let docs: Vec<Document> = jobs
            .iter()
            .map(|j| {
                let mut d = convert::new_job_doc(j, now);
                d.insert(f::ADD_TOK, &token);
                d
            })
            .collect();
        let first = match self.insert_jobs(&docs).await {
            Ok(existing) => self.after_round_trip("add", 1).await.map(|()| existing),
            Err(e) => Err(e),
        };
        let existing = match first {
            Ok(existing) => existing,
            // The insert may have applied (a write-concern error after the
            // write, a lost connection): send it again, and tell the ids the
            // first attempt inserted by their `add_tok`.
            Err(e) if e.is_retryable() => {
                tracing::debug!(error = %e, "add: sending the insert once more");
                let dups = self.insert_jobs(&docs).await?;
                if dups.is_empty() {
                    dups
                } else {
                    let ids: Vec<&str> = dups.iter().map(|i| jobs[*i].id.as_str()).collect();
                    let ours = self
                        .ids_where(&ids, f::ADD_TOK, &token, "add (read back)")
                        .await?;
                    dups.into_iter()
                        .filter(|i| !ours.contains(&jobs[*i].id))
                        .collect()
                }
            }
            Err(e) => return Err(e),
        };
        let mut out = AddOutcome::default();
        for (i, job) in jobs.iter().enumerate() {
            if existing.contains(&i) {
                out.existing.push(job.id.clone());
            } else {
                out.new.push(job.id.clone());
            }
        }
        Ok(out)
    }

    /// Adds a batch holding jobs with dependencies: the others first (as
    /// any batch), then the waiters (`deps.rs`), the outcome in batch order.
    async fn add_with_deps(&self, jobs: &[NewJob], now: Millis) -> Result<AddOutcome> {
        let others: Vec<NewJob> = jobs
            .iter()
            .filter(|j| j.dependencies().is_empty())
            .cloned()
            .collect();
        let first = self.add_without_deps(&others, now).await?;
        let batch_new: HashSet<String> = first.new.iter().cloned().collect();
        let waiters: Vec<&NewJob> = jobs
            .iter()
            .filter(|j| !j.dependencies().is_empty())
            .collect();
        let fates = self.add_waiters(&waiters, &batch_new, now).await?;
        let existing: HashSet<&str> = first.existing.iter().map(String::as_str).collect();
        let mut dups: HashMap<&str, &Duplicate> = first
            .duplicates
            .iter()
            .map(|d| (d.id.as_str(), d))
            .collect();
        let mut out = AddOutcome::default();
        for job in jobs {
            let id = job.id.as_str();
            match fates.get(id) {
                Some(Fate::New) => out.new.push(job.id.clone()),
                Some(Fate::Existing) => out.existing.push(job.id.clone()),
                Some(Fate::Duplicate(holder)) => out.duplicates.push(Duplicate {
                    id: job.id.clone(),
                    existing: holder.clone(),
                    replaced: false,
                }),
                Some(Fate::Refused(r)) => out.refused.push(r.clone()),
                None if batch_new.contains(id) => out.new.push(job.id.clone()),
                None if existing.contains(id) => out.existing.push(job.id.clone()),
                None => {
                    if let Some(d) = dups.remove(id) {
                        out.duplicates.push(d.clone());
                    }
                }
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl JobStore for MongoStore {
    fn capabilities(&self) -> Capabilities {
        let caps = Capabilities::new(self.max_payload())
            .with_waiting_count_cap(WAITING_COUNT_CAP)
            .with_management()
            .with_tags_and_history()
            .with_stats()
            .with_trace()
            .with_schedules()
            .with_repeat()
            .with_dependencies();
        let caps = if self.unique_jobs {
            caps.with_unique_jobs()
        } else {
            caps
        };
        if self.uses_change_streams() {
            caps.with_notifications()
        } else {
            caps
        }
    }

    async fn add_jobs(&self, jobs: &[NewJob], now: Millis) -> Result<AddOutcome> {
        validate::new_jobs(jobs, &self.capabilities(), now)?;
        if jobs.is_empty() {
            return Ok(AddOutcome::default());
        }
        if jobs.iter().any(|j| !j.dependencies().is_empty()) {
            return self.add_with_deps(jobs, now).await;
        }
        self.add_without_deps(jobs, now).await
    }

    async fn waiting_jobtypes(&self, now: Millis) -> Result<Vec<WaitingJobtype>> {
        validate::time("now", now)?;
        // Unfiltered on purpose: a `$group` on the claim index's first key
        // after a `$sort` on it is a distinct scan that reads one key per
        // jobtype, where a filter on `dt` or `lock` would read every
        // eligible job's key. Jobtypes with no eligible job cost one
        // sub-pipeline each below and are left out there. (Not the
        // `distinct` command: its answer is an array of values, which some
        // servers and emulators hand back parsed, `"null"` as null.)
        let (jobtypes, paused) = futures::try_join!(self.jobtypes_in(None), self.paused_set())?;
        let jobtypes: Vec<String> = jobtypes
            .into_iter()
            .filter(|t| !paused.contains(t))
            .collect();
        let chunks: Vec<Vec<String>> = jobtypes
            .chunks(JOBTYPES_PER_COUNT)
            .map(<[String]>::to_vec)
            .collect();
        if !self.uses_union_with() {
            return self.count_waiting_each(&jobtypes, now).await;
        }
        let counts: Vec<Vec<WaitingJobtype>> = futures::stream::iter(chunks)
            .map(|chunk| async move { self.count_waiting(&chunk, now).await })
            .buffer_unordered(COUNT_CONCURRENCY)
            .try_collect()
            .await?;
        Ok(counts.into_iter().flatten().collect())
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
        if limit == 0 || self.is_paused(jobtype).await? {
            return Ok(Vec::new());
        }
        let until = now + duration_ms(lease);
        let mut claimed: Vec<(Candidate, Job)> = Vec::new();
        // Each round's jobs, given back if this future is dropped before
        // they are returned.
        let mut taken: Vec<Unclaim> = Vec::new();
        // The first round takes the first candidates in order; a round
        // after one that lost candidates to racers takes them in this
        // claimer's own order, so that concurrent claimers spread.
        let mut spread = false;
        // Candidates that could not be read and were skipped: the next
        // round reads that many more, so they cannot crowd out the rest.
        let mut skipped = 0;
        for _ in 0..CLAIM_ROUNDS {
            let want = limit - claimed.len();
            if want == 0 {
                break;
            }
            let round = self
                .claim_round(
                    jobtype, want, skipped, owner, until, now, spread, &mut taken,
                )
                .await;
            let round = match round {
                Ok(r) => r,
                // The failed round gave back its jobs; those of earlier
                // rounds are handed out rather than stranded.
                Err(e) if !claimed.is_empty() => {
                    tracing::warn!(error = %e, "claim round failed; returning the jobs already claimed");
                    break;
                }
                Err(e) => return Err(e),
            };
            let lost = round.picked - round.claimed.len();
            claimed.extend(round.claimed);
            // Stop when nothing was lost to a racer or skipped, or when the
            // candidates were every eligible job there was (the query gave
            // fewer than it asked for, and all were picked or skipped).
            let more = round.found == round.fetched || round.found > round.picked + round.skipped;
            if (lost == 0 && round.skipped == 0) || !more {
                break;
            }
            if lost > 0 {
                spread = true;
            }
            skipped += round.skipped;
        }
        claimed.sort_by(|(a, _), (b, _)| {
            b.priority
                .cmp(&a.priority)
                .then(a.dt.cmp(&b.dt))
                .then(a.id.cmp(&b.id))
        });
        taken.iter_mut().for_each(Unclaim::disarm);
        Ok(claimed.into_iter().map(|(_, job)| job).collect())
    }

    async fn renew_locks(
        &self,
        ids: &[String],
        owner: &str,
        lease: Duration,
        now: Millis,
    ) -> Result<Renewal> {
        validate::renew(ids, owner, lease, now)?;
        self.renew_owned(&distinct(ids), owner, now + duration_ms(lease))
            .await
    }

    async fn release_jobs(
        &self,
        releases: &[JobRelease],
        owner: &str,
        now: Millis,
    ) -> Result<Vec<String>> {
        validate::release(releases, owner, now, &self.capabilities())?;
        self.release_owned(releases, owner, now).await
    }

    async fn update_data(&self, id: &str, owner: &str, data: &[u8], now: Millis) -> Result<bool> {
        validate::update_data(id, owner, data, &self.capabilities(), now)?;
        let r = self
            .call(
                "update data",
                self.jobs.update_one(
                    doc! { f::ID: id, f::LOCK: owner },
                    doc! { "$set": { f::DATA: convert::binary(data) }, "$inc": { f::VER: 1_i64 } },
                ),
            )
            .await?;
        Ok(r.matched_count == 1)
    }

    async fn cancel_jobs(&self, ids: &[String], now: Millis) -> Result<CancelOutcome> {
        validate::cancel(ids, now)?;
        self.cancel_ids(&distinct(ids), now).await
    }

    async fn get_job(&self, id: &str) -> Result<Option<Job>> {
        validate::id(id)?;
        self.read("find job", self.jobs.find_one(doc! { f::ID: id }))
            .await?
            .map(|d| stored_job(&d))
            .transpose()
            .map(Option::flatten)
    }

    async fn get_jobs(&self, ids: &[String]) -> Result<Vec<Job>> {
        validate::ids(ids)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // One `find` whose first batch holds every match (no `getMore`
        // unless the documents outgrow one reply).
        let docs: Vec<Document> = self
            .read("find jobs", async {
                self.jobs
                    .find(doc! { f::ID: { "$in": ids } })
                    .batch_size(batch(ids.len()))
                    .await?
                    .try_collect()
                    .await
            })
            .await?;
        let mut out = Vec::with_capacity(docs.len());
        for d in &docs {
            out.extend(stored_job(d)?);
        }
        Ok(out)
    }

    async fn purge_archived(&self, before: Millis, codes: &[ResultCode]) -> Result<u64> {
        validate::time("before", before)?;
        if codes.is_empty() {
            return Ok(0);
        }
        let codes: Vec<&str> = codes.iter().map(|c| c.as_str()).collect();
        // A job whose waiters are still to be told (`fx: 2`) is kept
        // until they are.
        let filter = doc! {
            "result.code": { "$in": codes },
            f::DONE_DT: { "$lt": before },
            f::LOCK: LOCK_DONE,
            f::FX: { "$ne": 2 },
        };
        let mut purged = 0;
        let size = self.purge_batch();
        for round in 1.. {
            let docs: Vec<Document> = self
                .read("purge (find)", async {
                    self.jobs
                        .find(filter.clone())
                        .hint(Hint::Name(PURGE_INDEX.to_owned()))
                        .limit(i64::try_from(size).unwrap_or(i64::MAX))
                        .batch_size(batch(size))
                        .projection(doc! { f::ID: 1 })
                        .await?
                        .try_collect()
                        .await
                })
                .await?;
            let ids: Vec<Bson> = docs.iter().filter_map(|d| d.get(f::ID).cloned()).collect();
            if ids.is_empty() {
                break;
            }
            let mut batch_filter = filter.clone();
            batch_filter.insert(f::ID, doc! { "$in": &ids });
            let r = self
                .call("purge", self.jobs.delete_many(batch_filter))
                .await?;
            purged += r.deleted_count;
            self.after_round_trip("purge", round).await?;
            if docs.len() < size {
                break;
            }
        }
        Ok(purged)
    }

    async fn job_counts(&self, now: Millis) -> Result<Vec<JobCounts>> {
        validate::time("now", now)?;
        let when = |cond: Document| doc! { "$sum": { "$cond": [cond, 1, 0] } };
        let done = doc! { "$eq": ["$lock", LOCK_DONE] };
        // (1) States, from the claim index only (covered).
        let states = [
            doc! { "$project": { f::ID: 0, f::JOBTYPE: 1, f::DT: 1, f::LOCK: 1 } },
            doc! { "$group": {
                "_id": "$jobtype",
                "waiting": when(doc! { "$and": [
                    { "$ne": ["$lock", LOCK_DONE] }, { "$lte": ["$dt", now] },
                ] }),
                "scheduled": when(doc! { "$and": [
                    { "$eq": ["$lock", LOCK_FREE] }, { "$gt": ["$dt", now] },
                ] }),
                "running": when(doc! { "$and": [
                    { "$ne": ["$lock", LOCK_FREE] }, { "$ne": ["$lock", LOCK_DONE] },
                    { "$ne": ["$lock", LOCK_BLOCKED] }, { "$ne": ["$lock", LOCK_STAGED] },
                    { "$gt": ["$dt", now] },
                ] }),
                "blocked": when(doc! { "$eq": ["$lock", LOCK_BLOCKED] }),
                "archived": when(done),
            } },
        ];
        // (2) Archived jobs by result code other than ok, from the codes
        // index only (covered). Archived jobs with no result count as
        // `ok`, as in MemoryStore: `ok` is the archived total less these.
        let others: Vec<ResultCode> = ResultCode::ALL
            .into_iter()
            .filter(|c| *c != ResultCode::Ok)
            .collect();
        let mut by_code = doc! { "_id": "$jobtype" };
        for code in &others {
            by_code.insert(
                format!("a_{code}"),
                when(doc! { "$eq": ["$result.code", code.as_str()] }),
            );
        }
        // No `$project`: the server sees that `$group` needs only these two
        // fields and reads them from the index.
        let codes = [
            doc! { "$match": { "result.code": { "$in": others.iter().map(|c| c.as_str()).collect::<Vec<_>>() } } },
            doc! { "$group": by_code },
        ];
        let (docs, code_docs): (Vec<Document>, Vec<Document>) = futures::try_join!(
            self.read("count jobs", async {
                self.jobs
                    .aggregate(states)
                    .hint(claim_index())
                    .await?
                    .try_collect()
                    .await
            }),
            self.read("count jobs by result", async {
                self.jobs
                    .aggregate(codes)
                    .hint(Hint::Name(CODES_INDEX.to_owned()))
                    .await?
                    .try_collect()
                    .await
            }),
        )?;
        let count = |d: &Document, k: &str| -> Result<u64> {
            u64::try_from(convert::get_i64(d, k, "job count")?)
                .map_err(|_| Error::backend_msg("negative job count from MongoDB"))
        };
        let mut by_jobtype: HashMap<String, &Document> = HashMap::new();
        for d in &code_docs {
            by_jobtype.insert(convert::get_str(d, "_id", "job count")?, d);
        }
        let mut out = Vec::with_capacity(docs.len());
        for d in &docs {
            let mut c = JobCounts {
                jobtype: convert::get_str(d, "_id", "job count")?,
                waiting: count(d, "waiting")?,
                scheduled: count(d, "scheduled")?,
                running: count(d, "running")?,
                blocked: count(d, "blocked")?,
                archived: Default::default(),
            };
            let mut ok = count(d, "archived")?;
            if let Some(codes) = by_jobtype.get(&c.jobtype) {
                for code in &others {
                    let n = count(codes, &format!("a_{code}"))?;
                    ok = ok.saturating_sub(n);
                    if n > 0 {
                        c.archived.insert(*code, n);
                    }
                }
            }
            if ok > 0 {
                c.archived.insert(ResultCode::Ok, ok);
            }
            out.push(c);
        }
        Ok(out)
    }

    async fn list_jobs(&self, query: &JobQuery, now: Millis) -> Result<JobPage> {
        validate::job_query(query, now)?;
        self.list_page(query, now).await
    }

    async fn rerun_jobs(
        &self,
        ids: &[String],
        delay: Duration,
        now: Millis,
    ) -> Result<Vec<String>> {
        validate::rerun(ids, delay, now)?;
        self.rerun_ids(
            &distinct(ids),
            now,
            u64::try_from(duration_ms(delay)).unwrap_or(0),
        )
        .await
    }

    async fn delete_jobs(&self, ids: &[String], now: Millis) -> Result<DeleteOutcome> {
        validate::ids(ids)?;
        validate::time("now", now)?;
        self.delete_ids(&distinct(ids), now).await
    }

    async fn edit_jobs(&self, edits: &[JobEdit], now: Millis) -> Result<Vec<String>> {
        validate::edits(edits, &self.capabilities(), now)?;
        self.edit_ids(edits, now).await
    }

    async fn job_waits(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<Waits>> {
        validate::waits(id, after, limit)?;
        self.waits_of(id, after, limit).await
    }

    async fn waits_of(&self, ids: &[String], limit: usize) -> Result<Vec<Waits>> {
        validate::waits_of(ids, limit)?;
        self.waits_of_many(&distinct(ids), limit).await
    }

    async fn unblock_jobs(&self, ids: &[String], now: Millis) -> Result<Vec<String>> {
        validate::cancel(ids, now)?;
        self.unblock(&distinct(ids), now).await
    }

    async fn settle_flows(&self, now: Millis, limit: usize) -> Result<u64> {
        validate::time("now", now)?;
        self.settle(now, limit).await
    }

    async fn pause_jobtype(&self, jobtype: &str, paused: bool, now: Millis) -> Result<bool> {
        validate::pause(jobtype, now)?;
        self.set_paused(jobtype, paused, now).await
    }

    async fn paused_jobtypes(&self) -> Result<Vec<String>> {
        self.paused_list().await
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
        if !self.uses_change_streams() {
            return Ok(WorkWatcher::polling(DEFAULT_POLL_INTERVAL));
        }
        match self.change_stream().await {
            Ok(watcher) => Ok(watcher),
            Err(e) => {
                tracing::warn!(error = %e, "MongoDB change stream refused; polling instead");
                Ok(WorkWatcher::polling(DEFAULT_POLL_INTERVAL))
            }
        }
    }

    async fn set_handler(
        &self,
        jobtype: &str,
        handler: &Handler,
        now: Millis,
    ) -> Result<HandlerVersion> {
        validate::handler(jobtype, handler, now)?;
        let seq = self.next_handler_seq().await?;
        let d = convert::handler_doc(jobtype, handler, seq, now);
        self.call("insert handler", self.handlers.insert_one(&d))
            .await?;
        convert::handler_from_doc(&d)
    }

    async fn get_handler(&self, jobtype: &str) -> Result<Option<HandlerVersion>> {
        validate::jobtype(jobtype)?;
        self.read(
            "find handler",
            self.handlers
                .find_one(doc! { "jobtype": jobtype })
                .sort(doc! { "dt": -1, "seq": -1 }),
        )
        .await?
        .map(|d| convert::handler_from_doc(&d))
        .transpose()
    }

    async fn delete_handler(&self, jobtype: &str) -> Result<bool> {
        validate::jobtype(jobtype)?;
        let r = self
            .call(
                "delete handler",
                self.handlers.delete_many(doc! { "jobtype": jobtype }),
            )
            .await?;
        Ok(r.deleted_count > 0)
    }

    async fn list_handlers(&self) -> Result<Vec<HandlerVersion>> {
        let docs: Vec<Document> = self
            .read("list handlers", async {
                self.handlers
                    .aggregate([
                        doc! { "$sort": { "jobtype": 1, "dt": -1, "seq": -1 } },
                        doc! { "$group": { "_id": "$jobtype", "newest": { "$first": "$$ROOT" } } },
                    ])
                    .await?
                    .try_collect()
                    .await
            })
            .await?;
        docs.iter()
            .map(|d| match d.get("newest") {
                Some(Bson::Document(v)) => convert::handler_from_doc(v),
                _ => Err(Error::backend_msg("malformed handler list from MongoDB")),
            })
            .collect()
    }

    async fn set_schedule(
        &self,
        s: &Schedule,
        next_due: Option<Millis>,
        now: Millis,
    ) -> Result<ScheduleRecord> {
        validate::schedule(s, next_due, &self.capabilities(), now)?;
        self.put_schedule(s, next_due, now).await
    }

    async fn get_schedule(&self, name: &str) -> Result<Option<ScheduleRecord>> {
        validate::schedule_name(name)?;
        self.find_schedule(name).await
    }

    async fn list_schedules(&self, prefix: &str) -> Result<Vec<ScheduleRecord>> {
        validate::schedule_prefix(prefix)?;
        self.schedules_with_prefix(prefix).await
    }

    async fn delete_schedule(&self, name: &str) -> Result<bool> {
        validate::schedule_name(name)?;
        self.remove_schedule(name).await
    }

    async fn pause_schedule(
        &self,
        name: &str,
        paused: bool,
        next_due: Option<Millis>,
        now: Millis,
    ) -> Result<bool> {
        validate::schedule_pause(name, next_due, now)?;
        self.set_schedule_paused(name, paused, next_due, now).await
    }

    async fn due_schedules(&self, now: Millis, limit: usize) -> Result<Vec<ScheduleRecord>> {
        validate::due_schedules(now, limit)?;
        self.schedules_due(now, limit).await
    }

    async fn advance_schedule(
        &self,
        name: &str,
        version: u64,
        advance: &ScheduleAdvance,
        now: Millis,
    ) -> Result<bool> {
        validate::schedule_advance(name, version, advance, now)?;
        self.advance_schedule_state(name, version, advance).await
    }

    async fn reserve_sysid(&self, sysid: &str, ttl: Duration, now: Millis) -> Result<SysidLease> {
        validate::sysid_lease(sysid, ttl, now)?;
        let lease = SysidLease {
            sysid: sysid.to_owned(),
            token: new_token(),
            expires: now + duration_ms(ttl),
        };
        // Matches a free (expired) lease and takes it over, or inserts one;
        // a valid lease does not match, and the insert then fails on `_id`.
        let upsert = self
            .sysids
            .update_one(
                doc! { "_id": sysid, "expires": { "$lte": now } },
                doc! { "$set": { "token": &lease.token, "expires": lease.expires } },
            )
            .upsert(true);
        let r = tokio::time::timeout(self.timeout(), upsert).await;
        match r {
            Ok(Ok(_)) => Ok(lease),
            Ok(Err(e)) if error::is_duplicate_key(&e) => Err(Error::sysid_held(sysid)),
            Ok(Err(e)) => Err(error::map("reserve sysid", e)),
            Err(elapsed) => Err(Error::unavailable(
                "MongoDB reserve sysid failed: no answer in time",
                elapsed,
            )),
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
        let r = self
            .call(
                "renew sysid",
                self.sysids.update_one(
                    doc! { "_id": &lease.sysid, "token": &lease.token },
                    doc! { "$set": { "expires": expires } },
                ),
            )
            .await?;
        if r.matched_count == 0 {
            return Err(Error::sysid_lost(&lease.sysid));
        }
        Ok(SysidLease {
            expires,
            ..lease.clone()
        })
    }

    async fn release_sysid(&self, lease: &SysidLease) -> Result<bool> {
        validate::sysid(&lease.sysid)?;
        let r = self
            .call(
                "release sysid",
                self.sysids
                    .delete_one(doc! { "_id": &lease.sysid, "token": &lease.token }),
            )
            .await?;
        Ok(r.deleted_count == 1)
    }
}

/// Aborts the change streams' tasks when the watcher is dropped.
struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.iter().for_each(tokio::task::JoinHandle::abort);
    }
}

impl MongoStore {
    /// A watcher fed by a change stream on the jobs collection: inserts and
    /// updates that free a job (`lock = ""`: retry and unget releases, runs
    /// again) or may make it due (`wake`: edits), each with its jobtype,
    /// projected so that no payload is ever sent; and by one on the paused
    /// jobtypes, whose deletes (resumes) name their jobtype.
    async fn change_stream(&self) -> Result<WorkWatcher> {
        let pipeline = [
            doc! { "$match": { "$or": [
                { "operationType": "insert" },
                { "operationType": "update", "updateDescription.updatedFields.lock": LOCK_FREE },
                {
                    "operationType": "update",
                    format!("updateDescription.updatedFields.{}", f::WAKE): { "$exists": true },
                },
            ] } },
            doc! { "$project": { "operationType": 1, "fullDocument.jobtype": 1 } },
        ];
        // The update events carry only the changed fields: the server
        // looks the document up, and the projection keeps only its jobtype.
        let mut stream = self
            .call(
                "watch",
                self.jobs
                    .watch()
                    .pipeline(pipeline)
                    .full_document(mongodb::options::FullDocumentType::UpdateLookup),
            )
            .await?;
        let (tx, rx) = tokio::sync::broadcast::channel(1024);
        let resumes = tx.clone();
        let mut tasks = vec![tokio::spawn(async move {
            while let Some(event) = stream.next().await {
                let notice = match event {
                    Ok(event) => event
                        .full_document
                        .as_ref()
                        .and_then(|d| d.get_str(f::JOBTYPE).ok())
                        .unwrap_or_default()
                        .to_owned(),
                    Err(e) => {
                        tracing::warn!(error = %e, "MongoDB change stream failed; polling instead");
                        break;
                    }
                };
                if tx.send(notice).is_err() {
                    break;
                }
            }
            // Dropping `tx` (and the resume stream's) closes the channel:
            // the watcher polls from here.
        })];
        let paused = self
            .call(
                "watch paused",
                self.paused
                    .watch()
                    .pipeline([doc! { "$match": { "operationType": "delete" } }]),
            )
            .await;
        match paused {
            Ok(mut stream) => tasks.push(tokio::spawn(async move {
                while let Some(event) = stream.next().await {
                    let notice = match event {
                        Ok(event) => event
                            .document_key
                            .as_ref()
                            .and_then(|d| d.get_str("_id").ok())
                            .unwrap_or_default()
                            .to_owned(),
                        Err(e) => {
                            tracing::warn!(error = %e, "MongoDB change stream of paused jobtypes failed; resumes wake watchers at their next poll");
                            break;
                        }
                    };
                    if resumes.send(notice).is_err() {
                        break;
                    }
                }
            })),
            Err(e) => {
                tracing::warn!(error = %e, "MongoDB change stream of paused jobtypes refused; resumes wake watchers at their next poll");
            }
        }
        Ok(WorkWatcher::notified(
            rx,
            DEFAULT_POLL_INTERVAL,
            Some(Box::new(AbortOnDrop(tasks))),
        ))
    }

    /// One unordered insert of `docs`: the indexes of the documents
    /// refused with a duplicate key (an existing `_id`, or for keyed jobs
    /// a `ukey` another live job holds), or the error.
    pub(crate) async fn insert_jobs(&self, docs: &[Document]) -> Result<HashSet<usize>> {
        let insert = self.jobs.insert_many(docs).ordered(false);
        let r = tokio::time::timeout(self.timeout(), insert)
            .await
            .map_err(|elapsed| {
                Error::unavailable("MongoDB insert failed: no answer in time", elapsed)
            })?;
        match r {
            Ok(_) => Ok(HashSet::new()),
            Err(e) => match &*e.kind {
                // A plain job has no `ukey` (a sparse index), so for it a
                // duplicate key means the id exists already (in any state).
                mongodb::error::ErrorKind::InsertMany(ime)
                    if ime.write_concern_error.is_none()
                        && ime
                            .write_errors
                            .as_ref()
                            .is_some_and(|ws| ws.iter().all(|w| w.code == DUPLICATE_KEY)) =>
                {
                    Ok(ime.write_errors.iter().flatten().map(|w| w.index).collect())
                }
                _ => Err(error::map("insert", e)),
            },
        }
    }

    /// The next handler version number: an atomic `$inc` on one counter
    /// document, so numbers increase across every process.
    async fn next_handler_seq(&self) -> Result<i64> {
        // The first upserts of two processes may race on `_id`; the loser
        // retries once and then finds the document.
        for attempt in 0..2 {
            let upsert = self
                .counters
                .find_one_and_update(
                    doc! { "_id": "handler_seq" },
                    doc! { "$inc": { "n": 1_i64 } },
                )
                .upsert(true)
                .return_document(ReturnDocument::After);
            let r = tokio::time::timeout(self.timeout(), upsert)
                .await
                .map_err(|elapsed| {
                    Error::unavailable("MongoDB handler counter failed: no answer in time", elapsed)
                })?;
            match r {
                Ok(Some(d)) => return convert::get_i64(&d, "n", "counter"),
                Ok(None) => {
                    return Err(Error::backend_msg(
                        "handler counter upsert returned nothing",
                    ));
                }
                Err(e) if attempt == 0 && error::is_duplicate_key(&e) => continue,
                Err(e) => return Err(error::map("handler counter", e)),
            }
        }
        Err(Error::backend_msg("handler counter upsert kept failing"))
    }
}

#[cfg(test)]
mod tests {
    use super::{Outcome, pack};
    use jobstore_api::ResultCode;
    use mongodb::bson::{Document, doc};

    /// A statement's size bound counts each id with its array overhead,
    /// the output, the owner (in the filter and in the event) and room for
    /// the fixed fields.
    #[test]
    fn statement_sizes_count_ids_output_and_owner() {
        assert_eq!(Outcome::Delete.size(&["ab"], "own"), (2 + 16) + 2 * 3 + 640);
        assert_eq!(
            Outcome::Unget.size(&["ab", "cde"], "own"),
            (2 + 16) + (3 + 16) + 2 * 3 + 640
        );
        let output = vec![7u8; 1000];
        let archive = Outcome::Archive(ResultCode::Ok, 200, &output);
        assert_eq!(archive.size(&["ab"], "own"), (2 + 16) + 1000 + 2 * 3 + 640);
    }

    /// Statements fill a command up to exactly the limit, one larger than
    /// the limit goes alone, and the order is kept.
    #[test]
    fn statements_pack_up_to_the_limit() {
        let statements = |sizes: &[usize]| -> Vec<(Document, usize)> {
            sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| (doc! { "i": i as i32 }, n))
                .collect()
        };
        let shape =
            |commands: &[Vec<Document>]| -> Vec<usize> { commands.iter().map(Vec::len).collect() };
        assert_eq!(shape(&pack(statements(&[4, 4, 4, 4]), 8)), [2, 2]);
        assert_eq!(shape(&pack(statements(&[4, 3, 9, 1]), 8)), [2, 1, 1]);
        assert_eq!(shape(&pack(statements(&[8, 1]), 8)), [1, 1]);
        assert!(pack(Vec::new(), 8).is_empty());
        let order: Vec<i32> = pack(statements(&[4, 3, 9, 1, 2]), 8)
            .concat()
            .iter()
            .map(|d| d.get_i32("i").unwrap())
            .collect();
        assert_eq!(order, [0, 1, 2, 3, 4]);
    }
}
