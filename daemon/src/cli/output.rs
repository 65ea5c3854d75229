//! Readable tables for the client subcommands.

use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};

use crate::http::jobs::{ClientStats, JobView};
use crate::http::jobtype_handlers::{HandlerList, HandlerView};
use crate::http::manage::FailureGroup;
use crate::http::schedules::ScheduleView;
use crate::http::timing::{DurationsView, StatsHistory};

fn table() -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED);
    t
}

/// Epoch milliseconds as RFC 3339.
fn time(ms: i64) -> String {
    u64::try_from(ms)
        .ok()
        .map(|ms| {
            humantime::format_rfc3339_millis(
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms),
            )
            .to_string()
        })
        .unwrap_or_else(|| ms.to_string())
}

fn clip(s: &str) -> String {
    const MAX: usize = 400;
    if s.chars().count() > MAX {
        format!("{}…", s.chars().take(MAX).collect::<String>())
    } else {
        s.to_owned()
    }
}

/// A job as key/value rows.
pub fn job(j: &JobView) -> Table {
    let mut t = table();
    t.add_row(vec!["id".to_owned(), j.id.clone()]);
    t.add_row(vec!["type".to_owned(), j.jobtype.clone()]);
    t.add_row(vec!["state".to_owned(), j.state.clone()]);
    t.add_row(vec!["priority".to_owned(), j.priority.to_string()]);
    t.add_row(vec!["attempts".to_owned(), j.attempts.to_string()]);
    t.add_row(vec!["created".to_owned(), time(j.created)]);
    if let Some(at) = j.run_at {
        t.add_row(vec!["run at".to_owned(), time(at)]);
    }
    if let Some(at) = j.lease_expires {
        t.add_row(vec!["lease expires".to_owned(), time(at)]);
    }
    if let Some(by) = &j.locked_by {
        t.add_row(vec!["locked by".to_owned(), by.clone()]);
    }
    if let Some(at) = j.done {
        t.add_row(vec!["done".to_owned(), time(at)]);
    }
    match (&j.data, &j.data_base64) {
        (Some(d), _) => t.add_row(vec!["data".to_owned(), clip(d)]),
        (None, Some(b)) => t.add_row(vec!["data (base64)".to_owned(), clip(b)]),
        _ => t.add_row(vec!["data".to_owned(), String::new()]),
    };
    if let Some(r) = &j.result {
        t.add_row(vec![
            "result".to_owned(),
            format!("{} ({})", r.code, r.status),
        ]);
        if let Some(o) = &r.output {
            t.add_row(vec!["output".to_owned(), clip(o)]);
        } else if let Some(o) = &r.output_base64 {
            t.add_row(vec!["output (base64)".to_owned(), clip(o)]);
        }
    }
    if !j.tags.is_empty() {
        t.add_row(vec!["tags".to_owned(), j.tags.join(", ")]);
    }
    if let Some(k) = &j.unique_key {
        t.add_row(vec!["unique key".to_owned(), k.clone()]);
    }
    if let Some(n) = j.dependencies_pending {
        t.add_row(vec![
            "dependencies".to_owned(),
            format!(
                "{n} pending; on failure: {}",
                j.on_dependency_failure.as_deref().unwrap_or("cancel")
            ),
        ]);
    }
    if let Some(r) = &j.repeat {
        t.add_row(vec![
            "repeats".to_owned(),
            format!("{} ({})", r.rule, r.time_zone),
        ]);
    }
    if let Some(tp) = &j.traceparent {
        t.add_row(vec!["traceparent".to_owned(), tp.clone()]);
    }
    if let Some(ts) = &j.tracestate {
        t.add_row(vec!["tracestate".to_owned(), ts.clone()]);
    }
    if j.cancelling {
        t.add_row(vec![
            "cancelling".to_owned(),
            "yes: stopped at its next lease renewal".to_owned(),
        ]);
    }
    for e in &j.history {
        let mut what = serde_json::to_value(&e.what)
            .ok()
            .and_then(|v| v.as_object().cloned())
            .unwrap_or_default();
        let name = what
            .remove("event")
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let details: Vec<String> = what.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let by = if e.by.is_empty() {
            String::new()
        } else {
            format!(" by {}", e.by)
        };
        t.add_row(vec![
            format!("history {}", time(e.at)),
            format!("{name}{by}, attempt {} {}", e.attempt, details.join(" "))
                .trim_end()
                .to_owned(),
        ]);
    }
    t
}

