#![doc = include_str!("../README.md")]

mod convert;
mod errors;
mod store;

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use jobstore_api::{Error, Result};
use mongodb::bson::{Document, doc};
use mongodb::options::{
    ClientOptions, CollectionOptions, IndexOptions, ReadConcern, ReadPreference, SelectionCriteria,
    WriteConcern,
};
use mongodb::{Client, Collection, Database, IndexModel};

/// The URL parameter that sets the collection prefix (removed before the
/// URL reaches the driver).
pub const PREFIX_PARAM: &str = "jobstore_prefix";

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
        let store = Self::open(url, options).await?;
        store.create_indexes().await?;
        Ok(store)
    }

    /// The store for `url` and `options`, without contacting the server
    /// (a `mongodb+srv://` URL is resolved through DNS, though).
    async fn open(url: &str, options: MongoOptions) -> Result<Self> {
        let (driver_url, url_prefix) = split_own_params(url)?;
        let mut client_options =
            ClientOptions::parse(&driver_url)
                .await
                .map_err(|e| match &*e.kind {
                    mongodb::error::ErrorKind::InvalidArgument { .. } => {
                        Error::invalid(format!("invalid MongoDB URL: {e}"))
                    }
                    _ => errors::map("URL resolution", e),
                })?;
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
                pinned_collection_options(),
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
        };
        Ok(store)
    }

    async fn create_indexes(&self) -> Result<()> {
        let named = |name: &str| IndexOptions::builder().name(name.to_owned()).build();
        self.jobs
            .create_indexes([
                IndexModel::builder()
                    .keys(doc! { "jobtype": 1, "priority": -1, "dt": 1, "id": 1, "lock": 1 })
                    .options(named("claim"))
                    .build(),
                IndexModel::builder()
                    .keys(doc! { "done_dt": 1 })
                    .options(
                        IndexOptions::builder()
                            .name("purge".to_owned())
                            .sparse(true)
                            .build(),
                    )
                    .build(),
            ])
            .await
            .map_err(|e| errors::map("index creation on jobs", e))?;
        self.handlers
            .create_index(
                IndexModel::builder()
                    .keys(doc! { "jobtype": 1, "dt": -1, "seq": -1 })
                    .options(named("newest"))
                    .build(),
            )
            .await
            .map_err(|e| errors::map("index creation on handlers", e))?;
        Ok(())
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
                .map_err(|e| errors::map("drop collection", e))?;
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
/// - write concern `majority` (no time limit; journaled as the server's
///   `writeConcernMajorityJournalDefault` says): an acknowledged write
///   survives a failover, so what a call reported stays true, and an
///   unacknowledged `w: 0` can never make a call guess its outcome.
fn pinned_collection_options() -> CollectionOptions {
    CollectionOptions::builder()
        .selection_criteria(SelectionCriteria::ReadPreference(ReadPreference::Primary))
        .read_concern(ReadConcern::local())
        .write_concern(WriteConcern::majority())
        .build()
}

/// Splits this store's own parameters off `url`: the URL for the driver,
/// and the `jobstore_prefix` value, if any.
fn split_own_params(url: &str) -> Result<(String, Option<String>)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), None));
    };
    let mut prefix = None;
    let mut kept = Vec::new();
    for param in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = param.split_once('=').unwrap_or((param, ""));
        if key.eq_ignore_ascii_case(PREFIX_PARAM) {
            prefix = Some(value.to_owned());
        } else {
            kept.push(param);
        }
    }
    let driver_url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((driver_url, prefix))
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
    fn own_params_are_stripped() {
        let split = |u: &str| split_own_params(u).unwrap();
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
    fn names_are_checked() {
        assert!(check_database_name("jst_0123456789abcdef").is_ok());
        for bad in ["", "a.b", "a/b", "a b", "a$", &"d".repeat(64)] {
            assert!(check_database_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_prefix("").is_ok());
        assert!(check_prefix("app1.q_").is_ok());
        assert!(check_prefix("a$").is_err());
        assert!(check_prefix(&"p".repeat(65)).is_err());
    }

    /// Review finding 1: the URL's read preference and concerns never
    /// reach the store's collections.
    #[tokio::test]
    async fn collections_pin_read_preference_and_concerns() {
        let url = "mongodb://127.0.0.1:1/db?replicaSet=rs&readPreference=secondaryPreferred\
                   &readConcernLevel=available&w=0&wtimeoutMS=5&jobstore_prefix=p_";
        let store = MongoStore::open(url, MongoOptions::default())
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
                Some(&WriteConcern::majority()),
                "{}",
                coll.name()
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
