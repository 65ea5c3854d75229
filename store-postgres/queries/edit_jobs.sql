-- Edits free (waiting or scheduled) and blocked jobs (a blocked job's due
-- time is its not-before time: dt = 400000000000000 + it, and it is
-- never due here), each as its own entry says, given
-- as parallel arrays (each id once): $1 ids, $2 priorities, $3 dts, $4
-- payloads; NULL leaves the field as it is. $5 now, $6 channel. The jobs
-- are locked first, in id order like every statement that locks jobs by
-- id (so two of them never wait on each other in a cycle), and each is
-- re-checked on its newest version (lock = ''), so a job claimed
-- meanwhile is left alone. Each job edited
-- gets an `edited` event in the same row change (after its pending claim,
-- should a free job have one; none does: a release that frees a job
-- stores its claim). Returns the ids
-- edited; notifies the channel once per jobtype with an edited job due at
-- $5.
WITH e AS (
    SELECT j.id, u.priority, u.dt, u.data
    FROM unnest($1::text[], $2::int4[], $3::int8[], $4::bytea[])
        AS u (id, priority, dt, data)
    JOIN jobs j ON j.id = u.id
    WHERE j.lock IN ('', '__blocked')
    ORDER BY j.id
    FOR UPDATE OF j
), edited AS (
    UPDATE jobs j
    SET priority = coalesce(e.priority, j.priority),
        dt = CASE WHEN e.dt IS NULL THEN j.dt
                  WHEN j.lock = '__blocked' THEN e.dt + 400000000000000
                  ELSE e.dt END,
        data = coalesce(e.data, j.data),
        claimed_at = NULL,
        history = jobstore_push_claim_event(j.history, j.claimed_at, j.lock, j.attempts,
            jsonb_build_object('at', $5::int8, 'attempt', j.attempts, 'event', 'edited'))
    FROM e
    WHERE j.id = e.id AND j.lock IN ('', '__blocked')
    RETURNING j.id, j.jobtype, j.dt
), notified AS (
    SELECT count(pg_notify($6, d.jobtype)) AS n
    FROM (SELECT DISTINCT jobtype FROM edited WHERE dt <= $5) d
)
SELECT edited.id FROM edited, notified
