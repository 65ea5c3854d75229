-- Runs archived jobs again: moves each from `archive` back to `jobs`, free,
-- with dt = $2 (now + delay), attempts 0, no cancel mark, and its result
-- kept as the job's last result (code, status, output), its tags, and its
-- history with a `rerun` event (delay_ms = dt - now, attempt 0), and its
-- trace context. $1 ids,
-- $2 dt, $3 channel, $4 now. Returns the ids run again; notifies the
-- channel once per jobtype. A job archived with its claim pending
-- (claimed_at set) first gets the `claimed` event (claimed_at, claimed_by,
-- attempts) and the `archived` event (done_dt, claimed_by, attempts, code,
-- status) its readers showed stored, then `rerun`; the job goes back with
-- no pending claim.
--
-- The archived rows are locked first, in id order like every statement
-- that locks archived jobs by id (a purge skips rows locked here), then
-- deleted: a purge deleting the same row at once makes one of the two find
-- it gone, so a job is purged or run again, never both. No ON CONFLICT: add_jobs never lets an id be
-- in both tables (an add racing this insert waits for it, then finds the id
-- in `archive` or in `jobs`), so a conflict would be an error, never a
-- lost job.
WITH la AS (
    SELECT id FROM archive WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE
), gone AS (
    DELETE FROM archive a
    USING la
    WHERE a.id = la.id
    RETURNING a.id, a.jobtype, a.data, a.priority, a.create_dt, a.code, a.status, a.output,
              a.tags, a.history, a.attempts, a.done_dt, a.claimed_at, a.claimed_by,
              a.traceparent, a.tracestate
), back AS (
    INSERT INTO jobs (id, jobtype, data, priority, dt, lock, attempts, create_dt,
                      cancel_requested, code, status, output, tags, history,
                      traceparent, tracestate)
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
           traceparent, tracestate
    FROM gone
    RETURNING id, jobtype
), notified AS (
    SELECT count(pg_notify($3, d.jobtype)) AS n
    FROM (SELECT DISTINCT jobtype FROM back) d
)
SELECT back.id FROM back, notified
