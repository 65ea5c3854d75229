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

/// The URL of a namespace of its own named `ns` in the same server as
/// `url` (tools such as `jobstore bench` work there and drop it after):
/// a PostgreSQL schema, a Redis key prefix, a MongoDB collection prefix, a
/// SQLite file beside the given one (or in `data_dir`); `memory://` is
/// private anyway.
pub fn with_namespace(url: Option<&str>, data_dir: &Path, ns: &str) -> Result<String> {
    let Some(url) = url else {
        return Ok(format!(
            "sqlite://{}",
            data_dir.join(format!("{ns}.db")).display()
        ));
    };
    let scheme = url.split_once(':').map_or("", |(s, _)| s);
    let param = |key: &str| {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut kept: Vec<&str> = query
            .split('&')
            .filter(|p| !p.is_empty() && p.split('=').next() != Some(key))
            .collect();
        let pair = format!("{key}={ns}");
        kept.push(&pair);
        format!("{base}?{}", kept.join("&"))
    };
    match scheme {
        "memory" => Ok(url.to_owned()),
        "sqlite" => {
            let rest = url
                .strip_prefix("sqlite://")
                .or_else(|| url.strip_prefix("sqlite:"))
                .unwrap_or_default();
            let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
            if path == ":memory:" {
                return Ok(url.to_owned());
            }
            let dir = Path::new(path).parent().unwrap_or(Path::new("."));
            let file = dir.join(format!("{ns}.db"));
            Ok(if query.is_empty() {
                format!("sqlite://{}", file.display())
            } else {
                format!("sqlite://{}?{query}", file.display())
            })
        }
        "postgres" | "postgresql" => Ok(param("schema")),
        "redis" | "rediss" | "redis+cluster" | "rediss+cluster" => Ok(param("prefix")),
        "mongodb" | "mongodb+srv" => Ok(param("jobstore_prefix")),
        _ => Err(Error::invalid(format!(
            "unsupported store URL scheme {scheme:?}; this build supports {}",
            schemes().join(", ")
        ))),
    }
}

/// The backend a store URL names, for reports: `memory`, `sqlite`
/// (`None`: the embedded default), `postgres`, `redis`, `mongodb`, or
/// `unknown`.
pub fn backend_name(url: Option<&str>) -> &'static str {
    let Some(url) = url else { return "sqlite" };
    match url.split_once(':').map_or("", |(s, _)| s) {
        "memory" => "memory",
        "sqlite" => "sqlite",
        "postgres" | "postgresql" => "postgres",
        "redis" | "rediss" | "redis+cluster" | "rediss+cluster" => "redis",
        "mongodb" | "mongodb+srv" => "mongodb",
        _ => "unknown",
    }
}

/// Removes a namespace made with [`with_namespace`] and everything in it.
pub async fn drop_namespace(url: &str) -> Result<()> {
    let scheme = url.split_once(':').map_or("", |(s, _)| s);
    match scheme {
        #[cfg(feature = "sqlite")]
        "sqlite" => {
            let options = jobstore_sqlite::SqliteOptions::parse(url)?;
            if let jobstore_sqlite::Location::File(path) = options.location() {
                for suffix in ["", "-wal", "-shm"] {
                    let mut p = path.as_os_str().to_owned();
                    p.push(suffix);
                    let _ = std::fs::remove_file(p);
                }
            }
            Ok(())
        }
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => {
            jobstore_postgres::PgStore::connect(url)
                .await?
                .drop_schema()
                .await
        }
        #[cfg(feature = "redis")]
        "redis" | "rediss" | "redis+cluster" | "rediss+cluster" => {
            jobstore_redis::RedisStore::connect(url)
                .await?
                .drop_namespace()
                .await
                .map(|_| ())
        }
        #[cfg(feature = "mongo")]
        "mongodb" | "mongodb+srv" => {
            jobstore_mongo::MongoStore::connect(url)
                .await?
                .drop_collections()
                .await
        }
        _ => Ok(()),
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

    #[test]
    fn namespaces_per_backend() {
        let d = Path::new("/data");
        let ns = |u: Option<&str>| with_namespace(u, d, "bench_1").unwrap();
        assert_eq!(ns(None), "sqlite:///data/bench_1.db");
        assert_eq!(
            ns(Some("sqlite:///var/jobs.db?synchronous=normal")),
            "sqlite:///var/bench_1.db?synchronous=normal"
        );
        assert_eq!(
            ns(Some("postgres://u@h/db")),
            "postgres://u@h/db?schema=bench_1"
        );
        assert_eq!(
            ns(Some("postgres://u@h/db?schema=jobs&max_connections=4")),
            "postgres://u@h/db?max_connections=4&schema=bench_1"
        );
        assert_eq!(
            ns(Some("redis://h:6379/0?prefix=jobs")),
            "redis://h:6379/0?prefix=bench_1"
        );
        assert_eq!(
            ns(Some("mongodb://h/db")),
            "mongodb://h/db?jobstore_prefix=bench_1"
        );
        assert_eq!(ns(Some("memory://")), "memory://");
        assert!(with_namespace(Some("ftp://x"), d, "n").is_err());
    }

    #[test]
    fn backend_names() {
        assert_eq!(backend_name(None), "sqlite");
        assert_eq!(backend_name(Some("postgresql://h/db")), "postgres");
        assert_eq!(backend_name(Some("redis+cluster://h")), "redis");
        assert_eq!(backend_name(Some("memory://")), "memory");
        assert_eq!(backend_name(Some("ftp://x")), "unknown");
    }

    #[tokio::test]
    async fn default_is_sqlite_in_the_data_dir() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(None, dir.path()).await.unwrap();
        store.job_counts(0).await.unwrap();
        assert!(dir.path().join(DEFAULT_SQLITE_FILE).exists());
        open(Some("memory://"), dir.path()).await.unwrap();
    }

    /// Opening a store, on any backend, is a `Send` future: it can be
    /// spawned on a multi-threaded runtime. (A compile-time check: the
    /// test does not build otherwise.)
    #[test]
    fn opening_a_store_can_be_spawned() {
        fn spawnable<F: std::future::Future + Send + 'static>(_: F) {}
        spawnable(async { jobstore_sqlite::SqliteStore::connect("sqlite::memory:").await });
        spawnable(async { jobstore_postgres::PgStore::connect("postgres://h/d").await });
        spawnable(async { jobstore_redis::RedisStore::connect("redis://h").await });
        spawnable(async { jobstore_mongo::MongoStore::connect("mongodb://h").await });
        spawnable(async {
            let dir = std::path::PathBuf::from("/nonexistent");
            open(Some("memory://"), &dir).await
        });
    }
}
