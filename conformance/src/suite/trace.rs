//! Behaviours of a job's trace context ([`NewJob::trace`]). A store that
//! declares [`Capabilities::trace`] keeps it, unchanged, through every
//! read and change; one that does not still validates it, accepts the job
//! and reads it back with `trace: None`. Either way the declared behaviour
//! is checked, never skipped.

use super::*;

/// A valid context whose trace id ends in `n` (hex), without tracestate.
pub fn trace_of(n: u32) -> TraceContext {
    TraceContext::parse(
        &format!("00-4bf92f3577b34da6a3ce9290{n:08x}-00f067aa0ba902b7-01"),
        None,
    )
    .expect("a valid traceparent")
}

/// A valid context with a tracestate (vendor entries, spaces around the
/// comma, a multi-tenant key and characters a store must not mangle).
pub fn trace_with_state() -> TraceContext {
    TraceContext::parse(
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
        Some("rojo=00f067aa0ba902b7 , congo@ot=t61rcWkgMzE|x'\"\\%;"),
    )
    .expect("a valid trace context")
}

/// What `s` reads back for a job added with `ctx`.
fn kept(s: &dyn JobStore, ctx: &TraceContext) -> Option<TraceContext> {
    s.capabilities().trace.then(|| ctx.clone())
}

/// The trace context of every job listed in `state`, by id.
async fn listed_traces(
    s: &dyn JobStore,
    state: JobState,
    now: Millis,
) -> Vec<(String, Option<TraceContext>)> {
    let mut out = Vec::new();
    for q in [JobQuery::new(state), JobQuery::new(state).with_data()] {
        let page = s.list_jobs(&q.jobtypes(ids(&["tr"])), now).await.unwrap();
        out.extend(page.jobs.into_iter().map(|j| (j.id, j.trace)));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.dedup();
    out
}

/// A job keeps the trace context it was added with through add, claim,
/// get and list; through a retry, a hand-back, an expired lease taken
/// again, an archive, a run again, an edit, a payload update and a cancel
/// mark; an add of its id again with another context changes nothing; a
/// job added without one has none.
pub async fn trace_context_kept_from_add_to_every_read(c: Ctx) {
    let s = &*c.store;
    let caps = s.capabilities();
    let a = trace_of(1);
    let b = trace_with_state();
    add(
        s,
        vec![
            NewJob::new("a", "tr", "x").priority(2).trace(a.clone()),
            NewJob::new("b", "tr", "y").priority(1).trace(b.clone()),
            NewJob::new("plain", "tr", "z"),
        ],
        T0,
    )
    .await;
    let expect = |id: &str| match id {
        "a" => kept(s, &a),
        "b" => kept(s, &b),
        _ => None,
    };
    let check = |what: &'static str| async move {
        for id in ["a", "b", "plain"] {
            assert_eq!(get(s, id).await.trace, expect(id), "{what}: get {id}");
        }
    };
    check("added").await;
    // Added again, with other contexts or none: nothing changes.
    let again = add(
        s,
        vec![
            NewJob::new("a", "tr", "x").trace(trace_of(9)),
            NewJob::new("b", "tr", "y"),
            NewJob::new("plain", "tr", "z").trace(trace_of(8)),
        ],
        T0 + 1,
    )
    .await;
    assert_eq!(again.existing.len(), 3);
    check("added again").await;
    if caps.list_jobs {
        let listed = listed_traces(s, JobState::Waiting, T0 + 1).await;
        let want: Vec<_> = ["a", "b", "plain"]
            .iter()
            .map(|id| (id.to_string(), expect(id)))
            .collect();
        assert_eq!(listed, want, "listed waiting, with and without payloads");
    }

    // Claimed: the claim returns it.
    let got = claim(s, "tr", 3, OWNER, T0 + SEC).await;
    let claimed: Vec<_> = got
        .iter()
        .map(|j| (j.id.as_str(), j.trace.clone()))
        .collect();
    assert_eq!(
        claimed,
        vec![("a", expect("a")), ("b", expect("b")), ("plain", None)],
        "claimed"
    );
    check("claimed").await;
    if caps.list_jobs {
        let listed = listed_traces(s, JobState::Running, T0 + SEC).await;
        assert_eq!(listed.len(), 3);
        for (id, t) in listed {
            assert_eq!(t, expect(&id), "listed running {id}");
        }
    }
    assert!(
        s.update_data("a", OWNER, b"progress", T0 + SEC + 1)
            .await
            .unwrap()
    );
    check("payload updated").await;

    // a retried, b handed back, plain archived.
    let releases = [
        JobRelease::new(
            "a",
            Release::Retry {
                delay: Duration::ZERO,
            },
        )
        .status(503),
        JobRelease::new("b", Release::Unget),
        JobRelease::new("plain", Release::Archive(JobResult::from_status(200))),
    ];
    assert_eq!(
        s.release_jobs(&releases, OWNER, T0 + 2 * SEC)
            .await
            .unwrap()
            .len(),
        3
    );
    check("retried, handed back, archived").await;

    // Claimed again; a's lease runs out and another claimer takes it.
    let again = claim(s, "tr", 2, OWNER, T0 + 3 * SEC).await;
    assert_eq!(again.len(), 2);
    for j in &again {
        assert_eq!(j.trace, expect(&j.id), "claimed again: {}", j.id);
    }
    if caps.cancel_running {
        s.cancel_jobs(&ids(&["b"]), T0 + 3 * SEC + 1).await.unwrap();
        check("marked for cancelling").await;
    }
    let expired_at = T0 + 3 * SEC + duration_ms(MIN);
    let taken = claim(s, "tr", 2, OTHER, expired_at).await;
    assert_eq!(taken.len(), 2, "both leases ran out");
    for j in &taken {
        assert_eq!(j.trace, expect(&j.id), "taken after expiry: {}", j.id);
    }
    if caps.list_jobs {
        for (id, t) in listed_traces(s, JobState::Running, expired_at).await {
            assert_eq!(t, expect(&id), "listed running after the takeover: {id}");
        }
    }
    archive_all(s, &ids(&["a", "b"]), OTHER, expired_at + 1).await;
    check("archived").await;
    if caps.list_jobs {
        let listed = listed_traces(s, JobState::Archived, expired_at + 1).await;
        let want: Vec<_> = ["a", "b", "plain"]
            .iter()
            .map(|id| (id.to_string(), expect(id)))
            .collect();
        assert_eq!(listed, want, "listed archived");
    }
    if !caps.edit_jobs {
        return;
    }
    // Run again, edited, claimed once more.
    let rerun = s
        .rerun_jobs(&ids(&["a", "b", "plain"]), MIN, expired_at + 2)
        .await
        .unwrap();
    assert_eq!(rerun.len(), 3);
    check("run again").await;
    if caps.list_jobs {
        for (id, t) in listed_traces(s, JobState::Scheduled, expired_at + 2).await {
            assert_eq!(t, expect(&id), "listed scheduled: {id}");
        }
    }
    let edits = [
        JobEdit::new("a").priority(9).data(b"edited".to_vec()),
        JobEdit::new("plain").run_at(expired_at + 3),
    ];
    assert_eq!(s.edit_jobs(&edits, expired_at + 3).await.unwrap().len(), 2);
    check("edited").await;
    let last = claim(s, "tr", 3, OWNER, expired_at + 2 + duration_ms(MIN)).await;
    assert_eq!(last.len(), 3);
    for j in &last {
        assert_eq!(j.trace, expect(&j.id), "claimed after run again: {}", j.id);
    }
}

