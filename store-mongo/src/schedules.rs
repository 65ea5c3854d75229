//! The `schedules` collection: one document per stored schedule, its
//! definition as JSON text, its payload as binary and its firing state as
//! fields; each operation one command on one document or one range (see
//! the crate docs, "Schedules").

use futures::TryStreamExt;
use jobstore_api::{Error, Millis, Result, Schedule, ScheduleAdvance, ScheduleRecord};
use mongodb::bson::{Bson, Document, doc};
use mongodb::options::{Hint, ReturnDocument};

use crate::conn::SCHEDULES_DUE_INDEX;
use crate::convert::{binary, get_bytes, get_flag, get_i64, get_int, get_str, opt_i64, opt_str};
use crate::error;
use crate::store::{MongoStore, batch};

/// Field names of the `schedules` collection.
pub(crate) mod s {
    pub const ID: &str = "_id";
    /// The name again, the last key of the `due` index.
    pub const NAME: &str = "name";
    pub const DEFINITION: &str = "definition";
    pub const DATA: &str = "data";
    pub const VERSION: &str = "version";
    pub const PAUSED: &str = "paused";
    pub const CREATED_DT: &str = "created_dt";
    pub const UPDATED_DT: &str = "updated_dt";
    pub const FIRED_THROUGH: &str = "fired_through";
    pub const LAST_JOB: &str = "last_job";
    pub const NEXT_DUE: &str = "next_due";
    pub const FIRED: &str = "fired";
    pub const SKIPPED: &str = "skipped";
}

/// How many schedules one reply of a list carries (the server also stops
/// a batch at 16 MiB).
const LIST_BATCH: u32 = 10_000;

/// A time that may be unset: null when it is.
fn opt_time(t: Option<Millis>) -> Bson {
    t.map_or(Bson::Null, Bson::Int64)
}

/// A counter as stored: Int64 (a count above `i64::MAX` is added as
/// `i64::MAX`).
fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The update of `set_schedule`, one for both a create and a replace: the
/// operators create the fields an insert needs from their values (`$inc`
/// from 0, `$min` and `$max` from nothing), and leave those a replace keeps
/// (the counters, the pause, `created_dt` up to `now`); the watermark and
/// the last job are not named, so an insert has none and a replace keeps
/// them.
fn set_update(sched: &Schedule, next_due: Option<Millis>, now: Millis) -> Document {
    doc! {
        "$set": {
            s::NAME: &sched.name,
            s::DEFINITION: sched.definition(),
            s::DATA: binary(&sched.data),
            s::NEXT_DUE: opt_time(next_due),
            s::UPDATED_DT: now,
        },
        "$inc": { s::VERSION: 1_i64, s::FIRED: 0_i64, s::SKIPPED: 0_i64 },
        "$min": { s::CREATED_DT: now },
        "$max": { s::PAUSED: false },
    }
}

/// The filter of `advance_schedule`: the version, and a watermark before
/// the advance's (or the same one for an advance that moves nothing), or
/// none yet (`null` matches a missing field).
///
/// Spelled as one `$and` of the three conditions, which MongoDB flattens
/// into the same query as `{_id, version, $or}`: the test emulator
/// evaluates an update's top-level `$or` beside other fields as if it
/// were unparenthesized (`a AND b OR c`), and so would match other
/// versions; inside `$and` it reads it as MongoDB does.
fn advance_filter(name: &str, version: u64, advance: &ScheduleAdvance) -> Document {
    let op = if advance.moves() { "$lt" } else { "$lte" };
    doc! {
        "$and": [
            { s::ID: name },
            { s::VERSION: count(version) },
            { "$or": [
                { s::FIRED_THROUGH: Bson::Null },
                { s::FIRED_THROUGH: { op: advance.fired_through } },
            ] },
        ],
    }
}

