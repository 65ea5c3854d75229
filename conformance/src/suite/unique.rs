//! Behaviours of unique keys ([`Unique`], [`AddOutcome::duplicates`]). A
//! store that does not declare [`Capabilities::unique_jobs`] must refuse a
//! job with a key as `Unsupported` and store nothing of its batch; each
//! behaviour checks that instead of the keys' effects.

use jobstore_api::limits::MAX_UNIQUE_KEY_LEN;

use super::*;

fn keyed(id: &str, jobtype: &str, key: &str) -> NewJob {
    NewJob::new(id, jobtype, format!("data of {id}")).unique(Unique::new(key))
}

fn dup(id: &str, existing: &str, replaced: bool) -> Duplicate {
    Duplicate {
        id: id.to_owned(),
        existing: existing.to_owned(),
        replaced,
    }
}

fn outcome(new: &[&str], existing: &[&str], duplicates: Vec<Duplicate>) -> AddOutcome {
    AddOutcome {
        new: ids(new),
        existing: ids(existing),
        duplicates,
        refused: vec![],
    }
}

async fn absent(s: &dyn JobStore, id: &str) {
    assert_eq!(s.get_job(id).await.unwrap(), None, "{id} is not stored");
}

/// Checks the `Unsupported` answer of a store without unique keys; returns
/// whether the store offers them (the behaviour goes on).
async fn offers_unique(s: &dyn JobStore) -> bool {
    if s.capabilities().unique_jobs {
        return true;
    }
    let batch = [NewJob::new("plain", "uq", "x"), keyed("k", "uq", "key")];
    assert_kind(
        s.add_jobs(&batch, T0).await,
        ErrorKind::Unsupported,
        "a keyed add to a store without unique keys",
    );
    absent(s, "plain").await;
    absent(s, "k").await;
    false
}

/// The key of a stored job, as every read gives it.
fn key_of(job: &Job) -> Option<&str> {
    job.flow.as_ref()?.unique_key.as_deref()
}

/// A live holder, in each live state, turns away a second job with its key
/// (another id), naming it; nothing is stored for the second. Every read
/// (get, claim, list) carries the key, and a plain job carries none.
pub async fn unique_add_returns_holder_in_every_live_state(c: Ctx) {
    let s = &*c.store;
    if !offers_unique(s).await {
        return;
    }
    let jt = "uq-live";
    let out = add(
        s,
        vec![
            keyed("waiting", jt, "kw"),
            keyed("scheduled", jt, "ks").run_at(T0 + 3_600 * SEC),
            keyed("running", jt, "kr").priority(9),
            keyed("expired", jt, "ke").priority(8),
            NewJob::new("plain", jt, "p").priority(-1),
        ],
        T0,
    )
    .await;
    assert_eq!(out.new.len(), 5, "{out:?}");
    assert!(out.duplicates.is_empty());
    assert_eq!(key_of(&get(s, "waiting").await), Some("kw"));
    assert_eq!(get(s, "plain").await.flow, None, "a plain job has no flow");
    // "running" on a long lease, "expired" on a short one.
    let got = claim(s, jt, 1, OWNER, T0).await;
    assert_eq!(job_ids(&got), ["running"]);
    assert_eq!(key_of(&got[0]), Some("kr"), "a claim carries the key");
    let got = s
        .claim_jobs(jt, 1, OTHER, Duration::from_secs(1), T0)
        .await
        .unwrap();
    assert_eq!(job_ids(&got), ["expired"]);
    let now = T0 + 10 * SEC;
    let out = add(
        s,
        vec![
            keyed("w2", jt, "kw"),
            keyed("s2", jt, "ks"),
            keyed("r2", jt, "kr"),
            keyed("e2", jt, "ke"),
        ],
        now,
    )
    .await;
    assert_eq!(
        out,
        outcome(
            &[],
            &[],
            vec![
                dup("w2", "waiting", false),
                dup("s2", "scheduled", false),
                dup("r2", "running", false),
                dup("e2", "expired", false),
            ]
        )
    );
    for id in ["w2", "s2", "r2", "e2"] {
        absent(s, id).await;
    }
    let counts = counts_of(s, jt, now).await;
    assert_eq!(
        (counts.waiting, counts.scheduled, counts.running),
        (3, 1, 1),
        "nothing was added (waiting counts the expired job): {counts:?}"
    );
    if s.capabilities().list_jobs {
        let page = s
            .list_jobs(&JobQuery::new(JobState::Waiting).jobtypes([jt]), now)
            .await
            .unwrap();
        let keys: Vec<_> = page
            .jobs
            .iter()
            .map(|j| (j.id.as_str(), key_of(j)))
            .collect();
        assert_eq!(keys, [("waiting", Some("kw")), ("plain", None)]);
    }
}

