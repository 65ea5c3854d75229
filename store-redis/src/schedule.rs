//! Stored schedules: one hash per schedule, `{P}:sch:<name>`, the due
//! index `{P}:sch` and the names `{P}:schn`, all in the namespace's slot;
//! one `schedule_*.lua` call (or one `HMGET`) per operation (see the crate
//! docs, "Schedules"). Callers validate first.

use jobstore_api::{Millis, Result, Schedule, ScheduleAdvance, ScheduleRecord};
use redis::Value;

use crate::decode::{bytes, int, string};
use crate::error::{malformed, map};
use crate::scripts::SCRIPTS;
use crate::store::RedisStore;

/// Every field of a schedule's hash, in the order reads return them: the
/// definition, the payload, then the firing state ([`STATE`]).
const FIELDS: [&str; 11] = [
    "definition",
    "data",
    "version",
    "paused",
    "created_dt",
    "updated_dt",
    "fired_through",
    "last_job",
    "next_due",
    "fired",
    "skipped",
];

/// The firing state's fields, as `schedule_set.lua` returns them.
const STATE: &[&str] = FIELDS.split_at(2).1;

/// A schedule's firing state, as its hash holds it.
struct State {
    version: u64,
    paused: bool,
    created_dt: Millis,
    updated_dt: Millis,
    fired_through: Option<Millis>,
    last_job: Option<String>,
    next_due: Option<Millis>,
    fired: u64,
    skipped: u64,
}

impl State {
    /// The state from the values of [`STATE`], in order; `None` when the
    /// hash has no `version` (no schedule).
    fn read(values: impl IntoIterator<Item = Value>) -> Result<Option<State>> {
        let mut it = values.into_iter();
        let mut next = || it.next().ok_or_else(|| malformed("schedule fields"));
        let version = next()?;
        if version == Value::Nil {
            return Ok(None);
        }
        let version = count(&version, "schedule version")?;
        let paused = match string(next()?, "schedule paused")?.as_str() {
            "1" => true,
            "0" => false,
            _ => return Err(malformed("schedule paused")),
        };
        Ok(Some(State {
            version,
            paused,
            created_dt: int(&next()?, "schedule created_dt")?,
            updated_dt: int(&next()?, "schedule updated_dt")?,
            fired_through: optional(next()?, "schedule fired_through")?,
            last_job: match next()? {
                Value::Nil => None,
                v => Some(string(v, "schedule last_job")?),
            },
            next_due: optional(next()?, "schedule next_due")?,
            fired: count(&next()?, "schedule fired")?,
            skipped: count(&next()?, "schedule skipped")?,
        }))
    }

    fn record(self, schedule: Schedule) -> ScheduleRecord {
        ScheduleRecord {
            schedule,
            version: self.version,
            paused: self.paused,
            created_dt: self.created_dt,
            updated_dt: self.updated_dt,
            fired_through: self.fired_through,
            last_job: self.last_job,
            next_due: self.next_due,
            fired: self.fired,
            skipped: self.skipped,
        }
    }
}

fn count(v: &Value, what: &str) -> Result<u64> {
    u64::try_from(int(v, what)?).map_err(|_| malformed(what))
}

fn optional(v: Value, what: &str) -> Result<Option<Millis>> {
    match v {
        Value::Nil => Ok(None),
        v => int(&v, what).map(Some),
    }
}

/// The schedule `name` from the values of [`FIELDS`], in order; `None`
/// when the hash has no `version` (no schedule).
fn record(name: String, values: Vec<Value>) -> Result<Option<ScheduleRecord>> {
    if values.len() != FIELDS.len() {
        return Err(malformed("schedule fields"));
    }
    let mut it = values.into_iter();
    let (Some(definition), Some(data)) = (it.next(), it.next()) else {
        return Err(malformed("schedule fields"));
    };
    let Some(state) = State::read(it)? else {
        return Ok(None);
    };
    let definition = string(definition, "schedule definition")?;
    let data = bytes(data, "schedule data")?;
    let schedule = Schedule::from_definition(name, &definition, data)?;
    Ok(Some(state.record(schedule)))
}

