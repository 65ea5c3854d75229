//! The job message of a waiter: what a job that waited for other jobs
//! is handed when it runs (its dependencies' ids, how each ended, and
//! their outputs when it was added `with_outputs`).
//!
//! After a claim, the jobs whose flow has edges are looked up together:
//! one [`JobStore::waits_of`] call (the first 1,000 dependencies of each),
//! then, for those added `with_outputs`, one [`JobStore::get_jobs`] call
//! per [`OUTPUT_READ`] dependencies for their outputs, until
//! [`OUTPUTS_PER_CLAIM`] bytes of outputs are kept (the messages of the
//! rest say `"outputs_partial": true`). Plain jobs cost nothing.
//! Each message is compact JSON:
//!
//! ```json
//! {"counts": {"pending": 0, "held": 0, "skipped": 0, "done": {"ok": 2}},
//!  "jobs": [{"id": "e1", "state": "done", "code": "ok", "status": 200, "output": "..."}],
//!  "more": false}
//! ```
//!
//! Ids are as the client knows them; `more` says that dependencies beyond
//! the first 1,000 are left out (read them from `GET
//! /{client}/jobs/{id}/waits`). Outputs are read as UTF-8 (invalid bytes
//! replaced), at most [`MAX_OUTPUTS`] bytes in all per message; a
//! dependency purged since it ended has none.

use std::collections::HashMap;

use jobstore_api::limits::{MAX_BATCH, MAX_PAGE};
use jobstore_api::{EdgeState, Job, JobStore, Waits};
use serde_json::{Value, json};

use crate::tenant;

/// The most output bytes one message carries, over all its dependencies.
pub const MAX_OUTPUTS: usize = 1 << 20;

/// Dependencies read per [`JobStore::get_jobs`] call for their outputs
/// (whole jobs come back: this bounds what one call holds in memory).
pub const OUTPUT_READ: usize = 200;

/// The most output bytes kept for the messages of one claimed batch.
pub const OUTPUTS_PER_CLAIM: usize = 64 << 20;

/// The messages of the waiters among `jobs`, by job id. A store error
/// gives each waiter a message saying so (`{"error": ...}`) rather than
/// holding up the run.
pub async fn messages(store: &dyn JobStore, jobs: &[Job]) -> HashMap<String, String> {
    let waiters: Vec<&Job> = jobs
        .iter()
        .filter(|j| j.flow.as_ref().is_some_and(|f| f.has_edges))
        .collect();
    if waiters.is_empty() {
        return HashMap::new();
    }
    match read(store, &waiters).await {
        Ok(out) => out,
        Err(e) => {
            tracing::warn!(error = %e, "the dependencies of claimed jobs could not be read");
            let text = json!({ "error": e.to_string() }).to_string();
            waiters
                .iter()
                .map(|j| (j.id.clone(), text.clone()))
                .collect()
        }
    }
}

async fn read(
    store: &dyn JobStore,
    waiters: &[&Job],
) -> jobstore_api::Result<HashMap<String, String>> {
    let ids: Vec<String> = waiters.iter().map(|j| j.id.clone()).collect();
    let mut waits: HashMap<String, Waits> = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(MAX_BATCH) {
        for w in store.waits_of(chunk, MAX_PAGE).await? {
            waits.insert(w.id.clone(), w);
        }
    }
    // Outputs, for the waiters that asked for them.
    let mut targets: Vec<String> = waiters
        .iter()
        .filter(|j| j.flow.as_ref().is_some_and(|f| f.with_outputs))
        .filter_map(|j| waits.get(&j.id))
        .flat_map(|w| w.edges.iter().map(|e| e.target.clone()))
        .collect();
    targets.sort_unstable();
    targets.dedup();
    let mut outputs: HashMap<String, Vec<u8>> = HashMap::new();
    let mut kept = 0usize;
    let mut partial = false;
    for chunk in targets.chunks(OUTPUT_READ) {
        if kept >= OUTPUTS_PER_CLAIM {
            partial = true;
            break;
        }
        for job in store.get_jobs(chunk).await? {
            if let Some(mut r) = job.result {
                r.output.truncate(MAX_OUTPUTS);
                kept += r.output.len();
                outputs.insert(job.id, r.output);
            }
        }
    }
    let empty = Waits::default();
    Ok(waiters
        .iter()
        .map(|j| {
            let with_outputs = j.flow.as_ref().is_some_and(|f| f.with_outputs);
            let w = waits.get(&j.id).unwrap_or(&empty);
            let mut m = message(w, with_outputs.then_some(&outputs));
            if with_outputs && partial {
                m["outputs_partial"] = json!(true);
            }
            (j.id.clone(), m.to_string())
        })
        .collect())
}

