//! Statements per add, counted from sqlx's own statement events (target
//! `sqlx::query`, one per statement sent) by a subscriber of this test
//! binary: a batch with unique keys, duplicates and replaces included, is
//! one statement (`add_unique_jobs`), and a batch without a key is the one
//! statement it always was (`add_jobs`); a batch with repeat rules is one
//! statement (`add_repeat_jobs.sql`, or `add_unique_jobs` with keys); a
//! release list of repeats, retries and ungets is one statement, and with
//! archives two, as without repeats; `waits_of` and `unblock_jobs` of
//! many jobs are one statement each, and so is `get_jobs`. One test in
//! this binary, so the global subscriber counts only its statements.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use std::time::Duration;

use jobstore_api::{JobRelease, JobResult, JobStore, NewJob, OnConflict, Release, Repeat, Unique};
use jobstore_conformance::services::{postgres_url, unique_namespace};
use jobstore_postgres::{PgStore, PgStoreOptions};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

const T0: i64 = 1_700_000_000_000;

/// The statements sqlx reported, as text.
static STATEMENTS: Mutex<Vec<String>> = Mutex::new(Vec::new());
static NEXT_SPAN: AtomicU64 = AtomicU64::new(1);

struct Statements;

struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0 += &format!("{}={value:?} ", field.name());
    }
}

