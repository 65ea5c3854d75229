//! The modes that call the store directly: `store`, `scale`, `soak`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use jobstore_api::{
    JobRelease, JobResult, JobStore, JobStoreExt, NewJob, Release, Repeat, Unique, duration_ms,
    now_millis,
};
use serde_json::{Value, json};

use jobstore_daemon::tenant;

use crate::{
    CliError, Ctx, Latencies, Report, archived_ok, expect_counts, rate, round3, spawn, store_err,
};

/// The lease of bench claims: long enough that nothing expires mid-run.
const LEASE: Duration = Duration::from_secs(600);

/// The rule of `store --repeat`'s jobs; each run is released with a
/// repeat [`REPEAT_IN`] ahead, so no job is claimed twice in a run.
const REPEAT_RULE: &str = "HOURLY";
const REPEAT_IN: Duration = Duration::from_secs(3600);

/// Makes the jobs of one batch of adds, without borrowing the context.
#[derive(Clone)]
pub(crate) struct JobGen {
    tag: String,
    jobtypes: Vec<String>,
    payload: usize,
    priority: i32,
    unique: bool,
    repeat: bool,
}

impl JobGen {
    pub(crate) fn new(ctx: &Ctx, tag: &str, jobtypes: usize) -> Self {
        Self::of(ctx, tag, (0..jobtypes).map(|k| ctx.jobtype(k)).collect())
    }

    /// Jobs spread over the store jobtypes `jobtypes` in turn, each with
    /// an id of its jobtype's client (`{client}-{tag}{i}`).
    pub(crate) fn of(ctx: &Ctx, tag: &str, jobtypes: Vec<String>) -> Self {
        JobGen {
            tag: tag.to_owned(),
            jobtypes,
            payload: ctx.args.payload,
            priority: 0,
            unique: ctx.args.unique,
            repeat: ctx.args.repeat,
        }
    }

    pub(crate) fn priority(mut self, p: i32) -> Self {
        self.priority = p;
        self
    }

    fn job(&self, i: usize) -> NewJob {
        let jobtype = self.jobtypes[i % self.jobtypes.len()].as_str();
        let job = NewJob::new(
            format!("{}-{}{i:010}", tenant::tenant_of(jobtype), self.tag),
            jobtype,
            vec![b'x'; self.payload],
        )
        .priority(self.priority);
        let job = if self.unique {
            job.unique(Unique::new(format!("{}{i:010}", self.tag)))
        } else {
            job
        };
        if self.repeat {
            job.repeat(Repeat::new(REPEAT_RULE))
        } else {
            job
        }
    }
}

/// Adds jobs `from..to` of `jobs_of` in batches of `--add-batch` from
/// `--claimers` concurrent tasks; returns each call's latency and the time
/// it took. Fails unless every job was new.
pub(crate) async fn add_range(
    ctx: &Ctx,
    jobs_of: &JobGen,
    from: usize,
    to: usize,
    bar: &ProgressBar,
) -> Result<(Latencies, Duration), CliError> {
    let per = ctx.args.add_batch;
    let batches = (to - from).div_ceil(per);
    let tasks = ctx.args.claimers.min(batches.max(1));
    let started = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let store = ctx.store.clone();
        let jobs_of = jobs_of.clone();
        let bar = bar.clone();
        handles.push(spawn(async move {
            let mut lat = Latencies::default();
            let mut b = t;
            while b < batches {
                let lo = from + b * per;
                let hi = (lo + per).min(to);
                let jobs: Vec<NewJob> = (lo..hi).map(|i| jobs_of.job(i)).collect();
                let t0 = Instant::now();
                let out = store
                    .add_jobs(&jobs, now_millis())
                    .await
                    .map_err(store_err("add_jobs"))?;
                lat.push(t0.elapsed());
                if out.new.len() != jobs.len() {
                    return Err(CliError::local(format!(
                        "add_jobs stored {} of {} new jobs",
                        out.new.len(),
                        jobs.len()
                    )));
                }
                bar.inc(jobs.len() as u64);
                b += tasks;
            }
            Ok::<_, CliError>(lat)
        }));
    }
    let mut lat = Latencies::default();
    for h in handles {
        lat.extend(join(h).await?);
    }
    Ok((lat, started.elapsed()))
}

