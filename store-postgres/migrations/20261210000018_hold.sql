-- jobstore schema, version 18: held and skipped edges, the policy
-- `hold`, and `with_outputs`. See README.md ("Dependencies").
--
-- Edges gain two states: 'h' held (the target ended other than ok and
-- its blocked waiter's policy is hold: the edge stays open, with the
-- target's code and status, and resolves at the target's next end after
-- a run again) and 's' skipped (unblock_jobs: the target's end no longer
-- reaches the waiter; code and status NULL). `pending` counts the open
-- edges, pending and held. `dep_policy` is 'cancel', 'run' or 'hold',
-- followed by '+outputs' for a job added with `with_outputs` (old rows
-- read as before). `archive.waited` is set on an archived target that
-- held edges wait on; a run again copies it into `jobs.waited`, so the
-- target's next end takes the flow path. No default: adding it rewrites
-- no row.
ALTER TABLE archive ADD COLUMN waited bool;

-- A target's open edges: pending and held.
DROP INDEX edges_open;
CREATE INDEX edges_open ON edges (target, waiter) WHERE state IN ('p', 'h');

-- Ends the open edges (pending or held) to p_targets, which left the
-- live states with p_codes / p_statuses, after dropping the edges of
-- the waiters p_forget (deleted jobs), and applies what follows, round
-- after round until a round cancels nothing: the waiters are locked in
-- id order first (FOR UPDATE: every later statement of the round reads
-- their newest version, and concurrent rounds and unblocks wait); an
-- edge whose target did not end ok and whose waiter is blocked under
-- 'hold' is held (it keeps the waiter blocked; the target, archived, gets
-- `waited`); every other edge is done: a blocked waiter under 'cancel'
-- whose ended dependency did not end ok is archived cancelled (status 0,
-- output naming the dependency: the least target id of the round among
-- failures, event `cancelled`), and its own edges end in the next round;
-- the other waiters count the edges done (`pending`, in `jobs` or
-- `archive`), and a blocked one left with none open becomes free with dt
-- = max(not_before, now) and the event `unblocked`, its jobtype
-- notified. Returns the waiters whose edges were done.
CREATE OR REPLACE FUNCTION jobstore_end_edges(
    p_targets text[], p_codes text[], p_statuses int4[], p_forget text[],
    p_now int8, p_horizon int8, p_channel text
) RETURNS int8
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
    v_t text[] := p_targets;
    v_c text[] := p_codes;
    v_s int4[] := p_statuses;
    w_id text[];
    w_n int4[];
    w_fail text[];
    w_code text[];
    v_held text[];
    v_cancel text[];
    v_free text[];
    v_types text[] := '{}';
    v_changed int8 := 0;
