//! The modes that run a daemon: `drain`, `e2e`, `intake`.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::{StreamExt, TryStreamExt};
use jobstore_api::JobStore;
use serde_json::{Value, json};

use crate::queue::{JobGen, add_range};
use crate::{
    CLIENT, CliError, Ctx, DaemonRef, Latencies, Report, expect_counts, rate, round3, spawn,
    store_err,
};
use jobstore_daemon::metrics::OutcomeLabels;

/// How long a daemon may make no progress before the bench gives up.
const STALL: Duration = Duration::from_secs(60);

/// Jobs the daemon finished with this outcome (`ok`, `error`, …).
fn finished(d: &DaemonRef, outcome: &'static str) -> u64 {
    d.metrics
        .jobs_finished
        .get_or_create(&OutcomeLabels { outcome })
        .get()
}

/// Waits until the daemon finished `n` jobs as ok, moving `bar`; fails if
/// a job fails or nothing moves for [`STALL`].
async fn wait_finished(
    d: &DaemonRef,
    n: u64,
    bar: &indicatif::ProgressBar,
) -> Result<(), CliError> {
    let mut last = (finished(d, "ok"), Instant::now());
    loop {
        let ok = finished(d, "ok");
        bar.set_position(ok);
        if ok >= n {
            return Ok(());
        }
        for bad in ["error", "failed", "retry", "timeout", "lost"] {
            if finished(d, bad) > 0 {
                return Err(CliError::local(format!(
                    "a no-op job finished as {bad}; the worker ({}) does not run here",
                    "jobstore noop-worker"
                )));
            }
        }
        if ok != last.0 {
            last = (ok, Instant::now());
        } else if last.1.elapsed() > STALL {
            return Err(CliError::local(format!(
                "the daemon finished {ok} of {n} jobs and then nothing for {} s",
                STALL.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// `drain`: jobs already in the store, then a daemon started on them; the
/// time from its start until it finished them all.
pub(crate) async fn drain(ctx: &Ctx, r: &mut Report) -> Result<(), CliError> {
    let a = &ctx.args;
    let n = a.jobs;
    ctx.set_noop_handlers(a.jobtypes, false).await?;
    let jobs_of = JobGen::new(ctx, "d", a.jobtypes);
    let bar = ctx.bar(n as u64, "adding");
    add_range(ctx, &jobs_of, 0, n, &bar).await?;
    bar.finish_and_clear();
    expect_counts(&ctx.counts().await?, n as u64, 0)?;

    // Timed from when the daemon serves (its executor starts claiming as
    // it does), and from the call that starts it.
    let bar = ctx.bar(n as u64, "draining");
    let cpu_from = ctx.cpu_mark().await;
    let starting = Instant::now();
    let d = ctx.start_daemon(true).await?;
    let up = starting.elapsed();
    let started = Instant::now();
    wait_finished(&d, n as u64, &bar).await?;
    let took = started.elapsed();
    let with_start = starting.elapsed();
    let cpu_to = ctx.cpu_mark().await;
    bar.finish_and_clear();
    // A graceful stop releases whatever the completer still gathers.
    ctx.stop_daemon(&d).await;
    expect_counts(&ctx.counts().await?, 0, n as u64)?;

    r.figure("jobs_per_s", rate(n, took));
    r.figure("jobs_per_s_with_start", rate(n, with_start));
    r.figure("jobs", n);
    r.figure("jobs_archived", n);
    r.figure("seconds", round3(took.as_secs_f64()));
    r.figure("daemon_start_ms", round3(up.as_secs_f64() * 1e3));
    r.cpu_figures("daemon", cpu_from, cpu_to, n);
    Ok(())
}

/// One add over HTTP: its store id, when it was sent (µs since the
/// epoch), and how long the acknowledgement took.
struct Sent {
    id: String,
    at_us: u64,
    ack: Duration,
}

/// Sends one add with `body`; returns the store ids acknowledged.
async fn add(
    http: &reqwest::Client,
    url: &str,
    body: String,
    expect: usize,
) -> Result<Vec<String>, CliError> {
    let resp = http
        .post(url)
        .body(body)
        .send()
        .await
        .map_err(|e| CliError::local(format!("add over HTTP: {e}")))?;
    let status = resp.status();
    let text = resp
        .text()
        .await
        .map_err(|e| CliError::local(format!("add over HTTP: {e}")))?;
    if !status.is_success() {
        return Err(CliError::local(format!("add over HTTP: {status}: {text}")));
    }
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| CliError::local(format!("add over HTTP: {e}: {text}")))?;
    let ids: Vec<String> = v["ids"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|i| i.as_str().map(|s| format!("{CLIENT}-{s}")))
                .collect()
        })
        .unwrap_or_default();
    if ids.len() != expect {
        return Err(CliError::local(format!(
            "an add of {expect} jobs was acknowledged with {} ids: {text}",
            ids.len()
        )));
    }
    Ok(ids)
}

pub(crate) fn http_client() -> Result<reqwest::Client, CliError> {
    jobstore_daemon::http_client::builder()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(256)
        .build()
        .map_err(|e| CliError::local(format!("HTTP client: {e}")))
}

/// `n` jobs added in bodies of `lines` lines (the last one shorter if need
/// be) from `clients` concurrent clients, as fast as they are
/// acknowledged. Every job of a body shares its send time and
/// acknowledgement latency.
async fn add_bodies(
    http: &reqwest::Client,
    url: &str,
    payload: &str,
    n: usize,
    lines: usize,
    clients: usize,
    bar: &indicatif::ProgressBar,
) -> Result<Vec<Sent>, CliError> {
    let lines = lines.max(1);
    let bodies = n.div_ceil(lines);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..clients.min(bodies) {
        let (http, url, payload, next, bar) = (
            http.clone(),
            url.to_owned(),
            payload.to_owned(),
            next.clone(),
            bar.clone(),
        );
        tasks.push(spawn(async move {
            let mut sent = Vec::new();
            loop {
                let b = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if b >= bodies {
                    break;
                }
                let count = lines.min(n - b * lines);
                let mut body = String::with_capacity(count * (payload.len() + 1));
                for _ in 0..count {
                    body.push_str(&payload);
                    body.push('\n');
                }
                let at_us = now_us();
                let t0 = Instant::now();
                let ids = add(&http, &url, body, count).await?;
                let ack = t0.elapsed();
                sent.extend(ids.into_iter().map(|id| Sent { id, at_us, ack }));
                bar.inc(count as u64);
            }
            Ok::<_, CliError>(sent)
        }));
    }
    let mut all = Vec::with_capacity(n);
    for t in tasks {
        all.extend(
            t.await
                .map_err(|e| CliError::local(format!("a client task failed: {e}")))??,
        );
    }
    Ok(all)
}

/// Add-to-start latencies: for each job, the time its worker received it
/// (the no-op worker prints it) minus the time its add was sent.
async fn add_to_start(store: &Arc<dyn JobStore>, sent: &[Sent]) -> Result<Latencies, CliError> {
    let lats: Vec<Duration> = futures::stream::iter(sent)
        .map(|s| async move {
            let job = store
                .get_job(&s.id)
                .await
                .map_err(store_err("get_job"))?
                .ok_or_else(|| CliError::local(format!("job {} is gone", s.id)))?;
            let out = job
                .result
                .map(|r| String::from_utf8_lossy(&r.output).into_owned())
                .unwrap_or_default();
            let start: u64 = out
                .split_whitespace()
                .skip_while(|w| *w != "t")
                .nth(1)
                .and_then(|t| t.parse().ok())
                .ok_or_else(|| {
                    CliError::local(format!("job {} has no start time in {out:?}", s.id))
                })?;
            Ok::<_, CliError>(Duration::from_micros(start.saturating_sub(s.at_us)))
        })
        .buffer_unordered(32)
        .try_collect()
        .await?;
    let mut l = Latencies::default();
    for d in lats {
        l.push(d);
    }
    Ok(l)
}

fn acks(sent: &[Sent]) -> Latencies {
    let mut l = Latencies::default();
    for s in sent {
        l.push(s.ack);
    }
    l
}

/// Acknowledgement latencies per request of [`add_bodies`] (the jobs of one
/// body are adjacent and share their send time and latency).
fn acks_per_body(sent: &[Sent]) -> Latencies {
    let mut l = Latencies::default();
    let mut last = None;
    for s in sent {
        if last != Some((s.at_us, s.ack)) {
            l.push(s.ack);
            last = Some((s.at_us, s.ack));
        }
    }
    l
}

/// `e2e`: a daemon runs jobs added over HTTP, first at `--rate` per second
/// for `--rate-duration`, then `--jobs` as fast as `--clients` clients add
/// them in bodies of `--lines` lines.
pub(crate) async fn e2e(ctx: &Ctx, r: &mut Report) -> Result<(), CliError> {
    let a = &ctx.args;
    ctx.set_noop_handlers(1, true).await?;
    let d = ctx.start_daemon(true).await?;
    let http = http_client()?;
    let url = format!("http://{}/{CLIENT}/job/noop0/add", d.addr);
    let payload = "x".repeat(a.payload);

    // Start the worker context, so that the first job does not pay for it.
    add(&http, &url, "warm-up".into(), 1).await?;
    let warm = ctx.bar(1, "warm-up");
    wait_finished(&d, 1, &warm).await?;
    warm.finish_and_clear();

    // At a fixed rate, one add after the other.
    let k = ((f64::from(a.rate) * a.rate_duration.as_secs_f64()).round() as usize).max(1);
    let bar = ctx.bar(k as u64, &format!("{}/s", a.rate));
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(a.rate)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut at_rate = Vec::with_capacity(k);
    let rate_started = Instant::now();
    for _ in 0..k {
        tick.tick().await;
        let at_us = now_us();
        let t0 = Instant::now();
        let mut ids = add(&http, &url, payload.clone(), 1).await?;
        at_rate.push(Sent {
            id: ids.remove(0),
            at_us,
            ack: t0.elapsed(),
        });
        bar.inc(1);
    }
    let rate_time = rate_started.elapsed();
    bar.finish_and_clear();
    let bar = ctx.bar(1 + k as u64, "finishing");
    wait_finished(&d, 1 + k as u64, &bar).await?;
    bar.finish_and_clear();

    // Full speed.
    let n = a.jobs;
    let bar = ctx.bar(n as u64, "full speed");
    let cpu_from = ctx.cpu_mark().await;
    let started = Instant::now();
    let full = add_bodies(&http, &url, &payload, n, a.lines, a.clients, &bar).await?;
    let sent_in = started.elapsed();
    bar.finish_and_clear();
    let bar = ctx.bar((1 + k + n) as u64, "finishing");
    wait_finished(&d, (1 + k + n) as u64, &bar).await?;
    let took = started.elapsed();
    let cpu_to = ctx.cpu_mark().await;
    bar.finish_and_clear();
    ctx.stop_daemon(&d).await;
    expect_counts(&ctx.counts().await?, 0, (1 + k + n) as u64)?;

    let rate_lat = add_to_start(&ctx.store, &at_rate).await?;
    let full_lat = add_to_start(&ctx.store, &full).await?;
    r.figure("jobs_per_s", rate(n, took));
    r.figure("jobs_archived", 1 + k + n);
    r.figure("rate_achieved_per_s", rate(k, rate_time));
    r.figure("add_to_start_at_rate", rate_lat.summary());
    r.figure("ack_latency_at_rate", acks(&at_rate).summary());
    r.figure("adds_per_s_full_speed", rate(n, sent_in));
    r.figure("add_to_start_full_speed", full_lat.summary());
    r.figure("ack_latency_full_speed", acks_per_body(&full).summary());
    r.figure("seconds_full_speed", round3(took.as_secs_f64()));
    // The bench process holds the daemon (intake, journal, ingest,
    // execution) and the HTTP clients.
    r.cpu_figures("daemon", cpu_from, cpu_to, n);
    Ok(())
}

/// `intake`: a daemon that runs nothing; `--single-jobs` single-job adds
/// from one client, the same from `--clients` clients, and `--jobs` in
/// bodies of `--lines` lines from `--clients` clients.
pub(crate) async fn intake(ctx: &Ctx, r: &mut Report) -> Result<(), CliError> {
    let a = &ctx.args;
    let n = a.jobs;
    let singles = a.single_jobs.unwrap_or(n);
    let d = ctx.start_daemon(false).await?;
    let http = http_client()?;
    let url = format!("http://{}/{CLIENT}/job/noop0/add", d.addr);
    let payload = "x".repeat(a.payload);

    let bar = ctx.bar(singles as u64, "1 client");
    let started = Instant::now();
    let one = add_bodies(&http, &url, &payload, singles, 1, 1, &bar).await?;
    let one_time = started.elapsed();
    bar.finish_and_clear();

    let bar = ctx.bar(singles as u64, &format!("{} clients", a.clients));
    let started = Instant::now();
    let many = add_bodies(&http, &url, &payload, singles, 1, a.clients, &bar).await?;
    let many_time = started.elapsed();
    bar.finish_and_clear();

    // Bodies of `lines` lines.
    let bar = ctx.bar(n as u64, &format!("{}-line bodies", a.lines));
    let started = Instant::now();
    let in_bodies = add_bodies(&http, &url, &payload, n, a.lines, a.clients, &bar).await?;
    let body_time = started.elapsed();
    bar.finish_and_clear();

    // Every acknowledged job reaches the store.
    let total = (2 * singles + n) as u64;
    let bar = ctx.bar(total, "ingest");
    let mut last = (0, Instant::now());
    loop {
        let c = ctx.counts().await?;
        bar.set_position(c.waiting);
        if c.waiting >= total {
            expect_counts(&c, total, 0)?;
            break;
        }
        if c.waiting != last.0 {
            last = (c.waiting, Instant::now());
        } else if last.1.elapsed() > STALL {
            return Err(CliError::local(format!(
                "{} of {total} acknowledged jobs reached the store",
                c.waiting
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bar.finish_and_clear();
    ctx.stop_daemon(&d).await;

    // One client; `--clients` clients; bodies of `--lines` lines from
    // `--clients` clients.
    r.figure("single_adds_per_s", rate(singles, one_time));
    r.figure("single_ack_latency", acks(&one).summary());
    r.figure("concurrent_adds_per_s", rate(singles, many_time));
    r.figure("concurrent_ack_latency", acks(&many).summary());
    r.figure("bodies_jobs_per_s", rate(n, body_time));
    r.figure("bodies_ack_latency", acks_per_body(&in_bodies).summary());
    r.figure("jobs_acknowledged", json!(total));
    r.figure("jobs_in_store", json!(total));
    Ok(())
}