async fn join<T>(
    h: tokio_util::task::AbortOnDropHandle<Result<T, CliError>>,
) -> Result<T, CliError> {
    h.await
        .map_err(|e| CliError::local(format!("a bench task failed: {e}")))?
}

fn ok() -> JobResult {
    JobResult::from_status(200)
}

fn archive_all(jobs: Vec<jobstore_api::Job>) -> Vec<JobRelease> {
    jobs.into_iter()
        .map(|j| JobRelease::new(j.id, Release::Archive(JobResult::from_status(200))))
        .collect()
}

/// Releases every job with a repeat at `now + REPEAT_IN`, an ok result and
/// the payload kept.
fn repeat_all(jobs: Vec<jobstore_api::Job>, now: jobstore_api::Millis) -> Vec<JobRelease> {
    let at = now + duration_ms(REPEAT_IN);
    jobs.into_iter()
        .map(|j| {
            JobRelease::new(
                j.id,
                Release::Repeat {
                    at,
                    result: JobResult::from_status(200),
                    data: None,
                },
            )
        })
        .collect()
}

/// Claims and archives the jobs `range` of `jobtype` under `owner`, the
/// `i`th with the result `result(i)`: jobs added at priority 1 beside a
/// waiting backlog at 0, so each claim takes only them, in order.
pub(crate) async fn archive_range(
    ctx: &Ctx,
    jobtype: &str,
    owner: &str,
    range: std::ops::Range<usize>,
    result: impl Fn(usize) -> JobResult,
    bar: &ProgressBar,
) -> Result<(), CliError> {
    let mut at = range.start;
    while at < range.end {
        let want = (range.end - at).min(jobstore_api::limits::MAX_CLAIM);
        let got = ctx
            .store
            .claim_jobs(jobtype, want, owner, LEASE, now_millis())
            .await
            .map_err(store_err("claim_jobs"))?;
        if got.len() != want || got.iter().any(|j| j.priority != 1) {
            return Err(CliError::local(
                "claiming the jobs to archive handed out other jobs",
            ));
        }
        let releases: Vec<JobRelease> = got
            .into_iter()
            .enumerate()
            .map(|(i, j)| JobRelease::new(j.id, Release::Archive(result(at + i))))
            .collect();
        let n = ctx
            .store
            .release_jobs(&releases, owner, now_millis())
            .await
            .map_err(store_err("release_jobs"))?
            .len();
        if n != want {
            return Err(CliError::local("not every job was archived"));
        }
        at += n;
        bar.inc(n as u64);
    }
    Ok(())
}