/// Every way out of the live states frees the key at once: an archive with
/// each result code, a release `Delete`, a cancel, a delete.
pub async fn unique_key_freed_by_every_way_out(c: Ctx) {
    let s = &*c.store;
    if !offers_unique(s).await {
        return;
    }
    let caps = s.capabilities();
    let mut exits: Vec<(&str, Option<Release>)> = vec![
        ("ok", Some(Release::Archive(JobResult::from_status(200)))),
        (
            "failed",
            Some(Release::Archive(JobResult::from_status(404))),
        ),
        ("error", Some(Release::Archive(JobResult::from_status(503)))),
        (
            "timeout",
            Some(Release::Archive(JobResult::new(ResultCode::Timeout, 0))),
        ),
        ("cancelled", Some(Release::Archive(JobResult::cancelled()))),
        ("release-delete", Some(Release::Delete)),
        ("cancel", None),
    ];
    if caps.edit_jobs {
        exits.push(("delete", None));
    }
    for (i, (name, how)) in exits.into_iter().enumerate() {
        let jt = &format!("uq-out-{i}");
        let key = &format!("key {name}");
        let now = T0 + i as Millis * SEC;
        let first = &format!("{name}-1");
        assert_eq!(
            add(s, vec![keyed(first, jt, key)], now).await.new,
            [first.as_str()]
        );
        match (name, how) {
            ("cancel", _) => {
                let out = s.cancel_jobs(&ids(&[first]), now).await.unwrap();
                assert_eq!(out.cancelled, [first.as_str()]);
            }
            ("delete", _) => {
                let out = s.delete_jobs(&ids(&[first]), T0).await.unwrap();
                assert_eq!(out.deleted, [first.as_str()]);
            }
            (_, Some(how)) => {
                assert_eq!(
                    job_ids(&claim(s, jt, 1, OWNER, now).await),
                    [first.as_str()]
                );
                let done = s
                    .release_jobs(&[JobRelease::new(first, how)], OWNER, now)
                    .await
                    .unwrap();
                assert_eq!(done, [first.as_str()], "{name}");
            }
            (_, None) => unreachable!(),
        }
        let second = &format!("{name}-2");
        assert_eq!(
            add(s, vec![keyed(second, jt, key)], now).await,
            outcome(&[second], &[], vec![]),
            "after {name} the key is free"
        );
        // The new holder holds it again.
        let third = &format!("{name}-3");
        assert_eq!(
            add(s, vec![keyed(third, jt, key)], now).await.duplicates,
            [dup(third, second, false)],
            "after {name}"
        );
    }
}

/// A holder whose daemon died: its lease runs out, another owner claims and
/// archives it, and the key is free with no call by the first owner.
pub async fn unique_key_freed_after_lease_runs_out(c: Ctx) {
    let s = &*c.store;
    if !offers_unique(s).await {
        return;
    }
    add(s, vec![keyed("lost", "uq-lease", "k")], T0).await;
    assert_eq!(claim(s, "uq-lease", 1, OWNER, T0).await.len(), 1);
    let later = T0 + 2 * MIN.as_millis() as Millis;
    assert_eq!(
        add(s, vec![keyed("early", "uq-lease", "k")], later)
            .await
            .duplicates,
        [dup("early", "lost", false)],
        "an expired holder still holds the key"
    );
    let taken = claim(&*c.peer, "uq-lease", 1, OTHER, later).await;
    assert_eq!(job_ids(&taken), ["lost"]);
    let how = Release::Archive(JobResult::from_status(500));
    c.peer
        .release_all(&ids(&["lost"]), OTHER, &how, later)
        .await
        .unwrap();
    // The first owner's late release changes nothing.
    let how = Release::Archive(JobResult::from_status(200));
    let late = s
        .release_all(&ids(&["lost"]), OWNER, &how, later)
        .await
        .unwrap();
    assert!(late.is_empty());
    assert_eq!(
        add(s, vec![keyed("next", "uq-lease", "k")], later)
            .await
            .new,
        ["next"]
    );
}

