//! The firer: every daemon's task that adds the jobs of due schedule slots.
//!
//! Each tick it reads the due schedules (one store call), reads the
//! previous slot's job of those whose plan needs it, plans each
//! ([`super::plan`]), adds every slot's job in one `add_jobs`, and only
//! then advances each schedule's watermark (a compare-and-set on its
//! version and watermark). A slot's job id is derived from the schedule
//! and the slot ([`slot_id`]), so firers on any number of daemons add one
//! job per slot; a crash between the add and the advance leaves the
//! watermark behind, and the next firer plans the slot again and finds
//! its job existing. The reverse order could lose a slot.
//!
//! The adds go to the store directly, not through the journal: the slot
//! id makes them idempotent and the watermark makes them recoverable, so
//! there is nothing for the journal to keep.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jobstore_api::{
    AddOutcome, ErrorKind, JobState, JobStore, Millis, NewJob, ScheduleAdvance, ScheduleRecord,
    now_millis,
};
use tokio_util::sync::CancellationToken;

use super::plan::{self, Previous};
use super::rule::{Rule, slot_id};
use crate::metrics::{Metrics, OutcomeLabels};

/// Most schedules read per round; a full round is followed by another at
/// once.
pub const ROUND: usize = 100;

/// Parsed rules by schedule name, with the rule text, zone and version they
/// were parsed from: a schedule deleted and set again starts at version 1,
/// so the version alone does not tell its rules apart. `None`: the rule
/// does not parse here (a daemon older than the one that set it), logged
/// once.
#[derive(Default)]
pub struct Rules(HashMap<String, Parsed>);

/// A schedule's rule as this daemon parsed it, with what it was parsed
/// from: version, rule text, time zone.
struct Parsed {
    version: u64,
    text: String,
    zone: String,
    rule: Option<Arc<Rule>>,
}

impl Rules {
    fn get(&mut self, rec: &ScheduleRecord) -> Option<Arc<Rule>> {
        let s = &rec.schedule;
        if let Some(p) = self.0.get(&s.name)
            && p.version == rec.version
            && p.text == s.rule
            && p.zone == s.time_zone
        {
            return p.rule.clone();
        }
        let rule = match Rule::parse(&s.rule, &s.time_zone) {
            Ok(rule) => Some(Arc::new(rule)),
            Err(e) => {
                tracing::warn!(
                    schedule = %s.name,
                    error = %e,
                    "schedule rule does not parse here: this daemon leaves it to the others"
                );
                None
            }
        };
        if self.0.len() > 10_000 {
            self.0.clear();
        }
        self.0.insert(
            s.name.clone(),
            Parsed {
                version: rec.version,
                text: s.rule.clone(),
                zone: s.time_zone.clone(),
                rule: rule.clone(),
            },
        );
        rule
    }
}

/// Fires due schedules every `tick` (with up to a tenth of jitter, so
/// daemons started together spread out) until `stop`. Does nothing on a
/// store without schedules.
pub async fn run(
    store: Arc<dyn JobStore>,
    metrics: Arc<Metrics>,
    tick: Duration,
    stop: CancellationToken,
) {
    if !store.capabilities().schedules {
        tracing::debug!("the store keeps no schedules: the schedule firer is off");
        return;
    }
    let mut rules = Rules::default();
    loop {
        let jitter = tick.mul_f64(rand::random::<f64>() * 0.1);
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(tick + jitter) => {}
        }
        // Rounds until one is not full (a backlog of due schedules).
        loop {
            match round(&*store, &metrics, &mut rules, now_millis()).await {
                Ok(n) if n == ROUND && !stop.is_cancelled() => continue,
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "firing schedules failed; trying again next tick");
                    break;
                }
            }
        }
    }
}