/// A handler as key/value rows.
pub fn handler(h: &HandlerView) -> Table {
    let mut t = table();
    t.add_row(vec!["type".to_owned(), h.jobtype.clone()]);
    t.add_row(vec!["method".to_owned(), h.handler.method.clone()]);
    t.add_row(vec!["body".to_owned(), clip(&h.handler.body)]);
    for (k, v) in [
        ("eid", &h.handler.eid),
        ("before", &h.handler.before),
        ("before_each", &h.handler.before_each),
        ("after_each", &h.handler.after_each),
    ] {
        if let Some(v) = v {
            t.add_row(vec![k.to_owned(), clip(v)]);
        }
    }
    let l = &h.handler.limits;
    let ms = |v: Option<u64>| {
        v.map(|v| humantime::format_duration(std::time::Duration::from_millis(v)).to_string())
    };
    for (k, v) in [
        ("max attempts", l.max_attempts.map(|v| v.to_string())),
        ("max age", ms(l.max_age_ms)),
        ("time limit", ms(l.time_limit_ms)),
        ("concurrency", l.concurrency.map(|v| v.to_string())),
        ("backoff base", ms(l.backoff_base_ms)),
        ("backoff max", ms(l.backoff_max_ms)),
    ] {
        if let Some(v) = v {
            t.add_row(vec![k.to_owned(), v]);
        }
    }
    t.add_row(vec!["version".to_owned(), h.version.clone()]);
    t.add_row(vec!["set at".to_owned(), time(h.set_at)]);
    t
}

/// Handlers, one row each.
pub fn handler_list(l: &HandlerList) -> Table {
    let mut t = table();
    t.set_header(vec!["type", "method", "body", "set at"]);
    for h in &l.handlers {
        t.add_row(vec![
            h.jobtype.clone(),
            h.handler.method.clone(),
            clip(&h.handler.body),
            time(h.set_at),
        ]);
    }
    t
}

/// Counts, one row per client and jobtype.
pub fn stats(clients: &[ClientStats]) -> Table {
    let mut t = table();
    t.set_header(vec![
        "client",
        "type",
        "waiting",
        "scheduled",
        "running",
        "blocked",
        "archived",
        "paused",
    ]);
    for c in clients {
        for j in &c.jobtypes {
            let archived = j
                .archived
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ");
            t.add_row(vec![
                c.client.clone(),
                j.jobtype.clone(),
                j.waiting.to_string(),
                j.scheduled.to_string(),
                j.running.to_string(),
                j.blocked.to_string(),
                archived,
                if j.paused { "paused" } else { "" }.to_owned(),
            ]);
        }
    }
    t
}

/// Wait and run times, one row per jobtype and minute or day: count,
/// mean, standard deviation and the 95th percentile's histogram bound.
pub fn stats_history(h: &StatsHistory) -> Table {
    let mut t = table();
    t.set_header(vec![
        "type",
        if h.resolution == "minute" {
            "minute"
        } else {
            "day"
        },
        "claims",
        "wait mean",
        "wait p95",
        "runs",
        "run mean",
        "run sd",
        "run p95",
    ]);
    let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| millis(v.round() as u64));
    let p95 = |d: &DurationsView| match (d.count, d.p95_ms) {
        (0, _) => "-".to_owned(),
        (_, Some(b)) => format!("≤ {}", millis(b)),
        (_, None) => format!("> {}", millis(h.bounds_ms.last().copied().unwrap_or(0))),
    };
    for j in &h.jobtypes {
        for b in &j.buckets {
            let start = time(b.start);
            let start = if h.resolution == "minute" {
                start.get(..16).unwrap_or(&start).replace('T', " ")
            } else {
                start.get(..10).unwrap_or(&start).to_owned()
            };
            t.add_row(vec![
                j.jobtype.clone(),
                start,
                b.wait.count.to_string(),
                ms(b.wait.mean_ms),
                p95(&b.wait),
                b.run.count.to_string(),
                ms(b.run.mean_ms),
                ms(b.run.stddev_ms),
                p95(&b.run),
            ]);
        }
    }
    t
}