BEGIN
    IF cardinality(p_forget) > 0 THEN
        DELETE FROM edges g WHERE g.waiter IN (SELECT unnest(p_forget));
    END IF;
    WHILE cardinality(v_t) > 0 LOOP
        -- The waiters of the open edges to the round's targets, locked in
        -- id order before their edges change (as unblock_jobs: the job,
        -- then its edges), so that the edges' new states and the
        -- statements below read their newest version.
        -- (An array of their ids, not a semi-join: one plan for a chain's
        -- single target and for a fan-out, a third faster on both.)
        PERFORM 1 FROM jobs j
        WHERE j.id = ANY (ARRAY(SELECT g.waiter FROM edges g
                                WHERE g.target = ANY (v_t) AND g.state IN ('p', 'h')))
        ORDER BY j.id FOR UPDATE;

        -- Open edges (pending or held; a skipped one is left as it is)
        -- end: held again when the code is not ok and the waiter is
        -- blocked under hold, else done. Only the done ones count.
        WITH t AS (
            SELECT * FROM unnest(v_t, v_c, v_s) AS t (id, code, status)
        ), e AS (
            UPDATE edges g
            SET state = CASE WHEN t.code <> 'ok' AND EXISTS (
                                  SELECT 1 FROM jobs j
                                  WHERE j.id = g.waiter AND j.lock = '__blocked'
                                    AND split_part(j.dep_policy, '+', 1) = 'hold')
                             THEN 'h' ELSE 'd' END,
                code = t.code, status = t.status
            FROM t
            WHERE g.target = t.id AND g.state IN ('p', 'h')
            RETURNING g.waiter, g.target, g.state, t.code
        )
        SELECT coalesce(array_agg(w.waiter ORDER BY w.waiter), '{}'),
               coalesce(array_agg(w.n ORDER BY w.waiter), '{}'),
               coalesce(array_agg(w.fail ORDER BY w.waiter), '{}'),
               coalesce(array_agg(w.failcode ORDER BY w.waiter), '{}'),
               (SELECT coalesce(array_agg(DISTINCT e.target), '{}') FROM e WHERE e.state = 'h')
        INTO w_id, w_n, w_fail, w_code, v_held
        FROM (SELECT e.waiter, count(*)::int4 AS n,
                     (array_agg(e.target ORDER BY e.target) FILTER (WHERE e.code <> 'ok'))[1] AS fail,
                     (array_agg(e.code ORDER BY e.target) FILTER (WHERE e.code <> 'ok'))[1] AS failcode
              FROM e WHERE e.state = 'd' GROUP BY e.waiter) w;

        -- A target with held edges, archived: its run again takes the
        -- marker back to `jobs`, so that its next end takes the flow path.
        IF cardinality(v_held) > 0 THEN
            UPDATE archive a SET waited = true
            WHERE a.id IN (SELECT unnest(v_held)) AND a.waited IS NULL;
        END IF;
        EXIT WHEN cardinality(w_id) = 0;
        v_changed := v_changed + cardinality(w_id);

        WITH w AS (
            SELECT * FROM unnest(w_id, w_n, w_fail, w_code) AS w (id, n, fail, failcode)
        ), c AS (
            DELETE FROM jobs j USING w
            WHERE j.id = w.id AND j.lock = '__blocked' AND split_part(j.dep_policy, '+', 1) = 'cancel'
              AND w.fail IS NOT NULL
            RETURNING j.id, j.jobtype, j.data, j.priority, j.attempts, j.create_dt, j.tags,
                      j.history, j.traceparent, j.tracestate, j.unique_key, j.repeat_rule,
                      j.pending - w.n AS pending, j.dep_policy, w.fail, w.failcode
        ), ca AS (
            INSERT INTO archive (id, jobtype, data, priority, dt, attempts, create_dt,
                                 done_dt, code, status, output, tags, history,
                                 claimed_at, claimed_by, traceparent, tracestate, unique_key,
                                 repeat_rule, pending, dep_policy)
            SELECT id, jobtype, data, priority, p_horizon, attempts, create_dt, p_now,
                   'cancelled', 0,
                   convert_to('[jobstore] dependency ' || fail || ' ended ' || failcode || E'\n', 'UTF8'),
                   tags, jobstore_push_event(history, jsonb_build_object(
                       'at', p_now, 'attempt', attempts, 'event', 'cancelled')),
                   NULL, NULL, traceparent, tracestate, unique_key, repeat_rule, pending,
                   dep_policy
            FROM c
            ON CONFLICT (id) DO NOTHING
        )
        SELECT coalesce(array_agg(c.id), '{}') INTO v_cancel FROM c;

        -- Blocked waiters whose last pending edges ended (rows locked above).
        SELECT coalesce(array_agg(j.id), '{}'), v_types || coalesce(array_agg(j.jobtype), '{}')
        INTO v_free, v_types
        FROM jobs j
        JOIN unnest(w_id, w_n) AS w (id, n) ON w.id = j.id
        WHERE j.lock = '__blocked' AND j.pending - w.n <= 0;

        UPDATE jobs j
        SET pending = j.pending - w.n,
            lock = CASE WHEN f.id IS NOT NULL THEN '' ELSE j.lock END,
            dt = CASE WHEN f.id IS NOT NULL THEN greatest(j.dt - 400000000000000, p_now)
                      ELSE j.dt END,
            history = CASE WHEN f.id IS NOT NULL THEN jobstore_push_event(j.history,
                               jsonb_build_object('at', p_now, 'attempt', j.attempts,
                                                  'event', 'unblocked'))
                           ELSE j.history END
        FROM unnest(w_id, w_n) AS w (id, n)
        LEFT JOIN unnest(v_free) AS f (id) ON f.id = w.id
        WHERE j.id = w.id;

        UPDATE archive a
        SET pending = a.pending - w.n
        FROM unnest(w_id, w_n) AS w (id, n)
        WHERE a.id = w.id AND a.id NOT IN (SELECT unnest(v_cancel));

        v_t := v_cancel;
        v_c := array_fill('cancelled'::text, ARRAY[cardinality(v_cancel)]);
        v_s := array_fill(0::int4, ARRAY[cardinality(v_cancel)]);
    END LOOP;

    PERFORM pg_notify(p_channel, d.t) FROM (SELECT DISTINCT t FROM unnest(v_types) AS t) d;
    RETURN v_changed;