/// `store`: batched adds, then concurrent claim+archive of every job
/// (with `--repeat`: repeating jobs, each claimed once and released with a
/// repeat an hour ahead, claim+repeat; the figures keep their names).
pub(crate) async fn store(ctx: &Ctx, r: &mut Report) -> Result<(), CliError> {
    let a = &ctx.args;
    let n = a.jobs;
    let repeat = a.repeat;
    if repeat && !ctx.store.capabilities().repeat {
        return Err(CliError::usage(format!(
            "--repeat: the {} store does not support repeating jobs",
            ctx.backend
        )));
    }
    let jobs_of = JobGen::new(ctx, "s", a.jobtypes);
    let bar = ctx.bar(n as u64, "adding");
    let (add_lat, add_time) = add_range(ctx, &jobs_of, 0, n, &bar).await?;
    bar.finish_and_clear();

    let bar = ctx.bar(
        n as u64,
        if repeat {
            "claim+repeat"
        } else {
            "claim+archive"
        },
    );
    let cpu_from = ctx.cpu_mark().await;
    let started = Instant::now();
    let mut handles = Vec::new();
    for c in 0..a.claimers {
        let store = ctx.store.clone();
        let jobtypes = jobs_of.jobtypes.clone();
        let batch = a.batch;
        let bar = bar.clone();
        let owner = format!("{}-claimer{c}", ctx.ns);
        handles.push(spawn(async move {
            let mut claim_lat = Latencies::default();
            let mut release_lat = Latencies::default();
            let mut done = 0usize;
            // Every job is in the store before the first claim, so an empty
            // claim means the jobtype has nothing left to hand out.
            let mut empty = vec![false; jobtypes.len()];
            let mut k = c % jobtypes.len();
            while empty.iter().any(|e| !e) {
                if empty[k] {
                    k = (k + 1) % jobtypes.len();
                    continue;
                }
                let t0 = Instant::now();
                let got = store
                    .claim_jobs(&jobtypes[k], batch, &owner, LEASE, now_millis())
                    .await
                    .map_err(store_err("claim_jobs"))?;
                claim_lat.push(t0.elapsed());
                if got.is_empty() {
                    empty[k] = true;
                    continue;
                }
                let now = now_millis();
                let releases = if repeat {
                    repeat_all(got, now)
                } else {
                    archive_all(got)
                };
                let t0 = Instant::now();
                let released = store
                    .release_jobs(&releases, &owner, now)
                    .await
                    .map_err(store_err("release_jobs"))?;
                release_lat.push(t0.elapsed());
                if released.len() != releases.len() {
                    return Err(CliError::local(format!(
                        "release_jobs {} {} of {} jobs held",
                        if repeat { "repeated" } else { "archived" },
                        released.len(),
                        releases.len()
                    )));
                }
                done += released.len();
                bar.inc(released.len() as u64);
                k = (k + 1) % jobtypes.len();
            }
            Ok::<_, CliError>((claim_lat, release_lat, done))
        }));
    }
    let (mut claim_lat, mut release_lat, mut done) =
        (Latencies::default(), Latencies::default(), 0);
    for h in handles {
        let (c, rl, d) = join(h).await?;
        claim_lat.extend(c);
        release_lat.extend(rl);
        done += d;
    }
    let ca_time = started.elapsed();
    let cpu_to = ctx.cpu_mark().await;
    bar.finish_and_clear();
    if done != n {
        return Err(CliError::local(format!(
            "claimed and {} {done} jobs of {n}",
            if repeat { "repeated" } else { "archived" }
        )));
    }
    if repeat {
        expect_repeated(&ctx.counts().await?, n as u64)?;
    } else {
        expect_counts(&ctx.counts().await?, 0, n as u64)?;
    }

    r.figure("adds_per_s", rate(n, add_time));
    r.figure("claim_archive_per_s", rate(n, ca_time));
    r.cpu_figures("client", cpu_from, cpu_to, n);
    r.figure("jobs_added", n);
    r.figure("jobs_archived", if repeat { 0 } else { done });
    if repeat {
        r.figure("jobs_repeated", done);
    }
    r.figure("add_seconds", round3(add_time.as_secs_f64()));
    r.figure("claim_archive_seconds", round3(ca_time.as_secs_f64()));
    r.figure("add_latency", add_lat.summary());
    r.figure("claim_latency", claim_lat.summary());
    r.figure("release_latency", release_lat.summary());
    if repeat {
        r.note(
            "--repeat: every job repeats (HOURLY) and was released with a repeat an hour ahead, \
             not archived; claim_archive_* are claim+repeat figures",
        );
    }
    Ok(())
}

/// Fails unless all `n` jobs wait for their next run (scheduled), none
/// waiting, running or archived.
fn expect_repeated(c: &jobstore_api::JobCounts, n: u64) -> Result<(), CliError> {
    if c.scheduled == n && c.total() == n {
        Ok(())
    } else {
        Err(CliError::local(format!(
            "the store's counts are off: expected {n} scheduled for their next run, found {c:?}"
        )))
    }
}

