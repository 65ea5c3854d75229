//! Connecting: the client and the store's collections with their pinned
//! read preference and concerns, the indexes, what the server offers, and
//! round trips bounded by the store's timeout.

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use jobstore_api::{Error, Result};
use mongodb::bson::{Document, doc};
use mongodb::event::EventHandler;
use mongodb::event::command::CommandEvent;
use mongodb::options::{
    ClientOptions, CollectionOptions, IndexOptions, ReadConcern, ReadPreference, SelectionCriteria,
    WriteConcern,
};
use mongodb::{Client, IndexModel};

use crate::error;
use crate::options::{
    DEFAULT_DATABASE, MongoOptions, TIMEOUT_PARAM, check_database_name, check_prefix,
    split_own_params,
};
use crate::store::{self, MongoStore};

/// The name of the claim index.
pub(crate) const CLAIM_INDEX: &str = "claim";

/// The name of the purge index: archived jobs by result code, then age.
/// (Versions before purges by code created `purge`, `{done_dt: 1}`, which
/// nothing reads any more.)
pub(crate) const PURGE_INDEX: &str = "purge_codes";

/// The name of the index of archived jobs' result codes.
pub(crate) const CODES_INDEX: &str = "codes";

/// The name of the listing index of free and locked jobs by due time:
/// scheduled, running and expired jobs of each jobtype.
pub(crate) const DUE_INDEX: &str = "list_due";

/// The name of the listing index of archived jobs: by result code, newest
/// first.
pub(crate) const ARCHIVED_INDEX: &str = "list_archived";

/// The sparse index of recorded deliveries and staged adds (`fx_at`),
/// read by `settle_flows` only.
pub(crate) const SETTLE_INDEX: &str = "settle";

/// The sparse unique index of live keyed jobs' `ukey`.
pub(crate) const UKEY_INDEX: &str = "ukey";

/// The sparse index of archived keyed jobs, newest first per key (the
/// window's look-up).
pub(crate) const UKEY_DONE_INDEX: &str = "ukey_done";

/// The name of the stats index by resolution and start: pruning.
pub(crate) const STATS_PRUNE_INDEX: &str = "prune";

/// The name of the stats index by resolution, jobtype and start: reads, in
/// their order.
pub(crate) const STATS_READ_INDEX: &str = "read";

/// The name of the schedules index of due reads: by pause, `next_due` and
/// name.
pub(crate) const SCHEDULES_DUE_INDEX: &str = "due";

impl MongoStore {
    /// The store for `url` and `options`, without contacting the server
    /// (a `mongodb+srv://` URL is resolved through DNS, though).
    pub(crate) async fn open(
        url: &str,
        options: MongoOptions,
        events: Option<EventHandler<CommandEvent>>,
    ) -> Result<Self> {
        let own = split_own_params(url)?;
        let driver_url = own.driver_url.clone();
        let url_prefix = own.prefix.clone();
        let mut client_options =
            ClientOptions::parse(&driver_url)
                .await
                .map_err(|e| match &*e.kind {
                    mongodb::error::ErrorKind::InvalidArgument { .. } => {
                        Error::invalid(format!("invalid MongoDB URL: {e}"))
                    }
                    _ => error::map("URL resolution", e),
                })?;
        if let Some(events) = events {
            client_options.command_event_handler = Some(events);
        }
        if client_options.app_name.is_none() {
            client_options.app_name = Some("jobstore".to_owned());
        }
        let database = options
            .database
            .or_else(|| client_options.default_database.clone())
            .unwrap_or_else(|| DEFAULT_DATABASE.to_owned());
        check_database_name(&database)?;
        let prefix = options.prefix.or(url_prefix).unwrap_or_default();
        check_prefix(&prefix)?;
        let client = Client::with_options(client_options)
            .map_err(|e| Error::invalid(format!("invalid MongoDB client options: {e}")))?;
        let db = client.database(&database);
        let coll = |name: &str| {
            db.collection_with_options::<Document>(
                &format!("{prefix}{name}"),
                pinned_collection_options(own.wtimeout),
            )
        };
        let store = MongoStore {
            jobs: coll("jobs"),
            handlers: coll("handlers"),
            sysids: coll("sysids"),
            counters: coll("counters"),
            paused: coll("paused"),
            stats: coll("stats"),
            schedules: coll("schedules"),
            client,
            db: db.clone(),
            prefix,
            hook: None,
            wtimeout: own.wtimeout,
            timeout: own.timeout,
            max_payload: own
                .max_payload
                .map_or(store::MAX_PAYLOAD, |m| m.min(store::MAX_PAYLOAD)),
            // Until the probe says otherwise: what works on every server.
            union_with: false,
            // Until the unique-key indexes are created.
            unique_jobs: false,
            change_streams: false,
            skipped: Arc::default(),
            purge_batch: store::PURGE_BATCH,
        };
        Ok(store)
    }