END
$fn$;


-- Adds a batch with at least one job with dependencies (migration 17's
-- function): p_policies per job is its stored policy ('cancel', 'run',
-- 'hold', each optionally followed by '+outputs'; NULL without
-- dependencies). Archived targets are locked too, and an edge to one
-- that ended other than ok is held when the waiter's policy is hold
-- (counted in `pending`; the target gets `archive.waited`).
CREATE OR REPLACE FUNCTION add_flow_jobs(
    p_ids text[], p_jobtypes text[], p_datas bytea[], p_priorities int4[], p_dts int8[],
    p_tags text[], p_traceparents text[], p_tracestates text[], p_repeats text[],
    p_keys text[], p_windows int8[], p_replace bool[],
    p_dep_pos int4[], p_dep_ids text[], p_policies text[],
    p_now int8, p_horizon int8, p_channel text
) RETURNS TABLE (o_pos int, o_what "char", o_holder text, o_replaced bool, o_field int)
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
    v_pending int[];              -- positions not decided yet
    v_pos int[] := '{}';          -- decided: position,
    v_what "char"[] := '{}';      --   what,
    v_holder text[] := '{}';      --   holder (duplicates)
    v_types text[] := '{}';       -- jobtypes inserted
    v_replaced int[] := '{}';     -- positions whose holder got the payload
    c_pos int[];                  -- this round: position,
    c_holder text[];              --   holder if a duplicate,
    c_chosen int[];               --   the position its group inserts (NULL: none)
    v_try int[];
    v_ins int[];
    v_undo int[];
    v_exist int[];
    v_round int := 0;
    r record;
    v_ref_pos int[];              -- jobs with an unknown dependency: position,
    v_ref_k int[];                --   the first such dependency's index (0-based),
    v_ref_dep text[];             --   and its id
    v_new text[];                 -- ids inserted with dependencies
    l_waiter text[];              -- their edges: waiter,
    l_target text[];              --   target,
    l_o int8[];                   --   place in the batch's dependency list,
    l_live bool[];                --   target live (pending),
    l_hold bool[];                --   the waiter's policy is hold,
    l_code text[];                --   else its code
    l_status int4[];              --   and status
