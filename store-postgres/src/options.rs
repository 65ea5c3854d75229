//! [`PgStoreOptions`]: where and how a [`PgStore`](crate::PgStore) connects.

use std::fmt;
use std::time::Duration;

use jobstore_api::{Error, Result};

/// The schema used when neither the URL nor the options name one.
pub const DEFAULT_SCHEMA: &str = "jobstore";
/// Longest schema name accepted (the notification channel adds a prefix and
/// must stay within PostgreSQL's 63-byte identifier limit).
pub const MAX_SCHEMA_LEN: usize = 50;

/// How a [`PgStore`](crate::PgStore) connects: the server URL, the schema
/// that is the store's namespace, and pool settings.
///
/// Build it with [`PgStoreOptions::from_url`] (which reads the store's own
/// URL query parameters, see the crate docs) and adjust it with the
/// builder methods. `Debug` hides the password.
#[derive(Clone)]
pub struct PgStoreOptions {
    url: String,
    schema: String,
    max_connections: u32,
    acquire_timeout: Duration,
    statement_timeout: Option<Duration>,
    poll_interval: Duration,
    purge_batch: u32,
    vacuum_every: u64,
}

impl fmt::Debug for PgStoreOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStoreOptions")
            .field("url", &redact(&self.url))
            .field("schema", &self.schema)
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("statement_timeout", &self.statement_timeout)
            .field("poll_interval", &self.poll_interval)
            .field("purge_batch", &self.purge_batch)
            .field("vacuum_every", &self.vacuum_every)
            .finish()
    }
}

/// The URL with any password replaced.
fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        Ok(u) => u.to_string(),
        Err(_) => "<unparsable url>".to_owned(),
    }
}

impl PgStoreOptions {
    /// Default pool size.
    pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;
    /// Default time to wait for a pooled connection (or a new one).
    pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);
    /// Default server-side statement timeout.
    pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);
    /// Default number of archived jobs one purge statement deletes.
    pub const DEFAULT_PURGE_BATCH: u32 = 10_000;
    /// Default number of jobs a store claims between two vacuums of the
    /// job table.
    pub const DEFAULT_VACUUM_EVERY: u64 = 20_000;

    /// Options from a `postgres://` (or `postgresql://`) URL. The store's
    /// own query parameters are removed before the rest goes to sqlx:
    /// `schema`, `max_connections`, `acquire_timeout_ms`,
    /// `statement_timeout_ms` (0 disables it), `poll_interval_ms`,
    /// `purge_batch` and `vacuum_every` (0 disables it).
    pub fn from_url(url: &str) -> Result<Self> {
        let mut parsed = url::Url::parse(url)
            .map_err(|e| Error::invalid(format!("invalid PostgreSQL URL: {e}")))?;
        if !matches!(parsed.scheme(), "postgres" | "postgresql") {
            return Err(Error::invalid(format!(
                "URL scheme {:?} is not postgres:// or postgresql://",
                parsed.scheme()
            )));
        }
        let mut opts = PgStoreOptions {
            url: String::new(),
            schema: DEFAULT_SCHEMA.to_owned(),
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
            acquire_timeout: Self::DEFAULT_ACQUIRE_TIMEOUT,
            statement_timeout: Some(Self::DEFAULT_STATEMENT_TIMEOUT),
            poll_interval: jobstore_api::limits::DEFAULT_POLL_INTERVAL,
            purge_batch: Self::DEFAULT_PURGE_BATCH,
            vacuum_every: Self::DEFAULT_VACUUM_EVERY,
        };
        let mut rest: Vec<(String, String)> = Vec::new();
        for (k, v) in parsed.query_pairs() {
            match &*k {
                "schema" => opts = opts.schema(v.to_string()),
                "max_connections" => opts.max_connections = number(&k, &v)?.max(1) as u32,
                "acquire_timeout_ms" => {
                    opts.acquire_timeout = Duration::from_millis(number(&k, &v)?.max(1))
                }
                "statement_timeout_ms" => {
                    let ms = number(&k, &v)?;
                    opts.statement_timeout = (ms > 0).then(|| Duration::from_millis(ms));
                }
                "poll_interval_ms" => {
                    opts.poll_interval = Duration::from_millis(number(&k, &v)?.max(1))
                }
                "purge_batch" => {
                    opts = opts.purge_batch(u32::try_from(number(&k, &v)?).unwrap_or(u32::MAX))
                }
                "vacuum_every" => opts = opts.vacuum_every(number(&k, &v)?),
                _ => rest.push((k.into_owned(), v.into_owned())),
            }
        }
        if rest.is_empty() {
            parsed.set_query(None);
        } else {
            parsed.query_pairs_mut().clear().extend_pairs(rest);
        }
        opts.url = parsed.to_string();
        Ok(opts)
    }

    /// Sets the schema (the store's namespace): 1..=50 bytes of `a-z`,
    /// `0-9` and `_`, not starting with a digit or `pg_`. Checked on
    /// connect.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// Sets the pool size (at least 1). Each [`watch`](jobstore_api::JobStore::watch)
    /// opens one more connection of its own.
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// Sets how long an operation waits for a connection before failing
    /// with a retryable `Unavailable` error.
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }

    /// Sets the server-side `statement_timeout` of the store's connections
    /// (`None`: no limit). A statement cut off by it is `Unavailable`.
    pub fn statement_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.statement_timeout = timeout;
        self
    }

    /// Sets the longest a [`WorkWatcher`](jobstore_api::WorkWatcher) waits
    /// without a notice (jobs that become due by time alone are found then).
    pub fn poll_interval(mut self, poll: Duration) -> Self {
        self.poll_interval = poll;
        self
    }

    /// Sets how many archived jobs one statement of
    /// [`purge_archived`](jobstore_api::JobStore::purge_archived) deletes
    /// (at least 1): a purge deletes in statements of this many, each its
    /// own transaction, so a large purge neither holds one long
    /// transaction nor runs into the statement timeout.
    pub fn purge_batch(mut self, n: u32) -> Self {
        self.purge_batch = n.max(1);
        self
    }

    /// Sets how many jobs the store claims between two vacuums of its job
    /// table (0: never; autovacuum alone then). Every claimed job leaves a
    /// dead entry at the front of the claim index, which every later claim
    /// steps over until a vacuum removes it; autovacuum visits a database
    /// at most once per `autovacuum_naptime` (a minute by default), by which
    /// time a busy queue has left hundreds of thousands. After this many
    /// claims the store runs `VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON,
    /// TRUNCATE false) jobs` in the background on a connection of its own
    /// (one at a time; skipped while another store's vacuum holds the
    /// table). Needs ownership of the table; without it PostgreSQL skips
    /// the vacuum with a warning.
    pub fn vacuum_every(mut self, claims: u64) -> Self {
        self.vacuum_every = claims;
        self
    }

    /// The URL handed to sqlx (the store's own parameters removed).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The schema name.
    pub fn schema_name(&self) -> &str {
        &self.schema
    }

    /// The pool size.
    pub fn get_max_connections(&self) -> u32 {
        self.max_connections
    }

    /// The acquire timeout.
    pub fn get_acquire_timeout(&self) -> Duration {
        self.acquire_timeout
    }

    /// The statement timeout.
    pub fn get_statement_timeout(&self) -> Option<Duration> {
        self.statement_timeout
    }

    /// The watcher's poll interval.
    pub fn get_poll_interval(&self) -> Duration {
        self.poll_interval
    }

    /// The purge's batch size.
    pub fn get_purge_batch(&self) -> u32 {
        self.purge_batch
    }

    /// Claims between two vacuums (0: never).
    pub fn get_vacuum_every(&self) -> u64 {
        self.vacuum_every
    }

    /// Checks the schema name.
    pub(crate) fn check_schema(&self) -> Result<()> {
        let s = &self.schema;
        let ok = !s.is_empty()
            && s.len() <= MAX_SCHEMA_LEN
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            && !s.as_bytes()[0].is_ascii_digit()
            && !s.starts_with("pg_");
        if ok {
            Ok(())
        } else {
            Err(Error::invalid(format!(
                "schema {s:?} must be 1..={MAX_SCHEMA_LEN} bytes of a-z 0-9 _, \
                 not starting with a digit or \"pg_\""
            )))
        }
    }
}