async fn archive_all(s: &dyn JobStore, ids: &[String], owner: &str, now: Millis) {
    let how = Release::Archive(JobResult::from_status(200));
    assert_eq!(
        s.release_all(ids, owner, &how, now).await.unwrap().len(),
        ids.len()
    );
}

/// A malformed `traceparent` or `tracestate` is `InvalidInput` naming the
/// field, in a store that keeps trace context and in one that does not,
/// and rejects the whole batch; a valid one is accepted either way.
pub async fn trace_context_validated(c: Ctx) {
    let s = &*c.store;
    let good = trace_of(1);
    let bad = [
        (
            "traceparent",
            TraceContext {
                traceparent: "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01".into(),
                tracestate: None,
            },
        ),
        (
            "traceparent",
            TraceContext {
                traceparent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01".into(),
                tracestate: None,
            },
        ),
        (
            "traceparent",
            TraceContext {
                traceparent: "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
                tracestate: None,
            },
        ),
        (
            "traceparent",
            TraceContext {
                traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01|x".into(),
                tracestate: None,
            },
        ),
        (
            "traceparent",
            TraceContext {
                traceparent: String::new(),
                tracestate: None,
            },
        ),
        (
            "tracestate",
            TraceContext {
                tracestate: Some(String::new()),
                ..good.clone()
            },
        ),
        (
            "tracestate",
            TraceContext {
                tracestate: Some("Upper=1".into()),
                ..good.clone()
            },
        ),
        (
            "tracestate",
            TraceContext {
                tracestate: Some("a=1\nb=2".into()),
                ..good.clone()
            },
        ),
        (
            "tracestate",
            TraceContext {
                tracestate: Some(format!("a={}", "x".repeat(limits::MAX_TRACESTATE_LEN))),
                ..good.clone()
            },
        ),
    ];
    for (i, (field, ctx)) in bad.into_iter().enumerate() {
        let batch = [
            NewJob::new(format!("ok-{i}"), "tv", "").trace(good.clone()),
            NewJob::new(format!("bad-{i}"), "tv", "").trace(ctx.clone()),
        ];
        match s.add_jobs(&batch, T0).await {
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::InvalidInput, "{ctx:?}: {e}");
                assert!(e.to_string().contains(field), "{ctx:?}: {e} names {field}");
            }
            Ok(v) => panic!("{ctx:?}: expected InvalidInput, got {v:?}"),
        }
        for id in [format!("ok-{i}"), format!("bad-{i}")] {
            assert_eq!(
                s.get_job(&id).await.unwrap(),
                None,
                "{ctx:?}: nothing stored"
            );
        }
    }
    // The longest valid values round-trip.
    let state: Vec<String> = (0..limits::MAX_TRACESTATE_MEMBERS)
        .map(|i| format!("k{i:02}={}", "v".repeat(10)))
        .collect();
    let longest = TraceContext::parse(
        &format!(
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-{}",
            "ab".repeat((limits::MAX_TRACEPARENT_LEN - 56) / 2)
        ),
        Some(&state.join(",")),
    )
    .unwrap();
    assert_eq!(longest.traceparent.len(), limits::MAX_TRACEPARENT_LEN);
    add(
        s,
        vec![NewJob::new("longest", "tv", "").trace(longest.clone())],
        T0,
    )
    .await;
    assert_eq!(get(s, "longest").await.trace, kept(s, &longest));
}

