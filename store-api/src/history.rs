//! A job's history ([`JobEvent`]) and its tags: what stores keep beside
//! a job so an operator can see what happened to it and find it again.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::types::{Millis, ResultCode};

/// How many events a job keeps: the newest
/// [`MAX_HISTORY`], oldest first.
pub use crate::limits::MAX_HISTORY;

/// One thing that happened to a job. Stores record them as the contract
/// says (see [`JobStore`](crate::JobStore)); lease renewals are not events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEvent {
    /// When (the operation's `now`).
    pub at: Millis,
    /// Who: the owner (a daemon's sysid, or a remote worker's lease token)
    /// for claims and releases; empty for operations of nobody in
    /// particular (add, cancel, run again, edit).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub by: String,
    /// The job's attempts after the event.
    pub attempt: u32,
    /// What happened.
    #[serde(flatten)]
    pub what: EventKind,
}

/// What a [`JobEvent`] records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    /// Added.
    Added,
    /// Claimed (handed out) by `by`.
    Claimed,
    /// Released for retry: due again after `delay_ms`; `status` is the
    /// run's status when the releaser gave it ([`JobRelease::status`](crate::JobRelease::status)).
    Retried {
        /// The retry delay.
        delay_ms: u64,
        /// The status of the run that asked for the retry.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
    },
    /// Handed back unstarted ([`Release::Unget`](crate::Release::Unget)).
    HandedBack,
    /// Archived with this result.
    Archived {
        /// The result code.
        code: ResultCode,
        /// The result status.
        status: u16,
    },
    /// Marked for cancelling while locked.
    CancelRequested,
    /// Cancelled while free (archived as `cancelled`).
    Cancelled,
    /// Run again, due after `delay_ms`.
    Rerun {
        /// The delay.
        delay_ms: u64,
    },
    /// Edited (priority, due time or payload).
    Edited,
    /// Its last dependency ended: no longer blocked, waiting (or
    /// scheduled until its not-before time).
    Unblocked,
    /// A repeating job's run ended with this result and it is due again
    /// at `next_ms` ([`Release::Repeat`](crate::Release::Repeat)).
    Repeated {
        /// The run's result code.
        code: ResultCode,
        /// The run's result status.
        status: u16,
        /// When it runs again.
        next_ms: Millis,
    },
}

impl JobEvent {
    /// An event.
    pub fn new(at: Millis, by: impl Into<String>, attempt: u32, what: EventKind) -> Self {
        JobEvent {
            at,
            by: by.into(),
            attempt,
            what,
        }
    }

    /// The event as the compact JSON text stores keep (one object).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned())
    }

    /// An event from its JSON text; a malformed one is a `Backend` error.
    pub fn from_json(text: &str) -> Result<Self> {
        serde_json::from_str(text)
            .map_err(|e| Error::backend(format!("malformed job event {text:?}"), e))
    }
}

/// Appends `event` to `history`, keeping the newest [`MAX_HISTORY`].
pub fn push_event(history: &mut Vec<JobEvent>, event: JobEvent) {
    history.push(event);
    if history.len() > MAX_HISTORY {
        let extra = history.len() - MAX_HISTORY;
        history.drain(..extra);
    }
}

/// A claim a store keeps in the job's own fields instead of as a stored
/// event, so the claim and the release that archives the job, the two
/// writes every job goes through, append nothing to the stored history.
///
/// A store that keeps history this way writes, on a claim, when and by whom
/// the job was claimed (`at`, `by`: its owner) beside the job's attempts, and
/// on the release that archives it, copies those fields into the archived
/// job: [`complete_history`] then shows the `Claimed` and `Archived` events as
/// if they were stored. Every other change to the job first appends the
/// pending claim as a stored `Claimed` event and clears it (a renewal leaves
/// it as it is), so the stored events and the pending ones never overlap:
/// a claim of an expired job stores the previous claim's event, a release
/// for retry or hand-back stores `Claimed` then its own event, a release
/// that archives a job whose claim was already stored (a cancel was
/// requested in between) stores its `Archived` event itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingClaim {
    /// When the job was claimed.
    pub at: Millis,
    /// Who claimed it (the owner).
    pub by: String,
    /// The job's attempts after that claim.
    pub attempt: u32,
}