/// `samples` claims of `batch` jobs of `jobtype`, each handed back (unget)
/// so the backlog stays the same; fails if a claim gets fewer than
/// `expect` jobs.
async fn claim_samples(
    store: &Arc<dyn JobStore>,
    jobtype: &str,
    owner: &str,
    batch: usize,
    samples: usize,
    expect: usize,
    bar: &ProgressBar,
) -> Result<Latencies, CliError> {
    let mut lat = Latencies::default();
    for _ in 0..samples {
        let t0 = Instant::now();
        let got = store
            .claim_jobs(jobtype, batch, owner, LEASE, now_millis())
            .await
            .map_err(store_err("claim_jobs"))?;
        lat.push(t0.elapsed());
        if got.len() != expect {
            return Err(CliError::local(format!(
                "a claim of {batch} got {} jobs, expected {expect}",
                got.len()
            )));
        }
        let ids: Vec<String> = got.into_iter().map(|j| j.id).collect();
        let back = store
            .release_all(&ids, owner, &Release::Unget, now_millis())
            .await
            .map_err(store_err("release_jobs"))?;
        if back.len() != ids.len() {
            return Err(CliError::local("an unget did not hand every job back"));
        }
        bar.inc(1);
    }
    Ok(lat)
}

/// `scale`: claim latency at each backlog size, then with an archive of
/// the same jobtype beside the largest.
pub(crate) async fn scale(ctx: &Ctx, r: &mut Report) -> Result<(), CliError> {
    let a = &ctx.args;
    let mut sizes = a.sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    let largest = sizes[sizes.len() - 1];
    let archive = a.archive.unwrap_or(largest);
    let jobtype = ctx.jobtype(0);
    let owner = format!("{}-claimer", ctx.ns);
    let waiting = JobGen::new(ctx, "w", 1);
    let mut have = 0;
    let mut points = Vec::new();
    let mut p50s = Vec::new();
    // Claim latency with `waiting` jobs waiting and `archived` archived.
    let mut point = async |label: String, waiting: usize, archived: usize| {
        let bar = ctx.bar(a.samples as u64, &label);
        let lat = claim_samples(
            &ctx.store,
            &jobtype,
            &owner,
            a.batch,
            a.samples,
            a.batch.min(waiting),
            &bar,
        )
        .await?;
        bar.finish_and_clear();
        let s = lat.summary();
        p50s.push(s["p50_ms"].as_f64().unwrap_or(0.0));
        points.push(json!({"waiting": waiting, "archived": archived, "claim_latency": s}));
        Ok::<_, CliError>(())
    };
    for &size in &sizes {
        let bar = ctx.bar((size - have) as u64, &format!("to {size}"));
        add_range(ctx, &waiting, have, size, &bar).await?;
        bar.finish_and_clear();
        have = size;
        point(format!("claims at {size}"), size, 0).await?;
    }

    // The archive: jobs of the same jobtype at a higher priority, so the
    // claims that archive them take them before any waiting one.
    if archive > 0 {
        let done = JobGen::new(ctx, "a", 1).priority(1);
        let bar = ctx.bar(archive as u64, "archive: add");
        add_range(ctx, &done, 0, archive, &bar).await?;
        bar.finish_and_clear();
        let bar = ctx.bar(archive as u64, "archive: run");
        archive_range(ctx, &jobtype, &owner, 0..archive, |_| ok(), &bar).await?;
        bar.finish_and_clear();
        point("claims + archive".to_owned(), largest, archive).await?;
    }
    expect_counts(&ctx.counts().await?, largest as u64, archive as u64)?;

    r.figure("points", Value::Array(points));
    let ratio = |x: f64, y: f64| if y > 0.0 { round3(x / y) } else { 0.0 };
    r.figure(
        "p50_largest_to_smallest",
        ratio(p50s[sizes.len() - 1], p50s[0]),
    );
    if archive > 0 {
        r.figure(
            "p50_with_archive_to_without",
            ratio(p50s[sizes.len()], p50s[sizes.len() - 1]),
        );
    }
    Ok(())
}