    /// Creates the indexes; the unique-key ones last, in a call of their
    /// own whose refusal only turns unique keys off (see
    /// [`offers_unique_jobs`]).
    pub(crate) async fn create_indexes(&mut self) -> Result<()> {
        let named = |name: &str| IndexOptions::builder().name(name.to_owned()).build();
        self.jobs
            .create_indexes([
                IndexModel::builder()
                    .keys(doc! { "jobtype": 1, "priority": -1, "dt": 1, "id": 1, "lock": 1 })
                    .options(named(CLAIM_INDEX))
                    .build(),
                IndexModel::builder()
                    .keys(doc! { "result.code": 1, "done_dt": 1 })
                    .options(
                        IndexOptions::builder()
                            .name(PURGE_INDEX.to_owned())
                            .sparse(true)
                            .build(),
                    )
                    .build(),
                IndexModel::builder()
                    .keys(doc! { "result.code": 1, "jobtype": 1 })
                    .options(
                        IndexOptions::builder()
                            .name(CODES_INDEX.to_owned())
                            .partial_filter_expression(doc! { "result.code": { "$exists": true } })
                            .build(),
                    )
                    .build(),
                IndexModel::builder()
                    .keys(doc! { "jobtype": 1, "lock": 1, "dt": 1, "id": 1 })
                    .options(named(DUE_INDEX))
                    .build(),
                IndexModel::builder()
                    .keys(doc! { "fx_at": 1 })
                    .options(
                        IndexOptions::builder()
                            .name(SETTLE_INDEX.to_owned())
                            .sparse(true)
                            .build(),
                    )
                    .build(),
                IndexModel::builder()
                    .keys(doc! { "result.code": 1, "done_dt": -1, "id": -1, "jobtype": 1 })
                    .options(
                        IndexOptions::builder()
                            .name(ARCHIVED_INDEX.to_owned())
                            .partial_filter_expression(doc! { "result.code": { "$exists": true } })
                            .build(),
                    )
                    .build(),
            ])
            .await
            .map_err(|e| error::map("index creation on jobs", e))?;
        self.handlers
            .create_index(
                IndexModel::builder()
                    .keys(doc! { "jobtype": 1, "dt": -1, "seq": -1 })
                    .options(named("newest"))
                    .build(),
            )
            .await
            .map_err(|e| error::map("index creation on handlers", e))?;
        self.stats
            .create_indexes([
                IndexModel::builder()
                    .keys(doc! { "res": 1, "start": 1 })
                    .options(named(STATS_PRUNE_INDEX))
                    .build(),
                IndexModel::builder()
                    .keys(doc! { "res": 1, "jobtype": 1, "start": 1 })
                    .options(named(STATS_READ_INDEX))
                    .build(),
            ])
            .await
            .map_err(|e| error::map("index creation on stats", e))?;
        self.schedules
            .create_index(
                IndexModel::builder()
                    .keys(doc! { "paused": 1, "next_due": 1, "name": 1 })
                    .options(named(SCHEDULES_DUE_INDEX))
                    .build(),
            )
            .await
            .map_err(|e| error::map("index creation on schedules", e))?;
        // The unique-key indexes last, in a call of their own: MongoDB
        // refuses a unique index on a sharded collection unless the shard
        // key is a prefix of it, and that refusal must cost only unique
        // keys (never the connect of a store that does not use them).
        let created = self
            .call(
                "index creation on jobs (unique keys)",
                self.jobs.create_indexes([
                    IndexModel::builder()
                        .keys(doc! { "ukey": 1 })
                        .options(
                            IndexOptions::builder()
                                .name(UKEY_INDEX.to_owned())
                                .sparse(true)
                                .unique(true)
                                .build(),
                        )
                        .build(),
                    IndexModel::builder()
                        .keys(doc! { "ukey_done": 1, "done_dt": -1, "id": -1 })
                        .options(
                            IndexOptions::builder()
                                .name(UKEY_DONE_INDEX.to_owned())
                                .sparse(true)
                                .build(),
                        )
                        .build(),
                ]),
            )
            .await
            .map(drop);
        self.unique_jobs = offers_unique_jobs(created)?;
        Ok(())
    }