/// With a window, a job archived less than `window` ago still turns away a
/// new one with its key (the most recently archived is named, and its
/// payload is never replaced); from the end of the window on, the add is
/// new. Without a window an archived job holds nothing.
pub async fn unique_window_after_archive(c: Ctx) {
    let s = &*c.store;
    if !offers_unique(s).await {
        return;
    }
    let jt = "uq-window";
    let window = Duration::from_secs(600);
    let w = |id: &str| keyed(id, jt, "k").unique(Unique::new("k").window(window));
    add(s, vec![w("a")], T0).await;
    claim(s, jt, 1, OWNER, T0).await;
    archive_as(s, &ids(&["a"]), 200, T0 + SEC).await;
    // Without a window the key is free at once.
    let out = add(s, vec![keyed("plain-key", jt, "k")], T0 + 2 * SEC).await;
    assert_eq!(out.new, ["plain-key"]);
    claim(s, jt, 1, OWNER, T0 + 2 * SEC).await;
    archive_as(s, &ids(&["plain-key"]), 404, T0 + 3 * SEC).await;
    // With both archives inside the window, the most recent is named.
    let both = keyed("b0", jt, "k").unique(Unique::new("k").window(window));
    assert_eq!(
        add(s, vec![both], T0 + 4 * SEC).await.duplicates,
        [dup("b0", "plain-key", false)]
    );
    // Inside the window of the most recent archive ("plain-key", at +3 s).
    let replace = Unique::new("k")
        .window(window)
        .on_conflict(OnConflict::ReplaceData);
    let inside = T0 + 3 * SEC + 600 * SEC - 1;
    let b = keyed("b", jt, "k").unique(replace);
    assert_eq!(
        add(s, vec![b], inside).await.duplicates,
        [dup("b", "plain-key", false)],
        "an archived holder is named and keeps its payload"
    );
    absent(s, "b").await;
    assert_eq!(get(s, "plain-key").await.data, b"data of plain-key");
    // A window shorter than the time since: new.
    let short = keyed("c", jt, "k").unique(Unique::new("k").window(Duration::from_secs(5)));
    assert_eq!(add(s, vec![short], T0 + 9 * SEC).await.new, ["c"]);
    claim(s, jt, 1, OWNER, T0 + 9 * SEC).await;
    archive_as(s, &ids(&["c"]), 200, T0 + 10 * SEC).await;
    // At exactly done_dt + window the window is over.
    let end = T0 + 10 * SEC + 600 * SEC;
    assert_eq!(
        add(s, vec![w("d")], end - 1).await.duplicates,
        [dup("d", "c", false)]
    );
    assert_eq!(add(s, vec![w("d")], end).await.new, ["d"]);
    // Two jobs of one key archived at the same time: the window names the
    // greater id, whichever was archived last.
    let tie = "uq-window-tie";
    for (key, first, second) in [("tie1", "t-b", "t-a"), ("tie2", "t-c", "t-d")] {
        for id in [first, second] {
            assert_eq!(add(s, vec![keyed(id, tie, key)], end).await.new, [id]);
            claim(s, tie, 1, OWNER, end).await;
            archive_as(s, &ids(&[id]), 200, end + SEC).await;
        }
        let late = keyed("t-late", tie, key).unique(Unique::new(key).window(window));
        let named = first.max(second);
        assert_eq!(
            add(s, vec![late], end + 2 * SEC).await.duplicates,
            [dup("t-late", named, false)],
            "a tie on the archive time names the greater id"
        );
    }
    // A purged archive no longer counts for the window; nor does a
    // deleted one.
    claim(s, jt, 1, OWNER, end).await;
    archive_as(s, &ids(&["d"]), 200, end + SEC).await;
    assert_eq!(
        add(s, vec![w("e")], end + 2 * SEC).await.duplicates,
        [dup("e", "d", false)]
    );
    let codes = [ResultCode::Ok, ResultCode::Failed];
    assert!(s.purge_archived(end + 2 * SEC, &codes).await.unwrap() >= 1);
    assert_eq!(add(s, vec![w("e")], end + 2 * SEC).await.new, ["e"]);
    if s.capabilities().edit_jobs {
        claim(s, jt, 1, OWNER, end + 2 * SEC).await;
        archive_as(s, &ids(&["e"]), 200, end + 3 * SEC).await;
        let out = s.delete_jobs(&ids(&["e"]), T0).await.unwrap();
        assert_eq!(out.deleted, ["e"]);
        assert_eq!(add(s, vec![w("f")], end + 4 * SEC).await.new, ["f"]);
    }
}

