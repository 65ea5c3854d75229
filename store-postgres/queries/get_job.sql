-- A job in any state: live jobs first, then the archive. $1 id.
-- Columns as every statement returning jobs: id, jobtype, data, priority,
-- dt, lock, attempts, create_dt, done_dt, code, status, output,
-- cancel_requested, tags, history (as JSON text), claimed_at, claimed_by
-- (the pending claim: when, and who; NULL claimed_at: none), traceparent,
-- tracestate (its trace context; NULL traceparent: none), unique_key,
-- repeat_rule (NULL: none) (a live job's code/status/output are its last
-- result if it was run again or repeated, else NULL).
SELECT id, jobtype, data, priority, dt, lock, attempts, create_dt,
       NULL::int8 AS done_dt, code, status, output, cancel_requested, tags,
       history::text, claimed_at, lock AS claimed_by, traceparent, tracestate,
       unique_key, repeat_rule, pending, dep_policy
FROM jobs WHERE id = $1
UNION ALL
SELECT id, jobtype, data, priority, dt, '__done', attempts, create_dt,
       done_dt, code, status, output, false, tags, history::text,
       claimed_at, claimed_by, traceparent, tracestate, unique_key, repeat_rule, pending, dep_policy
FROM archive WHERE id = $1
LIMIT 1
