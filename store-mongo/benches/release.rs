//! Measures the ways of releasing a batch of jobs whose results all
//! differ (the README's figures, "release_jobs"), on the server the tests
//! use: `JOBSTORE_TEST_MONGO_URL`, default `mongodb://127.0.0.1:27017`, in
//! a fresh database dropped at the end.
//!
//! ```text
//! cargo bench -p jobstore-mongo --bench release
//! ```
//!
//! `BENCH_JOBS` (default 1,000) jobs per release, `BENCH_ROUNDS` (default
//! 3) rounds; medians are printed.

use std::time::{Duration, Instant};

use jobstore_api::{JobRelease, JobResult, JobStore, JobStoreExt, NewJob, Release};
use jobstore_mongo::MongoStore;
use mongodb::bson::spec::BinarySubtype;
use mongodb::bson::{Binary, Document, doc};

const T0: i64 = 1_700_000_000_000;
const LEASE: Duration = Duration::from_secs(300);

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let n = env("BENCH_JOBS", 1_000);
    let rounds = env("BENCH_ROUNDS", 3).max(1);
    let url = std::env::var("JOBSTORE_TEST_MONGO_URL")
        .unwrap_or_else(|_| "mongodb://127.0.0.1:27017".to_owned());
    let db = format!("bench_release_{}", jobstore_api::new_token());
    let s = MongoStore::connect_with(&url, jobstore_mongo::MongoOptions::default().database(&db))
        .await
        .expect("connect");
    let jobs = s.database().collection::<Document>("jobs");
    let result = |i: usize| JobResult::from_status(200).with_output(format!("output {i}").into());
    let mut figures: Vec<(&str, Vec<f64>)> = vec![
        (
            "per-job release_jobs: one update command, one statement per job",
            vec![],
        ),
        (
            "one update_many round trip per job (per distinct result)",
            vec![],
        ),
        ("release_all, same result for all: one statement", vec![]),
    ];
    for round in 0..rounds {
        for (way, (_, times)) in figures.iter_mut().enumerate() {
            let jobtype = format!("m{round}-{way}");
            let new: Vec<NewJob> = (0..n)
                .map(|i| NewJob::new(format!("{jobtype}-{i:05}"), &jobtype, "x"))
                .collect();
            s.add_jobs(&new, T0).await.expect("add");
            let mut ids: Vec<String> = Vec::with_capacity(n);
            while ids.len() < n {
                let got = s
                    .claim_jobs(&jobtype, (n - ids.len()).min(1_000), "owner", LEASE, T0)
                    .await
                    .expect("claim");
                assert!(!got.is_empty(), "claimed every job");
                ids.extend(got.into_iter().map(|j| j.id));
            }
            let start = Instant::now();
            let released = match way {
                0 => {
                    let releases: Vec<JobRelease> = ids
                        .iter()
                        .enumerate()
                        .map(|(i, id)| JobRelease::new(id, Release::Archive(result(i))))
                        .collect();
                    s.release_jobs(&releases, "owner", T0 + 1)
                        .await
                        .expect("release")
                        .len()
                }
                1 => {
                    let mut released = 0;
                    for (i, id) in ids.iter().enumerate() {
                        let r = result(i);
                        let output = Binary {
                            subtype: BinarySubtype::Generic,
                            bytes: r.output.clone(),
                        };
                        let update = doc! { "$set": {
                            "lock": "__done",
                            "done_dt": T0 + 1,
                            "result": {
                                "code": r.code.as_str(),
                                "status": i32::from(r.status),
                                "output": output,
                            },
                        } };
                        let filter = doc! { "_id": { "$in": [id] }, "lock": "owner" };
                        let r = jobs.update_many(filter, update).await.expect("update");
                        released += usize::try_from(r.matched_count).unwrap_or(0);
                    }
                    released
                }
                _ => s
                    .release_all(&ids, "owner", &Release::Archive(result(0)), T0 + 1)
                    .await
                    .expect("release")
                    .len(),
            };
            times.push(start.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(released, n);
        }
    }
    for (what, mut times) in figures {
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        println!(
            "{n} jobs, {what}: median {median:.0} ms ({:.0} jobs/s), all {times:.0?}",
            n as f64 / median * 1000.0
        );
    }
    // The alternative the store does not use: a pipeline update choosing
    // each job's values with $switch on _id.
    let pipeline = vec![doc! { "$set": { "lock": { "$switch": {
        "branches": [{ "case": { "$eq": ["$_id", "x"] }, "then": "__done" }],
        "default": "$lock",
    } } } }];
    match jobs
        .update_many(doc! { "_id": { "$in": ["x"] } }, pipeline)
        .await
    {
        Ok(r) => println!("pipeline update with $switch: accepted ({r:?})"),
        Err(e) => println!("pipeline update with $switch: refused: {e}"),
    }
    s.database().drop().await.expect("drop the bench database");
}
