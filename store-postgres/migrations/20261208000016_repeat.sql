-- jobstore schema, version 16: repeating jobs. See README.md ("Repeating
-- jobs").
--
-- A job added with a repeat rule keeps it as text (Repeat::to_text: the
-- rule alone in UTC, else `TZ=<zone> <rule>`) in `repeat_rule`, in `jobs`
-- and in `archive` alike: every statement that moves a row between the
-- tables copies it, and every read returns it. The store never reads the
-- rule. A repeating job's last result, while it waits for its next run,
-- is the live row's `code`, `status`, `output` (migration 6). Plain jobs
-- have NULL rules: the columns have no default, so adding them rewrites
-- no row, and no index holds them.
ALTER TABLE jobs ADD COLUMN repeat_rule text;
ALTER TABLE archive ADD COLUMN repeat_rule text;

-- A batch without a key and with at least one rule: migration 13's add_jobs
-- with one more array, p_repeats (NULL where a job has none; the whole
-- array may be NULL, unnest pads it). Migration 13's function stays beside
-- it (a different signature) for batches without a rule: their statement
-- is unchanged, and a daemon of the previous version running on this
-- schema goes on adding jobs.
CREATE FUNCTION add_jobs(
    p_ids text[], p_jobtypes text[], p_datas bytea[], p_priorities int4[], p_dts int8[],
    p_tags text[], p_traceparents text[], p_tracestates text[], p_repeats text[],
    p_now int8, p_channel text
) RETURNS SETOF text
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
    v_inserted text[];
    v_types text[];
    v_archived text[];
BEGIN
    WITH ins AS (
        INSERT INTO jobs (id, jobtype, data, priority, dt, lock, attempts, create_dt,
                          tags, traceparent, tracestate, repeat_rule)
        SELECT t.id, t.jobtype, t.data, t.priority, t.dt, '', 0, p_now,
               coalesce(string_to_array(nullif(t.tags, ''), ' '), '{}'),
               t.traceparent, t.tracestate, t.repeat_rule
        FROM unnest(p_ids, p_jobtypes, p_datas, p_priorities, p_dts, p_tags,
                    p_traceparents, p_tracestates, p_repeats)
            AS t (id, jobtype, data, priority, dt, tags, traceparent, tracestate, repeat_rule)
        ON CONFLICT (id) DO NOTHING
        RETURNING jobs.id, jobs.jobtype
    )
    SELECT coalesce(array_agg(ins.id), '{}'), coalesce(array_agg(DISTINCT ins.jobtype), '{}')
    INTO v_inserted, v_types
    FROM ins;

    -- As in version 1: an id archived meanwhile counts as existing (see
    -- the first migration).
    SELECT coalesce(array_agg(a.id), '{}') INTO v_archived
    FROM archive a WHERE a.id = ANY (v_inserted);
    IF cardinality(v_archived) > 0 THEN
        DELETE FROM jobs j WHERE j.id = ANY (v_archived);
        v_inserted := ARRAY(SELECT x FROM unnest(v_inserted) x WHERE x <> ALL (v_archived));
    END IF;

    PERFORM pg_notify(p_channel, t) FROM unnest(v_types) t;

    RETURN QUERY SELECT unnest(v_inserted);
END
$fn$;

-- A batch with at least one key: migration 15's add_unique_jobs with one
-- more array, p_repeats (after p_tracestates, as in add_jobs; NULL where a
-- job has none, or the whole array NULL), written by its insert. Only the
-- insert changed. Migration 15's function stays beside it (a different
-- signature) for a daemon of the previous version.
CREATE FUNCTION add_unique_jobs(
    p_ids text[], p_jobtypes text[], p_datas bytea[], p_priorities int4[], p_dts int8[],
    p_tags text[], p_traceparents text[], p_tracestates text[], p_repeats text[],
    p_keys text[], p_windows int8[], p_replace bool[], p_now int8, p_channel text
) RETURNS TABLE (o_pos int, o_what "char", o_holder text, o_replaced bool)
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
BEGIN
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
            SELECT b.i, b.id, b.jobtype, b.ukey, b.win
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
            SELECT t.i, t.id, t.jobtype, t.ukey, h.live, h.arch,
                   coalesce(h.arch IS NOT NULL AND t.win IS NOT NULL
                            AND h.done_dt > p_now - t.win, false) AS covered
            FROM t LEFT JOIN h ON h.jobtype = t.jobtype AND h.ukey = t.ukey
        ), f AS (
            SELECT c.*,
                   min(c.i) FILTER (WHERE NOT c.covered)
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
                        WHEN f.firstpos IS NULL OR f.i < f.firstpos THEN f.arch
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
               v_what || coalesce(array_agg(CASE WHEN x.i = x.chosen THEN 'n' ELSE 'd' END::"char"), '{}'),
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

    PERFORM pg_notify(p_channel, t) FROM (SELECT DISTINCT t FROM unnest(v_types) AS t) d;

    RETURN QUERY
    SELECT x.i, x.what, x.holder, x.i IN (SELECT unnest(v_replaced))
    FROM unnest(v_pos, v_what, v_holder) AS x (i, what, holder);
END
$fn$;
