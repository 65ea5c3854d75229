//! MongoDB-specific behaviour beyond the shared suite: namespaces by URL
//! prefix, the declared payload limit against the server's document limit,
//! errors when no server answers, and the commands each operation sends.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use jobstore_api::limits::{MAX_ID_LEN, MAX_JOBTYPE_LEN, MAX_OUTPUT};
use jobstore_api::{
    ErrorKind, JobQuery, JobRelease, JobResult, JobState, JobStore, JobStoreExt, NewJob,
    OnConflict, Release, Repeat, ResultCode, Schedule, ScheduleAdvance, StatsDelta, StatsQuery,
    StatsResolution, Unique,
};
use jobstore_conformance::services;
use jobstore_mongo::{DEFAULT_WTIMEOUT, MongoOptions, MongoStore};
use mongodb::bson::doc;

const T0: i64 = 1_700_000_000_000;
const MIN: Duration = Duration::from_secs(60);

/// `url` with `path_and_query` appended after the host list.
fn with_path(url: &str, path_and_query: &str) -> String {
    let (base, _) = url.split_once('?').unwrap_or((url, ""));
    let (scheme, rest) = base.split_once("://").expect("a URL with a scheme");
    let hosts = rest.split('/').next().unwrap_or(rest);
    format!("{scheme}://{hosts}/{path_and_query}")
}

#[tokio::test]
async fn url_prefix_gives_separate_namespaces_in_one_database() {
    let Some(url) = services::mongo_url().await else {
        return;
    };
    let db = services::unique_namespace();
    let a = MongoStore::connect(&with_path(&url, &format!("{db}?jobstore_prefix=a_")))
        .await
        .expect("connect a");
    let b = MongoStore::connect(&with_path(&url, &format!("{db}?jobstore_prefix=b_")))
        .await
        .expect("connect b");
    assert_eq!((a.database().name(), a.prefix()), (db.as_str(), "a_"));
    let outcome = async {
        assert!(
            a.add_job(NewJob::new("same", "t", "in a"), T0)
                .await
                .unwrap()
        );
        assert_eq!(b.get_job("same").await.unwrap(), None);
        assert!(
            b.add_job(NewJob::new("same", "t", "in b"), T0)
                .await
                .unwrap()
        );
        assert_eq!(a.get_job("same").await.unwrap().unwrap().data, b"in a");
        let mut names = a.database().list_collection_names().await.unwrap();
        names.sort();
        for prefix in ["a_", "b_"] {
            for coll in ["jobs", "handlers"] {
                let name = format!("{prefix}{coll}");
                assert!(names.contains(&name), "{name} in {names:?}");
            }
        }
        b.drop_collections().await.unwrap();
        assert_eq!(b.get_job("same").await.unwrap(), None);
        assert!(a.get_job("same").await.unwrap().is_some());
    };
    then_drop(&a, outcome).await;
}

/// The largest job the store accepts (payload at the declared limit, the
/// longest id and jobtype, the largest result output) is stored and
/// archived by the server, so the server's own 16 MiB limit is never the
/// one that trips.
#[tokio::test]
async fn largest_job_fits_the_server_document_limit() {
    let Some((s, _)) = fresh_store().await else {
        return;
    };
    let outcome = async {
        let max = s.capabilities().max_payload;
        let id = "i".repeat(MAX_ID_LEN);
        let jobtype = "t".repeat(MAX_JOBTYPE_LEN);
        let data: Vec<u8> = (0..max).map(|i| (i % 253) as u8).collect();
        assert!(
            s.add_job(NewJob::new(&id, &jobtype, data.clone()), T0)
                .await
                .unwrap()
        );
        let got = s.claim_jobs(&jobtype, 1, "owner", MIN, T0).await.unwrap();
        assert_eq!(got.len(), 1);
        assert!(got[0].data == data, "payload read back");
        assert!(s.update_data(&id, "owner", &data, T0).await.unwrap());
        let result = JobResult::from_status(200).with_output(vec![b'o'; MAX_OUTPUT]);
        let rel = s
            .release_jobs(
                &[JobRelease::new(&id, Release::Archive(result.clone()))],
                "owner",
                T0,
            )
            .await
            .unwrap();
        assert_eq!(rel, vec![id.clone()]);
        let job = s.get_job(&id).await.unwrap().unwrap();
        assert_eq!((job.result, job.data.len()), (Some(result), max));
        let too_big = vec![0u8; max + 1];
        let err = s
            .add_jobs(&[NewJob::new("big", "t", too_big)], T0)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::TooLarge);
    };
    then_drop(&s, outcome).await;
}

/// Nothing listens on port 1: connecting is `Unavailable` (retryable), with
/// the driver's error as the cause.
#[tokio::test]
async fn no_server_is_unavailable() {
    let err = MongoStore::connect("mongodb://127.0.0.1:1/jobstore?serverSelectionTimeoutMS=300")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.is_retryable());
    assert!(std::error::Error::source(&err).is_some());
}

/// Waiting counts over more jobtypes than one aggregation takes (three
/// aggregations of at most 200 jobtypes), leaving out a jobtype whose only
/// job is archived and one whose only job is scheduled later.
#[tokio::test]
async fn waiting_counts_span_several_aggregations() {
    let Some((s, _)) = fresh_store().await else {
        return;
    };
    let outcome = async {
        let mut jobs: Vec<NewJob> = (0..401)
            .map(|i| NewJob::new(format!("j{i}"), format!("t{i:03}"), "x"))
            .collect();
        jobs.push(NewJob::new("extra", "t000", "x"));
        jobs.push(NewJob::new("arch", "archived", "x"));
        jobs.push(NewJob::new("later", "later", "x").run_at(T0 + 60_000));
        s.add_jobs(&jobs, T0).await.unwrap();
        assert_eq!(
            s.claim_jobs("archived", 1, "o", MIN, T0)
                .await
                .unwrap()
                .len(),
            1
        );
        let done = s
            .archive_jobs(&["arch".to_owned()], "o", JobResult::from_status(200), T0)
            .await
            .unwrap();
        assert_eq!(done.len(), 1);
        let mut counts = s.waiting_jobtypes(T0 + 1).await.unwrap();
        counts.sort_by(|a, b| a.jobtype.cmp(&b.jobtype));
        assert_eq!(
            counts.len(),
            401,
            "one entry per jobtype with a waiting job"
        );
        for (i, c) in counts.iter().enumerate() {
            assert_eq!(c.jobtype, format!("t{i:03}"));
            assert_eq!(c.count, if i == 0 { 2 } else { 1 }, "{}", c.jobtype);
        }
    };
    then_drop(&s, outcome).await;
}

/// The fallback for servers without `$unionWith` (before 4.4), forced on
/// this server: one capped count per jobtype gives the same answer.
#[tokio::test]
async fn waiting_counts_without_union_with() {
    let Some((s, _)) = fresh_store().await else {
        return;
    };
    let fallback = s.clone().without_union_with();
    let outcome = async {
        assert!(!fallback.uses_union_with());
        let mut jobs: Vec<NewJob> = (0..30)
            .map(|i| NewJob::new(format!("j{i}"), format!("t{:02}", i % 10), "x"))
            .collect();
        jobs.push(NewJob::new("later", "later", "x").run_at(T0 + 60_000));
        s.add_jobs(&jobs, T0).await.unwrap();
        let mut union = s.waiting_jobtypes(T0 + 1).await.unwrap();
        let mut each = fallback.waiting_jobtypes(T0 + 1).await.unwrap();
        union.sort_by(|a, b| a.jobtype.cmp(&b.jobtype));
        each.sort_by(|a, b| a.jobtype.cmp(&b.jobtype));
        assert_eq!(each.len(), 10, "{each:?}");
        assert!(each.iter().all(|c| c.count == 3), "{each:?}");
        assert_eq!(union, each);
    };
    then_drop(&s, outcome).await;
}

