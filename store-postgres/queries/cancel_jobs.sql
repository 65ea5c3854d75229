-- Archives free (waiting or scheduled) jobs as cancelled and marks locked
-- (running or expired) ones. $1 ids, $2 now (done_dt), $3 dt (now +
-- horizon). Returns (id, 'c') per job archived, (id, 'm') per job marked.
--
-- Each row is locked first, in id order like every statement that locks
-- jobs by id (so two of them never wait on each other in a cycle), with
-- FOR UPDATE, which reads its newest version,
-- so the free/locked decision and the change are made on the same version:
-- a job claimed or released meanwhile is decided as it is now. The two
-- data-modifying CTEs touch disjoint rows. Each job changed gets one
-- event in the same row change: `cancelled` (in the row the archive
-- receives) or `cancel_requested` (every marking), after its pending claim
-- (if any: a locked job's first marking) is stored as a `claimed` event
-- and cleared (jobstore_push_claim_event). An archived job keeps its unique
-- key (the delete from `jobs` frees it) and its repeat rule.
--
-- A blocked job is cancelled as a free one (it keeps its edges and its
-- pending count). A free or blocked job with waiters (`waited`) is
-- archived here only with $4 (the flow path: this statement in a
-- transaction followed by jobstore_end_edges); without it, it comes back
-- as (id, 'f'), untouched.
WITH l AS (
    SELECT id, lock, waited FROM jobs WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE
), done AS (
    DELETE FROM jobs j
    USING l
    WHERE j.id = l.id AND l.lock IN ('', '__blocked') AND ($4 OR l.waited IS NULL)
    RETURNING j.id, j.jobtype, j.data, j.priority, j.attempts, j.create_dt, j.tags, j.history,
              j.claimed_at, j.lock, j.traceparent, j.tracestate, j.unique_key,
              j.repeat_rule, j.pending, j.dep_policy
), marked AS (
    UPDATE jobs j
    SET cancel_requested = true,
        claimed_at = NULL,
        history = jobstore_push_claim_event(j.history, j.claimed_at, j.lock, j.attempts,
            jsonb_build_object('at', $2::int8, 'attempt', j.attempts, 'event', 'cancel_requested'))
    FROM l
    WHERE j.id = l.id AND l.lock NOT IN ('', '__blocked')
    RETURNING j.id
), archived AS (
    INSERT INTO archive (id, jobtype, data, priority, dt, attempts, create_dt,
                         done_dt, code, status, output, tags, history,
                         claimed_at, claimed_by, traceparent, tracestate, unique_key,
                         repeat_rule, pending, dep_policy)
    SELECT id, jobtype, data, priority, $3, attempts, create_dt, $2, 'cancelled', 0, '',
           tags, jobstore_push_claim_event(history, claimed_at, lock, attempts,
               jsonb_build_object('at', $2::int8, 'attempt', attempts, 'event', 'cancelled')),
           NULL, NULL, traceparent, tracestate, unique_key, repeat_rule, pending, dep_policy
    FROM done
    -- add_jobs never lets an archived id back into jobs; should one get
    -- there anyway, the newer result replaces the older instead of failing.
    ON CONFLICT (id) DO UPDATE SET
        jobtype = EXCLUDED.jobtype, data = EXCLUDED.data,
        priority = EXCLUDED.priority, dt = EXCLUDED.dt,
        attempts = EXCLUDED.attempts, create_dt = EXCLUDED.create_dt,
        done_dt = EXCLUDED.done_dt, code = EXCLUDED.code,
        status = EXCLUDED.status, output = EXCLUDED.output,
        tags = EXCLUDED.tags, history = EXCLUDED.history,
        claimed_at = EXCLUDED.claimed_at, claimed_by = EXCLUDED.claimed_by,
        traceparent = EXCLUDED.traceparent, tracestate = EXCLUDED.tracestate,
        unique_key = EXCLUDED.unique_key, repeat_rule = EXCLUDED.repeat_rule,
        pending = EXCLUDED.pending, dep_policy = EXCLUDED.dep_policy
)
SELECT id, 'c' AS what FROM done
UNION ALL
SELECT id, 'm' FROM marked
UNION ALL
SELECT id, 'f' FROM l WHERE NOT $4 AND l.lock IN ('', '__blocked') AND l.waited IS NOT NULL
