//! The store factory: the only code in the daemon that names a backend.
//! Everything else holds an `Arc<dyn JobStore>`.

use std::path::Path;
use std::sync::Arc;

use jobstore_api::{Error, JobStore, MemoryStore, Result};

/// The file name of the embedded default store in the data dir.
pub const DEFAULT_SQLITE_FILE: &str = "jobs.db";

/// The URL schemes this build can open, for messages and `--help`.
pub fn schemes() -> Vec<&'static str> {
    let mut s = vec!["memory://"];
    if cfg!(feature = "sqlite") {
        s.push("sqlite://");
    }
    if cfg!(feature = "postgres") {
        s.extend(["postgres://", "postgresql://"]);
    }
    if cfg!(feature = "redis") {
        s.extend(["redis://", "rediss://", "redis+cluster://"]);
    }
    if cfg!(feature = "mongo") {
        s.extend(["mongodb://", "mongodb+srv://"]);
    }
    s
}

/// Opens the store at `url`, or the embedded default (a SQLite file in
/// `data_dir`) when there is none.
pub async fn open(url: Option<&str>, data_dir: &Path) -> Result<Arc<dyn JobStore>> {
    let Some(url) = url else {
        return open_default(data_dir).await;
    };
    let scheme = url.split_once(':').map_or("", |(s, _)| s);
    match scheme {
        "memory" => Ok(Arc::new(MemoryStore::new())),
        #[cfg(feature = "sqlite")]
        "sqlite" => Ok(Arc::new(jobstore_sqlite::SqliteStore::connect(url).await?)),
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => Ok(Arc::new(jobstore_postgres::PgStore::connect(url).await?)),
        #[cfg(feature = "redis")]
        "redis" | "rediss" | "redis+cluster" | "rediss+cluster" => {
            Ok(Arc::new(jobstore_redis::RedisStore::connect(url).await?))
        }
        #[cfg(feature = "mongo")]
        "mongodb" | "mongodb+srv" => Ok(Arc::new(jobstore_mongo::MongoStore::connect(url).await?)),
        _ => Err(Error::invalid(format!(
            "unsupported store URL scheme {scheme:?}; this build supports {}",
            schemes().join(", ")
        ))),
    }
}

#[cfg(feature = "sqlite")]
async fn open_default(data_dir: &Path) -> Result<Arc<dyn JobStore>> {
    std::fs::create_dir_all(data_dir).map_err(|e| {
        Error::unavailable(format!("cannot create data dir {}", data_dir.display()), e)
    })?;
    let options = jobstore_sqlite::SqliteOptions::file(data_dir.join(DEFAULT_SQLITE_FILE));
    Ok(Arc::new(
        jobstore_sqlite::SqliteStore::connect_with(options).await?,
    ))
}

#[cfg(not(feature = "sqlite"))]
async fn open_default(_data_dir: &Path) -> Result<Arc<dyn JobStore>> {
    Err(Error::invalid(
        "no store URL given, and this build has no embedded SQLite store (feature \"sqlite\")",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn unknown_schemes_are_invalid_input() {
        let dir = tempfile::tempdir().unwrap();
        let err = open(Some("ftp://x"), dir.path()).await.unwrap_err();
        assert_eq!(err.kind(), jobstore_api::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("memory://"), "{err}");
    }

    #[tokio::test]
    async fn default_is_sqlite_in_the_data_dir() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(None, dir.path()).await.unwrap();
        store.job_counts(0).await.unwrap();
        assert!(dir.path().join(DEFAULT_SQLITE_FILE).exists());
        open(Some("memory://"), dir.path()).await.unwrap();
    }
}