/// A TCP proxy to `upstream` that can stop passing bytes on ("freeze"),
/// as a server that accepts a request and never answers (a primary
/// waiting for a majority that is down, a half-open connection).
async fn freezing_proxy(upstream: String) -> (String, Arc<AtomicBool>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let frozen = Arc::new(AtomicBool::new(false));
    let fz = frozen.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                continue;
            };
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            tokio::spawn(pipe(cr, sw, fz.clone()));
            tokio::spawn(pipe(sr, cw, fz.clone()));
        }
    });
    (addr.to_string(), frozen)
}

/// Copies `from` to `to`, holding each chunk while `frozen` is set.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// The first `host:port` of a `mongodb://` URL.
fn first_host(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let hosts = rest.split(['/', '?']).next().unwrap_or(rest);
    let host = hosts.rsplit('@').next().unwrap_or(hosts);
    host.split(',').next().unwrap_or(host).to_owned()
}

/// A server that stops answering: each round trip gives up after
/// `jobstore_timeout_ms` with `Unavailable` instead of hanging, and the
/// store works again once the server answers.
#[tokio::test]
async fn a_server_that_stops_answering_is_unavailable_after_the_timeout() {
    let Some(url) = services::mongo_url().await else {
        return;
    };
    let (proxy, frozen) = freezing_proxy(first_host(&url)).await;
    let ns = services::unique_namespace();
    let s = MongoStore::connect(&format!(
        "mongodb://{proxy}/{ns}?directConnection=true&jobstore_timeout_ms=700"
    ))
    .await
    .expect("connect through the proxy");
    let outcome = async {
        s.add_job(NewJob::new("j", "t", "x"), T0).await.unwrap();
        frozen.store(true, Ordering::SeqCst);
        let started = std::time::Instant::now();
        let err = s.claim_jobs("t", 1, "A", MIN, T0).await.unwrap_err();
        let took = started.elapsed();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
        assert!(err.to_string().contains("jobstore_timeout_ms"), "{err}");
        assert!(took < Duration::from_secs(3), "gave up after {took:?}");
        let err = s.add_job(NewJob::new("k", "t", "x"), T0).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
        frozen.store(false, Ordering::SeqCst);
        let mut got = Vec::new();
        for _ in 0..20 {
            match s.claim_jobs("t", 2, "A", MIN, T0 + 1).await {
                Ok(g) => {
                    got = g;
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        assert!(!got.is_empty(), "the store works again");
    };
    let result = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(outcome)).await;
    frozen.store(false, Ordering::SeqCst);
    s.database().drop().await.expect("drop test database");
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// `jobstore_max_payload` lowers the payload limit (a service with a
/// smaller document limit): the store declares it and rejects larger
/// payloads as `TooLarge` before sending them.
#[tokio::test]
async fn max_payload_from_the_url() {
    let Some(url) = services::mongo_url().await else {
        return;
    };
    let ns = services::unique_namespace();
    let s = MongoStore::connect(&with_path(
        &url,
        &format!("{ns}?jobstore_max_payload=1048576"),
    ))
    .await
    .expect("connect");
    let outcome = async {
        assert_eq!(s.capabilities().max_payload, 1 << 20);
        assert!(
            s.add_job(NewJob::new("ok", "t", vec![1u8; 1 << 20]), T0)
                .await
                .unwrap()
        );
        let err = s
            .add_job(NewJob::new("big", "t", vec![1u8; (1 << 20) + 1]), T0)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::TooLarge);
        assert_eq!(s.get_job("big").await.unwrap(), None);
    };
    then_drop(&s, outcome).await;
}

/// Documents written by other tools: integral doubles (what the shell
/// writes) are read as integers; a document that cannot be read is
/// skipped and counted, and the jobtype's other jobs are still claimed.
#[tokio::test]
async fn malformed_documents_do_not_starve_a_jobtype() {
    let Some((s, _)) = fresh_store().await else {
        return;
    };
    let outcome = async {
        let jobs = s.database().collection::<mongodb::bson::Document>("jobs");
        let bin = |b: &[u8]| mongodb::bson::Binary {
            subtype: mongodb::bson::spec::BinarySubtype::Generic,
            bytes: b.to_vec(),
        };
        insert_unreadable(&s).await;
        // Written by the shell: every number a double.
        jobs.insert_one(doc! {
            "_id": "shell", "id": "shell", "jobtype": "t", "data": bin(b"s"),
            "priority": 5.0_f64, "dt": (T0 - 5) as f64, "lock": "", "attempts": 0.0_f64,
            "create_dt": (T0 - 5) as f64,
        })
        .await
        .unwrap();
        s.add_job(NewJob::new("good", "t", "g"), T0).await.unwrap();
        let before = s.skipped_documents();
        // A claim of one: the unreadable first candidate must not make it
        // come back empty.
        let got = s.claim_jobs("t", 1, "A", MIN, T0).await.unwrap();
        let ids: Vec<&str> = got.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(ids, ["shell"]);
        assert_eq!(
            (got[0].priority, got[0].attempts, got[0].data.as_slice()),
            (5, 1, &b"s"[..])
        );
        assert!(
            s.skipped_documents() > before,
            "the unreadable document was reported"
        );
        let bad = jobs.find_one(doc! { "_id": "bad" }).await.unwrap().unwrap();
        assert_eq!(bad.get_str("lock").unwrap(), "", "never locked");
        // A round that skipped the unreadable candidate but lost nothing to
        // a racer is followed by one that keeps to the order: the best
        // remaining job, not one of many candidates in a shuffled order.
        let low: Vec<NewJob> = (0..100)
            .map(|i| NewJob::new(format!("low{i:03}"), "t", "l").priority(-1))
            .collect();
        s.add_jobs(&low, T0).await.unwrap();
        let got = s.claim_jobs("t", 2, "A", MIN, T0).await.unwrap();
        let ids: Vec<&str> = got.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(ids, ["good", "low000"]);
    };
    then_drop(&s, outcome).await;
}

/// Many claimers of one jobtype at once: no job is handed out twice, and
/// while enough jobs wait every batch comes back full.
#[tokio::test]
async fn many_claimers_get_full_batches_and_no_job_twice() {
    let Some((s, url)) = fresh_store().await else {
        return;
    };
    let ns = s.database().name().to_owned();
    const CLAIMERS: usize = 8;
    const BATCH: usize = 10;
    const ROUNDS: usize = 3;
    let outcome = async {
        // More jobs than all the claims take, so every batch can be full.
        let jobs: Vec<NewJob> = (0..CLAIMERS * BATCH * ROUNDS + 40)
            .map(|i| NewJob::new(format!("j{i:04}"), "t", "x"))
            .collect();
        s.add_jobs(&jobs, T0).await.unwrap();
        let mut tasks = tokio::task::JoinSet::new();
        // Claim rounds (candidate queries), counted through the hook.
        let rounds = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        for n in 0..CLAIMERS {
            // Separate clients, so the claims really run at once.
            let r = rounds.clone();
            let c = MongoStore::connect_with(&url, MongoOptions::default().database(&ns))
                .await
                .expect("connect a claimer")
                .with_round_trip_hook(Arc::new(move |op, k| {
                    if op == "claim" && k == 1 {
                        r.fetch_add(1, Ordering::SeqCst);
                    }
                    Box::pin(async { Ok(()) })
                }));
            tasks.spawn(async move {
                let owner = format!("claimer-{n}");
                let mut batches = Vec::new();
                for _ in 0..ROUNDS {
                    let got = c.claim_jobs("t", BATCH, &owner, MIN, T0 + 1).await.unwrap();
                    batches.push(got.into_iter().map(|j| j.id).collect::<Vec<_>>());
                }
                batches
            });
        }
        let mut seen = std::collections::HashSet::new();
        let mut sizes = Vec::new();
        while let Some(batches) = tasks.join_next().await {
            for batch in batches.unwrap() {
                sizes.push(batch.len());
                for id in batch {
                    assert!(seen.insert(id.clone()), "{id} handed out twice");
                }
            }
        }
        let rounds = rounds.load(Ordering::SeqCst);
        println!(
            "many claimers: {} claims in {rounds} rounds, batch sizes {sizes:?}",
            sizes.len()
        );
        assert!(
            sizes.iter().all(|n| *n == BATCH),
            "short batches: {sizes:?}"
        );
        assert_eq!(seen.len(), CLAIMERS * BATCH * ROUNDS);
    };
    then_drop(&s, outcome).await;
}

/// A purge deletes in bounded batches (here 10 a round trip): 25 old
/// archived jobs take three deletes, and newer archived jobs, waiting and
/// running jobs stay.
#[tokio::test]
async fn purge_deletes_in_bounded_batches() {
    let Some((s, _)) = fresh_store().await else {
        return;
    };
    let deletes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let d = deletes.clone();
    let batched = s
        .clone()
        .with_purge_batch(10)
        .with_round_trip_hook(Arc::new(move |op, _| {
            if op == "purge" {
                d.fetch_add(1, Ordering::SeqCst);
            }
            Box::pin(async { Ok(()) })
        }));
    let outcome = async {
        let old: Vec<NewJob> = (0..25)
            .map(|i| NewJob::new(format!("old{i:02}"), "t", "x"))
            .collect();
        s.add_jobs(&old, T0).await.unwrap();
        let got = s.claim_jobs("t", 25, "o", MIN, T0).await.unwrap();
        let ids: Vec<String> = got.into_iter().map(|j| j.id).collect();
        let archived = s
            .archive_jobs(&ids, "o", JobResult::from_status(200), T0)
            .await
            .unwrap();
        assert_eq!(archived.len(), 25);
        s.add_jobs(
            &[
                NewJob::new("new", "n", "x"),
                NewJob::new("waiting", "w", "x"),
            ],
            T0,
        )
        .await
        .unwrap();
        assert_eq!(s.claim_jobs("n", 1, "o", MIN, T0).await.unwrap().len(), 1);
        let kept = s
            .archive_jobs(
                &["new".to_owned()],
                "o",
                JobResult::from_status(200),
                T0 + 5000,
            )
            .await
            .unwrap();
        assert_eq!(kept.len(), 1);
        let all = ResultCode::ALL;
        assert_eq!(batched.purge_archived(T0 + 1000, &all).await.unwrap(), 25);
        assert_eq!(deletes.load(Ordering::SeqCst), 3, "25 jobs, 10 a batch");
        assert!(s.get_job("old00").await.unwrap().is_none());
        assert!(s.get_job("new").await.unwrap().is_some());
        assert!(s.get_job("waiting").await.unwrap().is_some());
        assert_eq!(batched.purge_archived(T0 + 1000, &all).await.unwrap(), 0);
    };
    then_drop(&s, outcome).await;
}

/// The shared check of batched purges, with counts that are exact
/// multiples of the batch: a delete that comes back full is followed by
/// another.
#[tokio::test]
async fn purge_is_exact_across_batches() {
    let Some((s, _)) = fresh_store().await else {
        return;
    };
    let batched = s.clone().with_purge_batch(10);
    let check = jobstore_conformance::checks::purge_is_exact_across_batches(&batched, 10);
    then_drop(&s, check).await;
}

/// On a standalone server (the emulator) the store declares no
/// notifications and polls; where change streams are tried and refused,
/// `watch` falls back to polling too.
#[tokio::test]
async fn watch_polls_where_change_streams_are_missing_or_refused() {
    let Some((s, _)) = fresh_store().await else {
        return;
    };
    let outcome = async {
        let caps = s.capabilities();
        let w = s.watch().await.unwrap();
        assert_eq!(caps.notifications, w.is_notified());
        // Set by the hosted workflow, which runs a replica set.
        if std::env::var("JOBSTORE_MONGO_EXPECT_CHANGE_STREAMS").is_ok_and(|v| v == "1") {
            assert!(caps.notifications, "a replica set offers change streams");
        }
        if !caps.notifications {
            let forced = s.clone().with_change_streams();
            let w = forced.watch().await.unwrap();
            println!(
                "change stream forced on a standalone server: notified = {}",
                w.is_notified()
            );
            assert!(
                !w.is_notified(),
                "a standalone server refuses change streams"
            );
        }
    };
    then_drop(&s, outcome).await;
}

/// The commands a store sends on its jobs and stats collections, as the
/// driver reports them (name and command document).
type Sent = Arc<std::sync::Mutex<Vec<(String, mongodb::bson::Document)>>>;

/// The names of the commands `sent` logged since it was last emptied;
/// empties it.
fn sent_names(sent: &Sent) -> Vec<String> {
    std::mem::take(&mut *sent.lock().unwrap())
        .into_iter()
        .map(|(n, _)| n)
        .collect()
}

/// Inserts job `bad` of jobtype `t`, written by another tool: the first
/// candidate of a claim (highest priority, oldest) and unreadable (its
/// payload is a string).
async fn insert_unreadable(s: &MongoStore) {
    s.database()
        .collection::<mongodb::bson::Document>("jobs")
        .insert_one(doc! {
            "_id": "bad", "id": "bad", "jobtype": "t", "data": "not binary",
            "priority": 9_i64, "dt": T0 - 10, "lock": "", "attempts": 0_i64,
            "create_dt": T0 - 10,
        })
        .await
        .unwrap();
}

/// A store whose commands on `jobs` and `stats` are recorded in the
/// returned list.
async fn observed_store(url: &str, ns: &str) -> (MongoStore, Sent) {
    observed_store_of(url, ns, &["jobs", "stats"]).await
}

/// A store whose commands on the collections `colls` (and every `getMore`)
/// are recorded in the returned list.
async fn observed_store_of(
    url: &str,
    ns: &str,
    colls: &'static [&'static str],
) -> (MongoStore, Sent) {
    use mongodb::event::EventHandler;
    use mongodb::event::command::CommandEvent;
    let sent: Sent = Arc::default();
    let log = sent.clone();
    let store = MongoStore::connect_observed(
        url,
        MongoOptions::default().database(ns),
        EventHandler::callback(move |ev: CommandEvent| {
            if let CommandEvent::Started(e) = ev {
                let on_jobs = e
                    .command
                    .get(&e.command_name)
                    .and_then(|v| v.as_str())
                    .is_some_and(|c| colls.contains(&c))
                    || e.command_name == "getMore";
                if on_jobs {
                    log.lock()
                        .unwrap()
                        .push((e.command_name.clone(), e.command.clone()));
                }
            }
        }),
    )
    .await
    .expect("connect");
    (store, sent)
}

/// Round trips: a claim of 150 jobs is one `find` (batch size 150: no
/// `getMore`, where the default first batch of 101 would need one), one
/// `update` and one read-back `find`; the candidate query and the count
/// queries carry the claim index's hint.
#[tokio::test]
async fn claims_and_counts_take_one_batch_and_the_claim_index() {
    let Some(url) = services::mongo_url().await else {
        return;
    };
    let ns = services::unique_namespace();
    let (s, sent) = observed_store(&url, &ns).await;
    let outcome = async {
        let jobs: Vec<NewJob> = (0..160)
            .map(|i| NewJob::new(format!("j{i:03}"), "t", "x"))
            .collect();
        s.add_jobs(&jobs, T0).await.unwrap();
        sent.lock().unwrap().clear();
        let got = s.claim_jobs("t", 150, "o", MIN, T0).await.unwrap();
        assert_eq!(got.len(), 150);
        let claim: Vec<(String, mongodb::bson::Document)> =
            std::mem::take(&mut *sent.lock().unwrap());
        let names: Vec<&str> = claim.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["find", "update", "find"], "one round trip each");
        let find = &claim[0].1;
        assert_eq!(find.get_str("hint").ok(), Some("claim"), "{find}");
        // The driver asks for one more than the limit when they are equal,
        // so the server closes the cursor with the first batch.
        let batch = find
            .get_i32("batchSize")
            .map(i64::from)
            .or(find.get_i64("batchSize"))
            .unwrap_or(0);
        assert!(batch >= 150, "{find}");
        let limit = find
            .get_i64("limit")
            .or(find.get_i32("limit").map(i64::from));
        assert_eq!(limit.ok(), Some(150), "the candidates wanted: {find}");
        let read_back = &claim[2].1;
        assert!(read_back.contains_key("batchSize"), "{read_back}");
        // A second jobtype with waiting jobs: still one counting aggregation.
        s.add_jobs(&[NewJob::new("u1", "u", "x")], T0)
            .await
            .unwrap();
        sent.lock().unwrap().clear();
        s.job_counts(T0).await.unwrap();
        let waiting = s.waiting_jobtypes(T0).await.unwrap();
        assert_eq!(waiting.len(), 2, "{waiting:?}");
        let counts = std::mem::take(&mut *sent.lock().unwrap());
        let aggregates: Vec<&mongodb::bson::Document> = counts
            .iter()
            .filter(|(n, _)| n == "aggregate")
            .map(|(_, c)| c)
            .collect();
        assert_eq!(
            aggregates.len(),
            4,
            "two for job_counts; for waiting counts one listing the jobtypes, one counting"
        );
        for a in &aggregates {
            assert!(a.contains_key("hint"), "{a}");
        }
        for a in &aggregates {
            let stages = a.get_array("pipeline").unwrap();
            for stage in stages {
                let stage = stage.as_document().unwrap();
                if let Ok(p) = stage.get_document("$project") {
                    assert!(!p.contains_key("data"), "no payload is projected: {a}");
                }
            }
        }
        // A release is one `update` command with the store's write concern,
        // also when its jobs have different outcomes (one statement each).
        let done = Release::Archive(JobResult::from_status(200));
        let released = s
            .release_jobs(
                &[
                    JobRelease::new("j000", done),
                    JobRelease::new("j001", Release::Unget),
                ],
                "o",
                T0,
            )
            .await
            .unwrap();
        assert_eq!(released.len(), 2);
        let sent = std::mem::take(&mut *sent.lock().unwrap());
        let updates: Vec<&mongodb::bson::Document> = sent
            .iter()
            .filter(|(n, c)| n == "update" && c.contains_key("updates"))
            .map(|(_, c)| c)
            .collect();
        assert_eq!(updates.len(), 1, "{sent:?}");
        let statements = updates[0].get_array("updates").unwrap();
        assert_eq!(statements.len(), 2, "{statements:?}");
        let wc = updates[0].get_document("writeConcern").unwrap();
        assert_eq!(wc.get_str("w").ok(), Some("majority"), "{wc}");
        let wtimeout = wc
            .get_i64("wtimeout")
            .or(wc.get_i32("wtimeout").map(i64::from));
        let default_ms = i64::try_from(DEFAULT_WTIMEOUT.as_millis()).unwrap();
        assert_eq!(wtimeout.ok(), Some(default_ms), "{wc}");
    };
    then_drop(&s, outcome).await;
}