BEGIN
    -- The live targets, locked in id order (as every statement locking
    -- jobs by id): none of them can end before the edges to it exist.
    -- Then the archived ones (a run again waits, and reads the marker
    -- `waited` this add may set on them), then the live ones again: a
    -- target run again between the first two statements is locked too.
    PERFORM 1 FROM jobs j WHERE j.id IN (SELECT unnest(p_dep_ids)) ORDER BY j.id FOR UPDATE;
    PERFORM 1 FROM archive a WHERE a.id IN (SELECT unnest(p_dep_ids)) ORDER BY a.id FOR UPDATE;
    PERFORM 1 FROM jobs j WHERE j.id IN (SELECT unnest(p_dep_ids)) ORDER BY j.id FOR UPDATE;

    -- Unknown dependencies (fresh snapshot: a target archived before the
    -- lock is found in archive): per job, the first one.
    SELECT coalesce(array_agg(x.pos), '{}'), coalesce(array_agg(x.k), '{}'),
           coalesce(array_agg(x.dep), '{}')
    INTO v_ref_pos, v_ref_k, v_ref_dep
    FROM (
        SELECT DISTINCT ON (d.pos) d.pos, d.k, d.dep
        FROM (SELECT u.pos, u.dep,
                     (row_number() OVER (PARTITION BY u.pos ORDER BY u.o) - 1)::int AS k
              FROM unnest(p_dep_pos, p_dep_ids) WITH ORDINALITY AS u (pos, dep, o)) d
        WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = d.dep)
          AND NOT EXISTS (SELECT 1 FROM archive a WHERE a.id = d.dep)
        ORDER BY d.pos, d.k
    ) x;

    -- Every statement reads the batch as rows (`unnest ... WITH
    -- ORDINALITY`, joined by position), never by subscripts: a subscript
    -- of an array of texts walks it from the start, and a batch of 10,000
    -- would take seconds.

    -- The id first, whatever the key: an id in jobs or archive is existing.
    SELECT coalesce(array_agg(b.i) FILTER (WHERE ex), '{}'),
           coalesce(array_agg(b.i) FILTER (WHERE NOT ex), '{}')
    INTO v_exist, v_pending
    FROM (SELECT u.i, EXISTS (SELECT 1 FROM jobs j WHERE j.id = u.id)
                      OR EXISTS (SELECT 1 FROM archive a WHERE a.id = u.id) AS ex
          FROM unnest(p_ids) WITH ORDINALITY AS u (id, i)) b;
    v_pos := v_exist;
    v_what := array_fill('e'::"char", ARRAY[cardinality(v_exist)]);
    v_holder := array_fill(NULL::text, ARRAY[cardinality(v_exist)]);

    WHILE cardinality(v_pending) > 0 LOOP
        v_round := v_round + 1;
        IF v_round > 8 THEN
            RAISE EXCEPTION 'add_unique_jobs: keys still contended after 8 rounds'
                USING ERRCODE = '40001';
        END IF;

        -- Decide, on this statement's snapshot: per (jobtype, key), the
        -- live holder and the most recent archived job; in batch order,
        -- the first job not covered by its own window is inserted (unless
        -- a live holder exists), the ones before it are duplicates of the
        -- archived job, the ones after it duplicates of it. A job without a
        -- key is a group of its own: inserted.
        WITH t AS (
            SELECT b.i, b.id, b.jobtype, b.ukey, b.win, b.i IN (SELECT unnest(v_ref_pos)) AS ref
            FROM unnest(p_ids, p_jobtypes, p_keys, p_windows) WITH ORDINALITY
                AS b (id, jobtype, ukey, win, i)
            WHERE b.i IN (SELECT unnest(v_pending))
        ), g AS (
            SELECT DISTINCT jobtype, ukey FROM t WHERE ukey IS NOT NULL
        ), h AS (
            SELECT g.jobtype, g.ukey, l.id AS live, a.id AS arch, a.done_dt
            FROM g
            LEFT JOIN LATERAL (
                SELECT j.id FROM jobs j WHERE j.jobtype = g.jobtype AND j.unique_key = g.ukey
            ) l ON true
            LEFT JOIN LATERAL (
                SELECT a.id, a.done_dt FROM archive a
                WHERE a.jobtype = g.jobtype AND a.unique_key = g.ukey
                ORDER BY a.done_dt DESC, a.id DESC
                LIMIT 1
            ) a ON true
        ), c AS (
            SELECT t.i, t.id, t.jobtype, t.ukey, t.ref, h.live, h.arch,
                   coalesce(h.arch IS NOT NULL AND t.win IS NOT NULL
                            AND h.done_dt > p_now - t.win, false) AS covered
            FROM t LEFT JOIN h ON h.jobtype = t.jobtype AND h.ukey = t.ukey
        ), f AS (
            SELECT c.*,
                   min(c.i) FILTER (WHERE NOT c.covered AND NOT c.ref)
                       OVER (PARTITION BY c.jobtype, c.ukey,
                                          CASE WHEN c.ukey IS NULL THEN c.i END) AS firstpos
            FROM c
        ), fid AS (
            SELECT f.*, ft.id AS first_id
            FROM f LEFT JOIN t AS ft ON ft.i = f.firstpos
        ), d AS (
            SELECT f.i,
                   CASE WHEN f.live IS NOT NULL THEN NULL ELSE f.firstpos END AS chosen,
                   CASE WHEN f.live IS NOT NULL THEN f.live
                        WHEN f.firstpos IS NULL OR f.i < f.firstpos THEN
                            CASE WHEN f.covered THEN f.arch END
                        WHEN f.i = f.firstpos THEN NULL
                        ELSE f.first_id END AS holder
            FROM fid f
        )
        SELECT coalesce(array_agg(d.i ORDER BY d.i), '{}'),
               coalesce(array_agg(d.holder ORDER BY d.i), '{}'),
               coalesce(array_agg(d.chosen ORDER BY d.i), '{}')
        INTO c_pos, c_holder, c_chosen
        FROM d;

        v_try := ARRAY(SELECT DISTINCT x FROM unnest(c_chosen) AS x WHERE x IS NOT NULL);

        -- Insert the chosen jobs, in key order (two batches wait on each
        -- other's keys in one order). No conflict target: a row loses to
        -- its id or to jobs_unique, waiting for an uncommitted one.
        WITH ins AS (
            INSERT INTO jobs (id, jobtype, data, priority, dt, lock, attempts, create_dt,
                              tags, traceparent, tracestate, unique_key, repeat_rule)
            SELECT b.id, b.jobtype, b.data, b.priority, b.dt, '', 0, p_now,
                   coalesce(string_to_array(nullif(b.tags, ''), ' '), '{}'),
                   b.traceparent, b.tracestate, b.ukey, b.repeat_rule
            FROM unnest(p_ids, p_jobtypes, p_datas, p_priorities, p_dts, p_tags,
                        p_traceparents, p_tracestates, p_keys, p_repeats) WITH ORDINALITY
                AS b (id, jobtype, data, priority, dt, tags, traceparent, tracestate, ukey,
                      repeat_rule, i)
            WHERE b.i IN (SELECT unnest(v_try))
            ORDER BY b.jobtype, b.ukey, b.id
            ON CONFLICT DO NOTHING
            RETURNING jobs.id
        )
        SELECT coalesce(array_agg(b.i), '{}') INTO v_ins
        FROM unnest(p_ids) WITH ORDINALITY AS b (id, i)
        WHERE b.id IN (SELECT ins.id FROM ins);

        -- Undone, in a statement of its own (a fresh snapshot): (1) as in
        -- add_jobs, an id archived meanwhile counts as existing; (2) a job
        -- with a window inserted although a job of its key was archived
        -- inside it since the decision (added and archived by others while
        -- this insert waited on the key): decided again. While the row
        -- inserted holds the key nobody else can add it, so every other
        -- job that held it is in `archive` on this snapshot.
        SELECT coalesce(array_agg(b.i), '{}') INTO v_undo
        FROM unnest(p_ids, p_jobtypes, p_keys, p_windows) WITH ORDINALITY
            AS b (id, jobtype, ukey, win, i)
        WHERE b.i IN (SELECT unnest(v_ins))
          AND (EXISTS (SELECT 1 FROM archive a WHERE a.id = b.id)
               OR (b.win IS NOT NULL
                   AND EXISTS (SELECT 1 FROM archive a
                               WHERE a.jobtype = b.jobtype AND a.unique_key = b.ukey
                                 AND a.done_dt > p_now - b.win)));
        IF cardinality(v_undo) > 0 THEN
            DELETE FROM jobs j
            WHERE j.id IN (SELECT b.id FROM unnest(p_ids) WITH ORDINALITY AS b (id, i)
                           WHERE b.i IN (SELECT unnest(v_undo)));
            v_ins := ARRAY(SELECT x FROM unnest(v_ins) AS x
                           WHERE x NOT IN (SELECT unnest(v_undo)));
        END IF;

        -- Not inserted (or undone) for its id, now in jobs or archive:
        -- existing. Otherwise it lost to a key: round again.
        SELECT coalesce(array_agg(b.i), '{}') INTO v_exist
        FROM unnest(p_ids) WITH ORDINALITY AS b (id, i)
        WHERE b.i IN (SELECT unnest(v_try))
          AND b.i NOT IN (SELECT unnest(v_ins))
          AND (EXISTS (SELECT 1 FROM jobs j WHERE j.id = b.id)
               OR EXISTS (SELECT 1 FROM archive a WHERE a.id = b.id));
        v_types := v_types || ARRAY(
            SELECT b.jobtype FROM unnest(p_jobtypes) WITH ORDINALITY AS b (jobtype, i)
            WHERE b.i IN (SELECT unnest(v_ins)));

        -- Decided: groups with nothing to insert, or whose job was inserted.
        SELECT v_pos || coalesce(array_agg(x.i), '{}'),
               v_what || coalesce(array_agg(CASE WHEN x.i = x.chosen THEN 'n' WHEN x.holder IS NULL THEN 'r' ELSE 'd' END::"char"), '{}'),
               v_holder || coalesce(array_agg(x.holder), '{}')
        INTO v_pos, v_what, v_holder
        FROM unnest(c_pos, c_holder, c_chosen) AS x (i, holder, chosen)
        WHERE x.chosen IS NULL OR x.chosen IN (SELECT unnest(v_ins));
        v_pos := v_pos || v_exist;
        v_what := v_what || array_fill('e'::"char", ARRAY[cardinality(v_exist)]);
        v_holder := v_holder || array_fill(NULL::text, ARRAY[cardinality(v_exist)]);
        v_pending := ARRAY(
            SELECT x.i FROM unnest(c_pos, c_chosen) AS x (i, chosen)
            WHERE x.chosen IS NOT NULL AND x.chosen NOT IN (SELECT unnest(v_ins))
              AND x.i NOT IN (SELECT unnest(v_exist)));
    END LOOP;

    -- Link the jobs inserted with dependencies: one edge per dependency,
    -- pending to a live (locked) target, which gets the marker `waited`;
    -- to an archived one, done with its code (one purged since the check
    -- counts as deleted: cancelled, 0), or held with it when the code is
    -- not ok and the waiter's policy is hold (the archived target, locked
    -- above, gets `archive.waited`: a run again takes it back to `jobs`,
    -- and its next end resolves the edge).
    v_new := ARRAY(
        SELECT b.id FROM unnest(p_ids) WITH ORDINALITY AS b (id, i)
        WHERE b.i IN (SELECT x.i FROM unnest(v_pos, v_what) AS x (i, what) WHERE x.what = 'n')
          AND b.i IN (SELECT unnest(p_dep_pos)));
    IF cardinality(v_new) > 0 THEN
        SELECT coalesce(array_agg(b.id), '{}'), coalesce(array_agg(d.dep), '{}'),
               coalesce(array_agg(d.o), '{}'), coalesce(array_agg(j.id IS NOT NULL), '{}'),
               coalesce(array_agg(CASE WHEN j.id IS NULL THEN coalesce(a.code, 'cancelled') END), '{}'),
               coalesce(array_agg(CASE WHEN j.id IS NULL THEN coalesce(a.status, 0) END), '{}'),
               coalesce(array_agg(split_part(p.policy, '+', 1) = 'hold'), '{}')
        INTO l_waiter, l_target, l_o, l_live, l_code, l_status, l_hold
        FROM unnest(p_dep_pos, p_dep_ids) WITH ORDINALITY AS d (pos, dep, o)
        JOIN unnest(p_ids) WITH ORDINALITY AS b (id, i) ON b.i = d.pos
        JOIN unnest(p_policies) WITH ORDINALITY AS p (policy, i) ON p.i = d.pos
        LEFT JOIN jobs j ON j.id = d.dep
        LEFT JOIN archive a ON a.id = d.dep
        WHERE b.id IN (SELECT unnest(v_new));
        INSERT INTO edges (waiter, target, state, code, status)
        SELECT l.waiter, l.target,
               CASE WHEN l.live THEN 'p' WHEN l.hold AND l.code <> 'ok' THEN 'h' ELSE 'd' END,
               l.code, l.status
        FROM unnest(l_waiter, l_target, l_live, l_code, l_status, l_hold)
            AS l (waiter, target, live, code, status, hold);
        UPDATE jobs j SET waited = true
        WHERE j.id IN (SELECT l.target FROM unnest(l_target, l_live) AS l (target, live) WHERE l.live)
          AND j.waited IS NULL;
        UPDATE archive a SET waited = true
        WHERE a.id IN (SELECT l.target FROM unnest(l_target, l_live, l_hold, l_code)
                           AS l (target, live, hold, code)
                       WHERE NOT l.live AND l.hold AND l.code <> 'ok')
          AND a.waited IS NULL;
        -- Per new waiter: its pending count (pending and held edges),
        -- policy, and the first
        -- dependency (in depends_on order) already ended other than ok.
        WITH w AS (
            SELECT l.waiter,
                   count(*) FILTER (WHERE l.live OR (l.hold AND l.code <> 'ok'))::int AS pending,
                   (array_agg(l.target ORDER BY l.o) FILTER (WHERE NOT l.live AND l.code <> 'ok'))[1] AS fail,
                   (array_agg(l.code ORDER BY l.o) FILTER (WHERE NOT l.live AND l.code <> 'ok'))[1] AS failcode,
                   min(p.policy) AS policy
            FROM unnest(l_waiter, l_target, l_o, l_live, l_code, l_hold)
                AS l (waiter, target, o, live, code, hold)
            JOIN unnest(p_ids) WITH ORDINALITY AS b (id, i) ON b.id = l.waiter
            JOIN unnest(p_policies) WITH ORDINALITY AS p (policy, i) ON p.i = b.i
            GROUP BY l.waiter
        ), c AS (
            DELETE FROM jobs j USING w
            WHERE j.id = w.waiter AND split_part(w.policy, '+', 1) = 'cancel' AND w.fail IS NOT NULL
            RETURNING j.id, j.jobtype, j.data, j.priority, j.attempts, j.create_dt, j.tags,
                      j.history, j.traceparent, j.tracestate, j.unique_key, j.repeat_rule,
                      w.pending, w.policy, w.fail, w.failcode
        ), ca AS (
            INSERT INTO archive (id, jobtype, data, priority, dt, attempts, create_dt,
                                 done_dt, code, status, output, tags, history,
                                 claimed_at, claimed_by, traceparent, tracestate, unique_key,
                                 repeat_rule, pending, dep_policy)
            SELECT id, jobtype, data, priority, p_horizon, attempts, create_dt, p_now,
                   'cancelled', 0,
                   convert_to('[jobstore] dependency ' || fail || ' ended ' || failcode || E'\n', 'UTF8'),
                   tags, jobstore_push_event(history, jsonb_build_object(
                       'at', p_now, 'attempt', attempts, 'event', 'cancelled')),
                   NULL, NULL, traceparent, tracestate, unique_key, repeat_rule, pending, policy
            FROM c
            ON CONFLICT (id) DO NOTHING
        )
        UPDATE jobs j
        SET pending = w.pending, dep_policy = w.policy,
            lock = CASE WHEN w.pending > 0 THEN '__blocked' ELSE '' END,
            dt = CASE WHEN w.pending > 0 THEN j.dt + 400000000000000 ELSE j.dt END
        FROM w
        WHERE j.id = w.waiter AND NOT (split_part(w.policy, '+', 1) = 'cancel' AND w.fail IS NOT NULL);
    END IF;

    -- ReplaceData: a free live holder gets the payload and `edited`, in
    -- holder id order (as every statement locking jobs by id), the
    -- duplicates of one holder in batch order (the last payload stays).
    FOR r IN
        SELECT x.i, x.holder, b.data
        FROM unnest(v_pos, v_what, v_holder) AS x (i, what, holder)
        JOIN unnest(p_datas, p_replace) WITH ORDINALITY AS b (data, replace, i) ON b.i = x.i
        WHERE x.what = 'd' AND b.replace
        ORDER BY x.holder, x.i
    LOOP
        UPDATE jobs j
        SET data = r.data,
            claimed_at = NULL,
            history = jobstore_push_claim_event(j.history, j.claimed_at, j.lock, j.attempts,
                jsonb_build_object('at', p_now, 'attempt', j.attempts, 'event', 'edited'))
        WHERE j.id = r.holder AND j.lock = '';
        IF FOUND THEN
            v_replaced := v_replaced || r.i;
        END IF;
    END LOOP;

    -- Jobtypes with a job added free (blocked and cancelled ones are not
    -- new work).
    PERFORM pg_notify(p_channel, d.jobtype)
    FROM (SELECT DISTINCT j.jobtype FROM jobs j
          WHERE j.id IN (SELECT b.id FROM unnest(p_ids) WITH ORDINALITY AS b (id, i)
                         WHERE b.i IN (SELECT x.i FROM unnest(v_pos, v_what) AS x (i, what)
                                       WHERE x.what = 'n'))
            AND j.lock = '') d;

    RETURN QUERY
    SELECT x.i, x.what, coalesce(x.holder, f.dep), x.i IN (SELECT unnest(v_replaced)), f.k
    FROM unnest(v_pos, v_what, v_holder) AS x (i, what, holder)
    LEFT JOIN unnest(v_ref_pos, v_ref_k, v_ref_dep) AS f (pos, k, dep)
        ON x.what = 'r' AND f.pos = x.i;
END
$fn$;
