//! [`SqliteOptions`]: where the database is and how to open it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use jobstore_api::{Error, Result};

/// Where a store keeps its database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A database file, created if missing.
    File(PathBuf),
    /// A new in-memory database, private to one [`SqliteStore`](crate::SqliteStore)
    /// and its clones; gone when the last of them is dropped.
    Memory,
}

/// How durable a commit is; see the crate docs ("Durability").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous = FULL`: every commit is fsynced before it returns; it
    /// survives power loss. The default.
    #[default]
    Full,
    /// `synchronous = NORMAL`: commits survive a crash of the process, but
    /// the last ones before a power loss or OS crash may be lost.
    Normal,
}

/// Options for [`SqliteStore::connect_with`](crate::SqliteStore::connect_with).
/// [`SqliteOptions::parse`] reads them from a URL.
#[derive(Clone, PartialEq, Eq)]
pub struct SqliteOptions {
    pub(crate) location: Location,
    pub(crate) durability: Durability,
    pub(crate) busy_timeout: Duration,
    pub(crate) max_connections: u32,
    pub(crate) purge_batch: u32,
}

impl fmt::Debug for SqliteOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteOptions")
            .field("location", &self.location)
            .field("durability", &self.durability)
            .field("busy_timeout", &self.busy_timeout)
            .field("max_connections", &self.max_connections)
            .field("purge_batch", &self.purge_batch)
            .finish()
    }
}

impl SqliteOptions {
    /// The default busy timeout: 10 s.
    pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(10);
    /// The longest busy timeout accepted: 1 hour.
    pub const MAX_BUSY_TIMEOUT: Duration = Duration::from_secs(3600);
    /// The default size of the read pool.
    pub const DEFAULT_MAX_CONNECTIONS: u32 = 4;
    /// The default number of archived jobs one purge statement deletes.
    pub const DEFAULT_PURGE_BATCH: u32 = 10_000;

    fn at(location: Location) -> Self {
        SqliteOptions {
            location,
            durability: Durability::default(),
            busy_timeout: Self::DEFAULT_BUSY_TIMEOUT,
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
            purge_batch: Self::DEFAULT_PURGE_BATCH,
        }
    }

    /// A database file at `path` (created if missing), with the defaults.
    pub fn file(path: impl AsRef<Path>) -> Self {
        Self::at(Location::File(path.as_ref().to_owned()))
    }

    /// A new in-memory database, with the defaults.
    pub fn memory() -> Self {
        Self::at(Location::Memory)
    }

    /// Sets how durable a commit is (default [`Durability::Full`]).
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Sets how long a write waits for another connection's lock
    /// (1 ms..=[`MAX_BUSY_TIMEOUT`](Self::MAX_BUSY_TIMEOUT); default 10 s).
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Sets the size of the read pool (1..=1000; default 4). Writes use one
    /// connection of their own.
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n;
        self
    }

    /// Sets how many archived jobs one statement of
    /// [`purge_archived`](jobstore_api::JobStore::purge_archived) deletes
    /// (at least 1; default 10,000). A purge repeats it until a statement
    /// comes back short, so other writes get the database between
    /// statements instead of waiting for one long delete.
    pub fn purge_batch(mut self, n: u32) -> Self {
        self.purge_batch = n;
        self
    }

    /// Where the database is.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// Parses `sqlite://path`, `sqlite:path` or `sqlite::memory:`, with the
    /// query parameters `synchronous` (`full`, `normal`), `busy_timeout_ms`,
    /// `max_connections` and `purge_batch`. Anything else is `InvalidInput`.
    pub fn parse(url: &str) -> Result<Self> {
        let rest = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .ok_or_else(|| Error::invalid(format!("{url:?} is not a sqlite: URL")))?;
        let (path, query) = match rest.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (rest, None),
        };
        let mut options = match path {
            "" => return Err(Error::invalid(format!("{url:?} names no database file"))),
            ":memory:" => Self::memory(),
            path => Self::file(path),
        };
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            if pair.is_empty() {
                continue;
            }
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let bad = || Error::invalid(format!("bad value {value:?} for {key} in the sqlite URL"));
            match key {
                "synchronous" => {
                    options.durability = match value.to_ascii_lowercase().as_str() {
                        "full" => Durability::Full,
                        "normal" => Durability::Normal,
                        _ => return Err(bad()),
                    }
                }
                "busy_timeout_ms" => {
                    options.busy_timeout =
                        Duration::from_millis(value.parse::<u64>().map_err(|_| bad())?)
                }
                "max_connections" => {
                    options.max_connections = value.parse::<u32>().map_err(|_| bad())?
                }
                "purge_batch" => options.purge_batch = value.parse::<u32>().map_err(|_| bad())?,
                _ => {
                    return Err(Error::invalid(format!(
                        "unknown parameter {key:?} in the sqlite URL; known are \
                         synchronous, busy_timeout_ms, max_connections, purge_batch"
                    )));
                }
            }
        }
        options.check()?;
        Ok(options)
    }

    pub(crate) fn check(&self) -> Result<()> {
        if self.busy_timeout < Duration::from_millis(1)
            || self.busy_timeout > Self::MAX_BUSY_TIMEOUT
        {
            return Err(Error::invalid(format!(
                "busy timeout {:?} is outside 1ms..={:?}",
                self.busy_timeout,
                Self::MAX_BUSY_TIMEOUT
            )));
        }
        if self.purge_batch == 0 {
            return Err(Error::invalid("purge_batch must be at least 1"));
        }
        if !(1..=1000).contains(&self.max_connections) {
            return Err(Error::invalid(format!(
                "max_connections {} is outside 1..=1000",
                self.max_connections
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let o = SqliteOptions::parse("sqlite://var/jobs.db").unwrap();
        assert_eq!(o.location, Location::File("var/jobs.db".into()));
        assert_eq!(o.durability, Durability::Full);
        let o = SqliteOptions::parse(
            "sqlite:///abs/jobs.db?synchronous=normal&busy_timeout_ms=50&max_connections=2&purge_batch=9",
        )
        .unwrap();
        assert_eq!(o.location, Location::File("/abs/jobs.db".into()));
        assert_eq!(
            (
                o.durability,
                o.busy_timeout,
                o.max_connections,
                o.purge_batch
            ),
            (Durability::Normal, Duration::from_millis(50), 2, 9)
        );
        assert_eq!(
            SqliteOptions::parse("sqlite://j.db").unwrap().purge_batch,
            SqliteOptions::DEFAULT_PURGE_BATCH
        );
        assert!(SqliteOptions::parse("sqlite://j.db?purge_batch=0").is_err());
        assert_eq!(
            SqliteOptions::parse("sqlite::memory:").unwrap().location,
            Location::Memory
        );
        assert_eq!(
            SqliteOptions::parse("sqlite://:memory:").unwrap().location,
            Location::Memory
        );
        assert_eq!(
            SqliteOptions::parse("sqlite:rel.db").unwrap().location,
            Location::File("rel.db".into())
        );
    }

    #[test]
    fn rejects_bad_urls() {
        for url in [
            "postgres://x",
            "sqlite://",
            "sqlite:x.db?mode=memory",
            "sqlite:x.db?synchronous=off",
            "sqlite:x.db?busy_timeout_ms=0",
            "sqlite:x.db?busy_timeout_ms=99999999999",
            "sqlite:x.db?max_connections=0",
            "sqlite:x.db?max_connections=-1",
        ] {
            let e = SqliteOptions::parse(url).unwrap_err();
            assert_eq!(e.kind(), jobstore_api::ErrorKind::InvalidInput, "{url}");
        }
    }
}