/// A reply of `name, {fields}` pairs (`schedule_list.lua`,
/// `schedule_due.lua`) as records, in its order; pairs of a hash without
/// a schedule are left out.
fn records(reply: Vec<Value>) -> Result<Vec<ScheduleRecord>> {
    if !reply.len().is_multiple_of(2) {
        return Err(malformed("schedule list length"));
    }
    let mut out = Vec::with_capacity(reply.len() / 2);
    let mut it = reply.into_iter();
    while let (Some(name), Some(fields)) = (it.next(), it.next()) {
        let Value::Array(fields) = fields else {
            return Err(malformed("schedule fields"));
        };
        if let Some(rec) = record(string(name, "schedule name")?, fields)? {
            out.push(rec);
        }
    }
    Ok(out)
}

/// An optional time as a script argument: `''` for none.
fn opt_arg(t: Option<Millis>) -> String {
    t.map(|t| t.to_string()).unwrap_or_default()
}

impl RedisStore {
    /// `schedule_set.lua`: creates or replaces the schedule.
    pub(crate) async fn schedule_set(
        &self,
        s: &Schedule,
        next_due: Option<Millis>,
        now: Millis,
    ) -> Result<ScheduleRecord> {
        let mut inv = SCRIPTS.schedule_set.prepare_invoke();
        inv.key(self.keys.schedule(&s.name))
            .key(self.keys.schedules_due())
            .key(self.keys.schedule_names())
            .arg(&s.name)
            .arg(s.definition())
            .arg(&s.data[..])
            .arg(opt_arg(next_due))
            .arg(now)
            .arg(STATE);
        let state: Vec<Value> = inv
            .invoke_async(&mut self.conn())
            .await
            .map_err(|e| map(e, "set schedule"))?;
        let state = State::read(state)?.ok_or_else(|| malformed("schedule set reply"))?;
        Ok(state.record(s.clone()))
    }

    /// `HMGET` of the schedule's hash.
    pub(crate) async fn schedule_get(&self, name: &str) -> Result<Option<ScheduleRecord>> {
        let values: Vec<Value> = redis::cmd("HMGET")
            .arg(self.keys.schedule(name))
            .arg(&FIELDS[..])
            .query_async(&mut self.conn())
            .await
            .map_err(|e| map(e, "get schedule"))?;
        record(name.to_owned(), values)
    }

    /// `schedule_list.lua`: the schedules whose name starts with `prefix`,
    /// by name.
    pub(crate) async fn schedule_list(&self, prefix: &str) -> Result<Vec<ScheduleRecord>> {
        // Names are ASCII, so every name starting with `prefix` sorts
        // before `prefix` followed by the byte 0xff.
        let (min, max) = if prefix.is_empty() {
            (b"-".to_vec(), b"+".to_vec())
        } else {
            let mut max = format!("({prefix}").into_bytes();
            max.push(0xff);
            (format!("[{prefix}").into_bytes(), max)
        };
        let mut inv = SCRIPTS.schedule_list.prepare_invoke();
        inv.key(self.keys.schedule_names())
            .arg(self.keys.schedule_prefix())
            .arg(min)
            .arg(max)
            .arg(&FIELDS[..]);
        let reply: Vec<Value> = inv
            .invoke_async(&mut self.conn())
            .await
            .map_err(|e| map(e, "list schedules"))?;
        records(reply)
    }

    /// `schedule_delete.lua`: whether the schedule existed.
    pub(crate) async fn schedule_delete(&self, name: &str) -> Result<bool> {
        let mut inv = SCRIPTS.schedule_delete.prepare_invoke();
        inv.key(self.keys.schedule(name))
            .key(self.keys.schedules_due())
            .key(self.keys.schedule_names())
            .arg(name);
        let n: i64 = inv
            .invoke_async(&mut self.conn())
            .await
            .map_err(|e| map(e, "delete schedule"))?;
        Ok(n == 1)
    }

