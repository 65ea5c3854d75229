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

/// The `application_name` of the connection that holds a transaction open
/// ([`hold_xmin`]), as `pg_stat_activity` shows it.
#[cfg(feature = "postgres")]
pub const HOLD_APPLICATION_NAME: &str = "jobstore-bench-hold";

/// Opens one transaction on the PostgreSQL server of `url` (a connection
/// of its own, outside the store, with no idle-in-transaction timeout) and
/// keeps it open for `hold`, or until the returned [`Held`] is dropped
/// (its connection then closes, ending the transaction): `with_xid` takes
/// a transaction id in a read-committed transaction (`BEGIN;
/// pg_current_xact_id()`, as a forgotten write does: no snapshot stays);
/// otherwise a repeatable-read transaction only reads, so its snapshot
/// stays (as a long report does). Either holds back the horizon vacuum
/// cleans up to. For benchmarks: what such a session does to the store
/// beside it. Returns once the transaction is open.
#[cfg(feature = "postgres")]
pub async fn hold_xmin(url: &str, with_xid: bool, hold: std::time::Duration) -> Result<Held> {
    use sqlx::Connection;
    use std::str::FromStr;
    let unavailable = |e: sqlx::Error| Error::unavailable("a held transaction", Box::new(e));
    let opts = jobstore_postgres::PgStoreOptions::from_url(url)?;
    let connect = sqlx::postgres::PgConnectOptions::from_str(opts.url())
        .map_err(unavailable)?
        .application_name(HOLD_APPLICATION_NAME)
        .options([("idle_in_transaction_session_timeout", "0")]);
    let mut conn = sqlx::PgConnection::connect_with(&connect)
        .await
        .map_err(unavailable)?;
    let (begin, first) = if with_xid {
        ("BEGIN", "SELECT pg_current_xact_id()::text")
    } else {
        (
            "BEGIN ISOLATION LEVEL REPEATABLE READ",
            "SELECT count(*)::text FROM pg_class",
        )
    };
    sqlx::query(begin)
        .execute(&mut conn)
        .await
        .map_err(unavailable)?;
    sqlx::query_scalar::<_, String>(first)
        .fetch_one(&mut conn)
        .await
        .map_err(unavailable)?;
    Ok(Held(tokio::spawn(async move {
        tokio::time::sleep(hold).await;
        let _ = sqlx::query("ROLLBACK").execute(&mut conn).await;
        let _ = conn.close().await;
    })))
}

/// A transaction [`hold_xmin`] keeps open: dropping it (a soak that ends,
/// or fails midway) closes its connection, which ends the transaction.
#[cfg(feature = "postgres")]
pub struct Held(tokio::task::JoinHandle<()>);

