//! What becomes of a job when its run ends: the outcome rules.
//!
//! - 2xx (ok) and 4xx (failed) are archived with their result: code,
//!   status and output. With a retention of zero, ok jobs are deleted
//!   instead.
//! - 1xx (retry) and 5xx (error) are released to run again after an
//!   exponential backoff with jitter (`base * 2^(attempt-1)`, capped, then
//!   a random 50–100 % of it; a runner's own wish such as HTTP
//!   `Retry-After` wins), until the job has been handed out `max_attempts`
//!   times or is older than `max_age`: then it is archived as `timeout`
//!   with the last status and output.
//! - A job of a jobtype with no handler is released as retry by the same
//!   rules, until it times out.
//! - A repeating job whose run ended ok is released to run again at its
//!   rule's next time ([`Release::Repeat`]), with the run's result and the
//!   payload the run left for the next (a `U:` line, a remote finish's
//!   `data`), instead of being archived or deleted. The next time counts
//!   from `now` for cron rules (missed times are not made up), and for
//!   repeat rules from their base: the time the job was due (`SCHEDULED`,
//!   so a late run may be due again at once), claimed (`STARTED`) or
//!   finished (`FINISHED`). A rule that does not parse (a newer daemon's
//!   syntax) or fires no more archives the job as any ok run, with a note
//!   in its output. Every other outcome ends a repeating job as any job.
//!
//! The jobs a run asks for (`J:` lines of this daemon's runners, the
//! `jobs` of a remote worker's finish) follow one rule too: each becomes a
//! job of the run's client; one whose jobtype is not a valid jobtype name,
//! or whose payload is over the store's limit, is dropped, with a note in
//! the run's output that says why (and, for a remote worker, in the
//! finish's answer). The run's own result stands either way.

use std::time::Duration;

use jobstore_api::{HandlerLimits, Job, JobResult, Millis, Release, Repeat, ResultCode};

use crate::journal::Record;
use crate::runner::{Class, Outcome};
use crate::tenant::Client;

/// The daemon's defaults for what a handler leaves unset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Hand-outs before `timeout`.
    pub max_attempts: u32,
    /// Age before `timeout`.
    pub max_age: Duration,
    /// Longest run.
    pub time_limit: Duration,
    /// First retry delay.
    pub backoff_base: Duration,
    /// Longest retry delay.
    pub backoff_max: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_attempts: 10,
            max_age: Duration::from_secs(7 * 24 * 3600),
            time_limit: Duration::from_secs(600),
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(3600),
        }
    }
}

impl Limits {
    /// These defaults overridden by what `h` sets.
    pub fn with(&self, h: &HandlerLimits) -> Limits {
        let ms = Duration::from_millis;
        Limits {
            max_attempts: h.max_attempts.unwrap_or(self.max_attempts),
            max_age: h.max_age_ms.map_or(self.max_age, ms),
            time_limit: h.time_limit_ms.map_or(self.time_limit, ms),
            backoff_base: h.backoff_base_ms.map_or(self.backoff_base, ms),
            backoff_max: h.backoff_max_ms.map_or(self.backoff_max, ms),
        }
    }

    /// The backoff before run `attempt + 1`, without jitter.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(32);
        self.backoff_base
            .saturating_mul(1u32 << exp.min(31))
            .min(self.backoff_max)
    }
}

/// A delay scaled by a random 50–100 %, so retries of many jobs that failed
/// together spread out.
pub fn jitter(d: Duration) -> Duration {
    d.mul_f64(rand::random_range(0.5..=1.0))
}

/// What a repeating job's release needs beside its run: its rule and the
/// times its next run may count from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repeating {
    /// The rule it was added with.
    pub rule: Repeat,
    /// When it was due (its claim's `claimed_due`).
    pub due: Millis,
    /// When it was claimed.
    pub claimed: Millis,
}

impl Repeating {
    /// The repeat of a job claimed at `claimed`, if it repeats.
    pub fn of(job: &Job, claimed: Millis) -> Option<Box<Repeating>> {
        let rule = job.flow.as_ref()?.repeat.clone()?;
        Some(Box::new(Repeating {
            rule,
            due: job.claimed_due.unwrap_or(claimed),
            claimed,
        }))
    }

