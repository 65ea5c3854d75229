//! MongoDB-specific behaviour beyond the shared suite: namespaces by URL
//! prefix, the declared payload limit against the server's document limit,
//! and errors when no server answers.

use std::time::Duration;

use jobstore_api::limits::{MAX_ID_LEN, MAX_JOBTYPE_LEN, MAX_OUTPUT};
use jobstore_api::{ErrorKind, JobRelease, JobResult, JobStore, JobStoreExt, NewJob, Release};
use jobstore_conformance::services;
use jobstore_mongo::{MongoOptions, MongoStore};

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
    let result = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(outcome)).await;
    a.database().drop().await.expect("drop test database");
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// The largest job the store accepts (payload at the declared limit, the
/// longest id and jobtype, the largest result output) is stored and
/// archived by the server, so the server's own 16 MiB limit is never the
/// one that trips.
#[tokio::test]
async fn largest_job_fits_the_server_document_limit() {
    let Some(url) = services::mongo_url().await else {
        return;
    };
    let ns = services::unique_namespace();
    let s = MongoStore::connect_with(&url, MongoOptions::default().database(&ns))
        .await
        .expect("connect");
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
    let result = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(outcome)).await;
    s.database().drop().await.expect("drop test database");
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
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
    let Some(url) = services::mongo_url().await else {
        return;
    };
    let ns = services::unique_namespace();
    let s = MongoStore::connect_with(&url, MongoOptions::default().database(&ns))
        .await
        .expect("connect");
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
    let result = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(outcome)).await;
    s.database().drop().await.expect("drop test database");
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// The fallback for servers without `$unionWith` (before 4.4), forced on
/// this server: one capped count per jobtype gives the same answer.
#[tokio::test]
async fn waiting_counts_without_union_with() {
    let Some(url) = services::mongo_url().await else {
        return;
    };
    let ns = services::unique_namespace();
    let s = MongoStore::connect_with(&url, MongoOptions::default().database(&ns))
        .await
        .expect("connect");
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
    let result = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(outcome)).await;
    s.database().drop().await.expect("drop test database");
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
