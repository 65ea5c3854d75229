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
    JobState, JobStore, Millis, NewJob, ScheduleAdvance, ScheduleRecord, now_millis,
};
use tokio_util::sync::CancellationToken;

use super::plan::{self, Previous};
use super::rule::{Rule, slot_id};
use crate::metrics::{Metrics, OutcomeLabels};

/// Most schedules read per round; a full round is followed by another at
/// once.
pub const ROUND: usize = 100;

/// How long a schedule whose rule no longer parses (a daemon of an older
/// version reading a newer one's rule) waits before it is looked at again.
const UNREADABLE_RETRY_MS: Millis = 60_000;

/// Parsed rules by (schedule, version): a rule is parsed once per version.
#[derive(Default)]
pub struct Rules(HashMap<String, (u64, Arc<Rule>)>);

impl Rules {
    fn get(&mut self, rec: &ScheduleRecord) -> Option<Arc<Rule>> {
        let name = &rec.schedule.name;
        if let Some((v, rule)) = self.0.get(name)
            && *v == rec.version
        {
            return Some(rule.clone());
        }
        match Rule::parse(&rec.schedule.rule, &rec.schedule.time_zone) {
            Ok(rule) => {
                let rule = Arc::new(rule);
                self.0.insert(name.clone(), (rec.version, rule.clone()));
                Some(rule)
            }
            Err(e) => {
                tracing::warn!(schedule = %name, error = %e, "schedule rule does not parse here");
                None
            }
        }
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
    let mut planned: Vec<(&ScheduleRecord, ScheduleAdvance)> = Vec::with_capacity(due.len());
    let mut jobs: Vec<NewJob> = Vec::new();
    for rec in &due {
        let Some(rule) = rules.get(rec) else {
            let through = rec.fired_through.unwrap_or(rec.created_dt);
            planned.push((rec, postpone(through, now + UNREADABLE_RETRY_MS)));
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
            let through = rec.fired_through.unwrap_or(rec.created_dt);
            planned.push((rec, postpone(through, now + UNREADABLE_RETRY_MS)));
            continue;
        }
        for &slot in &p.fire {
            let job = NewJob::new(slot_id(&s.name, slot), s.jobtype.clone(), s.data.clone())
                .priority(s.priority)
                .run_at(slot)
                .tags(s.tags.iter().cloned());
            jobs.push(job);
        }
        planned.push((
            rec,
            ScheduleAdvance {
                fired_through: p.fired_through,
                last_job: p.fire.last().map(|&t| slot_id(&s.name, t)),
                next_due: p.next_due,
                fired: p.fire.len() as u64,
                skipped: p.skipped,
            },
        ));
    }
    if !jobs.is_empty() {
        let out = store.add_jobs(&jobs, now).await?;
        metrics.schedule_slots_add("fired", out.new.len());
        metrics.schedule_slots_add("existing", out.existing.len());
        for id in &out.new {
            tracing::debug!(job = %id, "schedule slot fired");
        }
    }
    for (rec, adv) in planned {
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

/// An advance that only moves `next_due`.
fn postpone(through: Millis, next_due: Millis) -> ScheduleAdvance {
    ScheduleAdvance {
        fired_through: through,
        last_job: None,
        next_due: Some(next_due),
        fired: 0,
        skipped: 0,
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
