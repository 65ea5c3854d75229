-- Runs archived jobs again: moves each from `archive` back to `jobs`, free,
-- with dt = $2 (now + delay), attempts 0, no cancel mark, and its result
-- kept as the job's last result (code, status, output), its tags, and its
-- history with a `rerun` event (delay_ms = dt - now, attempt 0), and its
-- trace context, unique key and repeat rule. $1 ids,
-- $2 dt, $3 channel, $4 now. Returns the ids run again; notifies the
-- channel once per jobtype. A job archived with its claim pending
-- (claimed_at set) first gets the `claimed` event (claimed_at, claimed_by,
-- attempts) and the `archived` event (done_dt, claimed_by, attempts, code,
-- status) its readers showed stored, then `rerun`; the job goes back with
-- no pending claim.
--
-- The archived rows are locked first, in id order like every statement
-- that locks archived jobs by id (a purge skips rows locked here), and read
-- as locked (FOR UPDATE returns their newest version; a row a purge or a
-- delete removed meanwhile is not returned), then inserted into `jobs`,
-- then deleted from `archive`: only the rows inserted are deleted, so a
-- purge deleting the same row at once makes one of the two find it gone,
-- and a job is purged or run again, never both.
--
-- Unique keys: the insert has ON CONFLICT DO NOTHING, so a job whose key a
-- live job of its jobtype holds (jobs_unique) is not inserted, stays in
-- `archive` and is not returned. The rows are inserted in the order of $1,
-- so of two archived jobs of one key in one call the first listed takes it
-- and the second conflicts with it (as MemoryStore walks the ids). An id
-- conflict cannot happen (add_jobs never lets an id be in both tables);
-- should one, the job would stay archived, never be lost.
--
-- Dependencies: a job takes back its `pending` and `dep_policy`, and the
-- marker `waited` when edges held on it wait for its next end (set on its
-- archived row by jobstore_end_edges or add_flow_jobs, NULL otherwise):
-- that end takes the flow path and resolves them.
WITH la AS (
    SELECT a.id, a.jobtype, a.data, a.priority, a.create_dt, a.code, a.status, a.output,
           a.tags, a.history, a.attempts, a.done_dt, a.claimed_at, a.claimed_by,
           a.traceparent, a.tracestate, a.unique_key, a.repeat_rule, a.pending, a.dep_policy,
           a.waited, o.n
    FROM archive a
    JOIN unnest($1::text[]) WITH ORDINALITY AS o (id, n) ON a.id = o.id
    ORDER BY a.id
    FOR UPDATE OF a
), back AS (
    INSERT INTO jobs (id, jobtype, data, priority, dt, lock, attempts, create_dt,
                      cancel_requested, code, status, output, tags, history,
                      traceparent, tracestate, unique_key, repeat_rule, pending, dep_policy,
                      waited)
    SELECT id, jobtype, data, priority, $2, '', 0, create_dt, false, code, status, output,
           tags,
           CASE WHEN claimed_at IS NULL
                THEN jobstore_push_event(history, jsonb_build_object(
                    'at', $4::int8, 'attempt', 0, 'event', 'rerun', 'delay_ms', $2::int8 - $4::int8))
                ELSE jobstore_push_event(
                    jobstore_push_claim_event(history, claimed_at, claimed_by, attempts,
                        jsonb_build_object('at', done_dt, 'by', claimed_by, 'attempt', attempts,
                                           'event', 'archived', 'code', code, 'status', status)),
                    jsonb_build_object('at', $4::int8, 'attempt', 0, 'event', 'rerun',
                                       'delay_ms', $2::int8 - $4::int8))
                END,
           traceparent, tracestate, unique_key, repeat_rule, pending, dep_policy, waited
    FROM la
    ORDER BY n
    ON CONFLICT DO NOTHING
    RETURNING id, jobtype
), gone AS (
    DELETE FROM archive a
    USING back
    WHERE a.id = back.id
    RETURNING a.id
), notified AS (
    SELECT count(pg_notify($3, d.jobtype)) AS n
    FROM (SELECT DISTINCT jobtype FROM back) d
)
SELECT gone.id FROM gone, notified
