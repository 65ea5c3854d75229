#![doc = include_str!("../README.md")]

mod error;
mod options;
mod queries;
mod schedules;
mod stats;
mod store;

pub use options::{Durability, Location, SqliteOptions};
pub use store::SqliteStore;

/// The query plan of a statement, for tests that check which index it
/// follows: `EXPLAIN QUERY PLAN` with every one of its `params` bound to
/// NULL, its lines joined.
#[cfg(test)]
mod query_plan {
    use sqlx::AssertSqlSafe;
    use sqlx::sqlite::SqliteConnection;

    pub(crate) async fn plan(conn: &mut SqliteConnection, sql: &str, params: usize) -> String {
        let mut q = sqlx::query_as::<_, (i64, i64, i64, String)>(AssertSqlSafe(format!(
            "EXPLAIN QUERY PLAN {sql}"
        )));
        for _ in 0..params {
            q = q.bind(None::<i64>);
        }
        let rows = q.fetch_all(&mut *conn).await.unwrap();
        rows.into_iter().map(|r| r.3).collect::<Vec<_>>().join("\n")
    }
}