    /// When the job runs next after a run that ends at `now`; why not,
    /// when the rule does not parse or fires no more.
    pub fn next(&self, now: Millis) -> Result<Millis, String> {
        use crate::schedules::rule::{Base, Rule};
        let rule = Rule::parse(&self.rule.rule, &self.rule.time_zone)
            .map_err(|e| format!("its repeat rule does not parse: {e}"))?;
        let from = match (&rule, rule.base()) {
            (Rule::Cron { .. }, _) | (_, Base::Finished) => now,
            (_, Base::Scheduled) => self.due,
            (_, Base::Started) => self.claimed,
        };
        match rule.next(from) {
            Some(at) if at > from => Ok(at),
            _ => Err(format!(
                "its repeat rule {:?} fires no more after {}",
                self.rule.rule,
                crate::schedules::rule::rfc3339(from)
            )),
        }
    }
}

/// How to release a job whose run ended with `outcome`: its `attempt`-th
/// hand-out, created at `created`, at `now`.
pub fn release_for(
    outcome: &Outcome,
    limits: &Limits,
    attempt: u32,
    created: Millis,
    now: Millis,
    delete_ok: bool,
) -> Release {
    let result = |code: ResultCode| JobResult {
        code,
        status: outcome.status,
        output: outcome.output.clone(),
    };
    match outcome.class {
        Class::Ok if delete_ok => Release::Delete,
        Class::Ok => Release::Archive(result(ResultCode::Ok)),
        Class::Failed => Release::Archive(result(ResultCode::Failed)),
        Class::Retry | Class::Error => {
            if out_of_limits(limits, attempt, created, now) {
                Release::Archive(result(ResultCode::Timeout))
            } else {
                let delay = outcome
                    .retry_after
                    .unwrap_or_else(|| jitter(limits.backoff(attempt)));
                Release::Retry {
                    delay: delay.min(jobstore_api::limits::MAX_DELAY),
                }
            }
        }
    }
}

/// What becomes of a run: its release, and the outcome it is counted
/// under once the store took it (`ok`, `failed`, `timeout`, `retry`,
/// `error`). A repeating job's ok run is released with
/// [`Release::Repeat`] (see the module docs): `repeat` is its rule and
/// the largest payload the store takes, which the next run's data must fit.
pub fn settle(
    outcome: &mut Outcome,
    limits: &Limits,
    attempt: u32,
    created: Millis,
    now: Millis,
    delete_ok: bool,
    repeat: Option<(&Repeating, usize)>,
) -> (Release, &'static str) {
    let how = match repeat {
        Some((r, max_payload)) if outcome.class == Class::Ok => {
            repeat_ok(outcome, r, now, max_payload)
        }
        _ => release_for(outcome, limits, attempt, created, now, delete_ok),
    };
    let label = match &how {
        Release::Archive(r) | Release::Repeat { result: r, .. } => r.code.as_str(),
        Release::Delete => "ok",
        Release::Retry { .. } | Release::Unget => match outcome.class {
            Class::Retry => "retry",
            _ => "error",
        },
    };
    (how, label)
}

/// The release of a repeating job's ok run: due again at the rule's next
/// time with the data the run left, if it fits; otherwise (with a note in
/// the output saying why) the data is kept or the job archived.
fn repeat_ok(outcome: &mut Outcome, r: &Repeating, now: Millis, max_payload: usize) -> Release {
    let mut data = outcome.data.take();
    if let Some(d) = data.as_ref().filter(|d| d.len() > max_payload) {
        note(
            outcome,
            &format!(
                "the next run's payload is {} bytes, the limit is {max_payload}: the payload is kept",
                d.len()
            ),
        );
        data = None;
    }
    match r.next(now) {
        Ok(at) => Release::Repeat {
            at,
            result: JobResult {
                code: ResultCode::Ok,
                status: outcome.status,
                output: outcome.output.clone(),
            },
            data,
        },
        Err(why) => {
            note(outcome, &format!("{why}: archived"));
            Release::Archive(JobResult {
                code: ResultCode::Ok,
                status: outcome.status,
                output: outcome.output.clone(),
            })
        }
    }
}