/// Milliseconds for people: `850ms`, `2.5s`, `4m10s`.
fn millis(ms: u64) -> String {
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        let s = format!("{:.1}", ms as f64 / 1000.0);
        format!("{}s", s.trim_end_matches(".0"))
    } else {
        humantime::format_duration(std::time::Duration::from_secs(ms / 1000))
            .to_string()
            .replace(' ', "")
    }
}

fn first_line(s: &str, max: usize) -> String {
    let line = s.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    if line.chars().count() > max {
        format!("{}…", line.chars().take(max).collect::<String>())
    } else {
        line.to_owned()
    }
}

/// Jobs, one row each.
pub fn job_list(jobs: &[JobView]) -> Table {
    let mut t = table();
    t.set_header(vec![
        "id", "type", "state", "pri", "tries", "when", "result",
    ]);
    for j in jobs {
        let when = j.done.or(j.run_at).or(j.lease_expires).unwrap_or(j.created);
        let result = j
            .result
            .as_ref()
            .map(|r| {
                let out = r
                    .output
                    .as_deref()
                    .map(|o| first_line(o, 60))
                    .unwrap_or_default();
                format!("{} {} {out}", r.code, r.status)
                    .trim_end()
                    .to_owned()
            })
            .unwrap_or_default();
        let state = if j.cancelling {
            format!("{} (cancelling)", j.state)
        } else {
            j.state.clone()
        };
        t.add_row(vec![
            j.id.clone(),
            j.jobtype.clone(),
            state,
            j.priority.to_string(),
            j.attempts.to_string(),
            time(when),
            result,
        ]);
    }
    t
}

/// Failure groups, largest first.
pub fn failures(groups: &[FailureGroup]) -> Table {
    let mut t = table();
    t.set_header(vec![
        "count",
        "type",
        "code",
        "status",
        "first line",
        "example",
        "latest",
    ]);
    for g in groups {
        t.add_row(vec![
            g.count.to_string(),
            g.jobtype.clone(),
            g.code.clone(),
            g.status.to_string(),
            first_line(&g.message, 80),
            g.example.clone(),
            time(g.latest),
        ]);
    }
    t
}

/// A client's schedules, a row each.
pub fn schedules(list: &[ScheduleView]) -> Table {
    let mut t = table();
    t.set_header(vec![
        "name", "rule", "zone", "type", "state", "next", "fired", "skipped",
    ]);
    for s in list {
        let state = if s.paused {
            "paused"
        } else if s.next_due.is_none() {
            "ended"
        } else {
            "active"
        };
        t.add_row(vec![
            s.name.clone(),
            s.rule.clone(),
            s.time_zone.clone(),
            s.jobtype.clone(),
            state.to_owned(),
            s.next.first().cloned().unwrap_or_default(),
            s.fired.to_string(),
            s.skipped.to_string(),
        ]);
    }
    t
}

/// One schedule as key/value rows, with its next slots.
pub fn schedule(s: &ScheduleView) -> Table {
    let mut t = table();
    let mut row = |k: &str, v: String| {
        t.add_row(vec![k.to_owned(), v]);
    };
    row("name", s.name.clone());
    row("rule", s.rule.clone());
    row("time zone", s.time_zone.clone());
    row("type", s.jobtype.clone());
    match (&s.data, &s.data_base64) {
        (Some(d), _) => row("data", clip(d)),
        (None, Some(b)) => row("data (base64)", clip(b)),
        (None, None) => {}
    }
    row("priority", s.priority.to_string());
    if !s.tags.is_empty() {
        row("tags", s.tags.join(", "));
    }
    row(
        "catch-up",
        format!(
            "{} within {}",
            s.catch_up,
            humantime::format_duration(std::time::Duration::from_millis(s.catch_up_window_ms))
        ),
    );
    row("overlap", s.overlap.clone());
    if let Some(at) = s.start_at {
        row("start", time(at));
    }
    if let Some(at) = s.end_at {
        row("end", time(at));
    }
    row("version", s.version.to_string());
    row("paused", s.paused.to_string());
    row("fired / skipped", format!("{} / {}", s.fired, s.skipped));
    if let Some(at) = s.fired_through {
        row("fired through", time(at));
    }
    if let Some(job) = &s.last_job {
        row("last job", job.clone());
    }
    row(
        "next",
        if s.next.is_empty() {
            "none".to_owned()
        } else {
            s.next.join("\n")
        },
    );
    t
}
