//! `dashboard`: the dashboard's pages as a browser loads them, over HTTP
//! against a daemon on the bench store, at each archive size of `--sizes`.
//!
//! Each page is the API calls `daemon/src/http/dashboard/app.js` makes
//! for it, issued as the script issues them (one after the other, or
//! together where it uses `Promise.all`), and its time is from the first
//! call sent to the last answer parsed: what a signed-in user waits for
//! after a click. Sign-in's `GET /whoami` is made once per tab and is not
//! part of any page. The pages, with the admin token (which sees every
//! client, and picks the first from `GET /stats`) and with one client's
//! token:
//!
//! | page | calls |
//! |---|---|
//! | `overview` | `/health` and `/stats?max_age=5` (a client: `/{c}/stats`) together; then per client in turn `/{c}/stats/history?resolution=minute` and `/{c}/jobs?state=archived&code=failed,error,timeout&archived_from=(an hour ago)&limit=1000`; then `/{c}/workers` of every client together |
//! | `overview_fresh_counts` | the same with `max_age=0`: the counts read from the store, as after an action, or by a lone dashboard whose last refresh is 5 s old |
//! | `jobs` | (admin: `/stats?max_age=5` twice, to pick the client and fill the picker) `/{c}/jobs?state=archived&limit=50`: the newest archived jobs |
//! | `jobs_by_code` | (admin: `/stats?max_age=5`) `/{c}/jobs?state=archived&code=failed&limit=50` |
//! | `jobs_next_page` | (admin: `/stats?max_age=5`) `/{c}/jobs?state=archived&limit=50&cursor=…`, each sample the page after the one before |
//! | `job` | `/{c}/jobs/{id}` of a failed job |
//! | `failures` | (admin: `/stats?max_age=5` twice) `/{c}/failures` |
//! | `failures_of_a_jobtype` | (admin: `/stats?max_age=5`) `/{c}/failures?type=…` |
//! | `handlers` | (admin: `/stats?max_age=5` twice) `/{c}/handlers` |
//! | `workers` | (admin: `/stats?max_age=5` twice) `/{c}/workers` |

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use jobstore_api::stats::{Durations, MINUTE_MS, StatsDelta};
use jobstore_api::{Handler, JobCounts, JobResult, ResultCode, now_millis};
use jobstore_daemon::auth::TokenHash;
use jobstore_daemon::config::{FileAuth, FileClient, FileConfig};
use serde_json::{Map, Value, json};

use crate::queue::{JobGen, add_range, archive_range};
use crate::{CliError, Ctx, Latencies, Report, round3, store_err};

/// The page-time target of the dashboard (p99, ms).
const TARGET_MS: f64 = 200.0;

/// The ways the bench's jobs fail: one archived job in ten, these in turn,
/// so the failures page has a handful of groups per jobtype.
const FAILURES: [(ResultCode, u16, &str); 5] = [
    (
        ResultCode::Failed,
        404,
        "connection refused: db:5432\n  at connect (db.js:12)\n  at main (job.js:40)",
    ),
    (
        ResultCode::Failed,
        422,
        "invalid payload: missing field `email` at line 1 column 48",
    ),
    (
        ResultCode::Error,
        500,
        "panic: index out of bounds: the len is 3 but the index is 7\nstack backtrace:\n  0: job::run",
    ),
    (
        ResultCode::Error,
        503,
        "upstream unavailable: https://api.example.com/v2/charge (503)",
    ),
    (
        ResultCode::Timeout,
        500,
        "[jobstore] timed out after 30 s\nfetched 120 of 500 pages",
    ),
];

/// The result of archived job `i` of a jobtype: one in ten failed (in the
/// ways of [`FAILURES`], in turn), the rest ok.
fn result_of(i: usize) -> JobResult {
    if i.is_multiple_of(10) {
        let (code, status, output) = FAILURES[(i / 10) % FAILURES.len()];
        JobResult::new(code, status).with_output(output.as_bytes().to_vec())
    } else {
        JobResult::from_status(200).with_output(format!("{{\"ok\":true,\"n\":{i}}}").into_bytes())
    }
}