/// Appends `[jobstore] note` to a run's output, within the output cap.
fn note(outcome: &mut Outcome, note: &str) {
    let line = format!("[jobstore] {note}\n");
    if outcome.output.len() + line.len() <= jobstore_api::limits::MAX_OUTPUT {
        outcome.output.extend_from_slice(line.as_bytes());
    }
}

/// A job a run asked for that was dropped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// Its place among the jobs the run asked for, from 1.
    pub index: usize,
    /// Why it was dropped.
    pub reason: String,
}

/// The release of a job cancelled while it ran (or marked before a claim
/// handed it out): archived as `cancelled`, with the run's output kept
/// after a note saying so.
pub fn cancelled(output: &[u8]) -> Release {
    let mut out = b"[jobstore] cancelled while running\n".to_vec();
    out.extend_from_slice(output);
    Release::Archive(JobResult::cancelled().with_output(out))
}

/// The journal records of the jobs a run of `client` asked for
/// (`outcome.children`, taken), by the rule in the module docs: the
/// dropped ones are noted in the run's output (within the output cap)
/// and returned. Each new job continues the run's trace (`trace`, the
/// run's [`Task::trace`](crate::runner::Task::trace)) unless it brings a
/// context of its own.
pub fn follow_on_jobs(
    client: &Client,
    outcome: &mut Outcome,
    max_payload: usize,
    tags_ok: bool,
    trace: Option<&jobstore_api::TraceContext>,
) -> (Vec<Record>, Vec<Dropped>) {
    let children = std::mem::take(&mut outcome.children);
    let mut records = Vec::with_capacity(children.len());
    let mut dropped = Vec::new();
    for (i, child) in children.into_iter().enumerate() {
        let bad_tags = if child.tags.is_empty() {
            None
        } else if !tags_ok {
            Some("this store keeps no tags".to_owned())
        } else {
            jobstore_api::validate::tags(&child.tags)
                .err()
                .map(|e| e.to_string())
        };
        if let Some(reason) = bad_tags {
            dropped.push(Dropped {
                index: i + 1,
                reason,
            });
            continue;
        }
        let jobtype = match client.jobtype(&child.jobtype) {
            Ok(jt) if child.data.len() <= max_payload => jt,
            Ok(_) => {
                dropped.push(Dropped {
                    index: i + 1,
                    reason: format!(
                        "its payload is {} bytes, the limit is {max_payload}",
                        child.data.len()
                    ),
                });
                continue;
            }
            Err(e) => {
                dropped.push(Dropped {
                    index: i + 1,
                    reason: e.to_string(),
                });
                continue;
            }
        };
        records.push(Record {
            id: client.new_job_id(),
            jobtype,
            priority: 0,
            run_at: None,
            data: child.data,
            tags: child.tags,
            trace: child.trace.or_else(|| trace.cloned()),
            unique: None,
            repeat: None,
            depends_on: Vec::new(),
            on_dependency_failure: Default::default(),
            with_outputs: false,
        });
    }
    for d in &dropped {
        note(
            outcome,
            &format!("new job {} dropped: {}", d.index, d.reason),
        );
    }
    (records, dropped)
}

