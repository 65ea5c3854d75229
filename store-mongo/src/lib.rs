#![doc = include_str!("../README.md")]

mod convert;
mod error;
mod store;

use std::fmt;
use std::future::IntoFuture;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use jobstore_api::{Error, Result};
use mongodb::bson::{Document, doc};
use mongodb::event::EventHandler;
use mongodb::event::command::CommandEvent;
use mongodb::options::{
    ClientOptions, CollectionOptions, IndexOptions, ReadConcern, ReadPreference, SelectionCriteria,
    WriteConcern,
};
use mongodb::{Client, Collection, Database, IndexModel};

/// The URL parameter that sets the collection prefix (removed before the
/// URL reaches the driver).
pub const PREFIX_PARAM: &str = "jobstore_prefix";

/// The URL parameter that sets the write-concern timeout in milliseconds.
pub const WTIMEOUT_PARAM: &str = "jobstore_wtimeout_ms";

/// The URL parameter that sets the per-round-trip timeout in milliseconds.
pub const TIMEOUT_PARAM: &str = "jobstore_timeout_ms";

/// The URL parameter that lowers the largest payload accepted, in bytes.
pub const MAX_PAYLOAD_PARAM: &str = "jobstore_max_payload";

/// How long a write waits for a majority to acknowledge it, by default.
pub const DEFAULT_WTIMEOUT: Duration = Duration::from_secs(10);

/// The longest one round trip may take, by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The name of the claim index.
pub(crate) const CLAIM_INDEX: &str = "claim";

/// The name of the purge index.
pub(crate) const PURGE_INDEX: &str = "purge";

/// The name of the index of archived jobs' result codes.
pub(crate) const CODES_INDEX: &str = "codes";

/// The database used when neither the URL path nor [`MongoOptions`] names one.
pub const DEFAULT_DATABASE: &str = "jobstore";

/// Where a [`MongoStore`] keeps its collections, set in code; each field
/// overrides the URL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MongoOptions {
    /// The database (default: the URL's path, else [`DEFAULT_DATABASE`]).
    pub database: Option<String>,
    /// A prefix for the collection names (default: the URL's
    /// `jobstore_prefix` parameter, else none).
    pub prefix: Option<String>,
}

impl MongoOptions {
    /// Uses this database.
    pub fn database(mut self, database: impl Into<String>) -> Self {
        self.database = Some(database.into());
        self
    }