impl PendingClaim {
    /// The `Claimed` event it stands for.
    pub fn event(&self) -> JobEvent {
        JobEvent::new(self.at, self.by.clone(), self.attempt, EventKind::Claimed)
    }
}

/// A job's history as the contract shows it, from its stored events and
/// the claim kept in its fields ([`PendingClaim`]): the stored events, then
/// the pending claim's `Claimed` event, then, for a job archived by the
/// release that ended that claim, `Archived` with the job's result at its
/// archive time (`archived`: `done_dt` and the result's code and status);
/// the newest [`MAX_HISTORY`]. `archived` without a pending claim adds
/// nothing: such a job's archival is among its stored events.
pub fn complete_history(
    mut stored: Vec<JobEvent>,
    claim: Option<PendingClaim>,
    archived: Option<(Millis, ResultCode, u16)>,
) -> Vec<JobEvent> {
    if let Some(claim) = claim {
        let archived = archived.map(|(at, code, status)| {
            JobEvent::new(
                at,
                claim.by.clone(),
                claim.attempt,
                EventKind::Archived { code, status },
            )
        });
        push_event(&mut stored, claim.event());
        if let Some(event) = archived {
            push_event(&mut stored, event);
        }
    }
    stored
}

/// A stored history with the job's `Added` event put back, for stores
/// that leave it implicit: every job's first event is `Added`, at its
/// `create_dt`, by nobody, attempt 0, so such a store writes no history
/// when it adds a job and keeps only the events after it. The event is
/// put first unless the stored events already start with it (a job
/// stored before the store left it out) or fill [`MAX_HISTORY`] (it is
/// then older than the newest events kept, as if it had been stored and
/// dropped). Apply it before [`complete_history`].
pub fn with_added(mut stored: Vec<JobEvent>, created: Millis) -> Vec<JobEvent> {
    let has_it = stored.first().is_some_and(|e| e.what == EventKind::Added);
    if !has_it && stored.len() < MAX_HISTORY {
        stored.insert(0, JobEvent::new(created, "", 0, EventKind::Added));
    }
    stored
}

/// A history from a JSON array of events (how SQL and document stores
/// keep it); empty text or `null` is an empty history.
pub fn history_from_json(text: &str) -> Result<Vec<JobEvent>> {
    let text = text.trim();
    if text.is_empty() || text == "null" {
        return Ok(Vec::new());
    }
    serde_json::from_str(text).map_err(|e| Error::backend("malformed job history", e))
}