/// `soak`: a standing backlog, jobs added at `--rate` per second and
/// claimed and archived as fast as they come, archived jobs purged past
/// `--retention`; per `--interval`: claim latency, counts, and (Redis) the
/// server's memory per stored job.
pub(crate) async fn soak(ctx: &Ctx, r: &mut Report) -> Result<(), CliError> {
    let a = &ctx.args;
    let baseline = crate::server::server_memory(&ctx.url)
        .await
        .map_err(store_err("memory"))?;
    let backlog = JobGen::new(ctx, "b", 1);
    let bar = ctx.bar(a.backlog as u64, "backlog");
    add_range(ctx, &backlog, 0, a.backlog, &bar).await?;
    bar.finish_and_clear();

    let windows = (a.duration.as_secs_f64() / a.interval.as_secs_f64()).ceil() as usize;
    // A transaction kept open beside the load (PostgreSQL; `check` allows
    // --hold-xmin on nothing else).
    let held = match a.hold_xmin {
        #[cfg(feature = "postgres")]
        Some(hold) => Some(
            crate::server::hold_xmin(
                &ctx.url,
                a.hold_kind == crate::HoldKind::Xid,
                hold.min(a.duration),
            )
            .await
            .map_err(store_err("--hold-xmin"))?,
        ),
        #[cfg(not(feature = "postgres"))]
        Some(_) => return Err(CliError::usage("--hold-xmin needs the postgres feature")),
        None => None,
    };
    let hold_until = a.hold_xmin.map(|h| Instant::now() + h.min(a.duration));
    let window_lat: Arc<Mutex<Vec<Latencies>>> =
        Arc::new(Mutex::new(vec![Latencies::default(); windows]));
    let added = Arc::new(AtomicUsize::new(0));
    let budget = Arc::new(Mutex::new(0usize));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let interval = a.interval;
    let window_of =
        move |t: Instant| ((t - started).as_secs_f64() / interval.as_secs_f64()).floor() as usize;

    // The adder: what is due every 50 ms, in one call.
    let adder = {
        let (store, added, budget, stop) = (
            ctx.store.clone(),
            added.clone(),
            budget.clone(),
            stop.clone(),
        );
        let jobs_of = JobGen::new(ctx, "s", 1);
        let per_s = f64::from(a.rate);
        spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let due = (started.elapsed().as_secs_f64() * per_s) as usize;
                if due <= n {
                    continue;
                }
                let hi = due.min(n + jobstore_api::limits::MAX_BATCH);
                let jobs: Vec<NewJob> = (n..hi).map(|i| jobs_of.job(i)).collect();
                store
                    .add_jobs(&jobs, now_millis())
                    .await
                    .map_err(store_err("add_jobs"))?;
                n = hi;
                added.store(n, Ordering::Relaxed);
                if let Ok(mut b) = budget.lock() {
                    *b += jobs.len();
                }
            }
            Ok::<_, CliError>(n)
        })
    };
    // Claimers take as many jobs as were added, so the backlog stands.
    let mut claimers = Vec::new();
    for c in 0..a.claimers {
        let (store, budget, stop, window_lat) = (
            ctx.store.clone(),
            budget.clone(),
            stop.clone(),
            window_lat.clone(),
        );
        let jobtype = ctx.jobtype(0);
        let owner = format!("{}-claimer{c}", ctx.ns);
        let batch = a.batch;
        claimers.push(spawn(async move {
            let mut done = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let want = budget
                    .lock()
                    .map(|mut b| {
                        let w = (*b).min(batch);
                        *b -= w;
                        w
                    })
                    .unwrap_or(0);
                if want == 0 {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    continue;
                }
                let t0 = Instant::now();
                let got = store
                    .claim_jobs(&jobtype, want, &owner, LEASE, now_millis())
                    .await
                    .map_err(store_err("claim_jobs"))?;
                let took = t0.elapsed();
                if let Ok(mut w) = window_lat.lock()
                    && let Some(l) = w.get_mut(window_of(t0))
                {
                    l.push(took);
                }
                if got.len() != want {
                    return Err(CliError::local(format!(
                        "a claim of {want} from a standing backlog got {}",
                        got.len()
                    )));
                }
                let releases = archive_all(got);
                let n = store
                    .release_jobs(&releases, &owner, now_millis())
                    .await
                    .map_err(store_err("release_jobs"))?
                    .len();
                if n != want {
                    return Err(CliError::local("not every claimed job was archived"));
                }
                done += n;
            }
            Ok::<_, CliError>(done)
        }));
    }

    // Per window: purge, count, measure memory.
    let bar = ctx.bar(windows as u64, "windows");
    let mut rows = Vec::new();
    let mut failed = None;
    for w in 0..windows {
        let end = started + interval * (w as u32 + 1);
        while Instant::now() < end {
            if adder.is_finished() || claimers.iter().any(|c| c.is_finished()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100).min(end - Instant::now())).await;
        }
        if adder.is_finished() || claimers.iter().any(|c| c.is_finished()) {
            failed = Some(w);
            break;
        }
        let now = now_millis();
        let purged = ctx
            .store
            .purge_archived(
                now - duration_ms(a.retention),
                &jobstore_api::ResultCode::ALL,
            )
            .await
            .map_err(store_err("purge_archived"))?;
        let counts = ctx.counts().await?;
        let memory = crate::server::server_memory(&ctx.url)
            .await
            .map_err(store_err("memory"))?;
        let table = crate::server::table_stats(&ctx.url)
            .await
            .map_err(store_err("table statistics"))?;
        let lat = window_lat
            .lock()
            .map(|l| l[w].clone())
            .unwrap_or_default()
            .summary();
        let stored = counts.total();
        let mut row = json!({
            "window": w + 1,
            // the held transaction was open during (part of) the window
            "holding": hold_until.is_some_and(|u| end - interval < u),
            "claim_latency": lat,
            "added": added.load(Ordering::Relaxed),
            "waiting": counts.waiting,
            "archived_kept": archived_ok(&counts),
            "purged": purged,
        });
        if let (Some(m), Some(b)) = (memory, baseline) {
            let used = m.saturating_sub(b);
            row["memory_bytes"] = json!(used);
            row["memory_per_stored_job"] = json!(if stored > 0 {
                (used as f64 / stored as f64).round()
            } else {
                0.0
            });
        }
        if let Some(t) = table {
            row["table"] = t;
        }
        rows.push(row);
        bar.inc(1);
    }
    bar.finish_and_clear();
    stop.store(true, Ordering::Relaxed);
    drop(held);
    let total_added = join(adder).await?;
    let mut total_done = 0;
    for c in claimers {
        total_done += join(c).await?;
    }
    if let Some(w) = failed {
        return Err(CliError::local(format!(
            "the load stopped early, in window {}",
            w + 1
        )));
    }
    // Whatever was added and not claimed is still waiting.
    let counts = ctx.counts().await?;
    let expect_waiting = (a.backlog + total_added - total_done) as u64;
    if counts.waiting != expect_waiting || counts.running != 0 || counts.scheduled != 0 {
        return Err(CliError::local(format!(
            "the store's counts are off: expected {expect_waiting} waiting, found {counts:?}"
        )));
    }

    let p99 = |row: &Value| row["claim_latency"]["p99_ms"].as_f64().unwrap_or(0.0);
    let first = rows.first().map_or(0.0, p99);
    let worst = rows.iter().map(p99).fold(0.0, f64::max);
    r.figure("jobs_added", total_added);
    r.figure("jobs_archived", total_done);
    r.figure("achieved_rate_per_s", rate(total_done, started.elapsed()));
    r.figure("claim_p99_first_window_ms", first);
    r.figure("claim_p99_worst_window_ms", worst);
    let ratio = if first > 0.0 {
        round3(worst / first)
    } else {
        0.0
    };
    r.figure("claim_p99_worst_to_first", ratio);
    r.figure("claim_p99_within_2x", ratio <= 2.0);
    let dead = rows
        .iter()
        .filter_map(|row| row["table"]["dead_tuples"].as_i64())
        .max();
    if let Some(dead) = dead {
        r.figure("dead_tuples_max", dead);
    }
    if ratio > 2.0 {
        r.note(format!(
            "claim latency p99 grew to {ratio}x the first window's ({worst} ms vs {first} ms)"
        ));
    }
    if baseline.is_none() {
        r.note("memory per job is measured on Redis only");
    }
    r.figure("windows", Value::Array(rows));
    Ok(())
}