    /// Prefixes every collection name with `prefix`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }
}

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
    client: Client,
    db: Database,
    prefix: String,
    jobs: Collection<Document>,
    handlers: Collection<Document>,
    sysids: Collection<Document>,
    counters: Collection<Document>,
    hook: Option<RoundTripHook>,
    /// The write concern's `wtimeout`.
    wtimeout: Duration,
    /// The longest one round trip may take.
    timeout: Duration,
    /// The largest payload accepted.
    max_payload: usize,
    /// Whether the server runs `$unionWith` (4.4 and later).
    union_with: bool,
    /// Whether the server offers change streams (a replica set member or
    /// a `mongos`).
    change_streams: bool,
    /// How many job documents that could not be read were skipped.
    skipped: Arc<AtomicU64>,
    /// How many archived jobs one purge round trip deletes.
    purge_batch: usize,
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

    /// The store for `url` and `options`, without contacting the server
    /// (a `mongodb+srv://` URL is resolved through DNS, though).
    async fn open(
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
            change_streams: false,
            skipped: Arc::default(),
            purge_batch: store::PURGE_BATCH,
        };
        Ok(store)
    }

    async fn create_indexes(&self) -> Result<()> {
        let named = |name: &str| IndexOptions::builder().name(name.to_owned()).build();
        self.jobs
            .create_indexes([
                IndexModel::builder()
                    .keys(doc! { "jobtype": 1, "priority": -1, "dt": 1, "id": 1, "lock": 1 })
                    .options(named(CLAIM_INDEX))
                    .build(),
                IndexModel::builder()
                    .keys(doc! { "done_dt": 1 })
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
        Ok(())
    }

    /// Reads what the server offers: its version (`buildInfo`: `$unionWith`
    /// needs 4.4) and its topology (`hello`: change streams need a replica
    /// set member or a `mongos`).
    async fn probe_server(&mut self) -> Result<()> {
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

    /// Drops the store's four collections, and with them every job,
    /// handler and sysid of this namespace. Other collections of the
    /// database are left alone.
    pub async fn drop_collections(&self) -> Result<()> {
        for coll in [&self.jobs, &self.handlers, &self.sysids, &self.counters] {
            coll.drop()
                .await
                .map_err(|e| error::map("drop collection", e))?;
        }
        Ok(())
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

/// This store's own URL parameters, and the URL left for the driver.
#[derive(Debug, Clone, PartialEq)]
struct OwnParams {
    driver_url: String,
    prefix: Option<String>,
    wtimeout: Duration,
    timeout: Duration,
    max_payload: Option<usize>,
}

/// A positive integer URL parameter.
fn positive(key: &str, value: &str) -> Result<u64> {
    match value.parse::<u64>() {
        Ok(v) if v > 0 => Ok(v),
        _ => Err(Error::invalid(format!(
            "URL parameter {key} must be a positive integer, not {value:?}"
        ))),
    }
}

/// Splits this store's own parameters off `url` (see [`OwnParams`]).
fn split_own_params(url: &str) -> Result<OwnParams> {
    let mut own = OwnParams {
        driver_url: url.to_owned(),
        prefix: None,
        wtimeout: DEFAULT_WTIMEOUT,
        timeout: DEFAULT_TIMEOUT,
        max_payload: None,
    };
    let Some((base, query)) = url.split_once('?') else {
        return Ok(own);
    };
    let mut kept = Vec::new();
    for param in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = param.split_once('=').unwrap_or((param, ""));
        if key.eq_ignore_ascii_case(PREFIX_PARAM) {
            own.prefix = Some(value.to_owned());
        } else if key.eq_ignore_ascii_case(WTIMEOUT_PARAM) {
            own.wtimeout = Duration::from_millis(positive(key, value)?);
        } else if key.eq_ignore_ascii_case(TIMEOUT_PARAM) {
            own.timeout = Duration::from_millis(positive(key, value)?);
        } else if key.eq_ignore_ascii_case(MAX_PAYLOAD_PARAM) {
            let v = usize::try_from(positive(key, value)?).unwrap_or(usize::MAX);
            let min = jobstore_api::limits::MIN_PAYLOAD_SUPPORT;
            if !(min..=store::MAX_PAYLOAD).contains(&v) {
                return Err(Error::invalid(format!(
                    "URL parameter {key} must be between {min} and {} bytes, not {v}",
                    store::MAX_PAYLOAD
                )));
            }
            own.max_payload = Some(v);
        } else {
            kept.push(param);
        }
    }
    own.driver_url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok(own)
}

/// A database name MongoDB accepts: 1..=63 bytes, none of `/\. "$*<>:|?`
/// or NUL.
fn check_database_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > 63
        || name
            .chars()
            .any(|c| "/\\. \"$*<>:|?\0".contains(c) || c.is_control())
    {
        return Err(Error::invalid(format!(
            "MongoDB database name {name:?} must be 1..=63 bytes without / \\ . space \" $ * < > : | ? or control characters"
        )));
    }
    Ok(())
}

/// A collection prefix: up to 64 bytes of `[A-Za-z0-9_.-]`.
fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.len() > 64
        || !prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
    {
        return Err(Error::invalid(format!(
            "collection prefix {prefix:?} must be at most 64 bytes of A-Z a-z 0-9 _ . -"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn own_params_are_stripped() {
        let split = |u: &str| {
            let own = split_own_params(u).unwrap();
            (own.driver_url, own.prefix)
        };
        assert_eq!(split("mongodb://h:1/db"), ("mongodb://h:1/db".into(), None));
        assert_eq!(
            split("mongodb://h:1/db?jobstore_prefix=q1_"),
            ("mongodb://h:1/db".into(), Some("q1_".into()))
        );
        assert_eq!(
            split("mongodb://u:p@h1,h2/db?replicaSet=rs&JOBSTORE_PREFIX=x.&tls=true"),
            (
                "mongodb://u:p@h1,h2/db?replicaSet=rs&tls=true".into(),
                Some("x.".into())
            )
        );
        assert_eq!(
            split("mongodb://h/?authSource=admin"),
            ("mongodb://h/?authSource=admin".into(), None)
        );
    }

    #[test]
    fn timeouts_come_from_the_url_with_defaults() {
        let own = split_own_params("mongodb://h/db").unwrap();
        assert_eq!(
            (own.wtimeout, own.timeout),
            (DEFAULT_WTIMEOUT, DEFAULT_TIMEOUT)
        );
        let own = split_own_params(
            "mongodb://h/db?jobstore_wtimeout_ms=250&w=1&jobstore_timeout_ms=900&jobstore_max_payload=2000000",
        )
        .unwrap();
        assert_eq!(own.driver_url, "mongodb://h/db?w=1");
        assert_eq!(own.wtimeout, Duration::from_millis(250));
        assert_eq!(own.timeout, Duration::from_millis(900));
        assert_eq!(own.max_payload, Some(2_000_000));
        for bad in [
            "mongodb://h/?jobstore_timeout_ms=0",
            "mongodb://h/?jobstore_wtimeout_ms=-1",
            "mongodb://h/?jobstore_max_payload=x",
            "mongodb://h/?jobstore_max_payload=1000",
            "mongodb://h/?jobstore_max_payload=99999999",
        ] {
            let e = split_own_params(bad).unwrap_err();
            assert_eq!(e.kind(), jobstore_api::ErrorKind::InvalidInput, "{bad}");
        }
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

    #[test]
    fn names_are_checked() {
        assert!(check_database_name("jst_0123456789abcdef").is_ok());
        for bad in ["", "a.b", "a/b", "a b", "a$", &"d".repeat(64)] {
            assert!(check_database_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_prefix("").is_ok());
        assert!(check_prefix("app1.q_").is_ok());
        assert!(check_prefix("a$").is_err());
        assert!(check_prefix(&"p".repeat(65)).is_err());
        // The longest names allowed.
        assert!(check_database_name(&"d".repeat(63)).is_ok());
        assert!(check_prefix(&"p".repeat(64)).is_ok());
    }

    #[test]
    fn option_setters_set_their_fields() {
        let o = MongoOptions::default().database("db1").prefix("p_");
        assert_eq!(o.database.as_deref(), Some("db1"));
        assert_eq!(o.prefix.as_deref(), Some("p_"));
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
        for coll in [&store.jobs, &store.handlers, &store.sysids, &store.counters] {
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