/// Tags from a JSON array of strings; empty text or `null` is no tags.
pub fn tags_from_json(text: &str) -> Result<Vec<String>> {
    let text = text.trim();
    if text.is_empty() || text == "null" {
        return Ok(Vec::new());
    }
    serde_json::from_str(text).map_err(|e| Error::backend("malformed job tags", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tags as SQL stores keep them: a JSON array of strings; empty text
    /// or `null` (rows from before tags) is no tags; anything else is a
    /// backend error.
    #[test]
    fn tags_read_from_json() {
        assert_eq!(
            tags_from_json(r#"["eu", "customer-42"]"#).unwrap(),
            ["eu", "customer-42"]
        );
        for none in ["", "  ", "null", " null ", "[]"] {
            assert!(tags_from_json(none).unwrap().is_empty(), "{none:?}");
        }
        for bad in ["[1]", "{\"a\": 1}", "eu", "[\"eu\""] {
            let e = tags_from_json(bad).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::Backend, "{bad:?}");
        }
    }

    /// With the `Added` event implicit, a history reads as it would with
    /// every event stored: the store keeps the same newest events after
    /// it (capped at MAX_HISTORY), and `with_added` puts it back exactly
    /// while it would still be among the newest.
    #[test]
    fn an_implicit_added_event_reads_as_a_stored_one() {
        let event = |i: usize| JobEvent::new(10 + i as Millis, "s", 1, EventKind::Edited);
        let added = JobEvent::new(7, "", 0, EventKind::Added);
        for n in 0..=MAX_HISTORY + 3 {
            let mut all = vec![added.clone()];
            let mut implicit = Vec::new();
            for i in 0..n {
                push_event(&mut all, event(i));
                push_event(&mut implicit, event(i));
            }
            assert_eq!(with_added(implicit, 7), all, "{n} events after added");
            // A history stored with its Added event is left as it is.
            assert_eq!(
                with_added(all.clone(), 99),
                all,
                "{n} events, stored with added"
            );
        }
        let claim = PendingClaim {
            at: 50,
            by: "s".into(),
            attempt: 2,
        };
        for n in MAX_HISTORY - 3..=MAX_HISTORY {
            let mut all = vec![added.clone()];
            let mut implicit = Vec::new();
            for i in 0..n {
                push_event(&mut all, event(i));
                push_event(&mut implicit, event(i));
            }
            let done = Some((60, ResultCode::Ok, 0));
            assert_eq!(
                complete_history(with_added(implicit, 7), Some(claim.clone()), done),
                complete_history(all, Some(claim.clone()), done),
                "{n} events and a pending claim"
            );
        }
    }

    #[test]
    fn events_round_trip_through_json() {
        let events = [
            JobEvent::new(1, "", 0, EventKind::Added),
            JobEvent::new(2, "sys-a", 1, EventKind::Claimed),
            JobEvent::new(
                3,
                "sys-a",
                1,
                EventKind::Retried {
                    delay_ms: 500,
                    status: Some(503),
                },
            ),
            JobEvent::new(
                4,
                "sys-a",
                1,
                EventKind::Retried {
                    delay_ms: 0,
                    status: None,
                },
            ),
            JobEvent::new(
                5,
                "sys-a",
                2,
                EventKind::Archived {
                    code: ResultCode::Failed,
                    status: 404,
                },
            ),
            JobEvent::new(6, "", 0, EventKind::Rerun { delay_ms: 10 }),
        ];
        for e in &events {
            assert_eq!(&JobEvent::from_json(&e.to_json()).unwrap(), e);
        }
        assert_eq!(
            events[4].to_json(),
            r#"{"at":5,"by":"sys-a","attempt":2,"event":"archived","code":"failed","status":404}"#
        );
        let all = serde_json::to_string(&events).unwrap();
        assert_eq!(history_from_json(&all).unwrap(), events.to_vec());
        assert!(history_from_json("").unwrap().is_empty());
        assert!(JobEvent::from_json("{").is_err());
    }

    #[test]
    fn pending_claim_completes_the_history() {
        let added = JobEvent::new(1, "", 0, EventKind::Added);
        let claim = PendingClaim {
            at: 5,
            by: "sys-a".into(),
            attempt: 2,
        };
        assert_eq!(
            complete_history(vec![added.clone()], None, None),
            vec![added.clone()]
        );
        assert_eq!(
            complete_history(vec![added.clone()], None, Some((9, ResultCode::Ok, 200))),
            vec![added.clone()],
            "an archival without a pending claim is among the stored events"
        );
        assert_eq!(
            complete_history(vec![added.clone()], Some(claim.clone()), None),
            vec![
                added.clone(),
                JobEvent::new(5, "sys-a", 2, EventKind::Claimed)
            ]
        );
        assert_eq!(
            complete_history(
                vec![added.clone()],
                Some(claim.clone()),
                Some((9, ResultCode::Failed, 404))
            ),
            vec![
                added,
                JobEvent::new(5, "sys-a", 2, EventKind::Claimed),
                JobEvent::new(
                    9,
                    "sys-a",
                    2,
                    EventKind::Archived {
                        code: ResultCode::Failed,
                        status: 404
                    }
                ),
            ]
        );
        let full: Vec<_> = (0..MAX_HISTORY as i64)
            .map(|i| JobEvent::new(i, "", 0, EventKind::Edited))
            .collect();
        let h = complete_history(full, Some(claim), Some((99, ResultCode::Ok, 200)));
        assert_eq!(h.len(), MAX_HISTORY);
        assert_eq!(h[0].at, 2, "the oldest two make room");
        assert_eq!(h[MAX_HISTORY - 2].what, EventKind::Claimed);
        assert_eq!(h[MAX_HISTORY - 1].at, 99);
    }

    #[test]
    fn history_keeps_the_newest() {
        let mut h = Vec::new();
        for i in 0..30 {
            push_event(&mut h, JobEvent::new(i, "", 0, EventKind::Edited));
        }
        assert_eq!(h.len(), MAX_HISTORY);
        assert_eq!(h[0].at, 10);
        assert_eq!(h[19].at, 29);
    }
}
