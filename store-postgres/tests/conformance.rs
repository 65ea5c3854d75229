//! The conformance suite against PostgreSQL: each test in a fresh schema,
//! with a peer store (its own pool) on the same schema; the schema is
//! dropped afterwards.

use jobstore_conformance::TestStore;
use jobstore_conformance::services::{postgres_url, unique_namespace};
use jobstore_postgres::{PgStore, PgStoreOptions};

async fn open(url: &str, schema: &str) -> PgStore {
    // Small pools: many tests run at once against one server.
    let options = PgStoreOptions::from_url(url)
        .expect("test URL")
        .schema(schema)
        .max_connections(4);
    PgStore::connect_with(options)
        .await
        .unwrap_or_else(|e| panic!("connect to {schema}: {e:?}"))
}

async fn factory() -> Option<TestStore> {
    let url = postgres_url().await?;
    let schema = unique_namespace();
    let (store, peer) = tokio::join!(open(&url, &schema), open(&url, &schema));
    let pool = store.pool().clone();
    let cleanup = async move {
        let sql = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
        if let Err(e) = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&pool).await {
            eprintln!("could not drop schema {schema}: {e}");
        }
    };
    Some(TestStore::new(store).with_peer(peer).with_cleanup(cleanup))
}

jobstore_conformance::conformance_tests!(factory);
