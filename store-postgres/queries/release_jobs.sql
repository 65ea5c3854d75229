-- Lets go of the jobs locked by $2, each as its own entry says, in one
-- statement. The entries come as parallel arrays, one element per job
-- (each id once): $1 ids, $3 kinds ('r' retry, 'u' unget, 'a' archive,
-- 'd' delete), $4 new dt (retry: now + delay, unget: now; NULL otherwise),
-- $5 result codes (archive; NULL otherwise), $6 statuses (archive: the
-- result's; retry: the run's, or NULL), $7 outputs (archive; NULL
-- otherwise).
-- $8 now (done_dt), $9 now + 1000 years (dt of archived jobs), $10 channel.
--
-- Retry and unget update the job in place (clearing its cancel mark) and
-- notify the channel once per jobtype freed; archive moves it to `archive` with its own result;
-- delete removes it. The entries are joined to their jobs by primary key
-- and the jobs locked first, in id order like every statement that locks
-- jobs by id (so two of them never wait on each other in a cycle); a job
-- is re-checked on its newest version (`lock = $2`) as it is locked, and
-- only the jobs locked change. (One CTE carries both the entries and the
-- lock: joining a second CTE of the locked ids to the entries planned a
-- nested loop over CTE scans, 100 x 100 rows per release of 100.) The
-- two data-modifying CTEs touch disjoint rows: an id is listed once, with
-- one kind. Returns the ids released.
--
-- Every job changed gets one event (by $2, at $8), appended to its history
-- in the same row change: `retried` (delay_ms = dt - now, and the run's
-- status if given), `handed_back` (attempts after the decrement) or
-- `archived` (code, status), the last in the row the archive receives. A
-- delete records nothing.
WITH r AS (
    SELECT j.id, e.kind, e.dt, e.code, e.status, e.output
    FROM unnest($1::text[], $3::text[], $4::int8[], $5::text[], $6::int4[], $7::bytea[])
        AS e (id, kind, dt, code, status, output)
    JOIN jobs j ON j.id = e.id
    WHERE j.lock = $2
    ORDER BY j.id
    FOR UPDATE OF j
), freed AS (
    UPDATE jobs j
    SET lock = '',
        dt = r.dt,
        cancel_requested = false,
        attempts = CASE WHEN r.kind = 'u' THEN greatest(j.attempts - 1, 0) ELSE j.attempts END,
        history = jobstore_push_event(j.history, CASE WHEN r.kind = 'u'
            THEN jsonb_build_object('at', $8::int8, 'by', $2::text,
                                    'attempt', greatest(j.attempts - 1, 0), 'event', 'handed_back')
            ELSE jsonb_strip_nulls(jsonb_build_object('at', $8::int8, 'by', $2::text,
                                    'attempt', j.attempts, 'event', 'retried',
                                    'delay_ms', r.dt - $8::int8, 'status', r.status))
            END)
    FROM r
    WHERE j.id = r.id AND r.kind IN ('r', 'u') AND j.lock = $2
    RETURNING j.id, j.jobtype
), gone AS (
    DELETE FROM jobs j
    USING r
    WHERE j.id = r.id AND r.kind IN ('a', 'd') AND j.lock = $2
    RETURNING j.id, j.jobtype, j.data, j.priority, j.attempts, j.create_dt,
              j.tags, j.history, r.kind, r.code, r.status, r.output
), archived AS (
    INSERT INTO archive (id, jobtype, data, priority, dt, attempts, create_dt,
                         done_dt, code, status, output, tags, history)
    SELECT id, jobtype, data, priority, $9, attempts, create_dt, $8, code, status, output,
           tags, jobstore_push_event(history, jsonb_build_object(
               'at', $8::int8, 'by', $2::text, 'attempt', attempts, 'event', 'archived',
               'code', code, 'status', status))
    FROM gone
    WHERE kind = 'a'
    -- add_jobs never lets an archived id back into jobs; should one get
    -- there anyway, the newer result replaces the older instead of failing.
    ON CONFLICT (id) DO UPDATE SET
        jobtype = EXCLUDED.jobtype, data = EXCLUDED.data,
        priority = EXCLUDED.priority, dt = EXCLUDED.dt,
        attempts = EXCLUDED.attempts, create_dt = EXCLUDED.create_dt,
        done_dt = EXCLUDED.done_dt, code = EXCLUDED.code,
        status = EXCLUDED.status, output = EXCLUDED.output,
        tags = EXCLUDED.tags, history = EXCLUDED.history
), notified AS (
    SELECT count(pg_notify($10, d.jobtype)) AS n
    FROM (SELECT DISTINCT jobtype FROM freed) d
)
SELECT freed.id FROM freed, notified
UNION ALL
SELECT id FROM gone