fn number(key: &str, value: &str) -> Result<u64> {
    value
        .parse()
        .map_err(|_| Error::invalid(format!("URL parameter {key}={value:?} is not a number")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_parameters_are_stripped() {
        let o = PgStoreOptions::from_url(
            "postgres://u:secret@h:5433/db?schema=jobs&sslmode=disable&max_connections=4\
             &acquire_timeout_ms=1500&statement_timeout_ms=0&poll_interval_ms=250&purge_batch=500\
             &vacuum_every=0",
        )
        .unwrap();
        assert_eq!(o.url(), "postgres://u:secret@h:5433/db?sslmode=disable");
        assert_eq!(o.schema_name(), "jobs");
        assert_eq!(o.get_max_connections(), 4);
        assert_eq!(o.get_acquire_timeout(), Duration::from_millis(1500));
        assert_eq!(o.get_statement_timeout(), None);
        assert_eq!(o.get_poll_interval(), Duration::from_millis(250));
        assert_eq!(o.get_purge_batch(), 500);
        assert_eq!(o.get_vacuum_every(), 0);
        assert!(!format!("{o:?}").contains("secret"));
    }

    #[test]
    fn defaults() {
        let o = PgStoreOptions::from_url("postgres://h/db").unwrap();
        assert_eq!(o.url(), "postgres://h/db");
        assert_eq!(o.schema_name(), DEFAULT_SCHEMA);
        assert_eq!(
            o.get_statement_timeout(),
            Some(PgStoreOptions::DEFAULT_STATEMENT_TIMEOUT)
        );
        assert_eq!(o.get_purge_batch(), PgStoreOptions::DEFAULT_PURGE_BATCH);
        assert_eq!(o.get_vacuum_every(), PgStoreOptions::DEFAULT_VACUUM_EVERY);
        assert_eq!(
            PgStoreOptions::from_url("postgres://h/db?purge_batch=0")
                .unwrap()
                .get_purge_batch(),
            1
        );
    }

    #[test]
    fn bad_input() {
        assert!(PgStoreOptions::from_url("mysql://h/db").is_err());
        assert!(PgStoreOptions::from_url("postgres://h/db?max_connections=x").is_err());
        assert!(PgStoreOptions::from_url("postgres://h/db?vacuum_every=-1").is_err());
        for bad in ["", "Jobs", "1abc", "pg_x", "a-b", "a\"b", &"s".repeat(51)] {
            let o = PgStoreOptions::from_url("postgres://h/db")
                .unwrap()
                .schema(bad);
            assert!(o.check_schema().is_err(), "{bad:?}");
        }
        let o = PgStoreOptions::from_url("postgres://h/db?schema=ok_1").unwrap();
        assert!(o.check_schema().is_ok());
    }
}