/// The update of `advance_schedule`: [`ScheduleAdvance::apply`].
fn advance_update(advance: &ScheduleAdvance) -> Document {
    let mut set = doc! {
        s::FIRED_THROUGH: advance.fired_through,
        s::NEXT_DUE: opt_time(advance.next_due),
    };
    if let Some(job) = &advance.last_job {
        set.insert(s::LAST_JOB, job);
    }
    doc! {
        "$set": set,
        "$inc": { s::FIRED: count(advance.fired), s::SKIPPED: count(advance.skipped) },
    }
}

/// The filter of the names that start with `prefix`: one range of `_id`
/// (`~` sorts after every character of the name alphabet); none for the
/// empty prefix.
fn prefix_filter(prefix: &str) -> Document {
    if prefix.is_empty() {
        return Document::new();
    }
    doc! { s::ID: { "$gte": prefix, "$lt": format!("{prefix}~") } }
}

/// A stored schedule.
pub(crate) fn schedule_from_doc(d: &Document) -> Result<ScheduleRecord> {
    const W: &str = "schedule";
    let name = get_str(d, s::ID, W)?;
    let schedule = Schedule::from_definition(
        name,
        &get_str(d, s::DEFINITION, W)?,
        get_bytes(d, s::DATA, W)?,
    )?;
    Ok(ScheduleRecord {
        schedule,
        version: get_int(d, s::VERSION, W)?,
        paused: get_flag(d, s::PAUSED, W)?,
        created_dt: get_i64(d, s::CREATED_DT, W)?,
        updated_dt: get_i64(d, s::UPDATED_DT, W)?,
        fired_through: opt_i64(d, s::FIRED_THROUGH, W)?,
        last_job: opt_str(d, s::LAST_JOB, W)?,
        next_due: opt_i64(d, s::NEXT_DUE, W)?,
        fired: get_int(d, s::FIRED, W)?,
        skipped: get_int(d, s::SKIPPED, W)?,
    })
}

impl MongoStore {
    /// Creates or replaces `sched`: one `findAndModify` upsert, answered
    /// with the document it left. A duplicate key (the insert of a first
    /// set lost to a concurrent one, on a server that does not retry it
    /// as an update) sends it once more: the document exists then.
    pub(crate) async fn put_schedule(
        &self,
        sched: &Schedule,
        next_due: Option<Millis>,
        now: Millis,
    ) -> Result<ScheduleRecord> {
        let update = set_update(sched, next_due, now);
        for attempt in 0..2 {
            let upsert = self
                .schedules
                .find_one_and_update(doc! { s::ID: &sched.name }, update.clone())
                .upsert(true)
                .return_document(ReturnDocument::After);
            let r = tokio::time::timeout(self.timeout(), upsert)
                .await
                .map_err(|elapsed| {
                    Error::unavailable("MongoDB set schedule failed: no answer in time", elapsed)
                })?;
            match r {
                Ok(Some(d)) => return schedule_from_doc(&d),
                Ok(None) => {
                    return Err(Error::backend_msg(
                        "set schedule: the upsert returned no document",
                    ));
                }
                Err(e) if attempt == 0 && error::is_duplicate_key(&e) => continue,
                Err(e) => return Err(error::map("set schedule", e)),
            }
        }
        Err(Error::backend_msg("set schedule: the upsert kept failing"))
    }

    /// The schedule named `name`.
    pub(crate) async fn find_schedule(&self, name: &str) -> Result<Option<ScheduleRecord>> {
        self.read(
            "find schedule",
            self.schedules.find_one(doc! { s::ID: name }),
        )
        .await?
        .map(|d| schedule_from_doc(&d))
        .transpose()
    }

    /// The schedules whose name starts with `prefix`, by name: one range
    /// of the `_id` index, in its order.
    pub(crate) async fn schedules_with_prefix(&self, prefix: &str) -> Result<Vec<ScheduleRecord>> {
        let docs: Vec<Document> = self
            .read("list schedules", async {
                self.schedules
                    .find(prefix_filter(prefix))
                    .sort(doc! { s::ID: 1 })
                    .batch_size(LIST_BATCH)
                    .await?
                    .try_collect()
                    .await
            })
            .await?;
        docs.iter().map(schedule_from_doc).collect()
    }