/// `get_jobs` of 150 jobs (and 10 unknown ids) is one `find` (batch size
/// at least the ids asked: no `getMore`, where the default first batch
/// of 101 would need one).
#[tokio::test]
async fn get_jobs_is_one_find() {
    let Some(url) = services::mongo_url().await else {
        return;
    };
    let ns = services::unique_namespace();
    let (s, sent) = observed_store(&url, &ns).await;
    let outcome = async {
        let jobs: Vec<NewJob> = (0..150)
            .map(|i| NewJob::new(format!("j{i:03}"), "t", "x"))
            .collect();
        s.add_jobs(&jobs, T0).await.unwrap();
        let asked: Vec<String> = (0..160).map(|i| format!("j{i:03}")).collect();
        sent.lock().unwrap().clear();
        let got = s.get_jobs(&asked).await.unwrap();
        assert_eq!(got.len(), 150);
        let sent = std::mem::take(&mut *sent.lock().unwrap());
        let names: Vec<&str> = sent.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["find"], "one round trip");
        let find = &sent[0].1;
        let batch = find
            .get_i32("batchSize")
            .map(i64::from)
            .or(find.get_i64("batchSize"))
            .unwrap_or(0);
        assert!(batch >= 160, "{find}");
    };
    then_drop(&s, outcome).await;
}