/// `reference`: the `store` load (one jobtype) on the bare reference queue
/// of the store's server.
pub(crate) async fn reference(ctx: &Ctx, r: &mut Report) -> Result<(), CliError> {
    let a = &ctx.args;
    let q = crate::reference::open(&ctx.url, &ctx.ns)
        .await
        .map_err(store_err("reference queue"))?
        .ok_or_else(|| {
            CliError::usage(format!(
                "{} has no reference queue (PostgreSQL and Redis have one)",
                ctx.backend
            ))
        })?;
    if let Ok(mut slot) = ctx.reference.lock() {
        *slot = Some(q.clone());
    }
    let n = a.jobs;
    let per = a.add_batch;
    let batches = n.div_ceil(per);
    let tasks = a.claimers.min(batches);
    let bar = ctx.bar(n as u64, "adding");
    let started = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (q, bar, payload) = (q.clone(), bar.clone(), a.payload);
        handles.push(spawn(async move {
            let mut lat = Latencies::default();
            let mut b = t;
            while b < batches {
                let (lo, hi) = (b * per, ((b + 1) * per).min(n));
                let t0 = Instant::now();
                let added = q
                    .add(lo, hi, payload)
                    .await
                    .map_err(store_err("reference add"))?;
                lat.push(t0.elapsed());
                if added != hi - lo {
                    return Err(CliError::local("the reference queue lost adds"));
                }
                bar.inc(added as u64);
                b += tasks;
            }
            Ok::<_, CliError>(lat)
        }));
    }
    let mut add_lat = Latencies::default();
    for h in handles {
        add_lat.extend(join(h).await?);
    }
    let add_time = started.elapsed();
    bar.finish_and_clear();

    let bar = ctx.bar(n as u64, "claim+ack");
    let cpu_from = ctx.cpu_mark().await;
    let started = Instant::now();
    let mut handles = Vec::new();
    for c in 0..a.claimers {
        let (q, bar, batch) = (q.clone(), bar.clone(), a.batch);
        let owner = format!("{}-claimer{c}", ctx.ns);
        handles.push(spawn(async move {
            let (mut claim_lat, mut ack_lat, mut done) =
                (Latencies::default(), Latencies::default(), 0usize);
            loop {
                let t0 = Instant::now();
                let keys = q
                    .claim(batch, &owner)
                    .await
                    .map_err(store_err("reference claim"))?;
                claim_lat.push(t0.elapsed());
                if keys.is_empty() {
                    break;
                }
                let t0 = Instant::now();
                let acked = q.ack(&keys).await.map_err(store_err("reference ack"))?;
                ack_lat.push(t0.elapsed());
                if acked != keys.len() {
                    return Err(CliError::local("the reference queue lost acks"));
                }
                done += acked;
                bar.inc(acked as u64);
            }
            Ok::<_, CliError>((claim_lat, ack_lat, done))
        }));
    }
    let (mut claim_lat, mut ack_lat, mut done) = (Latencies::default(), Latencies::default(), 0);
    for h in handles {
        let (c, k, d) = join(h).await?;
        claim_lat.extend(c);
        ack_lat.extend(k);
        done += d;
    }
    let ca_time = started.elapsed();
    let cpu_to = ctx.cpu_mark().await;
    bar.finish_and_clear();
    if done != n {
        return Err(CliError::local(format!(
            "the reference queue handed out {done} jobs of {n}"
        )));
    }
    r.figure("adds_per_s", rate(n, add_time));
    r.figure("claim_archive_per_s", rate(n, ca_time));
    r.cpu_figures("client", cpu_from, cpu_to, n);
    r.figure("jobs_added", n);
    r.figure("jobs_archived", done);
    r.figure("add_seconds", round3(add_time.as_secs_f64()));
    r.figure("claim_archive_seconds", round3(ca_time.as_secs_f64()));
    r.figure("add_latency", add_lat.summary());
    r.figure("claim_latency", claim_lat.summary());
    r.figure("release_latency", ack_lat.summary());
    r.note("a bare reference queue: no duplicate detection, fencing, results or counts");
    Ok(())
}