#[cfg(feature = "postgres")]
impl Drop for Held {
    fn drop(&mut self) {
        self.0.abort();
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

/// Keys asked of each `SCAN` (and so at most unlinked by each `UNLINK`)
/// when a bench removes its Redis keys: small steps a busy server answers
/// quickly.
#[cfg(feature = "redis")]
const DROP_BATCH: u32 = 1000;

/// How long one `SCAN` or `UNLINK` of a drop may take before it is tried
/// again (the client's default, 500 ms, is what a busy server misses).
#[cfg(feature = "redis")]
const DROP_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Tries of one `SCAN` or `UNLINK` of a drop before it gives up, with
/// waits of 1, 2, 4, ... up to 30 s between tries: a drop outlasts a
/// minute and a half of refused connections, or five and a half minutes
/// of a server that answers nothing.
#[cfg(feature = "redis")]
const DROP_TRIES: u32 = 8;

/// Removes every key of the Redis store namespace of `url` (its `prefix`
/// parameter, `P`): the store keeps them all under the hash tags `{P}`,
/// `{P:<jobtype>}` and `{P|i<bucket>}`, found here in one pass of `SCAN`
/// with the pattern `{P[}:|]*`. Returns how many keys were removed. See
/// [`unlink_matching`] for how a busy server is waited out.
#[cfg(feature = "redis")]
pub(crate) async fn drop_redis_namespace(url: &str) -> Result<u64> {
    let parsed = url::Url::parse(url).map_err(|e| Error::invalid(format!("{e}")))?;
    let prefix = parsed
        .query_pairs()
        .find(|(k, _)| k == "prefix")
        .map(|(_, v)| v.into_owned())
        .filter(|p| !p.is_empty())
        .ok_or_else(|| Error::invalid("a bench namespace URL has a prefix parameter"))?;
    let client = redis::Client::open(without_prefix(url)?.as_str())
        .map_err(|e| Error::unavailable("redis URL", e))?;
    unlink_matching(&client, &format!("{{{}[}}:|]*", glob_escape(&prefix))).await
}

/// `s` with the characters special to Redis glob patterns escaped.
#[cfg(feature = "redis")]
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Removes the keys matching `pattern` on a single Redis server: `SCAN`
/// with `COUNT` [`DROP_BATCH`], then one `UNLINK` of what that page found,
/// page by page, so no one call holds the server long. Each call may take
/// [`DROP_CALL_TIMEOUT`] and is tried [`DROP_TRIES`] times (on a new
/// connection after a failure; `SCAN` from the same cursor, `UNLINK` of the
/// same keys, both safe to repeat). Returns how many keys were removed; an
/// error says how many were and what is left.
#[cfg(feature = "redis")]
pub(crate) async fn unlink_matching(client: &redis::Client, pattern: &str) -> Result<u64> {
    let mut conn = None;
    let mut cursor: u64 = 0;
    let mut removed: u64 = 0;
    let gave_up = |removed: u64, why: String| {
        Error::unavailable(
            format!("{why}; {removed} keys removed, keys matching {pattern} may remain"),
            why,
        )
    };
    loop {
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(DROP_BATCH);
        let (next, keys): (u64, Vec<Vec<u8>>) = patient(client, &mut conn, &scan, "SCAN")
            .await
            .map_err(|e| gave_up(removed, e))?;
        if !keys.is_empty() {
            let mut unlink = redis::cmd("UNLINK");
            for key in &keys {
                unlink.arg(key.as_slice());
            }
            removed += patient::<u64>(client, &mut conn, &unlink, "UNLINK")
                .await
                .map_err(|e| gave_up(removed, e))?;
        }
        cursor = next;
        if cursor == 0 {
            return Ok(removed);
        }
    }
}

/// One command, tried up to [`DROP_TRIES`] times, each within
/// [`DROP_CALL_TIMEOUT`]; `conn` is (re)made as needed. The error says
/// what failed, and how the last try did.
#[cfg(feature = "redis")]
async fn patient<T: redis::FromRedisValue>(
    client: &redis::Client,
    conn: &mut Option<redis::aio::MultiplexedConnection>,
    cmd: &redis::Cmd,
    what: &'static str,
) -> std::result::Result<T, String> {
    use std::time::Duration;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(DROP_CALL_TIMEOUT))
        .set_response_timeout(Some(DROP_CALL_TIMEOUT));
    let mut last = String::new();
    for attempt in 0..DROP_TRIES {
        if attempt > 0 {
            let wait = Duration::from_secs(1 << (attempt - 1).min(5)).min(DROP_CALL_TIMEOUT);
            tokio::time::sleep(wait).await;
        }
        let c = match conn {
            Some(c) => c,
            None => match client
                .get_multiplexed_async_connection_with_config(&config)
                .await
            {
                Ok(c) => conn.insert(c),
                Err(e) => {
                    last = format!("connect: {e}");
                    continue;
                }
            },
        };
        match cmd.query_async::<T>(c).await {
            Ok(v) => return Ok(v),
            Err(e) => {
                last = e.to_string();
                *conn = None;
            }
        }
    }
    Err(format!(
        "redis {what} failed {DROP_TRIES} times, the last: {last}"
    ))
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

    #[cfg(feature = "redis")]
    #[test]
    fn glob_specials_are_escaped() {
        assert_eq!(glob_escape("bench_0a1b"), "bench_0a1b");
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }

    #[tokio::test]
    async fn servers_without_info_report_nothing() {
        assert_eq!(server_cpu("sqlite::memory:").await.unwrap(), None);
        assert_eq!(server_memory("memory://").await.unwrap(), None);
    }
}