/// A renew or a release (as every by-id update) is one update command; the
/// read-back of its token follows only when the update matched some of the
/// ids but not all of them.
#[tokio::test]
async fn by_id_updates_read_back_only_a_partial_match() {
    let Some(url) = services::mongo_url().await else {
        return;
    };
    let ns = services::unique_namespace();
    let (s, sent) = observed_store(&url, &ns).await;
    let outcome = async {
        let jobs: Vec<NewJob> = (0..3)
            .map(|i| NewJob::new(format!("j{i}"), "t", "x"))
            .collect();
        s.add_jobs(&jobs, T0).await.unwrap();
        assert_eq!(s.claim_jobs("t", 2, "o", MIN, T0).await.unwrap().len(), 2);
        let renew = async |ids: &[&str]| {
            sent.lock().unwrap().clear();
            let ids: Vec<String> = ids.iter().map(|&i| i.to_owned()).collect();
            let mut renewed = s.renew_locks(&ids, "o", MIN, T0 + 1).await.unwrap().renewed;
            renewed.sort();
            let names = sent_names(&sent);
            (renewed, names)
        };
        assert_eq!(
            renew(&["j0", "j1"]).await,
            (
                vec!["j0".to_owned(), "j1".to_owned()],
                vec!["update".to_owned()]
            ),
            "all matched: no read-back"
        );
        assert_eq!(
            renew(&["j2", "nope"]).await,
            (vec![], vec!["update".to_owned()]),
            "none matched: no read-back"
        );
        assert_eq!(
            renew(&["j0", "j2"]).await,
            (
                vec!["j0".to_owned()],
                vec!["update".to_owned(), "find".to_owned()]
            ),
            "some matched: the token's read-back"
        );
        let release = async |ids: &[&str]| {
            sent.lock().unwrap().clear();
            let ids: Vec<String> = ids.iter().map(|&i| i.to_owned()).collect();
            let mut released = s
                .release_all(&ids, "o", &Release::Unget, T0 + 2)
                .await
                .unwrap();
            released.sort();
            let names = sent_names(&sent);
            (released, names)
        };
        assert_eq!(
            release(&["j2", "nope"]).await,
            (vec![], vec!["update".to_owned()]),
            "a release that matched none: no read-back"
        );
        assert_eq!(
            release(&["j0", "j2"]).await,
            (
                vec!["j0".to_owned()],
                vec!["update".to_owned(), "find".to_owned()]
            ),
            "a release that matched some: the token's read-back"
        );
        assert_eq!(
            release(&["j1"]).await,
            (vec!["j1".to_owned()], vec!["update".to_owned()]),
            "a release that matched all: no read-back"
        );
    };
    then_drop(&s, outcome).await;
}