/// One waiter's message from its waits and, when asked for, the outputs
/// of its dependencies by store id.
pub fn message(w: &Waits, outputs: Option<&HashMap<String, Vec<u8>>>) -> Value {
    let mut room = MAX_OUTPUTS;
    let jobs: Vec<Value> = w
        .edges
        .iter()
        .map(|e| {
            let (state, result) = match e.state {
                EdgeState::Pending => ("pending", None),
                EdgeState::Skipped => ("skipped", None),
                EdgeState::Done { code, status } => ("done", Some((code, status))),
                EdgeState::Held { code, status } => ("held", Some((code, status))),
            };
            let mut v = json!({ "id": tenant::local_of(&e.target), "state": state });
            if let Some((code, status)) = result {
                v["code"] = json!(code.as_str());
                v["status"] = json!(status);
            }
            if let Some(out) = outputs.and_then(|o| o.get(&e.target)) {
                let take = out.len().min(room);
                room -= take;
                v["output"] = json!(String::from_utf8_lossy(&out[..take]));
            }
            v
        })
        .collect();
    let done: serde_json::Map<String, Value> = w
        .done
        .iter()
        .map(|(code, n)| (code.as_str().to_owned(), json!(n)))
        .collect();
    json!({
        "counts": { "pending": w.pending, "held": w.held, "skipped": w.skipped, "done": done },
        "jobs": jobs,
        "more": w.next.is_some(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobstore_api::{ResultCode, WaitEdge};

    #[test]
    fn a_message_names_each_dependency_and_caps_outputs() {
        let w = Waits::page(
            "acme-w",
            [
                WaitEdge {
                    target: "acme-a".into(),
                    state: EdgeState::Done {
                        code: ResultCode::Ok,
                        status: 200,
                    },
                },
                WaitEdge {
                    target: "acme-b".into(),
                    state: EdgeState::Held {
                        code: ResultCode::Failed,
                        status: 404,
                    },
                },
                WaitEdge {
                    target: "acme-c".into(),
                    state: EdgeState::Pending,
                },
            ],
            None,
            2,
        );
        let outputs = HashMap::from([
            ("acme-a".to_owned(), vec![b'x'; MAX_OUTPUTS - 1]),
            ("acme-b".to_owned(), b"nope\xff".to_vec()),
        ]);
        let m = message(&w, Some(&outputs));
        assert_eq!(m["counts"]["pending"], 1);
        assert_eq!(m["counts"]["held"], 1);
        assert_eq!(m["counts"]["done"]["ok"], 1);
        assert_eq!(m["more"], true);
        assert_eq!(m["jobs"][0]["id"], "a");
        assert_eq!(m["jobs"][0]["code"], "ok");
        assert_eq!(
            m["jobs"][0]["output"].as_str().unwrap().len(),
            MAX_OUTPUTS - 1
        );
        assert_eq!(m["jobs"][1]["state"], "held");
        assert_eq!(m["jobs"][1]["status"], 404);
        assert_eq!(m["jobs"][1]["output"], "n", "cut at the cap");
        let m = message(&w, None);
        assert!(m["jobs"][0].get("output").is_none());
        assert_eq!(m["jobs"].as_array().unwrap().len(), 2);
    }
}