    /// Reads what the server offers: its version (`buildInfo`: `$unionWith`
    /// needs 4.4) and its topology (`hello`: change streams need a replica
    /// set member or a `mongos`).
    pub(crate) async fn probe_server(&mut self) -> Result<()> {
        let admin = self.client.database("admin");
        let info = self
            .call("buildInfo", admin.run_command(doc! { "buildInfo": 1 }))
            .await;
        self.union_with = offers_union_with(info)?;
        let hello = self
            .call("hello", admin.run_command(doc! { "hello": 1 }))
            .await?;
        self.change_streams = offers_change_streams(&hello);
        tracing::debug!(
            union_with = self.union_with,
            change_streams = self.change_streams,
            "MongoDB server probed"
        );
        Ok(())
    }

    /// Runs the hook, if any, after round trip `n` of `op`.
    pub(crate) async fn after_round_trip(&self, op: &'static str, n: usize) -> Result<()> {
        match &self.hook {
            Some(hook) => hook(op, n).await,
            None => Ok(()),
        }
    }

    /// Runs one round trip, `fut`, bounded by the store's timeout: a
    /// driver error is mapped by [`error::map`], and a round trip past
    /// the timeout is `Unavailable` (the driver has no socket timeout).
    pub(crate) async fn call<T>(
        &self,
        what: &str,
        fut: impl IntoFuture<Output = mongodb::error::Result<T>>,
    ) -> Result<T> {
        bounded(self.timeout, what, fut).await
    }

    /// [`call`](Self::call) for a read: the cursor-lost codes are
    /// `Unavailable` too, since a read can simply run again.
    pub(crate) async fn read<T>(
        &self,
        what: &str,
        fut: impl IntoFuture<Output = mongodb::error::Result<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(r) => r.map_err(|e| error::map_read(what, e)),
            Err(elapsed) => Err(timed_out(self.timeout, what, elapsed)),
        }
    }

    /// The write concern's `wtimeout` in milliseconds, for commands sent
    /// with `runCommand`.
    pub(crate) fn wtimeout_ms(&self) -> i64 {
        i64::try_from(self.wtimeout.as_millis()).unwrap_or(i64::MAX)
    }

    /// The longest one round trip may take.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// The read preference and concerns of every collection of the store,