/// Round trips of unique keys: a plain batch is one `insert`, as before
/// keys existed, and so is a keyed batch that meets no holder; a keyed
/// batch meeting holders (stored, earlier in the batch, a replayed id) is
/// the insert and one `find`; a `ReplaceData` of a free holder one
/// `update` more; a window one `aggregate` first. Archives carry the
/// `$rename` of `ukey` on every statement (plain jobs too: an operator on
/// a missing field) and no other command; a run again refused by a held
/// key is its read and its `update`, and the job stays archived.
#[tokio::test]
async fn keyed_adds_take_a_bounded_number_of_round_trips() {
    let Some(url) = services::mongo_url().await else {
        return;
    };
    let ns = services::unique_namespace();
    let (s, sent) = observed_store(&url, &ns).await;
    let outcome = async {
        let keyed = |id: &str, key: &str| NewJob::new(id, "t", id).unique(Unique::new(key));
        let plain: Vec<NewJob> = (0..3)
            .map(|i| NewJob::new(format!("p{i}"), "t", "x"))
            .collect();
        sent.lock().unwrap().clear();
        assert_eq!(s.add_jobs(&plain, T0).await.unwrap().new.len(), 3);
        assert_eq!(sent_names(&sent), ["insert"], "a plain batch");
        let out = s
            .add_jobs(&[keyed("a", "ka"), keyed("b", "kb")], T0)
            .await
            .unwrap();
        assert_eq!(out.new, ["a", "b"]);
        assert_eq!(sent_names(&sent), ["insert"], "keys that nobody holds");
        let out = s
            .add_jobs(
                &[
                    keyed("a", "other"),
                    keyed("a2", "ka"),
                    keyed("c", "kc"),
                    keyed("c2", "kc"),
                    NewJob::new("p0", "t", "x"),
                ],
                T0,
            )
            .await
            .unwrap();
        assert_eq!(out.new, ["c"]);
        assert_eq!(out.existing, ["a", "p0"]);
        let dups: Vec<_> = out
            .duplicates
            .iter()
            .map(|d| (d.id.as_str(), d.existing.as_str(), d.replaced))
            .collect();
        assert_eq!(dups, [("a2", "a", false), ("c2", "c", false)]);
        assert_eq!(sent_names(&sent), ["insert", "find"], "holders met");
        let replace = NewJob::new("b2", "t", "new b")
            .unique(Unique::new("kb").on_conflict(OnConflict::ReplaceData));
        let out = s.add_jobs(&[replace], T0).await.unwrap();
        assert!(out.duplicates[0].replaced);
        assert_eq!(sent_names(&sent), ["insert", "find", "update"], "replace");
        assert_eq!(s.get_job("b").await.unwrap().unwrap().data, b"new b");
        // Archive "a" (key ka) and a plain job in one release.
        assert_eq!(s.claim_jobs("t", 10, "o", MIN, T0).await.unwrap().len(), 6);
        sent.lock().unwrap().clear();
        let how = Release::Archive(JobResult::from_status(200));
        let done = s
            .release_all(&["a".to_owned(), "p1".to_owned()], "o", &how, T0 + 1)
            .await
            .unwrap();
        assert_eq!(done.len(), 2);
        let log = std::mem::take(&mut *sent.lock().unwrap());
        let names: Vec<&str> = log.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["update"], "a release");
        let statement = log[0].1.get_array("updates").unwrap()[0]
            .as_document()
            .unwrap()
            .clone();
        let u = statement.get_document("u").unwrap();
        assert_eq!(
            u.get_document("$rename").unwrap(),
            &doc! { "ukey": "ukey_done" },
            "{statement}"
        );
        assert!(!statement.get_document("q").unwrap().contains_key("ukey"));
        // A window: the newest archive of the key first.
        let windowed = |id: &str| {
            NewJob::new(id, "t", id).unique(Unique::new("ka").window(Duration::from_secs(60)))
        };
        let out = s.add_jobs(&[windowed("a3")], T0 + 2).await.unwrap();
        assert_eq!(out.duplicates[0].existing, "a");
        assert_eq!(sent_names(&sent), ["aggregate", "find"], "inside a window");
        let out = s.add_jobs(&[windowed("a4")], T0 + 61_001).await.unwrap();
        assert_eq!(out.new, ["a4"]);
        assert_eq!(
            sent_names(&sent),
            ["aggregate", "insert", "aggregate"],
            "after the window: the look-up again after the insert"
        );
        // "a4" holds ka: "a" cannot take it back.
        let rerun = s
            .rerun_jobs(&["a".to_owned()], Duration::ZERO, T0 + 61_002)
            .await
            .unwrap();
        assert!(rerun.is_empty(), "{rerun:?}");
        assert_eq!(sent_names(&sent), ["find", "update"], "a refused run again");
        let a = s.get_job("a").await.unwrap().unwrap();
        assert_eq!(a.state(T0 + 61_002), JobState::Archived);
        assert_eq!(
            a.flow.and_then(|f| f.unique_key),
            Some("ka".to_owned()),
            "an archived job keeps its key in reads"
        );
    };
    then_drop(&s, outcome).await;
}

/// Review finding (sharded `jobs`): where MongoDB refuses the unique-key
/// index (here: live documents already sharing a `ukey`, which a real
/// server refuses with 11000 and the emulator with its own error; a
/// `jobs` sharded on `{_id: "hashed"}` refuses it with
/// `CannotCreateIndex`), the connect still succeeds; the store declares
/// no unique keys, answers a keyed add with `Unsupported`, and serves
/// plain jobs.
#[tokio::test]
async fn a_refused_unique_key_index_leaves_plain_jobs_working() {
    let Some(url) = services::mongo_url().await else {
        return;
    };
    let ns = services::unique_namespace();
    let client = mongodb::Client::with_uri_str(&url).await.unwrap();
    let jobs = client
        .database(&ns)
        .collection::<mongodb::bson::Document>("jobs");
    jobs.insert_many([
        doc! { "_id": "x1", "ukey": "t/k" },
        doc! { "_id": "x2", "ukey": "t/k" },
    ])
    .await
    .unwrap();
    let s = MongoStore::connect_with(&url, MongoOptions::default().database(&ns))
        .await
        .expect("the connect succeeds without the unique-key index");
    let outcome = async {
        assert!(!s.uses_unique_keys());
        assert!(!s.capabilities().unique_jobs);
        jobs.delete_many(doc! {}).await.unwrap();
        let keyed = NewJob::new("k", "t", "k").unique(Unique::new("k"));
        let err = s.add_jobs(&[keyed], T0).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
        let out = s
            .add_jobs(
                &[NewJob::new("p", "t", "x"), NewJob::new("q", "t", "y")],
                T0,
            )
            .await
            .unwrap();
        assert_eq!(out.new, ["p", "q"]);
        let claimed = s.claim_jobs("t", 5, "o", MIN, T0).await.unwrap();
        assert_eq!(claimed.len(), 2);
        let how = Release::Archive(JobResult::from_status(200));
        let ids = ["p".to_owned(), "q".to_owned()];
        assert_eq!(
            s.release_all(&ids, "o", &how, T0 + 1).await.unwrap().len(),
            2
        );
        let p = s.get_job("p").await.unwrap().unwrap();
        assert_eq!(p.state(T0 + 1), JobState::Archived);
        assert_eq!(p.flow, None);
        // On a collection that takes the index, the store offers keys.
        jobs.drop().await.unwrap();
        let again = MongoStore::connect_with(&url, MongoOptions::default().database(&ns))
            .await
            .unwrap();
        assert!(again.uses_unique_keys() && again.capabilities().unique_jobs);
    };
    then_drop(&s, outcome).await;
}

/// A claim whose query gave every eligible job there was (fewer than it
/// asked for) takes no second round, even when it skipped one it could
/// not read: one query, one update, one read-back.
#[tokio::test]
async fn a_claim_that_saw_every_candidate_takes_one_round() {
    let Some(url) = services::mongo_url().await else {
        return;
    };
    let ns = services::unique_namespace();
    let (s, sent) = observed_store(&url, &ns).await;
    let outcome = async {
        insert_unreadable(&s).await;
        let good = [NewJob::new("g1", "t", "1"), NewJob::new("g2", "t", "2")];
        s.add_jobs(&good, T0).await.unwrap();
        sent.lock().unwrap().clear();
        let got = s.claim_jobs("t", 5, "o", MIN, T0).await.unwrap();
        assert_eq!(got.len(), 2);
        let names = sent_names(&sent);
        assert_eq!(names, ["find", "update", "find"]);
    };
    then_drop(&s, outcome).await;
}

