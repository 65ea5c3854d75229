-- The jobs of many ids in any state: live jobs, then archived ones, with
-- the columns of `get_job.sql`. $1 ids (validated: each once). A job moves
-- between `jobs` and `archive` in one transaction, so the statement's one
-- snapshot sees each id in one table at most; unknown ids match nothing.
SELECT id, jobtype, data, priority, dt, lock, attempts, create_dt,
       NULL::int8 AS done_dt, code, status, output, cancel_requested, tags,
       history::text, claimed_at, lock AS claimed_by, traceparent, tracestate,
       unique_key, repeat_rule, pending, dep_policy
FROM jobs WHERE id = ANY($1::text[])
UNION ALL
SELECT id, jobtype, data, priority, dt, '__done', attempts, create_dt,
       done_dt, code, status, output, false, tags, history::text,
       claimed_at, claimed_by, traceparent, tracestate, unique_key, repeat_rule, pending, dep_policy
FROM archive WHERE id = ANY($1::text[])