    /// Deletes the schedule named `name`; whether it existed.
    pub(crate) async fn remove_schedule(&self, name: &str) -> Result<bool> {
        let r = self
            .call(
                "delete schedule",
                self.schedules.delete_one(doc! { s::ID: name }),
            )
            .await?;
        Ok(r.deleted_count == 1)
    }

    /// Pauses or resumes the schedule named `name` if it is not so
    /// already; whether it changed.
    pub(crate) async fn set_schedule_paused(
        &self,
        name: &str,
        paused: bool,
        next_due: Option<Millis>,
        now: Millis,
    ) -> Result<bool> {
        let mut set = doc! { s::PAUSED: paused, s::UPDATED_DT: now };
        if !paused {
            set.insert(s::NEXT_DUE, opt_time(next_due));
        }
        let r = self
            .call(
                if paused {
                    "pause schedule"
                } else {
                    "resume schedule"
                },
                self.schedules.update_one(
                    doc! { s::ID: name, s::PAUSED: !paused },
                    doc! { "$set": set },
                ),
            )
            .await?;
        Ok(r.matched_count == 1)
    }

    /// Up to `limit` schedules not paused with `next_due <= now`, by
    /// `next_due` then name: one range of the `due` index, in its order.
    pub(crate) async fn schedules_due(
        &self,
        now: Millis,
        limit: usize,
    ) -> Result<Vec<ScheduleRecord>> {
        let docs: Vec<Document> = self
            .read("due schedules", async {
                self.schedules
                    .find(doc! { s::PAUSED: false, s::NEXT_DUE: { "$lte": now } })
                    .sort(doc! { s::NEXT_DUE: 1, s::NAME: 1 })
                    .hint(Hint::Name(SCHEDULES_DUE_INDEX.to_owned()))
                    .limit(i64::from(batch(limit)))
                    .batch_size(batch(limit))
                    .await?
                    .try_collect()
                    .await
            })
            .await?;
        docs.iter().map(schedule_from_doc).collect()
    }