/// A purge that finds fewer archived jobs than its slice holds is one
/// query and one delete: it does not look again. The query names the
/// codes purged and carries the purge index's hint.
#[tokio::test]
async fn a_purge_of_less_than_a_slice_is_one_round() {
    let Some(url) = services::mongo_url().await else {
        return;
    };
    let ns = services::unique_namespace();
    let (s, sent) = observed_store(&url, &ns).await;
    let outcome = async {
        let jobs: Vec<NewJob> = (0..3)
            .map(|i| NewJob::new(format!("j{i}"), "t", "x"))
            .collect();
        s.add_jobs(&jobs, T0).await.unwrap();
        let got = s.claim_jobs("t", 3, "o", MIN, T0).await.unwrap();
        let ids: Vec<String> = got.into_iter().map(|j| j.id).collect();
        let done = Release::Archive(JobResult::from_status(200));
        s.release_all(&ids, "o", &done, T0).await.unwrap();
        sent.lock().unwrap().clear();
        let codes = [ResultCode::Ok, ResultCode::Error];
        assert_eq!(s.purge_archived(T0 + 1, &codes).await.unwrap(), 3);
        let purge: Vec<(String, mongodb::bson::Document)> =
            std::mem::take(&mut *sent.lock().unwrap());
        let names: Vec<&str> = purge.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["find", "delete"]);
        let find = &purge[0].1;
        assert_eq!(find.get_str("hint").ok(), Some("purge_codes"), "{find}");
        let filter = find.get_document("filter").unwrap();
        let asked = filter.get_document("result.code").unwrap().get_array("$in");
        assert_eq!(asked.unwrap(), &vec!["ok".into(), "error".into()], "{find}");
    };
    then_drop(&s, outcome).await;
}

/// A page of jobs is one `find` on the index of its state's order, with
/// the sort, `limit + 1` and no payload; a page of named jobtypes reads
/// no jobtype list, a page of every jobtype one aggregation first. A
/// cursor's page keeps the index and the sort.
#[tokio::test]
async fn a_page_is_one_find_on_its_index() {
    let Some(url) = services::mongo_url().await else {
        return;
    };
    let ns = services::unique_namespace();
    let (s, sent) = observed_store(&url, &ns).await;
    let outcome = async {
        let jobs: Vec<NewJob> = (0..6)
            .map(|i| NewJob::new(format!("j{i}"), "t", "x"))
            .collect();
        s.add_jobs(&jobs, T0).await.unwrap();
        let got = s.claim_jobs("t", 3, "o", MIN, T0).await.unwrap();
        let ids: Vec<String> = got.into_iter().map(|j| j.id).collect();
        let done = Release::Archive(JobResult::from_status(500));
        s.release_all(&ids, "o", &done, T0).await.unwrap();
        let cases = [
            (
                JobQuery::new(JobState::Archived).codes([ResultCode::Error]),
                "list_archived",
                vec!["find"],
            ),
            (
                JobQuery::new(JobState::Waiting).jobtypes(["t"]),
                "claim",
                vec!["find"],
            ),
            (
                JobQuery::new(JobState::Scheduled),
                "list_due",
                vec!["aggregate", "find"],
            ),
        ];
        for (query, index, names) in cases {
            let query = query.limit(2);
            sent.lock().unwrap().clear();
            let page = s.list_jobs(&query, T0).await.unwrap();
            let log = std::mem::take(&mut *sent.lock().unwrap());
            let got: Vec<&str> = log.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(got, names, "{query:?}");
            let find = &log.last().unwrap().1;
            assert_eq!(find.get_str("hint").ok(), Some(index), "{find}");
            assert!(find.contains_key("sort"), "{find}");
            let limit = find
                .get_i64("limit")
                .or(find.get_i32("limit").map(i64::from));
            assert_eq!(limit.ok(), Some(3), "{find}");
            let projection = find.get_document("projection").unwrap();
            assert!(projection.contains_key("data"), "no payload: {find}");
            if let Some(next) = page.next {
                sent.lock().unwrap().clear();
                s.list_jobs(&query.clone().after(Some(next)), T0)
                    .await
                    .unwrap();
                let log = std::mem::take(&mut *sent.lock().unwrap());
                let find = &log.last().unwrap().1;
                assert_eq!(find.get_str("hint").ok(), Some(index), "{find}");
                let filter = find.get_document("filter").unwrap();
                assert!(filter.contains_key("$or"), "keyset: {find}");
            }
        }
    };
    then_drop(&s, outcome).await;
}

/// A watcher follows a change stream exactly where the server offers one;
/// elsewhere it polls and opens nothing on the server.
#[tokio::test]
async fn watchers_open_a_change_stream_only_where_offered() {
    let Some(url) = services::mongo_url().await else {
        return;
    };
    let ns = services::unique_namespace();
    let (s, sent) = observed_store(&url, &ns).await;
    let outcome = async {
        sent.lock().unwrap().clear();
        let _watcher = s.watch().await.unwrap();
        let streams = std::mem::take(&mut *sent.lock().unwrap())
            .into_iter()
            .filter(|(n, c)| n == "aggregate" && format!("{c}").contains("$changeStream"))
            .count();
        assert_eq!(streams, usize::from(s.uses_change_streams()));
    };
    then_drop(&s, outcome).await;
}

/// Connecting probes the server: `$unionWith` is used exactly when its
/// `buildInfo` reports 4.4 or later.
#[tokio::test]
async fn connect_probes_the_servers_version() {
    let Some(url) = services::mongo_url().await else {
        return;
    };
    let client = mongodb::Client::with_uri_str(&url).await.expect("client");
    let info = client
        .database("admin")
        .run_command(doc! { "buildInfo": 1 })
        .await
        .expect("buildInfo");
    let version: Vec<u32> = info
        .get_str("version")
        .expect("a version")
        .split('.')
        .map(|p| p.parse().unwrap_or(0))
        .collect();
    let at_least_4_4 = version.as_slice() >= [4, 4].as_slice();
    let ns = services::unique_namespace();
    let s = MongoStore::connect_with(&url, MongoOptions::default().database(&ns))
        .await
        .expect("connect");
    assert_eq!(
        s.uses_union_with(),
        at_least_4_4,
        "server version {version:?}"
    );
    client.database(&ns).drop().await.expect("drop database");
}

/// Debug output names the database and the prefix, and never the URL,
/// which may carry credentials.
#[tokio::test]
async fn debug_output_names_the_database_and_no_url() {
    let Some((s, _)) = fresh_store().await else {
        return;
    };
    let name = s.database().name().to_owned();
    let shown = format!("{s:?}");
    then_drop(&s, async {
        assert!(shown.starts_with("MongoStore"), "{shown}");
        assert!(shown.contains(&name), "{shown}");
        assert!(shown.contains("prefix"), "{shown}");
        assert!(!shown.contains("mongodb://"), "{shown}");
    })
    .await;
}