impl Subscriber for Statements {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target() == "sqlx::query"
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(NEXT_SPAN.fetch_add(1, Ordering::Relaxed))
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        if event.metadata().target() == "sqlx::query" {
            let mut text = Text(String::new());
            event.record(&mut text);
            STATEMENTS.lock().unwrap().push(text.0);
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

fn taken() -> Vec<String> {
    std::mem::take(&mut *STATEMENTS.lock().unwrap())
}

#[test]
fn a_keyed_add_is_one_statement_and_a_plain_add_is_unchanged() {
    tracing::subscriber::set_global_default(Statements).expect("subscriber");
    jobstore_conformance::block_on(async {
        let Some(url) = postgres_url().await else {
            return;
        };
        let opts = PgStoreOptions::from_url(&url)
            .expect("url")
            .schema(unique_namespace())
            .max_connections(2);
        let store = PgStore::connect_with(opts).await.expect("connect");
        let outcome = count(&store).await;
        let drop = format!("DROP SCHEMA \"{}\" CASCADE", store.schema());
        sqlx::query(sqlx::AssertSqlSafe(drop))
            .execute(store.pool())
            .await
            .expect("drop schema");
        outcome.expect("statements");
    });
}

async fn count(store: &PgStore) -> Result<(), String> {
    let e = |e: jobstore_api::Error| e.to_string();
    let replace = |id: String, key: String| {
        NewJob::new(id, "t", "x").unique(Unique::new(key).on_conflict(OnConflict::ReplaceData))
    };
    let first: Vec<NewJob> = (0..50)
        .map(|i| replace(format!("a{i}"), format!("k{i}")))
        .collect();
    store.add_jobs(&first, T0).await.map_err(e)?;
    taken();
    // 50 duplicates of stored holders (replaced), 50 new, 50 duplicates
    // of those, and plain jobs.
    let mut batch: Vec<NewJob> = (0..100)
        .map(|i| replace(format!("b{i}"), format!("k{i}")))
        .chain((50..100).map(|i| replace(format!("c{i}"), format!("k{i}"))))
        .collect();
    batch.extend((0..10).map(|i| NewJob::new(format!("p{i}"), "t", "plain")));
    let out = store.add_jobs(&batch, T0 + 1).await.map_err(e)?;
    if out.new.len() != 60 || out.duplicates.len() != 100 {
        return Err(format!(
            "new {} duplicates {}",
            out.new.len(),
            out.duplicates.len()
        ));
    }
    let sent = taken();
    if sent.len() != 1 || !sent[0].contains("add_unique_jobs") {
        return Err(format!("a keyed batch sent {sent:#?}"));
    }
    let plain: Vec<NewJob> = (0..100)
        .map(|i| NewJob::new(format!("q{i}"), "t", "plain"))
        .collect();
    store.add_jobs(&plain, T0 + 2).await.map_err(e)?;
    let sent = taken();
    if sent.len() != 1
        || sent[0].contains("add_unique_jobs")
        || sent[0].contains("repeat")
        || !sent[0].contains("add_jobs")
    {
        return Err(format!("a plain batch sent {sent:#?}"));
    }

    // Repeat rules: a batch with some is one statement, keyed or not.
    let rule = Repeat::new("HOURLY");
    let mut repeating: Vec<NewJob> = (0..50)
        .map(|i| NewJob::new(format!("r{i}"), "r", "x").repeat(rule.clone()))
        .collect();
    repeating.extend((0..50).map(|i| NewJob::new(format!("rp{i}"), "r", "plain")));
    let out = store.add_jobs(&repeating, T0 + 3).await.map_err(e)?;
    let sent = taken();
    if out.new.len() != 100 || sent.len() != 1 || !sent[0].contains("$9::text[], $10, $11") {
        return Err(format!("a batch with rules: {out:?}, sent {sent:#?}"));
    }
    let keyed = [
        NewJob::new("rk", "r", "x")
            .repeat(rule.clone())
            .unique(Unique::new("rk")),
        NewJob::new("rk2", "r", "x").repeat(rule.clone()),
    ];
    let out = store.add_jobs(&keyed, T0 + 3).await.map_err(e)?;
    let sent = taken();
    if out.new.len() != 2 || sent.len() != 1 || !sent[0].contains("add_unique_jobs") {
        return Err(format!("a keyed batch with rules: {out:?}, sent {sent:#?}"));
    }
    let got = store
        .claim_jobs("r", 102, "sys-a", Duration::from_secs(60), T0 + 3)
        .await
        .map_err(e)?;
    taken();
    let how = |i: usize| match i % 4 {
        0 => Release::Retry {
            delay: Duration::ZERO,
        },
        1 => Release::Unget,
        _ => Release::Repeat {
            at: T0 + 3_600_000,
            result: JobResult::from_status(200),
            data: i.is_multiple_of(3).then(|| b"next".to_vec()),
        },
    };
    let list: Vec<JobRelease> = got[..60]
        .iter()
        .enumerate()
        .map(|(i, j)| JobRelease::new(j.id.clone(), how(i)))
        .collect();
    let released = store
        .release_jobs(&list, "sys-a", T0 + 4)
        .await
        .map_err(e)?;
    let sent = taken();
    if released.len() != 60 || sent.len() != 1 {
        return Err(format!("repeats, retries and ungets sent {sent:#?}"));
    }
    let list: Vec<JobRelease> = got[60..]
        .iter()
        .enumerate()
        .map(|(i, j)| match i % 2 {
            0 => JobRelease::new(j.id.clone(), how(2)),
            _ => JobRelease::new(j.id.clone(), Release::Archive(JobResult::from_status(200))),
        })
        .collect();
    let released = store
        .release_jobs(&list, "sys-a", T0 + 4)
        .await
        .map_err(e)?;
    let sent = taken();
    if released.len() != 42 || sent.len() != 2 {
        return Err(format!("repeats and archives sent {sent:#?}"));
    }

    // Dependencies: the waits of many jobs, and their unblock.
    store
        .add_jobs(&[NewJob::new("d", "d", "")], T0 + 5)
        .await
        .map_err(e)?;
    let ids: Vec<String> = (0..20).map(|i| format!("dw{i:02}")).collect();
    let waiters: Vec<NewJob> = ids
        .iter()
        .map(|id| NewJob::new(id.clone(), "dw", "").depends_on(["d"]))
        .collect();
    store.add_jobs(&waiters, T0 + 5).await.map_err(e)?;
    taken();
    let many = store.waits_of(&ids, 10).await.map_err(e)?;
    let sent = taken();
    if many.len() != 20 || sent.len() != 1 {
        return Err(format!("waits_of: {many:?}, sent {sent:#?}"));
    }
    let got = store.unblock_jobs(&ids, T0 + 6).await.map_err(e)?;
    let sent = taken();
    if got.len() != 20 || sent.len() != 1 {
        return Err(format!("unblock_jobs: {got:?}, sent {sent:#?}"));
    }

    // Reading many jobs, live and archived, known or not: one statement.
    let mut asked = ids.clone();
    asked.extend(["d".to_owned(), "rp0".to_owned(), "nope".to_owned()]);
    asked.extend(list.iter().map(|r| r.id.clone()));
    let many = store.get_jobs(&asked).await.map_err(e)?;
    let sent = taken();
    if many.len() != asked.len() - 1
        || sent.len() != 1
        || !sent[0].contains("archive WHERE id = ANY")
    {
        return Err(format!("get_jobs: {} jobs, sent {sent:#?}", many.len()));
    }
    Ok(())
}
