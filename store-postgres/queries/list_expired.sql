-- One page of expired jobs (locked, dt <= now) in claim order: priority
-- DESC, dt, id. Parameters as list_waiting.sql. The jobtypes come from a
-- skip scan of `jobs_leased`; per jobtype, its range dt <= now of
-- `jobs_leased` (exactly the expired leases, normally few) is read whole
-- and sorted, as claims do, then the merge keeps $5.
WITH RECURSIVE skip (jobtype) AS (
    (SELECT jobtype FROM jobs
     WHERE lock <> '' AND jobtype >= $2 AND jobtype < $3
     ORDER BY jobtype LIMIT 1)
    UNION ALL
    SELECT (SELECT j.jobtype FROM jobs j
            WHERE j.lock <> '' AND j.jobtype > s.jobtype AND j.jobtype < $3
            ORDER BY j.jobtype LIMIT 1)
    FROM skip s
    WHERE s.jobtype IS NOT NULL
), types (jobtype) AS (
    SELECT unnest($1::text[])
    UNION ALL
    SELECT jobtype FROM skip WHERE jobtype IS NOT NULL
)
SELECT p.id, p.jobtype, p.data, p.priority, p.dt, p.lock, p.attempts, p.create_dt,
       NULL::int8 AS done_dt, p.code, p.status, p.output, p.cancel_requested,
       p.tags, p.history::text, p.claimed_at, p.lock AS claimed_by,
       p.traceparent, p.tracestate, p.unique_key, p.repeat_rule, p.pending, p.dep_policy
FROM types t
CROSS JOIN LATERAL (
    SELECT id, jobtype, CASE WHEN $11 THEN data ELSE '' END AS data, priority, dt, lock,
           attempts, create_dt, code, status, output, cancel_requested,
           tags, history, claimed_at, traceparent, tracestate, unique_key, repeat_rule, pending, dep_policy
    FROM jobs
    WHERE jobtype = t.jobtype AND lock <> '' AND dt <= $4
      AND (priority < $6::int8 OR (priority = $6::int8 AND (dt, id) > ($7, $8)))
      AND create_dt >= $9 AND create_dt < $10
      AND ($12::text IS NULL OR $12 = ANY (tags))
    ORDER BY priority DESC, dt, id
    LIMIT $5
) p
ORDER BY p.priority DESC, p.dt, p.id
LIMIT $5
