//! Bare reference queues for `jobstore bench reference` and the
//! PostgreSQL and Redis throughput benches (`benches/`): the least a queue
//! on the same server can do, measured in the same run as the store so the
//! ratio between them means something on a shared, noisy machine.
//!
//! * PostgreSQL ([`PgRef`]): a single-table `SKIP LOCKED` queue in the
//!   River, Oban and graphile-worker style: a bigint identity key, a
//!   partial fetch index over the available jobs, a claim that is one
//!   `UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED LIMIT n)
//!   RETURNING id`, and a batched completion (`UPDATE state =
//!   'completed'`, or [`PgRef::delete`]).
//! * Redis ([`RedisRef`]): one ZSET of waiting ids and one HASH per job;
//!   add = HSET + ZADD, claim = ZPOPMIN + HSET owner + ZADD to a lock ZSET,
//!   ack = DEL + ZREM; one EVALSHA per batch.
//!
//! Neither has the store's duties: ids with duplicate detection, expired
//! leases as eligible work, fencing, a result per job, counts.

use std::sync::Arc;

use async_trait::async_trait;
#[cfg(any(feature = "postgres", feature = "redis"))]
use jobstore_api::Error;
use jobstore_api::Result;

/// A reference queue in a namespace of its own.
#[async_trait]
pub trait RefQueue: Send + Sync {
    /// Adds jobs `from..to` with `payload`-byte payloads in one call.
    async fn add(&self, from: usize, to: usize, payload: usize) -> Result<usize>;
    /// Claims up to `limit` jobs for `owner`; returns their keys.
    async fn claim(&self, limit: usize, owner: &str) -> Result<Vec<String>>;
    /// Finishes claimed jobs in one call; returns how many.
    async fn ack(&self, keys: &[String]) -> Result<usize>;
    /// Removes the queue and everything in it.
    async fn remove(&self) -> Result<()>;
}

/// The reference queue on the server of `url` (a store URL), in namespace
/// `ns`; `None` for backends that have none (memory, SQLite, MongoDB).
pub async fn open(url: &str, ns: &str) -> Result<Option<Arc<dyn RefQueue>>> {
    let _ = ns;
    match url.split_once(':').map_or("", |(s, _)| s) {
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => Ok(Some(Arc::new(PgRef::open(url, ns).await?))),
        #[cfg(feature = "redis")]
        "redis" | "rediss" => Ok(Some(Arc::new(RedisRef::open(url, ns).await?))),
        _ => Ok(None),
    }
}

#[cfg(feature = "postgres")]
pub use pg::PgRef;
#[cfg(feature = "redis")]
pub use rd::RedisRef;

#[cfg(any(feature = "postgres", feature = "redis"))]
fn unavailable(what: &str) -> impl Fn(Box<dyn std::error::Error + Send + Sync>) -> Error + '_ {
    move |e| Error::unavailable(format!("reference queue: {what}"), e)
}

#[cfg(feature = "postgres")]
mod pg {
    use std::str::FromStr;

    use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

    use super::*;

    const SCHEMA_SQL: &str = "
        CREATE TABLE jobs (
            id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            kind         text    NOT NULL,
            args         bytea   NOT NULL,
            priority     integer NOT NULL,
            state        text    NOT NULL DEFAULT 'available',
            scheduled_at bigint  NOT NULL,
            attempt      integer NOT NULL DEFAULT 0,
            attempted_by text,
            created_at   bigint  NOT NULL,
            finalized_at bigint
        ) WITH (fillfactor = 90);
        CREATE INDEX jobs_fetch ON jobs (kind, priority, scheduled_at, id)
            WHERE state = 'available';";

    const ADD: &str = "
        INSERT INTO jobs (kind, args, priority, scheduled_at, created_at)
        SELECT k, a, p, $4, $4 FROM unnest($1::text[], $2::bytea[], $3::int4[]) AS t (k, a, p)";

    const CLAIM: &str = "
        UPDATE jobs SET state = 'running', attempt = attempt + 1,
                        attempted_by = $4, scheduled_at = $5
        WHERE id IN (
            SELECT id FROM jobs
            WHERE state = 'available' AND kind = $1 AND scheduled_at <= $2
            ORDER BY priority, scheduled_at, id
            LIMIT $3
            FOR UPDATE SKIP LOCKED)
        RETURNING id";