/// whatever the URL asks for: each operation that reads back what it just
/// wrote (claims, renewals, releases, cancels) must read it on the node it
/// wrote to, and must be told exactly what the write matched.
///
/// - read preference `primary`: a secondary may not have the write yet;
/// - read concern `local`: on the primary, a read sees every write
///   acknowledged before it;
/// - write concern `majority` with `wtimeout` (journaled as the server's
///   `writeConcernMajorityJournalDefault` says): an acknowledged write
///   survives a failover, so what a call reported stays true, and an
///   unacknowledged `w: 0` can never make a call guess its outcome; a set
///   that cannot reach a majority answers after `wtimeout` with a
///   write-concern error instead of never.
fn pinned_collection_options(wtimeout: Duration) -> CollectionOptions {
    CollectionOptions::builder()
        .selection_criteria(SelectionCriteria::ReadPreference(ReadPreference::Primary))
        .read_concern(ReadConcern::local())
        .write_concern(majority(wtimeout))
        .build()
}

/// Write concern `majority` with this `wtimeout`.
fn majority(wtimeout: Duration) -> WriteConcern {
    let mut wc = WriteConcern::majority();
    wc.w_timeout = Some(wtimeout);
    wc
}

/// `fut` bounded by `timeout`, its error mapped as from operation `what`.
pub(crate) async fn bounded<T>(
    timeout: Duration,
    what: &str,
    fut: impl IntoFuture<Output = mongodb::error::Result<T>>,
) -> Result<T> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r.map_err(|e| error::map(what, e)),
        Err(elapsed) => Err(timed_out(timeout, what, elapsed)),
    }
}

/// The error of a round trip past `timeout`.
fn timed_out(timeout: Duration, what: &str, elapsed: tokio::time::error::Elapsed) -> Error {
    Error::unavailable(
        format!(
            "MongoDB {what} failed: no answer within {} ms ({TIMEOUT_PARAM})",
            timeout.as_millis()
        ),
        elapsed,
    )
}

/// Whether a server whose `buildInfo` answered `info` runs `$unionWith`
/// (4.4 or later). A service that refuses `buildInfo` gets the fallback
/// that works everywhere; only an unreachable server fails the connect.
fn offers_union_with(info: Result<Document>) -> Result<bool> {
    match info {
        Ok(info) => Ok(version_at_least(&info, &[4, 4])),
        Err(e) if e.is_retryable() => Err(e),
        Err(e) => {
            tracing::warn!(error = %e, "MongoDB buildInfo refused; counting waiting jobs without $unionWith");
            Ok(false)
        }
    }
}

/// Whether the store offers unique keys, given how the creation of the
/// `ukey` and `ukey_done` indexes went. A transient failure (no server,
/// no answer within the timeout, a failover) fails the connect as any
/// other index creation does; any other refusal (a `jobs` collection
/// sharded on a key that is not a prefix of `{ukey: 1}`:
/// `CannotCreateIndex`; an index of that name with other options; live
/// documents sharing a `ukey`) leaves the store usable without unique
/// keys: a keyed add answers `Unsupported`.
fn offers_unique_jobs(created: Result<()>) -> Result<bool> {
    match created {
        Ok(()) => Ok(true),
        Err(e) if e.is_retryable() => Err(e),
        Err(e) => {
            tracing::warn!(
                error = %e,
                "MongoDB refused the unique-key index on jobs (a jobs collection sharded on \
                 {{_id: \"hashed\"}}?); unique keys are off: keyed adds answer Unsupported"
            );
            Ok(false)
        }
    }
}

/// Whether a server whose `hello` answered `hello` has change streams: a
/// replica set member (it names its set) or a `mongos` (`msg: isdbgrid`).
fn offers_change_streams(hello: &Document) -> bool {
    hello.get_str("setName").is_ok() || hello.get_str("msg").is_ok_and(|m| m == "isdbgrid")
}