    /// The compare-and-set of `advance_schedule`: one `update_one` whose
    /// filter is the condition; whether it matched.
    pub(crate) async fn advance_schedule_state(
        &self,
        name: &str,
        version: u64,
        advance: &ScheduleAdvance,
    ) -> Result<bool> {
        let r = self
            .call(
                "advance schedule",
                self.schedules.update_one(
                    advance_filter(name, version, advance),
                    advance_update(advance),
                ),
            )
            .await?;
        Ok(r.matched_count == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobstore_api::{CatchUp, Overlap};
    use std::time::Duration;

    fn full() -> Schedule {
        Schedule {
            data: vec![0, 1, 255],
            priority: -3,
            tags: vec!["t".to_owned()],
            catch_up: CatchUp::None,
            catch_up_window: Duration::from_millis(1_234),
            overlap: Overlap::Skip,
            start_at: Some(5),
            end_at: Some(50),
            ..Schedule::new("a-b", "*/5 * * * *", "jt")
        }
    }

    /// The fields an insert gets from `set_schedule`'s update, as
    /// MongoDB applies its operators to a missing document: a fresh
    /// record, read back exactly.
    #[test]
    fn a_set_inserts_a_fresh_record() {
        let u = set_update(&full(), Some(77), 10);
        let mut d = doc! { s::ID: "a-b" };
        for op in ["$set", "$inc", "$min", "$max"] {
            d.extend(u.get_document(op).unwrap().clone());
        }
        let rec = schedule_from_doc(&d).unwrap();
        assert_eq!(
            rec,
            ScheduleRecord {
                schedule: full(),
                version: 1,
                paused: false,
                created_dt: 10,
                updated_dt: 10,
                fired_through: None,
                last_job: None,
                next_due: Some(77),
                fired: 0,
                skipped: 0,
            }
        );
        assert_eq!(
            u.get_document("$set").unwrap().get(s::NEXT_DUE),
            Some(&Bson::Int64(77))
        );
        let never = set_update(&full(), None, 10);
        assert_eq!(
            never.get_document("$set").unwrap().get(s::NEXT_DUE),
            Some(&Bson::Null)
        );
    }

    /// The replace names none of the fields it keeps but through the
    /// operators that keep them.
    #[test]
    fn a_set_names_no_kept_field() {
        let u = set_update(&full(), None, 10);
        let named: Vec<&str> = u
            .values()
            .flat_map(|v| v.as_document().unwrap().keys())
            .map(String::as_str)
            .collect();
        for kept in [s::FIRED_THROUGH, s::LAST_JOB] {
            assert!(!named.contains(&kept), "{kept} in {named:?}");
        }
    }

    #[test]
    fn advances_compare_by_what_they_move() {
        let moving = ScheduleAdvance {
            fired_through: 100,
            last_job: None,
            next_due: None,
            fired: 0,
            skipped: 1,
        };
        let f = advance_filter("x", 3, &moving);
        assert_eq!(
            f,
            doc! { "$and": [
                { "_id": "x" },
                { "version": 3_i64 },
                { "$or": [
                    { "fired_through": Bson::Null },
                    { "fired_through": { "$lt": 100_i64 } },
                ] },
            ] }
        );
        let postpone = ScheduleAdvance {
            skipped: 0,
            ..moving.clone()
        };
        let f = advance_filter("x", 3, &postpone);
        let and = f.get_array("$and").unwrap();
        let or = and[2].as_document().unwrap().get_array("$or").unwrap();
        assert_eq!(
            or[1],
            Bson::Document(doc! { "fired_through": { "$lte": 100_i64 } })
        );
        // No last job: the stored one stays.
        let u = advance_update(&moving);
        assert_eq!(
            u,
            doc! {
                "$set": { "fired_through": 100_i64, "next_due": Bson::Null },
                "$inc": { "fired": 0_i64, "skipped": 1_i64 },
            }
        );
        let named = ScheduleAdvance {
            last_job: Some("j".to_owned()),
            next_due: Some(9),
            ..moving
        };
        assert_eq!(
            advance_update(&named).get_document("$set").unwrap(),
            &doc! { "fired_through": 100_i64, "next_due": 9_i64, "last_job": "j" }
        );
    }

    #[test]
    fn prefixes_are_one_range_of_names() {
        assert_eq!(prefix_filter(""), Document::new());
        assert_eq!(
            prefix_filter("acme-"),
            doc! { "_id": { "$gte": "acme-", "$lt": "acme-~" } }
        );
        // `~` is above every byte of the name alphabet.
        let alphabet = ('0'..='9')
            .chain('A'..='Z')
            .chain('a'..='z')
            .chain(['_', '.', ':', '-']);
        assert!(alphabet.into_iter().all(|c| c < '~'));
    }

    #[test]
    fn malformed_schedules_are_backend_errors() {
        let u = set_update(&full(), None, 10);
        let mut d = doc! { s::ID: "a-b" };
        for op in ["$set", "$inc", "$min", "$max"] {
            d.extend(u.get_document(op).unwrap().clone());
        }
        let mut bad = d.clone();
        bad.insert(s::DEFINITION, "{not json");
        assert_eq!(
            schedule_from_doc(&bad).unwrap_err().kind(),
            jobstore_api::ErrorKind::Backend
        );
        let mut bad = d;
        bad.insert(s::FIRED, -1_i64);
        assert_eq!(
            schedule_from_doc(&bad).unwrap_err().kind(),
            jobstore_api::ErrorKind::Backend
        );
    }
}