fn is_failure(code: ResultCode) -> bool {
    matches!(
        code,
        ResultCode::Failed | ResultCode::Error | ResultCode::Timeout
    )
}

/// The store's jobs: `--tenants` clients with `--jobtypes` jobtypes each.
struct Shape {
    clients: Vec<String>,
    /// Store jobtypes (`{client}-type{k}`), client by client.
    jobtypes: Vec<String>,
}

impl Shape {
    fn new(tenants: usize, per_client: usize) -> Self {
        let clients: Vec<String> = (0..tenants).map(|t| format!("bench{t}")).collect();
        let jobtypes = clients
            .iter()
            .flat_map(|c| (0..per_client).map(move |k| format!("{c}-type{k}")))
            .collect();
        Shape { clients, jobtypes }
    }

    /// How many of the first `n` archived jobs (dealt out in turn) go to
    /// jobtype `k`.
    fn share(&self, n: usize, k: usize) -> usize {
        let t = self.jobtypes.len();
        n / t + usize::from(k < n % t)
    }
}

/// `dashboard`: fills the store (`--backlog` waiting jobs, then archived
/// jobs up to each size of `--sizes`, dealt out over every jobtype of
/// every client, one in ten failed), starts a daemon with an admin token
/// and a client's token, and loads each page `--samples` times with each
/// token: p50/p99 per page and per API call, at each size.
pub(crate) async fn dashboard(ctx: &Ctx, r: &mut Report) -> Result<(), CliError> {
    let a = &ctx.args;
    let mut sizes = a.sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    let shape = Shape::new(a.tenants, a.jobtypes);
    let handler = Handler::new("process", "true");
    for jt in &shape.jobtypes {
        ctx.store
            .set_handler(jt, &handler, now_millis())
            .await
            .map_err(store_err("set_handler"))?;
    }
    let bar = ctx.bar(a.backlog as u64, "backlog");
    let backlog = JobGen::of(ctx, "w", shape.jobtypes.clone());
    add_range(ctx, &backlog, 0, a.backlog, &bar).await?;
    bar.finish_and_clear();
    add_last_hour_stats(ctx, &shape).await?;

    let admin_token = jobstore_api::new_token();
    let client_token = jobstore_api::new_token();
    let file = FileConfig {
        auth: FileAuth {
            admin_token_sha256: Some(TokenHash::of(&admin_token).to_hex()),
            clients: vec![FileClient {
                name: shape.clients[0].clone(),
                token_sha256: Some(TokenHash::of(&client_token).to_hex()),
                token_sha256s: Vec::new(),
            }],
        },
        ..FileConfig::default()
    };
    let d = ctx.start_daemon_with(false, file).await?;
    let base = format!("http://{}", d.addr);
    let http = crate::daemon::http_client()?;
    let browsers = [
        Browser::new(&http, &base, "admin", &admin_token, None),
        Browser::new(
            &http,
            &base,
            "client",
            &client_token,
            Some(shape.clients[0].clone()),
        ),
    ];
    for b in &browsers {
        b.whoami().await?;
    }

    let owner = format!("{}-archiver", ctx.ns);
    let mut archived = 0;
    let mut points = Vec::new();
    let mut calls = Vec::new();
    let mut over = Vec::new();
    let mut slowest = 0.0f64;
    for &size in &sizes {
        fill(ctx, &shape, &owner, archived, size).await?;
        archived = size;
        check_counts(ctx, &shape, size).await?;
        for b in &browsers {
            let pages = b.measure(ctx, &shape, size).await?;
            let mut point = Map::new();
            point.insert("archived".into(), json!(size));
            point.insert("waiting".into(), json!(a.backlog));
            point.insert("token".into(), json!(b.who));
            for (page, lat) in &pages {
                let s = lat.summary();
                let p99 = s["p99_ms"].as_f64().unwrap_or(0.0);
                slowest = slowest.max(p99);
                if p99 > TARGET_MS {
                    over.push(json!(format!(
                        "{size} archived, {} token: {page} p99 {p99} ms",
                        b.who
                    )));
                }
                point.insert((*page).to_owned(), s);
            }
            points.push(Value::Object(point));
            let mut per_call = Map::new();
            per_call.insert("archived".into(), json!(size));
            per_call.insert("token".into(), json!(b.who));
            for (label, lat) in b.take_calls() {
                per_call.insert(label, lat.summary());
            }
            calls.push(Value::Object(per_call));
        }
    }
    ctx.stop_daemon(&d).await;
    r.figure("points", Value::Array(points));
    r.figure("slowest_page_p99_ms", round3(slowest));
    r.figure("pages_over_200ms_p99", Value::Array(over));
    r.figure("calls", Value::Array(calls));
    r.note(format!(
        "{} clients of {} jobtypes each; one archived job in ten failed, in {} ways; \
         the daemon runs nothing (--no-execute); the client token is {}'s",
        shape.clients.len(),
        a.jobtypes,
        FAILURES.len(),
        shape.clients[0]
    ));
    r.note(
        "overview: counts at most 5 s old, shared with the samples before it (one sample \
         in 5 s reads the store); overview_fresh_counts: read for every sample",
    );
    Ok(())
}