    const COMPLETE: &str = "
        UPDATE jobs SET state = 'completed', finalized_at = $2
        WHERE id = ANY($1) AND state = 'running'";

    const DELETE: &str = "DELETE FROM jobs WHERE id = ANY($1) AND state = 'running'";

    /// The PostgreSQL reference queue: a table `jobs` in a schema of its
    /// own, `{ns}_ref`, on the server of a store URL (its `max_connections`
    /// sizes the pool).
    pub struct PgRef {
        pool: PgPool,
        schema: String,
    }

    fn err(what: &'static str) -> impl Fn(sqlx::Error) -> Error {
        move |e| unavailable(what)(Box::new(e))
    }

    impl PgRef {
        /// Creates the schema `{ns}_ref` and its table on the server of
        /// `url` (a PostgreSQL store URL); fails if the schema exists.
        pub async fn open(url: &str, ns: &str) -> Result<Self> {
            let plain = jobstore_postgres::PgStoreOptions::from_url(url)?;
            let schema = format!("{ns}_ref");
            let opts = PgConnectOptions::from_str(plain.url())
                .map_err(err("URL"))?
                .options([("search_path", schema.as_str())]);
            let pool = PgPoolOptions::new()
                .max_connections(plain.get_max_connections())
                .connect_with(opts)
                .await
                .map_err(err("connect"))?;
            let mut tx = pool.begin().await.map_err(err("begin"))?;
            let create = format!("CREATE SCHEMA \"{schema}\"");
            sqlx::query(sqlx::AssertSqlSafe(create))
                .execute(&mut *tx)
                .await
                .map_err(err("create schema"))?;
            let path = format!("SET LOCAL search_path = \"{schema}\"");
            sqlx::query(sqlx::AssertSqlSafe(path))
                .execute(&mut *tx)
                .await
                .map_err(err("search_path"))?;
            sqlx::raw_sql(SCHEMA_SQL)
                .execute(&mut *tx)
                .await
                .map_err(err("create tables"))?;
            tx.commit().await.map_err(err("commit"))?;
            Ok(PgRef { pool, schema })
        }

        /// The pool, whose connections have the queue's schema as their
        /// `search_path` (for `VACUUM`, `TRUNCATE`, WAL positions).
        pub fn pool(&self) -> &PgPool {
            &self.pool
        }

        /// Finishes claimed jobs by deleting them, in one call (where
        /// [`RefQueue::ack`] keeps them as completed); returns how many.
        pub async fn delete(&self, keys: &[String]) -> Result<usize> {
            let done = sqlx::query(DELETE)
                .bind(ids(keys))
                .execute(&self.pool)
                .await
                .map_err(err("delete"))?;
            Ok(done.rows_affected() as usize)
        }
    }

    /// The ids of claimed jobs' keys.
    fn ids(keys: &[String]) -> Vec<i64> {
        keys.iter().filter_map(|k| k.parse().ok()).collect()
    }

    #[async_trait]
    impl RefQueue for PgRef {
        async fn add(&self, from: usize, to: usize, payload: usize) -> Result<usize> {
            let n = to - from;
            let prios: Vec<i32> = (from..to).map(|i| (i % 3) as i32).collect();
            let done = sqlx::query(ADD)
                .bind(vec!["bench"; n])
                .bind(vec![vec![b'x'; payload]; n])
                .bind(prios)
                .bind(jobstore_api::now_millis())
                .execute(&self.pool)
                .await
                .map_err(err("add"))?;
            Ok(done.rows_affected() as usize)
        }

        async fn claim(&self, limit: usize, owner: &str) -> Result<Vec<String>> {
            let now = jobstore_api::now_millis();
            let rows: Vec<(i64,)> = sqlx::query_as(CLAIM)
                .bind("bench")
                .bind(now)
                .bind(limit as i64)
                .bind(owner)
                .bind(now + 600_000)
                .fetch_all(&self.pool)
                .await
                .map_err(err("claim"))?;
            Ok(rows.into_iter().map(|r| r.0.to_string()).collect())
        }

        async fn ack(&self, keys: &[String]) -> Result<usize> {
            let done = sqlx::query(COMPLETE)
                .bind(ids(keys))
                .bind(jobstore_api::now_millis())
                .execute(&self.pool)
                .await
                .map_err(err("complete"))?;
            Ok(done.rows_affected() as usize)
        }