/// Stats: an add is one `update` command of upserts, each naming its
/// bucket by `_id` alone, and one `delete` command pruning one range of
/// the `prune` index per resolution, which drops a bucket left behind
/// (here one written two hours back, as by an add that no later add
/// followed); an empty batch sends nothing; a read is one `find` on the
/// `read` index in the answer's order.
#[tokio::test]
async fn stats_take_one_upsert_command_one_prune_and_one_find() {
    let Some(url) = services::mongo_url().await else {
        return;
    };
    let ns = services::unique_namespace();
    let (s, sent) = observed_store(&url, &ns).await;
    let outcome = async {
        let minute = StatsResolution::Minute.start_of(T0);
        let stale = minute - 120 * 60_000;
        let raw = s.database().collection::<mongodb::bson::Document>("stats");
        raw.insert_one(doc! {
            "_id": format!("minute:{stale}:t"), "jobtype": "t", "res": "minute",
            "start": stale, "wait_count": 1_i64, "wait_sum_sq_ms": 0.0, "wait_h0": 1_i64,
        })
        .await
        .unwrap();
        sent.lock().unwrap().clear();
        let delta = |jobtype: &str, minute: i64| {
            let mut d = StatsDelta::new(jobtype, minute);
            d.wait.record(3);
            d.run.record(700);
            d
        };
        s.add_stats(
            &[
                delta("t", minute),
                delta("u", minute),
                delta("t", minute - 90 * 60_000),
            ],
            T0,
        )
        .await
        .unwrap();
        let mut add = std::mem::take(&mut *sent.lock().unwrap());
        add.sort_by(|a, b| a.0.cmp(&b.0));
        let names: Vec<&str> = add.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["delete", "update"], "two commands, sent together");
        let deletes = add[0].1.get_array("deletes").unwrap();
        assert_eq!(deletes.len(), 2, "one per resolution: {deletes:?}");
        for d in deletes {
            assert_eq!(d.as_document().unwrap().get_str("hint"), Ok("prune"));
        }
        let updates = add[1].1.get_array("updates").unwrap();
        assert_eq!(
            updates.len(),
            5,
            "a minute and a day each, the minute 90 minutes back its day only"
        );
        for u in updates {
            let u = u.as_document().unwrap();
            assert_eq!(u.get_bool("upsert"), Ok(true), "{u}");
            let q = u.get_document("q").unwrap();
            assert_eq!(q.keys().collect::<Vec<_>>(), ["_id"], "{u}");
        }
        let wc = add[1].1.get_document("writeConcern").unwrap();
        assert_eq!(wc.get_str("w").ok(), Some("majority"), "{wc}");
        assert_eq!(
            raw.count_documents(doc! { "start": stale }).await.unwrap(),
            0,
            "the bucket two hours back is pruned"
        );
        sent.lock().unwrap().clear();
        s.add_stats(&[], T0).await.unwrap();
        assert!(sent_names(&sent).is_empty(), "an empty batch sends nothing");
        let read = s
            .job_stats(&StatsQuery::new(StatsResolution::Minute), T0)
            .await
            .unwrap();
        let keys: Vec<(&str, i64)> = read.iter().map(|b| (b.jobtype.as_str(), b.start)).collect();
        assert_eq!(keys, [("t", minute), ("u", minute)]);
        assert_eq!(read[0].run.sum_ms, 700);
        let find = std::mem::take(&mut *sent.lock().unwrap());
        assert_eq!(find.len(), 1, "one find, no getMore: {find:?}");
        let find = &find[0].1;
        assert_eq!(find.get_str("hint").ok(), Some("read"), "{find}");
        assert_eq!(
            find.get_document("sort").unwrap(),
            &doc! { "jobtype": 1, "start": 1 },
            "{find}"
        );
    };
    then_drop(&s, outcome).await;
}

/// Concurrent sets of one schedule, the first ones creating it, from
/// separate clients: each adds its own version (the answers are 1 to n,
/// each once), none is lost, and the firing state a replace keeps stays.
#[tokio::test]
async fn concurrent_sets_of_a_schedule_each_add_a_version() {
    let Some((s, url)) = fresh_store().await else {
        return;
    };
    let ns = s.database().name().to_owned();
    const SETTERS: u64 = 8;
    const ROUNDS: u64 = 3;
    let outcome = async {
        let mut tasks = tokio::task::JoinSet::new();
        for n in 0..SETTERS {
            let c = MongoStore::connect_with(&url, MongoOptions::default().database(&ns))
                .await
                .expect("connect a setter");
            tasks.spawn(async move {
                let mut versions = Vec::new();
                for r in 0..ROUNDS {
                    let mut sched = Schedule::new("race", "* * * * *", format!("t{n}"));
                    sched.priority = i32::try_from(r).unwrap();
                    let rec = c
                        .set_schedule(&sched, Some(T0), T0 + i64::try_from(r).unwrap())
                        .await
                        .unwrap();
                    assert_eq!(rec.created_dt, T0, "{rec:?}");
                    assert_eq!(rec.fired, 0);
                    versions.push(rec.version);
                }
                versions
            });
        }
        let mut versions: Vec<u64> = tasks.join_all().await.into_iter().flatten().collect();
        versions.sort_unstable();
        assert_eq!(versions, (1..=SETTERS * ROUNDS).collect::<Vec<_>>());
        let rec = s.get_schedule("race").await.unwrap().unwrap();
        assert_eq!(rec.version, SETTERS * ROUNDS);
        assert!(!rec.paused);
    };
    then_drop(&s, outcome).await;
}

/// Each schedule operation is one command on `schedules`: a set is one
/// `findAndModify` upsert (no `$setOnInsert`, no pipeline), a due read one
/// `find` on the `due` index in its order with the limit as batch, a list
/// one `find` of an `_id` range, a pause, a resume and an advance one
/// `update` each, a get one `find`, a delete one `delete`.
#[tokio::test]
async fn schedule_operations_are_one_command_each() {
    let Some(url) = services::mongo_url().await else {
        return;
    };
    let ns = services::unique_namespace();
    let (s, sent) = observed_store_of(&url, &ns, &["schedules"]).await;
    let outcome = async {
        sent.lock().unwrap().clear();
        let sched = Schedule::new("acme-a", "* * * * *", "t");
        s.set_schedule(&sched, Some(T0), T0).await.unwrap();
        let set = std::mem::take(&mut *sent.lock().unwrap());
        assert_eq!(set.len(), 1, "{set:?}");
        let (name, cmd) = &set[0];
        assert_eq!(name, "findAndModify");
        assert_eq!(cmd.get_bool("upsert"), Ok(true), "{cmd}");
        let update = cmd.get_document("update").expect("an update document");
        assert!(!update.contains_key("$setOnInsert"), "{update}");

        let due = s.due_schedules(T0, 7).await.unwrap();
        assert_eq!(due.len(), 1);
        let find = std::mem::take(&mut *sent.lock().unwrap());
        assert_eq!(find.len(), 1, "{find:?}");
        let find = &find[0].1;
        assert_eq!(find.get_str("hint").ok(), Some("due"), "{find}");
        assert_eq!(
            find.get_document("sort").unwrap(),
            &doc! { "next_due": 1, "name": 1 },
            "{find}"
        );
        assert_eq!(find.get_i64("limit").ok(), Some(7), "{find}");

        assert_eq!(s.list_schedules("acme-").await.unwrap().len(), 1);
        let list = std::mem::take(&mut *sent.lock().unwrap());
        assert_eq!(list.len(), 1, "{list:?}");
        assert_eq!(
            list[0].1.get_document("filter").unwrap(),
            &doc! { "_id": { "$gte": "acme-", "$lt": "acme-~" } }
        );

        let adv = ScheduleAdvance {
            fired_through: T0,
            last_job: None,
            next_due: Some(T0 + 60_000),
            fired: 1,
            skipped: 0,
        };
        assert!(s.advance_schedule("acme-a", 1, &adv, T0).await.unwrap());
        assert!(s.pause_schedule("acme-a", true, None, T0).await.unwrap());
        assert!(
            s.pause_schedule("acme-a", false, Some(T0), T0)
                .await
                .unwrap()
        );
        assert!(s.get_schedule("acme-a").await.unwrap().is_some());
        assert!(s.delete_schedule("acme-a").await.unwrap());
        assert_eq!(
            sent_names(&sent),
            ["update", "update", "update", "find", "delete"]
        );
    };
    then_drop(&s, outcome).await;
}