/// `query`: what an operator's questions cost as the archive grows. At each
/// archive size of `--sizes` (one job in ten failed, the rest ok), beside
/// `--backlog` waiting jobs: `--samples` pages of 100 failed jobs (the
/// first page, then pages further in, by cursor) and `--samples`
/// `job_counts` calls, as p50/p99; then the ratios of the largest size's
/// p99 to the smallest's.
pub(crate) async fn query(ctx: &Ctx, r: &mut Report) -> Result<(), CliError> {
    use jobstore_api::{JobQuery, JobState, ResultCode};
    let a = &ctx.args;
    let mut sizes = a.sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    let jobtype = ctx.jobtype(0);
    let owner = format!("{}-archiver", ctx.ns);
    let backlog = JobGen::new(ctx, "w", 1);
    let bar = ctx.bar(a.backlog as u64, "backlog");
    add_range(ctx, &backlog, 0, a.backlog, &bar).await?;
    bar.finish_and_clear();
    // Archived jobs: a higher priority, so the claims that archive them
    // take them before any waiting one.
    let done = JobGen::new(ctx, "a", 1).priority(1);
    let mut archived = 0;
    let mut failed = 0u64;
    let mut points = Vec::new();
    let mut page_p99 = Vec::new();
    let mut count_p99 = Vec::new();
    for &size in &sizes {
        let bar = ctx.bar((size - archived) as u64, &format!("archive to {size}"));
        add_range(ctx, &done, archived, size, &bar).await?;
        let status = |i: usize| if i.is_multiple_of(10) { 404 } else { 200 };
        let result = |i| JobResult::from_status(status(i));
        archive_range(ctx, &jobtype, &owner, archived..size, result, &bar).await?;
        failed += (archived..size).filter(|&i| status(i) == 404).count() as u64;
        archived = size;
        bar.finish_and_clear();
        // Pages of 100 failed jobs: the first, then on by cursor, back to
        // the first when the failures run out.
        let first = JobQuery::new(JobState::Archived)
            .jobtypes([jobtype.clone()])
            .codes([ResultCode::Failed])
            .limit(100);
        let bar = ctx.bar(2 * a.samples as u64, &format!("queries at {size}"));
        let mut pages = Latencies::default();
        let mut q = first.clone();
        for _ in 0..a.samples {
            let t0 = Instant::now();
            let page = ctx
                .store
                .list_jobs(&q, now_millis())
                .await
                .map_err(store_err("list_jobs"))?;
            pages.push(t0.elapsed());
            if page.jobs.is_empty()
                || page
                    .jobs
                    .iter()
                    .any(|j| j.result.as_ref().map(|r| r.status) != Some(404))
            {
                return Err(CliError::local("a page of failed jobs held other jobs"));
            }
            q = match page.next {
                Some(c) => first.clone().after(Some(c)),
                None => first.clone(),
            };
            bar.inc(1);
        }
        let mut counts = Latencies::default();
        for _ in 0..a.samples {
            let t0 = Instant::now();
            let c = ctx
                .store
                .job_counts(now_millis())
                .await
                .map_err(store_err("job_counts"))?;
            counts.push(t0.elapsed());
            let mine = c.iter().find(|c| c.jobtype == jobtype);
            let got_failed = mine
                .and_then(|c| c.archived.get(&ResultCode::Failed))
                .copied();
            if got_failed != Some(failed) || mine.map(|c| c.waiting) != Some(a.backlog as u64) {
                return Err(CliError::local(format!(
                    "job_counts says {mine:?}, expected {failed} failed and {} waiting",
                    a.backlog
                )));
            }
            bar.inc(1);
        }
        bar.finish_and_clear();
        let (ps, cs) = (pages.summary(), counts.summary());
        page_p99.push(ps["p99_ms"].as_f64().unwrap_or(0.0));
        count_p99.push(cs["p99_ms"].as_f64().unwrap_or(0.0));
        points.push(json!({
            "archived": size,
            "waiting": a.backlog,
            "page_of_100_failed": ps,
            "job_counts": cs,
        }));
    }
    r.figure("points", Value::Array(points));
    let ratio = |v: &[f64]| {
        let (x, y) = (v[v.len() - 1], v[0]);
        if y > 0.0 { round3(x / y) } else { 0.0 }
    };
    r.figure("page_p99_largest_to_smallest", ratio(&page_p99));
    r.figure("counts_p99_largest_to_smallest", ratio(&count_p99));
    Ok(())
}
