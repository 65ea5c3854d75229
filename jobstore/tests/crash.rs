//! SIGKILL between the journal and the store: what the daemon acknowledged
//! is in the store after a restart, and nothing is stored twice.

mod support;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobstore_api::JobStore;
use serde_json::json;
use support::*;

const WAIT: Duration = Duration::from_secs(60);

async fn stored_ids(store: &dyn JobStore, ids: &[String]) -> HashSet<String> {
    let mut found = HashSet::new();
    for id in ids {
        if store.get_job(id).await.unwrap().is_some() {
            found.insert(id.clone());
        }
    }
    found
}

async fn count_of(store: &dyn JobStore, jobtype: &str) -> u64 {
    store
        .job_counts(jobstore_api::now_millis())
        .await
        .unwrap()
        .iter()
        .find(|c| c.jobtype == jobtype)
        .map_or(0, |c| c.total())
}

async fn backlog(url: &str) -> Option<u64> {
    let (s, v) = json(http().get(format!("{url}/health"))).await;
    (s == 200).then(|| v["journal"]["backlog_records"].as_u64().unwrap())
}

/// The store is write-locked, so ingest cannot move anything: the jobs are
/// acknowledged from the journal alone. The daemon is then killed, the lock
/// released, the daemon started again: every acknowledged job reaches the
/// store, once.
#[test]
fn sigkill_between_journal_write_and_ingest_loses_nothing() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let mut d = DaemonProc::start(dir.path(), &Start::store(None));
        let c = http();

        // Another process holds SQLite's write lock: every store write waits.
        use sqlx::Connection;
        let db = dir
            .path()
            .join(jobstore_daemon::factory::DEFAULT_SQLITE_FILE);
        let mut lock = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
            .await
            .unwrap();
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut lock)
            .await
            .unwrap();

        let mut acked = Vec::new();
        for r in 0..5 {
            let body: String = (0..100).map(|i| format!("r{r} j{i}\n")).collect();
            let (s, v) = json(c.post(format!("{}/acme/job/t/add", d.url)).body(body)).await;
            assert_eq!(s, 200, "{v}");
            acked.extend(ids(&v).into_iter().map(|id| format!("acme-{id}")));
        }
        assert_eq!(
            backlog(&d.url).await,
            Some(500),
            "ingest is stalled by the lock"
        );
        d.kill9();
        sqlx::query("ROLLBACK").execute(&mut lock).await.unwrap();
        drop(lock);

        let store = jobstore_daemon::factory::open(None, dir.path())
            .await
            .unwrap();
        assert_eq!(
            count_of(&*store, "acme-t").await,
            0,
            "nothing reached the store before the kill"
        );

        let d = DaemonProc::start(dir.path(), &Start::store(None));
        eventually(WAIT, "journal drained", || async {
            (backlog(&d.url).await == Some(0)).then_some(())
        })
        .await;
        let found = stored_ids(&*store, &acked).await;
        assert_eq!(found.len(), acked.len(), "every acknowledged job is stored");
        assert_eq!(
            count_of(&*store, "acme-t").await,
            500,
            "none is stored twice"
        );
    });
}

/// Clients add with their own ids as fast as they can; the daemon is killed
/// at an arbitrary moment and restarted. Every acknowledged job is stored;
/// the only other stored jobs are ones whose requests were in flight.
#[test]
fn sigkill_under_load_loses_no_acknowledged_job() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let mut d = DaemonProc::start(dir.path(), &Start::store(None));
        let url = d.url.clone();
        let acked = Arc::new(Mutex::new(Vec::<String>::new()));
        let attempted = Arc::new(Mutex::new(Vec::<String>::new()));
        let mut clients = Vec::new();
        for client in 0..4 {
            let (acked, attempted, url) = (acked.clone(), attempted.clone(), url.clone());
            clients.push(tokio::spawn(async move {
                let c = http();
                for batch in 0.. {
                    let items: Vec<_> = (0..50)
                        .map(|i| json!({"id": format!("c{client}-b{batch}-{i}"), "data": "x"}))
                        .collect();
                    let ids: Vec<String> = (0..50)
                        .map(|i| format!("acme-c{client}-b{batch}-{i}"))
                        .collect();
                    attempted.lock().unwrap().extend(ids.iter().cloned());
                    match c
                        .post(format!("{url}/acme/job/t/add"))
                        .json(&items)
                        .send()
                        .await
                    {
                        Ok(r) if r.status() == 200 => acked.lock().unwrap().extend(ids),
                        _ => return,
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        d.kill9();
        for c in clients {
            c.await.unwrap();
        }
        let acked = acked.lock().unwrap().clone();
        let attempted = attempted.lock().unwrap().clone();
        assert!(acked.len() >= 200, "load ran: {} acknowledged", acked.len());

        let d = DaemonProc::start(dir.path(), &Start::store(None));
        eventually(WAIT, "journal drained", || async {
            (backlog(&d.url).await == Some(0)).then_some(())
        })
        .await;
        let store = jobstore_daemon::factory::open(None, dir.path())
            .await
            .unwrap();
        let found = stored_ids(&*store, &attempted).await;
        let missing: Vec<&String> = acked.iter().filter(|id| !found.contains(*id)).collect();
        assert!(missing.is_empty(), "acknowledged but lost: {missing:?}");
        let total = count_of(&*store, "acme-t").await;
        assert_eq!(
            total,
            found.len() as u64,
            "every stored job is one that was sent, once"
        );
        report(format!(
            "acknowledged {}, sent {}, stored {} ({} from requests in flight at the kill)",
            acked.len(),
            attempted.len(),
            total,
            total - acked.len() as u64
        ));
    });
}