/// Whether a `buildInfo` reply's `versionArray` (else `version`) is at
/// least `min`; a reply with neither counts as older.
fn version_at_least(info: &Document, min: &[i64]) -> bool {
    use mongodb::bson::Bson;
    let parts: Vec<i64> = match info.get("versionArray") {
        Some(Bson::Array(a)) => a
            .iter()
            .map_while(|v| match v {
                Bson::Int32(n) => Some(i64::from(*n)),
                Bson::Int64(n) => Some(*n),
                Bson::Double(d) if d.fract() == 0.0 => Some(*d as i64),
                _ => None,
            })
            .collect(),
        _ => match info.get_str("version") {
            Ok(v) => v
                .split(['.', '-'])
                .map_while(|p| p.parse::<i64>().ok())
                .collect(),
            Err(_) => Vec::new(),
        },
    };
    !parts.is_empty() && parts.as_slice() >= min
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::DEFAULT_WTIMEOUT;

    #[test]
    fn union_with_needs_4_4_and_a_refused_build_info_falls_back() {
        let info = |v: &str| Ok(doc! { "version": v });
        assert!(offers_union_with(info("4.4.0")).unwrap());
        assert!(offers_union_with(info("7.0.2")).unwrap());
        assert!(!offers_union_with(info("4.2.24")).unwrap());
        let refused = Error::backend_msg("command buildInfo requires authentication");
        assert!(!offers_union_with(Err(refused)).unwrap());
        let down = Error::unavailable("no server", std::io::Error::other("refused"));
        let err = offers_union_with(Err(down)).unwrap_err();
        assert_eq!(err.kind(), jobstore_api::ErrorKind::Unavailable);
    }

    /// Review finding (sharded `jobs`): a refused unique-key index turns
    /// unique keys off instead of failing the connect; a transient failure
    /// still fails it.
    #[test]
    fn a_refused_unique_key_index_turns_unique_keys_off() {
        use mongodb::error::{CommandError, Error as MongoError, ErrorKind as K};
        let command = |code: i32, name: &str| {
            let e: CommandError = mongodb::bson::from_document(doc! {
                "code": code, "codeName": name, "errmsg": "refused",
            })
            .unwrap();
            error::map("index creation", MongoError::from(K::Command(e)))
        };
        assert!(offers_unique_jobs(Ok(())).unwrap());
        // What a `jobs` sharded on `{_id: "hashed"}` answers, an index of
        // that name with other options, live duplicates of one key, a
        // missing privilege: the store connects without unique keys.
        for (code, name) in [
            (67, "CannotCreateIndex"),
            (85, "IndexOptionsConflict"),
            (86, "IndexKeySpecsConflict"),
            (11000, "DuplicateKey"),
            (13, "Unauthorized"),
            (20, "IllegalOperation"),
        ] {
            assert!(
                !offers_unique_jobs(Err(command(code, name))).unwrap(),
                "{name}"
            );
        }
        assert!(!offers_unique_jobs(Err(Error::backend_msg("no code"))).unwrap());
        // A failover, a lost connection, no answer within the timeout: the
        // connect fails as it did.
        for (code, name) in [
            (189, "PrimarySteppedDown"),
            (10107, "NotWritablePrimary"),
            (91, "ShutdownInProgress"),
            (89, "NetworkTimeout"),
        ] {
            let err = offers_unique_jobs(Err(command(code, name))).unwrap_err();
            assert_eq!(err.kind(), jobstore_api::ErrorKind::Unavailable, "{name}");
        }
        let io = MongoError::from(K::Io(Arc::new(std::io::Error::other("reset"))));
        let err = offers_unique_jobs(Err(error::map("index creation", io))).unwrap_err();
        assert_eq!(err.kind(), jobstore_api::ErrorKind::Unavailable);
    }

    #[tokio::test]
    async fn a_unique_key_index_creation_past_the_timeout_fails_the_connect() {
        let never = std::future::pending::<mongodb::error::Result<()>>();
        let created = bounded(Duration::from_millis(10), "index creation", never).await;
        let err = offers_unique_jobs(created).unwrap_err();
        assert_eq!(err.kind(), jobstore_api::ErrorKind::Unavailable);
    }

    #[test]
    fn change_streams_need_a_replica_set_or_a_mongos() {
        assert!(offers_change_streams(
            &doc! { "isWritablePrimary": true, "setName": "rs0" }
        ));
        assert!(offers_change_streams(
            &doc! { "isWritablePrimary": true, "msg": "isdbgrid" }
        ));
        assert!(!offers_change_streams(&doc! { "isWritablePrimary": true }));
        assert!(!offers_change_streams(
            &doc! { "isWritablePrimary": true, "msg": "other" }
        ));
    }

    #[test]
    fn server_versions_are_compared() {
        assert!(version_at_least(
            &doc! { "versionArray": [7, 0, 2, 0] },
            &[4, 4]
        ));
        assert!(version_at_least(
            &doc! { "versionArray": [4, 4, 0, 0] },
            &[4, 4]
        ));
        assert!(!version_at_least(
            &doc! { "versionArray": [4, 2, 24, 0] },
            &[4, 4]
        ));
        assert!(version_at_least(&doc! { "version": "5.0.3-rc1" }, &[4, 4]));
        assert!(!version_at_least(&doc! { "version": "3.6.0" }, &[4, 4]));
        assert!(!version_at_least(&doc! { "ok": 1 }, &[4, 4]));
        // Drivers and proxies may send the parts as 64-bit integers or
        // doubles; a part that is not a whole number ends the version.
        assert!(version_at_least(
            &doc! { "versionArray": [4_i64, 4_i64, 1_i64, 0_i64] },
            &[4, 4]
        ));
        assert!(version_at_least(
            &doc! { "versionArray": [4.0, 4.0, 0.0, 0.0] },
            &[4, 4]
        ));
        assert!(!version_at_least(
            &doc! { "versionArray": [4.0, 4.5, 0.0, 0.0] },
            &[4, 4]
        ));
    }

    /// Review finding 1: the URL's read preference and concerns never
    /// reach the store's collections.
    #[tokio::test]
    async fn collections_pin_read_preference_and_concerns() {
        let url = "mongodb://127.0.0.1:1/db?replicaSet=rs&readPreference=secondaryPreferred\
                   &readConcernLevel=available&w=0&wtimeoutMS=5&jobstore_prefix=p_";
        let store = MongoStore::open(url, MongoOptions::default(), None)
            .await
            .unwrap();
        assert_eq!(store.prefix(), "p_");
        for coll in [
            &store.jobs,
            &store.handlers,
            &store.sysids,
            &store.counters,
            &store.paused,
            &store.stats,
        ] {
            assert!(
                matches!(
                    coll.selection_criteria(),
                    Some(SelectionCriteria::ReadPreference(ReadPreference::Primary))
                ),
                "{}: {:?}",
                coll.name(),
                coll.selection_criteria()
            );
            assert_eq!(
                coll.read_concern(),
                Some(&ReadConcern::local()),
                "{}",
                coll.name()
            );
            assert_eq!(
                coll.write_concern(),
                Some(&majority(DEFAULT_WTIMEOUT)),
                "{}",
                coll.name()
            );
            assert_eq!(
                coll.write_concern().and_then(|w| w.w_timeout),
                Some(DEFAULT_WTIMEOUT),
                "a write never waits for a majority forever"
            );
        }
        // The URL's options did reach the client (so the pin is what wins).
        let client = store.client();
        assert!(client.selection_criteria().is_some());
        assert_eq!(
            client.write_concern().and_then(|w| w.w.clone()),
            Some(mongodb::options::Acknowledgment::Nodes(0))
        );
    }

    #[tokio::test]
    async fn bad_urls_are_invalid_input() {
        for url in [
            "postgres://h/db",
            "mongodb://h/db?jobstore_prefix=a%24",
            "mongodb://h/a.b",
        ] {
            let err = MongoStore::connect(url).await.unwrap_err();
            assert_eq!(err.kind(), jobstore_api::ErrorKind::InvalidInput, "{url}");
        }
    }
}