        async fn remove(&self) -> Result<()> {
            let sql = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.schema);
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&self.pool)
                .await
                .map_err(err("drop schema"))?;
            self.pool.close().await;
            Ok(())
        }
    }
}

#[cfg(feature = "redis")]
mod rd {
    use redis::aio::MultiplexedConnection;

    use super::*;

    const ADD: &str = r"
-- KEYS queue. ARGV: job key prefix, then id, data, priority...
local add = {}
for i = 2, #ARGV, 3 do
  redis.call('HSET', ARGV[1] .. ARGV[i], 'd', ARGV[i + 1], 'p', ARGV[i + 2])
  add[#add + 1] = -tonumber(ARGV[i + 2])
  add[#add + 1] = ARGV[i]
end
for i = 1, #add, 1000 do
  redis.call('ZADD', KEYS[1], unpack(add, i, math.min(i + 999, #add)))
end
return #add / 2
";

    const CLAIM: &str = r"
-- KEYS queue, lock. ARGV: job key prefix, limit, owner, expiry.
local popped = redis.call('ZPOPMIN', KEYS[1], tonumber(ARGV[2]))
local out, lock = {}, {}
for i = 1, #popped, 2 do
  local id = popped[i]
  redis.call('HSET', ARGV[1] .. id, 'l', ARGV[3])
  lock[#lock + 1] = ARGV[4]
  lock[#lock + 1] = id
  out[#out + 1] = id
end
if #lock > 0 then
  redis.call('ZADD', KEYS[2], unpack(lock))
end
return out
";

    const ACK: &str = r"
-- KEYS lock. ARGV: job key prefix, ids...
for i = 2, #ARGV do
  redis.call('DEL', ARGV[1] .. ARGV[i])
end
return redis.call('ZREM', KEYS[1], unpack(ARGV, 2))
";

    /// The Redis reference queue: keys under the hash tag `{ns}_ref` on
    /// the server of a store URL, over one multiplexed connection.
    pub struct RedisRef {
        client: redis::Client,
        conn: MultiplexedConnection,
        tag: String,
        add: redis::Script,
        claim: redis::Script,
        ack: redis::Script,
    }

    fn err(what: &'static str) -> impl Fn(redis::RedisError) -> Error {
        move |e| unavailable(what)(Box::new(e))
    }

    impl RedisRef {
        /// Connects to the server of `url` (a Redis store URL, single
        /// node); the queue's keys are made as jobs are added.
        pub async fn open(url: &str, ns: &str) -> Result<Self> {
            let client = redis::Client::open(crate::server::without_prefix(url)?.as_str())
                .map_err(err("URL"))?;
            let conn = client
                .get_multiplexed_async_connection()
                .await
                .map_err(err("connect"))?;
            Ok(RedisRef {
                client,
                conn,
                tag: format!("{ns}_ref"),
                add: redis::Script::new(ADD),
                claim: redis::Script::new(CLAIM),
                ack: redis::Script::new(ACK),
            })
        }

        fn key(&self, what: &str) -> String {
            format!("{{{}}}:{what}", self.tag)
        }
    }

    #[async_trait]
    impl RefQueue for RedisRef {
        async fn add(&self, from: usize, to: usize, payload: usize) -> Result<usize> {
            let mut inv = self.add.prepare_invoke();
            inv.key(self.key("queue")).arg(self.key("j:"));
            for i in from..to {
                inv.arg(format!("{i:010}"))
                    .arg(vec![b'x'; payload])
                    .arg((i % 3) as i32);
            }
            let n: usize = inv
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(err("add"))?;
            Ok(n)
        }

        async fn claim(&self, limit: usize, owner: &str) -> Result<Vec<String>> {
            self.claim
                .key(self.key("queue"))
                .key(self.key("lock"))
                .arg(self.key("j:"))
                .arg(limit)
                .arg(owner)
                .arg(jobstore_api::now_millis() + 600_000)
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(err("claim"))
        }

        async fn ack(&self, keys: &[String]) -> Result<usize> {
            if keys.is_empty() {
                return Ok(0);
            }
            self.ack
                .key(self.key("lock"))
                .arg(self.key("j:"))
                .arg(keys)
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(err("ack"))
        }

        async fn remove(&self) -> Result<()> {
            // The tag is the bench namespace's, without glob characters.
            crate::server::unlink_matching(&self.client, &format!("{{{}}}*", self.tag))
                .await
                .map(|_| ())
        }
    }
}