/// Concurrent claims on two handles hand out each traced job once, each
/// with its own context (never another job's).
pub async fn trace_context_concurrent_claims_keep_each_jobs_own(c: Ctx) {
    const N: u32 = 120;
    let s = &*c.store;
    let jobs: Vec<NewJob> = (0..N)
        .map(|i| {
            let job = NewJob::new(format!("c{i:03}"), "tc", format!("{i}"));
            if i % 3 == 2 {
                job
            } else {
                job.trace(trace_of(i))
            }
        })
        .collect();
    add(s, jobs, T0).await;
    let claimers: Vec<_> = (0..6)
        .map(|k| {
            let store = if k % 2 == 0 {
                c.store.clone()
            } else {
                c.peer.clone()
            };
            let owner = format!("sys-{k}");
            tokio::spawn(async move {
                let mut got = Vec::new();
                loop {
                    let batch = store
                        .claim_jobs("tc", 7, &owner, MIN, T0 + SEC)
                        .await
                        .expect("claim_jobs");
                    if batch.is_empty() {
                        return got;
                    }
                    got.extend(batch);
                }
            })
        })
        .collect();
    let mut seen = BTreeSet::new();
    for claimer in claimers {
        for j in claimer.await.expect("claimer") {
            let i: u32 = j.id[1..].parse().unwrap();
            let want = if i % 3 == 2 {
                None
            } else {
                kept(s, &trace_of(i))
            };
            assert_eq!(j.trace, want, "claimed {}", j.id);
            assert!(seen.insert(j.id.clone()), "{} handed out twice", j.id);
        }
    }
    assert_eq!(seen.len(), N as usize, "every job handed out once");
}

/// Two namespaces keep their own context for the same id: adding,
/// claiming and archiving it in one leaves the other's unchanged.
pub async fn trace_context_isolated_between_namespaces(a: Ctx, b: Ctx) {
    let (a, b) = (&*a.store, &*b.store);
    add(
        a,
        vec![NewJob::new("same", "ti", "a").trace(trace_of(1))],
        T0,
    )
    .await;
    add(
        b,
        vec![NewJob::new("same", "ti", "b").trace(trace_with_state())],
        T0,
    )
    .await;
    assert_eq!(claim(b, "ti", 1, OWNER, T0).await.len(), 1);
    archive_as(b, &ids(&["same"]), 200, T0 + 1).await;
    assert_eq!(get(a, "same").await.trace, kept(a, &trace_of(1)));
    assert_eq!(get(b, "same").await.trace, kept(b, &trace_with_state()));
    let got = claim(a, "ti", 1, OWNER, T0 + 2).await;
    assert_eq!(got[0].trace, kept(a, &trace_of(1)));
}