/// Archives jobs `from..to` (dealt out over the jobtypes in turn): added
/// at priority 1 beside the waiting backlog, then claimed and archived,
/// `--claimers` jobtypes at a time.
async fn fill(
    ctx: &Ctx,
    shape: &Shape,
    owner: &str,
    from: usize,
    to: usize,
) -> Result<(), CliError> {
    let bar = ctx.bar(2 * (to - from) as u64, &format!("archive to {to}"));
    let bar = &bar;
    futures::stream::iter(shape.jobtypes.iter().enumerate())
        .map(|(k, jt)| async move {
            let (lo, hi) = (shape.share(from, k), shape.share(to, k));
            let jobs = JobGen::of(ctx, &format!("a{k}x"), vec![jt.clone()]).priority(1);
            add_range(ctx, &jobs, lo, hi, bar).await?;
            archive_range(ctx, jt, owner, lo..hi, result_of, bar).await
        })
        .buffer_unordered(ctx.args.claimers)
        .try_collect::<Vec<()>>()
        .await?;
    bar.finish_and_clear();
    Ok(())
}

/// Runs and waits of the last hour for every jobtype, a minute at a
/// time, as daemons running them would have sent (so the overview's
/// charts read a full hour).
async fn add_last_hour_stats(ctx: &Ctx, shape: &Shape) -> Result<(), CliError> {
    let now = now_millis();
    let mut deltas = Vec::new();
    for jt in &shape.jobtypes {
        for m in 0..60 {
            let mut d = StatsDelta::new(jt.clone(), now - m * MINUTE_MS);
            d.wait = Durations::of(&[3, 5, 8, 40, 250]);
            d.run = Durations::of(&[12, 30, 31, 90, 1200]);
            deltas.push(d);
        }
    }
    for chunk in deltas.chunks(jobstore_api::limits::MAX_BATCH) {
        ctx.store
            .add_stats(chunk, now)
            .await
            .map_err(store_err("add_stats"))?;
    }
    Ok(())
}

/// Fails unless the store counts exactly the backlog and `archived` jobs,
/// one in ten of each jobtype's failed.
async fn check_counts(ctx: &Ctx, shape: &Shape, archived: usize) -> Result<(), CliError> {
    let all: Vec<JobCounts> = ctx
        .store
        .job_counts(now_millis())
        .await
        .map_err(store_err("job_counts"))?;
    let (mut waiting, mut done, mut failed) = (0u64, 0u64, 0u64);
    for c in &all {
        waiting += c.waiting + c.scheduled + c.running;
        for (code, n) in &c.archived {
            done += n;
            if is_failure(*code) {
                failed += n;
            }
        }
    }
    let want_failed: usize = (0..shape.jobtypes.len())
        .map(|k| shape.share(archived, k).div_ceil(10))
        .sum();
    if waiting != ctx.args.backlog as u64 || done != archived as u64 || failed != want_failed as u64
    {
        return Err(CliError::local(format!(
            "the store's counts are off: {waiting} live, {done} archived, {failed} failed; \
             expected {}, {archived}, {want_failed}",
            ctx.args.backlog
        )));
    }
    Ok(())
}