/// `ReplaceData` gives a free holder (waiting or scheduled) the duplicate's
/// payload and the event `Edited`, nothing else; a running holder is left
/// as it is.
pub async fn unique_replace_data_of_free_holder(c: Ctx) {
    let s = &*c.store;
    if !offers_unique(s).await {
        return;
    }
    let jt = "uq-replace";
    let replace = |id: &str, key: &str, data: &str| {
        NewJob::new(id, jt, data)
            .priority(5)
            .run_at(T0 + 7 * SEC)
            .unique(Unique::new(key).on_conflict(OnConflict::ReplaceData))
    };
    add(
        s,
        vec![
            keyed("w", jt, "kw").priority(2),
            keyed("s", jt, "ks").run_at(T0 + 3_600 * SEC),
            keyed("r", jt, "kr").priority(9),
        ],
        T0,
    )
    .await;
    assert_eq!(job_ids(&claim(s, jt, 1, OWNER, T0).await), ["r"]);
    let before = [get(s, "w").await, get(s, "s").await, get(s, "r").await];
    let now = T0 + SEC;
    let out = add(
        s,
        vec![
            replace("w2", "kw", "new w"),
            replace("s2", "ks", "new s"),
            replace("r2", "kr", "new r"),
        ],
        now,
    )
    .await;
    assert_eq!(
        out,
        outcome(
            &[],
            &[],
            vec![
                dup("w2", "w", true),
                dup("s2", "s", true),
                dup("r2", "r", false),
            ]
        )
    );
    for (old, data) in before.iter().zip(["new w", "new s"]) {
        let mut want = old.clone();
        want.data = data.as_bytes().to_vec();
        let want = with_event(s, want, JobEvent::new(now, "", 0, EventKind::Edited));
        assert_eq!(get(s, &old.id).await, want, "only the payload changed");
    }
    assert_eq!(
        get(s, "r").await,
        before[2],
        "a running holder is left alone"
    );
    // A second replace replaces again.
    add(s, vec![replace("w3", "kw", "newer w")], now).await;
    assert_eq!(get(s, "w").await.data, b"newer w");
    // Two replaces of one holder in one batch both replace, in batch
    // order: the last payload stays, and each is an edit of its own.
    let before = get(s, "w").await;
    let later = now + SEC;
    let out = add(
        s,
        vec![replace("w4", "kw", "first"), replace("w5", "kw", "second")],
        later,
    )
    .await;
    assert_eq!(out.duplicates, [dup("w4", "w", true), dup("w5", "w", true)]);
    let mut want = before;
    want.data = b"second".to_vec();
    let edited = JobEvent::new(later, "", 0, EventKind::Edited);
    let want = with_event(s, want, edited.clone());
    let want = with_event(s, want, edited);
    assert_eq!(get(s, "w").await, want, "each replace is one edit");
}