/// Whether a job may not run again: handed out `max_attempts` times, or
/// older than `max_age`.
pub fn out_of_limits(limits: &Limits, attempt: u32, created: Millis, now: Millis) -> bool {
    let age = u64::try_from(now.saturating_sub(created)).unwrap_or(0);
    attempt >= limits.max_attempts || Duration::from_millis(age) >= limits.max_age
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::Parsed;
    use jobstore_api::FlowState;

    fn outcome(status: u16) -> Outcome {
        Outcome::new(
            status,
            Parsed {
                output: b"out".to_vec(),
                ..Parsed::default()
            },
        )
    }

    #[test]
    fn classes_end_as_specified() {
        let l = Limits::default();
        let ok = release_for(&outcome(200), &l, 1, 0, 10, false);
        assert!(
            matches!(&ok, Release::Archive(r) if r.code == ResultCode::Ok && r.status == 200 && r.output == b"out")
        );
        assert_eq!(
            release_for(&outcome(201), &l, 1, 0, 10, true),
            Release::Delete
        );
        let failed = release_for(&outcome(404), &l, 1, 0, 10, true);
        assert!(
            matches!(&failed, Release::Archive(r) if r.code == ResultCode::Failed && r.status == 404)
        );
        for s in [101, 500, 302] {
            assert!(matches!(
                release_for(&outcome(s), &l, 1, 0, 10, false),
                Release::Retry { .. }
            ));
        }
        let out = release_for(&outcome(500), &l, 10, 0, 10, false);
        assert!(
            matches!(&out, Release::Archive(r) if r.code == ResultCode::Timeout && r.status == 500)
        );
        let old = release_for(&outcome(102), &l, 1, 0, l.max_age.as_millis() as i64, false);
        assert!(matches!(&old, Release::Archive(r) if r.code == ResultCode::Timeout));
    }

    #[test]
    fn backoff_doubles_with_jitter_up_to_the_cap() {
        let l = Limits {
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_millis(1000),
            ..Limits::default()
        };
        assert_eq!(l.backoff(1), Duration::from_millis(100));
        assert_eq!(l.backoff(2), Duration::from_millis(200));
        assert_eq!(l.backoff(4), Duration::from_millis(800));
        assert_eq!(l.backoff(5), Duration::from_millis(1000));
        assert_eq!(l.backoff(1000), Duration::from_millis(1000));
        for attempt in 1..6 {
            match release_for(&outcome(500), &l, attempt, 0, 1, false) {
                Release::Retry { delay } => {
                    assert!(delay <= l.backoff(attempt) && delay >= l.backoff(attempt) / 2)
                }
                other => panic!("{other:?}"),
            }
        }
        let mut o = outcome(429);
        o.class = Class::Retry;
        o.retry_after = Some(Duration::from_secs(7));
        assert_eq!(
            release_for(&o, &l, 1, 0, 1, false),
            Release::Retry {
                delay: Duration::from_secs(7)
            }
        );
    }

    #[test]
    fn settled_runs_are_counted_by_what_became_of_them() {
        let l = Limits::default();
        let label =
            |status: u16, attempt| settle(&mut outcome(status), &l, attempt, 0, 1, false, None).1;
        assert_eq!(label(200, 1), "ok");
        assert_eq!(label(404, 1), "failed");
        assert_eq!(label(102, 1), "retry");
        assert_eq!(label(500, 1), "error");
        assert_eq!(label(500, 10), "timeout");
        assert_eq!(
            settle(&mut outcome(200), &l, 1, 0, 1, true, None),
            (Release::Delete, "ok")
        );
    }

    /// 2026-11-30T10:00:00Z, a Monday.
    const MON: Millis = 1_796_032_800_000;
    const MIN: Millis = 60_000;

    fn repeating(rule: &str, zone: &str) -> Repeating {
        Repeating {
            rule: Repeat::new(rule).time_zone(zone),
            due: MON - 30 * MIN,
            claimed: MON - 20 * MIN,
        }
    }

    fn settled(o: &mut Outcome, r: &Repeating, delete_ok: bool) -> (Release, &'static str) {
        settle(
            o,
            &Limits::default(),
            1,
            MON - MIN,
            MON,
            delete_ok,
            Some((r, 16)),
        )
    }

    #[test]
    fn a_repeating_jobs_ok_run_is_due_again_at_its_rules_next_time() {
        let at = |rule: &str, zone: &str| match settled(
            &mut outcome(200),
            &repeating(rule, zone),
            false,
        ) {
            (Release::Repeat { at, result, data }, "ok") => {
                assert_eq!(
                    (result.code, result.status, result.output),
                    (ResultCode::Ok, 200, b"out".to_vec())
                );
                assert_eq!(data, None, "no U: line: the payload stays");
                at
            }
            other => panic!("{rule}: {other:?}"),
        };
        // Cron counts from now: missed times are not made up.
        assert_eq!(at("0 * * * *", "UTC"), MON + 60 * MIN);
        assert_eq!(at("0 6 * * *", "Europe/Paris"), MON + 19 * 60 * MIN);
        // Repeat rules count from their base.
        assert_eq!(at("SCHEDULED, +1 HOUR", "UTC"), MON + 30 * MIN);
        assert_eq!(at("STARTED, +1 HOUR", "UTC"), MON + 40 * MIN);
        assert_eq!(at("FINISHED, +1 HOUR", "UTC"), MON + 60 * MIN);
        assert_eq!(
            at("SCHEDULED, +10 MINUTES", "UTC"),
            MON - 20 * MIN,
            "late: due at once"
        );
        // Retention 0 deletes ok jobs, never a repeating one.
        assert!(matches!(
            settled(&mut outcome(200), &repeating("HOURLY", "UTC"), true).0,
            Release::Repeat { .. }
        ));
    }

    #[test]
    fn a_repeating_job_takes_the_payload_its_run_left_if_it_fits() {
        let r = repeating("HOURLY", "UTC");
        let mut o = outcome(200);
        o.data = Some(b"next".to_vec());
        match settled(&mut o, &r, false).0 {
            Release::Repeat { data, .. } => assert_eq!(data.as_deref(), Some(&b"next"[..])),
            other => panic!("{other:?}"),
        }
        let mut o = outcome(200);
        o.data = Some(vec![b'x'; 17]);
        match settled(&mut o, &r, false).0 {
            Release::Repeat { data, result, .. } => {
                assert_eq!(data, None, "over the limit: the payload stays");
                let text = String::from_utf8(result.output).unwrap();
                assert!(
                    text.contains("payload is 17 bytes, the limit is 16"),
                    "{text}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_repeating_job_counts_from_its_claims_due_time_or_its_claim() {
        let job = |flow: Option<Box<FlowState>>, claimed_due| Job {
            id: "r".into(),
            jobtype: "t".into(),
            data: Vec::new(),
            priority: 0,
            dt: 0,
            lock: "me".into(),
            attempts: 1,
            create_dt: 0,
            done_dt: None,
            result: None,
            cancel_requested: false,
            tags: Vec::new(),
            history: Vec::new(),
            claimed_due,
            flow,
            trace: None,
        };
        let rule = Repeat::new("HOURLY").time_zone("Europe/Paris");
        let flow = FlowState::from_parts(None, Some(&rule.to_text()));
        assert_eq!(
            Repeating::of(&job(flow.clone(), Some(MON - MIN)), MON).as_deref(),
            Some(&Repeating {
                rule: rule.clone(),
                due: MON - MIN,
                claimed: MON,
            })
        );
        assert_eq!(
            Repeating::of(&job(flow, None), MON).as_deref(),
            Some(&Repeating {
                rule,
                due: MON,
                claimed: MON,
            }),
            "no due time (a claim that did not say): the claim's"
        );
        assert_eq!(Repeating::of(&job(None, None), MON), None, "plain");
        let keyed = Some(Box::new(FlowState::unique("k")));
        assert_eq!(Repeating::of(&job(keyed, None), MON), None, "keyed only");
    }

    #[test]
    fn a_repeating_jobs_next_payload_may_be_as_large_as_the_limit() {
        let r = repeating("HOURLY", "UTC");
        let mut o = outcome(200);
        o.data = Some(vec![b'x'; 16]);
        match settled(&mut o, &r, false).0 {
            Release::Repeat { data, result, .. } => {
                assert_eq!(data, Some(vec![b'x'; 16]));
                assert_eq!(result.output, b"out", "no note");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_rule_that_does_not_move_forward_archives_the_job() {
        // Rule::check (and so the HTTP add) refuses such a rule, but a
        // job added through a store directly may carry it: its next time
        // is the base itself (due at midnight) or before it.
        for due in [MON - 10 * 60 * MIN, MON - 30 * MIN] {
            let r = Repeating {
                rule: Repeat::new("SCHEDULED, START OF DAY"),
                due,
                claimed: MON - 20 * MIN,
            };
            match settled(&mut outcome(200), &r, false) {
                (Release::Archive(res), "ok") => {
                    let text = String::from_utf8(res.output).unwrap();
                    assert!(text.contains("fires no more"), "{text}");
                }
                other => panic!("due {due}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_note_is_added_only_when_it_fits_under_the_output_cap() {
        use jobstore_api::limits::MAX_OUTPUT;
        let line = b"[jobstore] n\n".len();
        for (len, added) in [
            (MAX_OUTPUT / 2, true),
            (MAX_OUTPUT - line, true),
            (MAX_OUTPUT - line + 1, false),
        ] {
            let mut o = outcome(200);
            o.output = vec![b'o'; len];
            note(&mut o, "n");
            let want = if added { len + line } else { len };
            assert_eq!(o.output.len(), want, "output of {len} bytes");
            if added {
                assert!(o.output.ends_with(b"[jobstore] n\n"));
            }
        }
    }

    #[test]
    fn a_repeating_job_ends_as_any_job_when_its_run_does_not_end_ok() {
        let r = repeating("HOURLY", "UTC");
        let (failed, label) = settled(&mut outcome(404), &r, false);
        assert!(matches!(&failed, Release::Archive(res) if res.code == ResultCode::Failed));
        assert_eq!(label, "failed");
        assert!(matches!(
            settled(&mut outcome(500), &r, false),
            (Release::Retry { .. }, "error")
        ));
        // A rule that does not parse, or fires no more: archived ok, noted.
        for rule in ["NEVERLY", "0 0 30 2 *"] {
            let (how, label) = settled(&mut outcome(200), &repeating(rule, "UTC"), false);
            match how {
                Release::Archive(res) => {
                    assert_eq!((res.code, label), (ResultCode::Ok, "ok"));
                    let text = String::from_utf8(res.output).unwrap();
                    assert!(
                        text.starts_with("out") && text.contains("archived"),
                        "{text}"
                    );
                }
                other => panic!("{rule}: {other:?}"),
            }
        }
    }

    #[test]
    fn follow_on_jobs_with_a_bad_jobtype_or_payload_are_dropped_with_a_note() {
        use crate::runner::Child;
        let client = Client::new("acme").unwrap();
        let mut o = outcome(200);
        let child = |jobtype: &str, data: &[u8]| Child {
            jobtype: jobtype.into(),
            data: data.to_vec(),
            tags: vec![],
            trace: None,
        };
        o.children = vec![
            child("mail", b"a"),
            child("bad type", b"b"),
            child("mail", b"0123456789"),
            child("sms", b""),
        ];
        let run = jobstore_api::TraceContext::parse(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            None,
        )
        .unwrap();
        let own = jobstore_api::TraceContext::parse(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            Some("a=1"),
        )
        .unwrap();
        o.children[3].trace = Some(own.clone());
        let (records, dropped) = follow_on_jobs(&client, &mut o, 8, true, Some(&run));
        assert!(o.children.is_empty());
        let traces: Vec<_> = records.iter().map(|r| r.trace.clone()).collect();
        assert_eq!(
            traces,
            [Some(run), Some(own)],
            "the run's, or the job's own"
        );
        let got: Vec<(&str, &[u8])> = records
            .iter()
            .map(|r| (r.jobtype.as_str(), r.data.as_slice()))
            .collect();
        assert_eq!(got, [("acme-mail", &b"a"[..]), ("acme-sms", &b""[..])]);
        assert!(records.iter().all(|r| r.id.starts_with("acme-")));
        assert_ne!(records[0].id, records[1].id);
        assert_eq!(dropped.iter().map(|d| d.index).collect::<Vec<_>>(), [2, 3]);
        assert!(dropped[1].reason.contains("10 bytes"), "{dropped:?}");
        let out = String::from_utf8(o.output).unwrap();
        assert!(
            out.starts_with("out[jobstore] new job 2 dropped: "),
            "{out}"
        );
        assert!(out.contains("new job 3 dropped: its payload is 10 bytes, the limit is 8"));
        // The output cap holds.
        let mut full = outcome(200);
        full.output = vec![b'x'; jobstore_api::limits::MAX_OUTPUT];
        full.children = vec![child("bad type", b"")];
        let (records, dropped) = follow_on_jobs(&client, &mut full, 8, true, None);
        assert!(records.is_empty() && dropped.len() == 1);
        assert_eq!(full.output.len(), jobstore_api::limits::MAX_OUTPUT);
    }

    #[test]
    fn handler_limits_override_defaults() {
        let l = Limits::default().with(&HandlerLimits {
            max_attempts: Some(2),
            time_limit_ms: Some(1500),
            ..HandlerLimits::default()
        });
        assert_eq!(l.max_attempts, 2);
        assert_eq!(l.time_limit, Duration::from_millis(1500));
        assert_eq!(l.max_age, Limits::default().max_age);
    }
}
