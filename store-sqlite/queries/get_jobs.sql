-- ?1 JSON array of ids: the columns of get_job.sql for each id found
-- (one primary-key lookup per id)
SELECT id, jobtype, priority, dt, lock, attempts, create_dt, done_dt, result_code, result_status, result_output, cancel_requested, data, tags, history, claimed_at, claimed_by, traceparent, tracestate, unique_key, repeat, pending, dep_policy
FROM jobs WHERE id IN (SELECT value FROM json_each(?1))