/// The key's scope is the jobtype: one key in two jobtypes is two holders;
/// keys are compared byte for byte; a plain job holds no key.
pub async fn unique_scope_is_jobtype(c: Ctx) {
    let s = &*c.store;
    if !offers_unique(s).await {
        return;
    }
    let out = add(
        s,
        vec![
            keyed("a1", "uq-scope-a", "k"),
            keyed("b1", "uq-scope-b", "k"),
            keyed("a2", "uq-scope-a", "K"),
            keyed("a3", "uq-scope-a", "k "),
            keyed("a4", "uq-scope-a", "ключ 🔑"),
            NewJob::new("a5", "uq-scope-a", "plain"),
            NewJob::new("a6", "uq-scope-a", "plain"),
        ],
        T0,
    )
    .await;
    assert_eq!(out.new.len(), 7, "{out:?}");
    let out = add(
        s,
        vec![
            keyed("a7", "uq-scope-a", "ключ 🔑"),
            keyed("b2", "uq-scope-b", "K"),
        ],
        T0,
    )
    .await;
    assert_eq!(out.duplicates, [dup("a7", "a4", false)]);
    assert_eq!(out.new, ["b2"]);
}

/// The id is checked before the key: a replay of an added job is
/// `existing` (whatever key it carries), never a duplicate of itself.
pub async fn unique_id_checked_before_key(c: Ctx) {
    let s = &*c.store;
    if !offers_unique(s).await {
        return;
    }
    let jt = "uq-replay";
    assert_eq!(add(s, vec![keyed("j", jt, "k")], T0).await.new, ["j"]);
    let replay = [keyed("j", jt, "k"), keyed("j2", jt, "k2")];
    assert_eq!(
        add(s, replay.to_vec(), T0 + SEC).await,
        outcome(&["j2"], &["j"], vec![])
    );
    // An existing id with another key, or none, is existing and unchanged.
    let before = get(s, "j").await;
    let other = [keyed("j", jt, "other"), NewJob::new("j2", jt, "plain")];
    assert_eq!(
        add(s, other.to_vec(), T0 + 2 * SEC).await,
        outcome(&[], &["j", "j2"], vec![])
    );
    assert_eq!(get(s, "j").await, before);
    assert_eq!(
        add(s, vec![keyed("j3", jt, "other")], T0).await.new,
        ["j3"],
        "the key of a replayed id was not taken"
    );
}

/// Two jobs with one key in one batch: the first is added, the second is
/// its duplicate (and with `ReplaceData` gives it its payload); a third
/// meeting a stored holder names that one.
pub async fn unique_twice_in_one_batch(c: Ctx) {
    let s = &*c.store;
    if !offers_unique(s).await {
        return;
    }
    let jt = "uq-batch";
    let replace = Unique::new("k2").on_conflict(OnConflict::ReplaceData);
    let out = add(
        s,
        vec![
            keyed("a", jt, "k1"),
            keyed("b", jt, "k1"),
            keyed("c", jt, "k2"),
            NewJob::new("d", jt, "replacement").unique(replace),
            keyed("e", jt, "k3"),
        ],
        T0,
    )
    .await;
    assert_eq!(
        out,
        outcome(
            &["a", "c", "e"],
            &[],
            vec![dup("b", "a", false), dup("d", "c", true)]
        )
    );
    assert_eq!(get(s, "c").await.data, b"replacement");
    absent(s, "b").await;
    absent(s, "d").await;
    let out = add(s, vec![keyed("f", jt, "k3"), keyed("g", jt, "k3")], T0).await;
    assert_eq!(out.duplicates, [dup("f", "e", false), dup("g", "e", false)]);
    // Batch order decides, whatever the ids: forty pairs, the first of
    // each with the greater id, spread however the store spreads ids.
    let mut batch = Vec::new();
    for i in 0..40 {
        let key = format!("pair {i}");
        batch.push(keyed(&format!("z-{i:02}"), jt, &key));
        batch.push(keyed(&format!("a-{i:02}"), jt, &key));
    }
    let out = add(s, batch, T0).await;
    let want: Vec<_> = (0..40)
        .map(|i| dup(&format!("a-{i:02}"), &format!("z-{i:02}"), false))
        .collect();
    assert_eq!(out.duplicates, want);
    assert_eq!(out.new.len(), 40);
}