/// Repeating jobs: a release list mixing repeats with an archive and a
/// retry is one `update` command, the repeats of one outcome one
/// statement that sets `prev_result` (never `result`), attempts 0 and the
/// payload, keeps `ukey` (no `$rename`, no `$unset` of it) and pushes a
/// `repeated` event; documents with a rule carry `repeat`, plain ones do
/// not; job counts see repeated jobs as scheduled, never archived; two
/// repeats with 5 MiB payloads each go in two commands of at most 8 MiB.
#[tokio::test]
async fn repeats_share_the_release_command_and_stay_unarchived() {
    let Some(url) = services::mongo_url().await else {
        return;
    };
    let ns = services::unique_namespace();
    let (s, sent) = observed_store(&url, &ns).await;
    let outcome = async {
        let rule = Repeat::new("HOURLY");
        let jobs = vec![
            NewJob::new("r1", "t", "a")
                .repeat(rule.clone())
                .unique(Unique::new("k1")),
            NewJob::new("r2", "t", "b").repeat(rule.clone()),
            NewJob::new("p1", "t", "c"),
            NewJob::new("p2", "t", "d"),
        ];
        s.add_jobs(&jobs, T0).await.unwrap();
        let raw = s.database().collection::<mongodb::bson::Document>("jobs");
        let stored = |id: &'static str| {
            let raw = raw.clone();
            async move { raw.find_one(doc! { "_id": id }).await.unwrap().unwrap() }
        };
        let p1 = stored("p1").await;
        assert!(!p1.contains_key("repeat"), "a plain job has no rule: {p1}");
        assert_eq!(stored("r2").await.get_str("repeat"), Ok("HOURLY"));
        assert_eq!(s.claim_jobs("t", 4, "o", MIN, T0).await.unwrap().len(), 4);
        sent.lock().unwrap().clear();

        let at = T0 + 3_600_000;
        let run = JobResult::from_status(200).with_output(b"out".to_vec());
        let repeat = Release::Repeat {
            at,
            result: run.clone(),
            data: Some(b"next".to_vec()),
        };
        let list = [
            JobRelease::new("r1", repeat.clone()),
            JobRelease::new("p1", Release::Archive(JobResult::from_status(200))),
            JobRelease::new("r2", repeat),
            JobRelease::new("p2", Release::Retry { delay: MIN }),
        ];
        let mut released = s.release_jobs(&list, "o", T0 + 1).await.unwrap();
        released.sort();
        assert_eq!(released, ["p1", "p2", "r1", "r2"]);
        let commands = std::mem::take(&mut *sent.lock().unwrap());
        let names: Vec<&str> = commands.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["update"], "one round trip, no read-back");
        let statements = commands[0].1.get_array("updates").unwrap();
        assert_eq!(statements.len(), 3, "{statements:?}");
        let st = statements
            .iter()
            .map(|b| b.as_document().unwrap())
            .find(|st| {
                let q = st.get_document("q").unwrap();
                q.get_document("_id")
                    .unwrap()
                    .get_array("$in")
                    .unwrap()
                    .len()
                    == 2
            })
            .expect("one statement for both repeats");
        let u = st.get_document("u").unwrap();
        let set = u.get_document("$set").unwrap();
        assert!(
            set.contains_key("prev_result") && !set.contains_key("result"),
            "{u}"
        );
        assert_eq!(set.get_i64("attempts"), Ok(0), "{u}");
        assert_eq!(set.get_i64("dt"), Ok(at), "{u}");
        assert!(set.contains_key("data"), "{u}");
        assert!(!u.contains_key("$rename"), "the key stays held: {u}");
        let unset: Vec<&String> = u.get_document("$unset").unwrap().keys().collect();
        assert_eq!(unset, ["cancel"], "{u}");
        let event = u
            .get_document("$push")
            .unwrap()
            .get_document("history")
            .unwrap()
            .get_array("$each")
            .unwrap()[0]
            .as_document()
            .unwrap()
            .clone();
        assert_eq!(event.get_str("event"), Ok("repeated"), "{u}");
        assert_eq!(event.get_i64("next_ms"), Ok(at), "{u}");

        let r1 = stored("r1").await;
        assert!(
            !r1.contains_key("result") && !r1.contains_key("done_dt"),
            "{r1}"
        );
        assert_eq!(r1.get_str("ukey"), Ok("t/k1"), "{r1}");
        assert_eq!(r1.get_str("repeat"), Ok("HOURLY"), "{r1}");
        let job = s.get_job("r1").await.unwrap().unwrap();
        assert_eq!((job.result, job.attempts), (Some(run), 0));
        let counts = s.job_counts(T0 + 1).await.unwrap();
        let t = counts.iter().find(|c| c.jobtype == "t").unwrap();
        assert_eq!((t.waiting, t.scheduled, t.running), (0, 3, 0), "{t:?}");
        assert_eq!(t.archived.values().sum::<u64>(), 1, "{t:?}");
        let page = s
            .list_jobs(&JobQuery::new(JobState::Archived).jobtypes(["t"]), T0 + 1)
            .await
            .unwrap();
        let archived: Vec<&str> = page.jobs.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(archived, ["p1"]);

        // Payloads count toward the command size: 2 x 5 MiB, 2 commands.
        // r1, r2 and p2 (retried) are due.
        assert_eq!(s.claim_jobs("t", 3, "o", MIN, at).await.unwrap().len(), 3);
        sent.lock().unwrap().clear();
        let big = |id: &str, byte: u8| {
            JobRelease::new(
                id,
                Release::Repeat {
                    at: at + 1,
                    result: JobResult::from_status(200),
                    data: Some(vec![byte; 5 << 20]),
                },
            )
        };
        let mut released = s
            .release_jobs(&[big("r1", b'1'), big("r2", b'2')], "o", at)
            .await
            .unwrap();
        released.sort();
        assert_eq!(released, ["r1", "r2"]);
        assert_eq!(sent_names(&sent), ["update", "update"]);
        let r2 = s.get_job("r2").await.unwrap().unwrap();
        assert_eq!((r2.data.len(), r2.data[0], r2.dt), (5 << 20, b'2', at + 1));
    };
    then_drop(&s, outcome).await;
}

/// A repeating job's history, whose `repeated` events are written
/// without their attempt, reads as the memory store's through runs of
/// one claim and runs with a hand-back, also once `added` and the oldest
/// runs have left the newest 20 events (at every offset of a run).
#[tokio::test]
async fn a_repeating_jobs_history_reads_as_the_memory_stores() {
    let Some((s, _)) = fresh_store().await else {
        return;
    };
    let outcome = async {
        let memory = jobstore_api::MemoryStore::new();
        let stores: [&dyn JobStore; 2] = [&s, &memory];
        for (n, unget) in [(0, false), (1, true)] {
            let jt = format!("t{n}");
            let job = NewJob::new(format!("j{n}"), &jt, "x").repeat(Repeat::new("HOURLY"));
            for st in stores {
                st.add_jobs(std::slice::from_ref(&job), T0).await.unwrap();
            }
            let mut now = T0;
            for cycle in 0..14 {
                for st in stores {
                    let claim = || st.claim_jobs(&jt, 1, "o", MIN, now);
                    assert_eq!(claim().await.unwrap().len(), 1);
                    if unget {
                        let back = [JobRelease::new(job.id.as_str(), Release::Unget)];
                        assert_eq!(st.release_jobs(&back, "o", now).await.unwrap().len(), 1);
                        assert_eq!(claim().await.unwrap().len(), 1);
                    }
                    let rel = [JobRelease::new(
                        job.id.as_str(),
                        Release::Repeat {
                            at: now + 1_000,
                            result: JobResult::from_status(200),
                            data: None,
                        },
                    )];
                    assert_eq!(st.release_jobs(&rel, "o", now).await.unwrap().len(), 1);
                }
                let got = s.get_job(&job.id).await.unwrap().unwrap();
                let want = memory.get_job(&job.id).await.unwrap().unwrap();
                assert_eq!(got.history, want.history, "{jt}, cycle {cycle}");
                assert_eq!(got.attempts, 0);
                now += 1_000;
                // and while claimed
                for st in stores {
                    st.claim_jobs(&jt, 1, "o", MIN, now).await.unwrap();
                }
                let got = s.get_job(&job.id).await.unwrap().unwrap();
                let want = memory.get_job(&job.id).await.unwrap().unwrap();
                assert_eq!(got.history, want.history, "{jt}, cycle {cycle}, claimed");
                for st in stores {
                    let back = [JobRelease::new(job.id.as_str(), Release::Unget)];
                    st.release_jobs(&back, "o", now).await.unwrap();
                }
            }
        }
    };
    then_drop(&s, outcome).await;
}

/// Runs `body`, then drops `s`'s database, even when `body` panics.
async fn then_drop(s: &MongoStore, body: impl std::future::Future<Output = ()>) {
    let result = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(body)).await;
    s.database().drop().await.expect("drop test database");
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// A store on a fresh database of the test server, and the server's URL;
/// `None` when the test is to be skipped.
async fn fresh_store() -> Option<(MongoStore, String)> {
    let url = services::mongo_url().await?;
    let ns = services::unique_namespace();
    let s = MongoStore::connect_with(&url, MongoOptions::default().database(&ns))
        .await
        .expect("connect");
    Some((s, url))
}
