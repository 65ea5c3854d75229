-- Archives free (waiting or scheduled) jobs as cancelled.
-- $1 ids, $2 now (done_dt), $3 dt (now + horizon).
WITH done AS (
    DELETE FROM jobs
    WHERE id = ANY($1::text[]) AND lock = ''
    RETURNING id, jobtype, data, priority, attempts, create_dt
), archived AS (
    INSERT INTO archive (id, jobtype, data, priority, dt, attempts, create_dt,
                         done_dt, code, status, output)
    SELECT id, jobtype, data, priority, $3, attempts, create_dt, $2, 'cancelled', 0, ''
    FROM done
    -- add_jobs never lets an archived id back into jobs; should one get
    -- there anyway, the newer result replaces the older instead of failing.
    ON CONFLICT (id) DO UPDATE SET
        jobtype = EXCLUDED.jobtype, data = EXCLUDED.data,
        priority = EXCLUDED.priority, dt = EXCLUDED.dt,
        attempts = EXCLUDED.attempts, create_dt = EXCLUDED.create_dt,
        done_dt = EXCLUDED.done_dt, code = EXCLUDED.code,
        status = EXCLUDED.status, output = EXCLUDED.output
)
SELECT id FROM done