/// A run again takes the key back: an archived job whose key another live
/// job holds stays archived and is not returned; of two archived jobs with
/// one key run again in one call, only one is.
pub async fn unique_rerun_refused_while_key_held(c: Ctx) {
    let s = &*c.store;
    if !s.capabilities().edit_jobs || !offers_unique(s).await {
        return;
    }
    let jt = "uq-rerun";
    add(s, vec![keyed("a", jt, "k")], T0).await;
    claim(s, jt, 1, OWNER, T0).await;
    archive_as(s, &ids(&["a"]), 500, T0 + SEC).await;
    assert_eq!(add(s, vec![keyed("b", jt, "k")], T0 + SEC).await.new, ["b"]);
    let a = get(s, "a").await;
    let rerun = s
        .rerun_jobs(&ids(&["a"]), Duration::ZERO, T0 + 2 * SEC)
        .await
        .unwrap();
    assert!(rerun.is_empty(), "b holds the key: {rerun:?}");
    assert_eq!(get(s, "a").await, a, "a is untouched");
    claim(s, jt, 1, OWNER, T0 + 2 * SEC).await;
    archive_as(s, &ids(&["b"]), 500, T0 + 3 * SEC).await;
    let rerun = s
        .rerun_jobs(&ids(&["a", "b"]), Duration::ZERO, T0 + 4 * SEC)
        .await
        .unwrap();
    assert_eq!(rerun, ["a"], "the first id of the call takes the key");
    assert_eq!(get(s, "a").await.state(T0 + 4 * SEC), JobState::Waiting);
    let b = get(s, "b").await;
    assert_eq!(
        b.state(T0 + 4 * SEC),
        JobState::Archived,
        "b stays archived"
    );
    assert_eq!(key_of(&b), Some("k"), "and keeps its key");
    assert_eq!(
        add(s, vec![keyed("c", jt, "k")], T0 + 4 * SEC)
            .await
            .duplicates,
        [dup("c", "a", false)],
        "the job run again holds the key"
    );
    // The key's scope is the jobtype, in a run again too: archived jobs of
    // two jobtypes with one key, run again in one call, both take it.
    let (jx, jy) = ("uq-rerun-x", "uq-rerun-y");
    add(s, vec![keyed("x", jx, "k"), keyed("y", jy, "k")], T0).await;
    claim(s, jx, 1, OWNER, T0).await;
    claim(s, jy, 1, OWNER, T0).await;
    archive_as(s, &ids(&["x", "y"]), 500, T0 + SEC).await;
    let mut rerun = s
        .rerun_jobs(&ids(&["x", "y"]), Duration::ZERO, T0 + 2 * SEC)
        .await
        .unwrap();
    rerun.sort();
    assert_eq!(rerun, ["x", "y"], "one key in two jobtypes is two keys");
}

/// A retry and a hand-back keep the key: the job is live all along.
pub async fn unique_key_kept_by_retry_and_unget(c: Ctx) {
    let s = &*c.store;
    if !offers_unique(s).await {
        return;
    }
    let jt = "uq-keep";
    add(s, vec![keyed("j", jt, "k")], T0).await;
    for (i, how) in [Release::Retry { delay: MIN }, Release::Unget]
        .into_iter()
        .enumerate()
    {
        let now = T0 + (i as Millis) * 120 * SEC;
        assert_eq!(job_ids(&claim(s, jt, 1, OWNER, now).await), ["j"]);
        let done = s
            .release_jobs(&[JobRelease::new("j", how)], OWNER, now)
            .await
            .unwrap();
        assert_eq!(done, ["j"]);
        let again = format!("again-{i}");
        assert_eq!(
            add(s, vec![keyed(&again, jt, "k")], now).await.duplicates,
            [dup(&again, "j", false)],
            "after release {i} the job still holds its key"
        );
        assert_eq!(key_of(&get(s, "j").await), Some("k"));
    }
}

