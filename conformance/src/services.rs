//! Finding the servers that backend tests run against.
//!
//! Order of preference, per backend: the URL in the backend's environment
//! variable; the default local address, if something answers there; with the
//! `containers` feature and a Docker engine, a container started through
//! testcontainers (kept for the life of the test process); otherwise a skip
//! notice — or a failure, when `JOBSTORE_REQUIRE_BACKENDS` names the backend.

use std::time::Duration;

/// The environment variable that lists the backends that must not be skipped.
pub const REQUIRE_VAR: &str = "JOBSTORE_REQUIRE_BACKENDS";

/// Whether `JOBSTORE_REQUIRE_BACKENDS` (a comma list) names `backend`.
pub fn required(backend: &str) -> bool {
    std::env::var(REQUIRE_VAR)
        .map(|v| v.split(',').any(|b| b.trim().eq_ignore_ascii_case(backend)))
        .unwrap_or(false)
}

/// Skips a backend that has no server: prints a notice and returns `None`,
/// or panics if the backend is required.
pub fn skip<T>(backend: &str, why: &str) -> Option<T> {
    if required(backend) {
        panic!("{backend} is required by {REQUIRE_VAR} but cannot be tested: {why}");
    }
    eprintln!("SKIPPED {backend}: {why} (set {REQUIRE_VAR}={backend} to make this a failure)");
    None
}

/// A fresh namespace name for one test: `jst_` and 16 hex digits, valid as a
/// PostgreSQL schema, a Redis key prefix and a MongoDB database name.
pub fn unique_namespace() -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("jst_{}", &id[..16])
}

/// The PostgreSQL server for tests: `JOBSTORE_TEST_POSTGRES_URL`, else
/// `postgres://postgres@127.0.0.1:5432/test`.
pub async fn postgres_url() -> Option<String> {
    url_or_skip(
        "postgres",
        "JOBSTORE_TEST_POSTGRES_URL",
        "postgres://postgres@127.0.0.1:5432/test",
    )
    .await
}

/// The Redis server for tests: `JOBSTORE_TEST_REDIS_URL`, else
/// `redis://127.0.0.1:6379`.
pub async fn redis_url() -> Option<String> {
    url_or_skip("redis", "JOBSTORE_TEST_REDIS_URL", "redis://127.0.0.1:6379").await
}

/// The MongoDB server for tests: `JOBSTORE_TEST_MONGO_URL`, else
/// `mongodb://127.0.0.1:27017`.
pub async fn mongo_url() -> Option<String> {
    url_or_skip(
        "mongo",
        "JOBSTORE_TEST_MONGO_URL",
        "mongodb://127.0.0.1:27017",
    )
    .await
}

/// The server URL for `backend`: `env_var` if set (used as given, even if
/// nothing answers: an explicit URL that fails is a failure), else
/// `default_url` if its host and port answer, else a container (with the
/// `containers` feature, for `postgres`, `redis` and `mongo`), else
/// [`skip`].
pub async fn url_or_skip(backend: &str, env_var: &str, default_url: &str) -> Option<String> {
    if let Ok(url) = std::env::var(env_var)
        && !url.is_empty()
    {
        return Some(url);
    }
    if let Some(addr) = host_port(default_url)
        && answers(&addr).await
    {
        return Some(default_url.to_owned());
    }
    let why = format!("{env_var} is not set and nothing answers at {default_url}");
    match container_url(backend).await {
        Ok(url) => Some(url),
        Err(container) => skip(backend, &format!("{why}; {container}")),
    }
}

/// `host:port` of a URL like `scheme://user:pw@host:port/path`.
fn host_port(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?']).next()?;
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    hostport.contains(':').then(|| hostport.to_owned())
}

async fn answers(addr: &str) -> bool {
    matches!(
        tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr)).await,
        Ok(Ok(_))
    )
}

#[cfg(not(feature = "containers"))]
async fn container_url(_backend: &str) -> Result<String, String> {
    Err("the containers feature is off".to_owned())
}

#[cfg(feature = "containers")]
async fn container_url(backend: &str) -> Result<String, String> {
    use testcontainers_modules::testcontainers::ImageExt;
    use testcontainers_modules::testcontainers::runners::AsyncRunner;
    use tokio::sync::OnceCell;

    static POSTGRES: OnceCell<Result<String, String>> = OnceCell::const_new();
    static REDIS: OnceCell<Result<String, String>> = OnceCell::const_new();
    static MONGO: OnceCell<Result<String, String>> = OnceCell::const_new();

    // The containers live as long as the test process: the handles are
    // leaked on purpose, and testcontainers' reaper removes them at exit.
    fn keep<T>(container: T) {
        std::mem::forget(container);
    }
    let fail = |e: &dyn std::fmt::Display| format!("no container could be started ({e})");

    match backend {
        "postgres" => POSTGRES
            .get_or_init(|| async {
                let c = testcontainers_modules::postgres::Postgres::default()
                    .with_tag("16-alpine")
                    .start()
                    .await
                    .map_err(|e| fail(&e))?;
                let port = c.get_host_port_ipv4(5432).await.map_err(|e| fail(&e))?;
                keep(c);
                Ok(format!(
                    "postgres://postgres:postgres@127.0.0.1:{port}/postgres"
                ))
            })
            .await
            .clone(),
        "redis" => REDIS
            .get_or_init(|| async {
                let c = testcontainers_modules::redis::Redis::default()
                    .with_tag("7-alpine")
                    .start()
                    .await
                    .map_err(|e| fail(&e))?;
                let port = c.get_host_port_ipv4(6379).await.map_err(|e| fail(&e))?;
                keep(c);
                Ok(format!("redis://127.0.0.1:{port}"))
            })
            .await
            .clone(),
        "mongo" => MONGO
            .get_or_init(|| async {
                let c = testcontainers_modules::mongo::Mongo::default()
                    .with_tag("7")
                    .start()
                    .await
                    .map_err(|e| fail(&e))?;
                let port = c.get_host_port_ipv4(27017).await.map_err(|e| fail(&e))?;
                keep(c);
                Ok(format!("mongodb://127.0.0.1:{port}"))
            })
            .await
            .clone(),
        other => Err(format!("no container image is known for {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::host_port;

    #[test]
    fn host_port_of_urls() {
        assert_eq!(
            host_port("postgres://postgres@127.0.0.1:5432/test").as_deref(),
            Some("127.0.0.1:5432")
        );
        assert_eq!(
            host_port("redis://127.0.0.1:6379").as_deref(),
            Some("127.0.0.1:6379")
        );
        assert_eq!(
            host_port("mongodb://u:p@h:1/db?x=1").as_deref(),
            Some("h:1")
        );
        assert_eq!(host_port("sqlite::memory:"), None);
    }
}
