-- Unblocks the blocked jobs of $1 (ids), whatever their edges wait for,
-- in one statement. $2 now, $3 channel. Each job is locked first, in id
-- order like every statement that locks jobs by id, with FOR UPDATE,
-- which re-checks `lock = '__blocked'` on its newest version: a job that
-- a dependency's end unblocked or cancelled meanwhile (committed while
-- this statement waited on its row) is left out, so it is unblocked
-- exactly once. Its pending and held edges become skipped ('s', code
-- and status NULL: the targets' ends no longer reach it; an edge that
-- such an end made done meanwhile is re-checked and left done), and the
-- job becomes free: pending 0, dt = max(not_before, now) (a blocked row
-- stores 400000000000000 + its not-before time), the event `unblocked`.
-- Jobs in other states and unknown ids are untouched. Returns the ids
-- unblocked; notifies the channel once per jobtype.
WITH l AS (
    SELECT id FROM jobs
    WHERE id = ANY($1::text[]) AND lock = '__blocked'
    ORDER BY id
    FOR UPDATE
), skipped AS (
    UPDATE edges g
    SET state = 's', code = NULL, status = NULL
    FROM l
    WHERE g.waiter = l.id AND g.state IN ('p', 'h')
), freed AS (
    UPDATE jobs j
    SET lock = '',
        pending = 0,
        dt = greatest(j.dt - 400000000000000, $2::int8),
        history = jobstore_push_event(j.history, jsonb_build_object(
            'at', $2::int8, 'attempt', j.attempts, 'event', 'unblocked'))
    FROM l
    WHERE j.id = l.id
    RETURNING j.id, j.jobtype
), notified AS (
    SELECT count(pg_notify($3, d.jobtype)) AS n
    FROM (SELECT DISTINCT jobtype FROM freed) d
)
SELECT freed.id FROM freed, notified