/// Bad keys are `InvalidInput` and nothing of the batch is stored; the
/// longest key and a window of `MAX_DELAY` are accepted.
pub async fn unique_key_limits_rejected_nothing_stored(c: Ctx) {
    let s = &*c.store;
    if !offers_unique(s).await {
        return;
    }
    let jt = "uq-limits";
    let longest = "k".repeat(MAX_UNIQUE_KEY_LEN);
    let bad = [
        Unique::new(""),
        Unique::new("k".repeat(MAX_UNIQUE_KEY_LEN + 1)),
        Unique::new("line\nbreak"),
        Unique::new("nul\0"),
        Unique::new("k").window(MAX_DELAY + Duration::from_millis(1)),
    ];
    for u in bad {
        let batch = [
            NewJob::new("ok-first", jt, "x"),
            NewJob::new("bad", jt, "x").unique(u.clone()),
        ];
        assert_kind(
            s.add_jobs(&batch, T0).await,
            ErrorKind::InvalidInput,
            &format!("{u:?}"),
        );
        absent(s, "ok-first").await;
        absent(s, "bad").await;
    }
    let good = [
        keyed("long", jt, &longest),
        NewJob::new("far", jt, "x").unique(Unique::new("far").window(MAX_DELAY)),
    ];
    assert_eq!(add(s, good.to_vec(), T0).await.new, ["long", "far"]);
    assert_eq!(key_of(&get(s, "long").await), Some(longest.as_str()));
}

/// Sixteen adds of one key under sixteen ids, at one `now`, from both
/// handles at once: exactly one job is stored and the fifteen others name
/// it. Repeated with the holder archived between rounds, over several
/// jobtypes (several slots on Redis Cluster).
pub async fn unique_concurrent_adds_make_one_job(c: Ctx) {
    if !offers_unique(&*c.store).await {
        return;
    }
    for round in 0..6 {
        let jt = format!("uq-race-{}", round % 3);
        let now = T0 + round * SEC;
        let mut set = tokio::task::JoinSet::new();
        for i in 0..16 {
            let store = if i % 2 == 0 {
                c.store.clone()
            } else {
                c.peer.clone()
            };
            let job = keyed(&format!("r{round}-{i}"), &jt, "one");
            set.spawn(async move { store.add_jobs(&[job], now).await.unwrap() });
        }
        let outs = set.join_all().await;
        let new: Vec<_> = outs.iter().flat_map(|o| o.new.clone()).collect();
        assert_eq!(new.len(), 1, "round {round}: {outs:?}");
        let dups: Vec<_> = outs.iter().flat_map(|o| o.duplicates.clone()).collect();
        assert_eq!(dups.len(), 15, "round {round}");
        assert!(dups.iter().all(|d| d.existing == new[0] && !d.replaced));
        let counts = counts_of(&*c.store, &jt, now).await;
        assert_eq!(counts.waiting, 1, "round {round}: {counts:?}");
        let got = claim(&*c.store, &jt, 10, OWNER, now).await;
        assert_eq!(job_ids(&got), new);
        archive_as(&*c.store, &new, 200, now).await;
    }
}

/// A key held in one namespace is not held in another.
pub async fn unique_keys_isolated_between_namespaces(a: Ctx, b: Ctx) {
    let (a, b) = (&*a.store, &*b.store);
    if !offers_unique(a).await {
        return;
    }
    assert_eq!(add(a, vec![keyed("x", "uq-iso", "k")], T0).await.new, ["x"]);
    assert_eq!(add(b, vec![keyed("y", "uq-iso", "k")], T0).await.new, ["y"]);
    claim(b, "uq-iso", 1, OWNER, T0).await;
    archive_as(b, &ids(&["y"]), 200, T0).await;
    let window = Unique::new("k").window(Duration::from_secs(60));
    let z = NewJob::new("z", "uq-iso", "z").unique(window);
    assert_eq!(
        add(a, vec![z.clone()], T0).await.duplicates,
        [dup("z", "x", false)]
    );
    assert_eq!(add(b, vec![z], T0).await.duplicates, [dup("z", "y", false)]);
}