/// A signed-in dashboard tab: one token, the API calls of each page.
struct Browser<'a> {
    http: &'a reqwest::Client,
    base: &'a str,
    /// `admin` or `client`.
    who: &'static str,
    token: String,
    /// The client of a client's token; `None` for the admin token.
    client: Option<String>,
    /// Every call's time, by what it asks.
    calls: Mutex<BTreeMap<String, Latencies>>,
    /// Whether calls are timed now (not during untimed loads).
    timing: AtomicBool,
}

/// Query parameters of a call.
type Params = Vec<(&'static str, String)>;

impl<'a> Browser<'a> {
    fn new(
        http: &'a reqwest::Client,
        base: &'a str,
        who: &'static str,
        token: &str,
        client: Option<String>,
    ) -> Self {
        Browser {
            http,
            base,
            who,
            token: token.to_owned(),
            client,
            calls: Mutex::new(BTreeMap::new()),
            timing: AtomicBool::new(false),
        }
    }

    fn take_calls(&self) -> BTreeMap<String, Latencies> {
        self.calls
            .lock()
            .map(|mut c| std::mem::take(&mut *c))
            .unwrap_or_default()
    }

    /// `GET path?query` with the token, its JSON answer parsed; its time
    /// is kept under `label` while timing. Anything but 200 fails the bench.
    async fn get(&self, label: &str, path: String, query: Params) -> Result<Value, CliError> {
        let t0 = Instant::now();
        let res = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .header(reqwest::header::ACCEPT, "application/json")
            .query(&query)
            .send()
            .await
            .map_err(|e| CliError::local(format!("GET {path}: {e}")))?;
        let status = res.status();
        let body = res
            .bytes()
            .await
            .map_err(|e| CliError::local(format!("GET {path}: {e}")))?;
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let took = t0.elapsed();
        if !status.is_success() {
            return Err(CliError::local(format!(
                "GET {path} ({} token): {status}: {}",
                self.who,
                String::from_utf8_lossy(&body)
            )));
        }
        if self.timing.load(Ordering::Relaxed)
            && let Ok(mut calls) = self.calls.lock()
        {
            calls.entry(label.to_owned()).or_default().push(took);
        }
        Ok(v)
    }

    async fn whoami(&self) -> Result<(), CliError> {
        let me = self.get("/whoami", "/whoami".into(), Vec::new()).await?;
        if me["admin"].as_bool() != Some(self.client.is_none()) {
            return Err(CliError::local(format!("/whoami answered {me}")));
        }
        Ok(())
    }

    /// app.js `clients()`: the token's client, or (admin) every client
    /// with jobs, from the counts at most 5 s old.
    async fn clients(&self) -> Result<Vec<String>, CliError> {
        if let Some(c) = &self.client {
            return Ok(vec![c.clone()]);
        }
        let all = self
            .get(
                "/stats?max_age=5",
                "/stats".into(),
                vec![("max_age", "5".into())],
            )
            .await?;
        Ok(all["clients"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c["client"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// The client a page shows: the one its link names, else (app.js)
    /// the token's, or the admin's first; then the client picker, which
    /// asks `clients()` again.
    async fn page_client(&self, named: Option<&str>) -> Result<String, CliError> {
        let client = match named {
            Some(c) => c.to_owned(),
            None => self
                .clients()
                .await?
                .into_iter()
                .next()
                .ok_or_else(|| CliError::local("GET /stats lists no client"))?,
        };
        self.clients().await?;
        Ok(client)
    }

    /// app.js `overview()`.
    async fn overview(&self, max_age: u64) -> Result<(), CliError> {
        let age = vec![("max_age", max_age.to_string())];
        let stats = async {
            match &self.client {
                None => self.get("/stats", "/stats".into(), age).await,
                Some(c) => {
                    let s = self.get("/{c}/stats", format!("/{c}/stats"), age).await?;
                    Ok(json!({ "clients": [s] }))
                }
            }
        };
        let (health, stats) =
            futures::join!(self.get("/health", "/health".into(), Vec::new()), stats);
        health?;
        let stats = stats?;
        let clients: Vec<String> = stats["clients"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c["client"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        for c in &clients {
            self.get(
                "/{c}/stats/history?resolution=minute",
                format!("/{c}/stats/history"),
                vec![("resolution", "minute".into())],
            )
            .await?;
            let hour_ago = now_millis() - 60 * MINUTE_MS;
            let fails = self
                .get(
                    "/{c}/jobs?state=archived&code=failed,error,timeout&archived_from=…&limit=1000",
                    format!("/{c}/jobs"),
                    vec![
                        ("state", "archived".into()),
                        ("code", "failed,error,timeout".into()),
                        ("archived_from", hour_ago.to_string()),
                        ("limit", "1000".into()),
                    ],
                )
                .await?;
            if fails["jobs"].as_array().is_none_or(Vec::is_empty) {
                return Err(CliError::local(format!(
                    "the overview's failures of the last hour of {c} are empty"
                )));
            }
        }
        futures::future::try_join_all(
            clients
                .iter()
                .map(|c| self.get("/{c}/workers", format!("/{c}/workers"), Vec::new())),
        )
        .await?;
        Ok(())
    }

    /// app.js `jobs(p)`: the page of archived jobs `filter` selects, 50 at
    /// a time, from `cursor`.
    async fn jobs(
        &self,
        label: &str,
        named: Option<&str>,
        filter: &Params,
        cursor: Option<&str>,
    ) -> Result<Value, CliError> {
        let client = self.page_client(named).await?;
        let mut q: Params = vec![("state", "archived".into())];
        q.extend(filter.iter().cloned());
        q.push(("limit", "50".into()));
        if let Some(c) = cursor {
            q.push(("cursor", c.to_owned()));
        }
        self.get(label, format!("/{client}/jobs"), q).await
    }

    /// app.js `failures(p)`.
    async fn failures(&self, named: Option<&str>, jobtype: Option<&str>) -> Result<(), CliError> {
        let client = self.page_client(named).await?;
        let (label, q): (&str, Params) = match jobtype {
            None => ("/{c}/failures", Vec::new()),
            Some(t) => ("/{c}/failures?type=…", vec![("type", t.to_owned())]),
        };
        let f = self.get(label, format!("/{client}/failures"), q).await?;
        let groups = f["groups"].as_array().map_or(0, Vec::len);
        if groups == 0 {
            return Err(CliError::local(format!(
                "/{client}/failures has no group: {f}"
            )));
        }
        Ok(())
    }

    /// app.js `handlers(p)` and `workers(p)`: the picker, then the list.
    async fn listing(&self, what: &str) -> Result<(), CliError> {
        let client = self.page_client(None).await?;
        self.get(
            &format!("/{{c}}/{what}"),
            format!("/{client}/{what}"),
            Vec::new(),
        )
        .await?;
        Ok(())
    }

    /// Every page `--samples` times (after one load of each, untimed):
    /// each page's load times.
    async fn measure(
        &self,
        ctx: &Ctx,
        shape: &Shape,
        size: usize,
    ) -> Result<Vec<(&'static str, Latencies)>, CliError> {
        let n = ctx.args.samples;
        let mine = self
            .client
            .clone()
            .unwrap_or_else(|| shape.clients[0].clone());
        let jobtype = "type0";
        let by_code: Params = vec![("code", "failed".into())];
        // Ids of failed jobs for the job page, and the walk of next pages.
        let failed = self.jobs("warm-up", Some(&mine), &by_code, None).await?;
        let ids: Vec<String> = failed["jobs"]
            .as_array()
            .map(|js| {
                js.iter()
                    .filter_map(|j| j["id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        if ids.is_empty()
            || failed["jobs"]
                .as_array()
                .is_some_and(|js| js.iter().any(|j| j["result"]["code"] != "failed"))
        {
            return Err(CliError::local(format!(
                "the first page of failed jobs of {mine} is empty or holds other codes: {failed}"
            )));
        }
        let bar = ctx.bar((10 * n) as u64, &format!("{} pages at {size}", self.who));
        let mut pages: Vec<(&'static str, Latencies)> = Vec::new();
        let mut cursor: Option<String> = None;
        for page in [
            "overview",
            "overview_fresh_counts",
            "jobs",
            "jobs_by_code",
            "jobs_next_page",
            "job",
            "failures",
            "failures_of_a_jobtype",
            "handlers",
            "workers",
        ] {
            let mut lat = Latencies::default();
            // One untimed load first: what a user who opened the page once
            // already has warm (caches, connections).
            for i in 0..=n {
                self.timing.store(i > 0, Ordering::Relaxed);
                let t0 = Instant::now();
                match page {
                    "overview" => self.overview(5).await?,
                    "overview_fresh_counts" => self.overview(0).await?,
                    "jobs" => {
                        let p = self
                            .jobs("/{c}/jobs?state=archived&limit=50", None, &Vec::new(), None)
                            .await?;
                        if p["jobs"].as_array().map_or(0, Vec::len) != 50 {
                            return Err(CliError::local("a page of archived jobs is not full"));
                        }
                    }
                    "jobs_by_code" => {
                        self.jobs(
                            "/{c}/jobs?state=archived&code=failed&limit=50",
                            Some(&mine),
                            &by_code,
                            None,
                        )
                        .await?;
                    }
                    "jobs_next_page" => {
                        let p = self
                            .jobs(
                                "/{c}/jobs?state=archived&limit=50&cursor=…",
                                Some(&mine),
                                &Vec::new(),
                                cursor.as_deref(),
                            )
                            .await?;
                        cursor = p["next"].as_str().map(str::to_owned);
                    }
                    "job" => {
                        let id = &ids[i % ids.len()];
                        let j = self
                            .get("/{c}/jobs/{id}", format!("/{mine}/jobs/{id}"), Vec::new())
                            .await?;
                        if j["state"] != "archived" {
                            return Err(CliError::local(format!("job {id} is not archived: {j}")));
                        }
                    }
                    "failures" => self.failures(None, None).await?,
                    "failures_of_a_jobtype" => self.failures(Some(&mine), Some(jobtype)).await?,
                    "handlers" => self.listing("handlers").await?,
                    _ => self.listing("workers").await?,
                }
                if i > 0 {
                    lat.push(t0.elapsed());
                }
            }
            bar.inc(n as u64);
            pages.push((page, lat));
        }
        self.timing.store(false, Ordering::Relaxed);
        bar.finish_and_clear();
        Ok(pages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_in_ten_fails_in_each_way_in_turn() {
        let codes: Vec<ResultCode> = (0..100).map(|i| result_of(i).code).collect();
        assert_eq!(codes.iter().filter(|c| is_failure(**c)).count(), 10);
        let ways: std::collections::BTreeSet<u16> = (0..50)
            .filter(|i| i % 10 == 0)
            .map(|i| result_of(i).status)
            .collect();
        assert_eq!(ways.len(), 4, "404, 422, 500, 503 (timeouts are 500)");
        assert_eq!(result_of(1).code, ResultCode::Ok);
    }

    #[test]
    fn archived_jobs_are_dealt_out_over_every_jobtype() {
        let s = Shape::new(4, 3);
        assert_eq!(s.jobtypes.len(), 12);
        assert_eq!(s.jobtypes[3], "bench1-type0");
        for n in [0, 1, 11, 12, 13, 10_000, 1_000_001] {
            let total: usize = (0..12).map(|k| s.share(n, k)).sum();
            assert_eq!(total, n);
        }
        assert_eq!(s.share(13, 0), 2);
        assert_eq!(s.share(13, 1), 1);
    }
}