    /// `schedule_pause.lua`: whether the flag changed.
    pub(crate) async fn schedule_pause(
        &self,
        name: &str,
        paused: bool,
        next_due: Option<Millis>,
        now: Millis,
    ) -> Result<bool> {
        let mut inv = SCRIPTS.schedule_pause.prepare_invoke();
        inv.key(self.keys.schedule(name))
            .key(self.keys.schedules_due())
            .arg(name)
            .arg(if paused { "1" } else { "0" })
            .arg(opt_arg(next_due))
            .arg(now);
        let n: i64 = inv
            .invoke_async(&mut self.conn())
            .await
            .map_err(|e| map(e, "pause schedule"))?;
        Ok(n == 1)
    }

    /// `schedule_due.lua`: up to `limit` schedules due at `now`, by
    /// `next_due`, then name.
    pub(crate) async fn schedule_due(
        &self,
        now: Millis,
        limit: usize,
    ) -> Result<Vec<ScheduleRecord>> {
        let mut inv = SCRIPTS.schedule_due.prepare_invoke();
        inv.key(self.keys.schedules_due())
            .arg(self.keys.schedule_prefix())
            .arg(now)
            .arg(limit)
            .arg(&FIELDS[..]);
        let reply: Vec<Value> = inv
            .invoke_async(&mut self.conn())
            .await
            .map_err(|e| map(e, "due schedules"))?;
        records(reply)
    }

    /// `schedule_advance.lua`: the compare-and-set of the firing state;
    /// whether it applied.
    pub(crate) async fn schedule_advance(
        &self,
        name: &str,
        version: u64,
        advance: &ScheduleAdvance,
    ) -> Result<bool> {
        let mut inv = SCRIPTS.schedule_advance.prepare_invoke();
        inv.key(self.keys.schedule(name))
            .key(self.keys.schedules_due())
            .arg(name)
            .arg(version)
            .arg(advance.fired_through)
            .arg(advance.last_job.as_deref().unwrap_or_default())
            .arg(opt_arg(advance.next_due))
            .arg(advance.fired)
            .arg(advance.skipped)
            .arg(if advance.moves() { "1" } else { "0" });
        let n: i64 = inv
            .invoke_async(&mut self.conn())
            .await
            .map_err(|e| map(e, "advance schedule"))?;
        Ok(n == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scripts read the fields they are given, in that order: the
    /// state's come after the definition and the payload.
    #[test]
    fn state_fields_follow_the_definition() {
        assert_eq!(STATE.len(), 9);
        assert_eq!(STATE[0], "version");
        assert_eq!(FIELDS[..2], ["definition", "data"]);
    }

    /// A hash without `version` is no schedule; a full one decodes.
    #[test]
    fn records_decode_from_their_fields() {
        let nil = vec![Value::Nil; FIELDS.len()];
        assert_eq!(record("x".into(), nil).unwrap(), None);
        let s = Schedule::new("x", "* * * * *", "t");
        let bulk = |v: &str| Value::BulkString(v.as_bytes().to_vec());
        let values = vec![
            bulk(&s.definition()),
            bulk(""),
            bulk("3"),
            bulk("1"),
            bulk("10"),
            bulk("20"),
            Value::Nil,
            bulk("j"),
            bulk("30"),
            bulk("4"),
            bulk("5"),
        ];
        let rec = record("x".into(), values).unwrap().unwrap();
        assert_eq!(rec.schedule, s);
        assert_eq!(
            (rec.version, rec.paused, rec.created_dt, rec.updated_dt),
            (3, true, 10, 20)
        );
        assert_eq!(rec.fired_through, None);
        assert_eq!(rec.last_job.as_deref(), Some("j"));
        assert_eq!((rec.next_due, rec.fired, rec.skipped), (Some(30), 4, 5));
        let short = vec![Value::Nil; 3];
        assert!(record("x".into(), short).is_err());
    }
}
