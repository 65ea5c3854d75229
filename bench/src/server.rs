//! What a store's server reports about itself, for benchmarks (the
//! `JobStore` trait has no such calls): Redis `INFO` (memory, CPU) and
//! PostgreSQL's `pg_stat_user_tables`.

#[cfg(any(feature = "postgres", feature = "redis"))]
use jobstore_api::Error;
use jobstore_api::Result;

/// The memory the store's server uses, in bytes, where the backend reports
/// it: Redis `INFO memory` `used_memory` (the whole server, not one
/// namespace; a single node, not a cluster). `None` for other backends.
/// For benchmarks: the trait has no such call.
pub async fn server_memory(url: &str) -> Result<Option<u64>> {
    let Some(info) = server_info(url, "memory").await? else {
        return Ok(None);
    };
    Ok(info_field(&info, "used_memory").and_then(|v| v.parse().ok()))
}

/// The CPU time the store's server has used since it started, where the
/// backend reports it: Redis `INFO cpu` (`used_cpu_sys` + `used_cpu_user`,
/// the main thread and its helpers). `None` for other backends. For
/// benchmarks: the trait has no such call.
pub async fn server_cpu(url: &str) -> Result<Option<std::time::Duration>> {
    let Some(info) = server_info(url, "cpu").await? else {
        return Ok(None);
    };
    let seconds = |name: &str| info_field(&info, name)?.parse::<f64>().ok();
    Ok(match (seconds("used_cpu_sys"), seconds("used_cpu_user")) {
        (Some(sys), Some(user)) => Some(std::time::Duration::from_secs_f64((sys + user).max(0.0))),
        _ => None,
    })
}

/// One section of the server's `INFO`, where the backend has it (Redis).
async fn server_info(url: &str, section: &str) -> Result<Option<String>> {
    match url.split_once(':').map_or("", |(s, _)| s) {
        #[cfg(feature = "redis")]
        "redis" | "rediss" => {
            let unavailable = |e: redis::RedisError| Error::unavailable("redis INFO", e);
            let plain = without_prefix(url)?;
            let client = redis::Client::open(plain.as_str()).map_err(unavailable)?;
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .map_err(unavailable)?;
            let info: String = redis::cmd("INFO")
                .arg(section)
                .query_async(&mut conn)
                .await
                .map_err(unavailable)?;
            Ok(Some(info))
        }
        _ => {
            let _ = section;
            Ok(None)
        }
    }
}

/// The server's statistics of the store's job table, where the backend
/// keeps them: PostgreSQL's `pg_stat_user_tables` row of the schema's
/// `jobs` (live and dead tuples, vacuums and autovacuums so far). `None`
/// for other backends. For benchmarks: the trait has no such call.
pub async fn table_stats(url: &str) -> Result<Option<serde_json::Value>> {
    match url.split_once(':').map_or("", |(s, _)| s) {
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => {
            use sqlx::Connection;
            use std::str::FromStr;
            let unavailable =
                |e: sqlx::Error| Error::unavailable("pg_stat_user_tables", Box::new(e));
            let opts = jobstore_postgres::PgStoreOptions::from_url(url)?;
            let connect =
                sqlx::postgres::PgConnectOptions::from_str(opts.url()).map_err(unavailable)?;
            let mut conn = sqlx::PgConnection::connect_with(&connect)
                .await
                .map_err(unavailable)?;
            let row: Option<(i64, i64, i64, i64)> = sqlx::query_as(
                "SELECT n_live_tup, n_dead_tup, vacuum_count, autovacuum_count
                 FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'jobs'",
            )
            .bind(opts.schema_name())
            .fetch_optional(&mut conn)
            .await
            .map_err(unavailable)?;
            let _ = conn.close().await;
            Ok(row.map(|(live, dead, vacuums, autovacuums)| {
                serde_json::json!({
                    "live_tuples": live,
                    "dead_tuples": dead,
                    "vacuums": vacuums,
                    "autovacuums": autovacuums,
                })
            }))
        }
        _ => Ok(None),
    }
}

/// The value of `name:value` in an `INFO` reply.
fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// A Redis store URL without the store's own `prefix` parameter, which
/// means nothing to the client.
#[cfg(feature = "redis")]
pub(crate) fn without_prefix(url: &str) -> Result<url::Url> {
    let mut plain = url::Url::parse(url).map_err(|e| Error::invalid(format!("{e}")))?;
    let kept: Vec<(String, String)> = plain
        .query_pairs()
        .filter(|(k, _)| k != "prefix")
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    plain.set_query(None);
    if !kept.is_empty() {
        plain.query_pairs_mut().extend_pairs(kept);
    }
    Ok(plain)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_fields_match_whole_names() {
        let info = "# Memory\r\nused_memory_rss:900\r\nused_memory:1234\r\nused_cpu_sys:1.5\r\n";
        assert_eq!(info_field(info, "used_memory"), Some("1234"));
        assert_eq!(info_field(info, "used_cpu_sys"), Some("1.5"));
        assert_eq!(info_field(info, "used_cpu_user"), None);
    }

    #[tokio::test]
    async fn servers_without_info_report_nothing() {
        assert_eq!(server_cpu("sqlite::memory:").await.unwrap(), None);
        assert_eq!(server_memory("memory://").await.unwrap(), None);
    }
}