/// One round at `now`: returns how many schedules were due.
pub async fn round(
    store: &dyn JobStore,
    metrics: &Metrics,
    rules: &mut Rules,
    now: Millis,
) -> jobstore_api::Result<usize> {
    let due = store.due_schedules(now, ROUND).await?;
    // Per schedule: its advance and its slots' jobs.
    let mut planned: Vec<(&ScheduleRecord, ScheduleAdvance, Vec<NewJob>)> =
        Vec::with_capacity(due.len());
    for rec in &due {
        // A rule this daemon cannot read is left to daemons that can: no
        // advance, so nobody's slots are moved.
        let Some(rule) = rules.get(rec) else {
            continue;
        };
        let prev = match &rec.last_job {
            Some(id) if plan::needs_previous(&rule, rec) => previous(store, id).await?,
            Some(_) => Previous::Gone,
            None => Previous::None,
        };
        let p = plan::plan(&rule, rec, now, prev);
        let s = &rec.schedule;
        if let Some(slot) = p.fire.first()
            && let Err(e) = jobstore_api::validate::id(&slot_id(&s.name, *slot))
        {
            // A schedule set around the daemon's checks: its jobs cannot
            // be added; the others' still are.
            tracing::warn!(schedule = %s.name, error = %e, "schedule slots cannot be added");
            continue;
        }
        let jobs = p
            .fire
            .iter()
            .map(|&slot| {
                NewJob::new(slot_id(&s.name, slot), s.jobtype.clone(), s.data.clone())
                    .priority(s.priority)
                    .run_at(slot)
                    .tags(s.tags.iter().cloned())
            })
            .collect();
        planned.push((
            rec,
            ScheduleAdvance {
                fired_through: p.fired_through,
                last_job: p.fire.last().map(|&t| slot_id(&s.name, t)),
                next_due: p.next_due,
                fired: p.fire.len() as u64,
                skipped: p.skipped,
            },
            jobs,
        ));
    }
    // Every slot's job in one add. Should the batch be refused (one
    // schedule's template no longer accepted, a batch too large), each
    // schedule's jobs are added on their own, and a schedule whose add
    // fails is not advanced: the others go on.
    let all: Vec<NewJob> = planned
        .iter()
        .flat_map(|(_, _, j)| j.iter().cloned())
        .collect();
    if !all.is_empty() {
        match store.add_jobs(&all, now).await {
            Ok(out) => count_added(metrics, &out),
            Err(e) if matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::TooLarge) => {
                tracing::warn!(error = %e, "the schedules' adds were refused together; adding them one schedule at a time");
                let mut kept = Vec::with_capacity(planned.len());
                for (rec, adv, jobs) in planned {
                    if jobs.is_empty() {
                        kept.push((rec, adv, jobs));
                        continue;
                    }
                    match store.add_jobs(&jobs, now).await {
                        Ok(out) => {
                            count_added(metrics, &out);
                            kept.push((rec, adv, jobs));
                        }
                        Err(e) => {
                            tracing::warn!(schedule = %rec.schedule.name, error = %e, "schedule slots cannot be added")
                        }
                    }
                }
                planned = kept;
            }
            Err(e) => return Err(e),
        }
    }
    for (rec, adv, _) in planned {
        let skipped = adv.skipped as usize;
        if store
            .advance_schedule(&rec.schedule.name, rec.version, &adv, now)
            .await?
        {
            metrics.schedule_slots_add("skipped", skipped);
        }
    }
    Ok(due.len())
}

fn count_added(metrics: &Metrics, out: &AddOutcome) {
    metrics.schedule_slots_add("fired", out.new.len());
    metrics.schedule_slots_add("existing", out.existing.len());
    for id in &out.new {
        tracing::debug!(job = %id, "schedule slot fired");
    }
}

/// What became of the job of a schedule's newest slot.
async fn previous(store: &dyn JobStore, id: &str) -> jobstore_api::Result<Previous> {
    let Some(job) = store.get_job(id).await? else {
        return Ok(Previous::Gone);
    };
    match (job.state(now_millis()), job.done_dt) {
        (JobState::Archived, Some(finished)) => {
            // Its last claim, from its history; without one, its archive.
            let started = job
                .history
                .iter()
                .rev()
                .find(|e| matches!(e.what, jobstore_api::EventKind::Claimed))
                .map_or(finished, |e| e.at);
            Ok(Previous::Ended { started, finished })
        }
        _ => Ok(Previous::Live),
    }
}

impl Metrics {
    fn schedule_slots_add(&self, outcome: &'static str, n: usize) {
        if n > 0 {
            self.schedule_slots
                .get_or_create(&OutcomeLabels { outcome })
                .inc_by(n as u64);
        }
    }
}
