-- One page of scheduled jobs (free, dt > now), due first: dt, id.
-- Parameters as list_running.sql (the key $5, $6 is at least (now + 1, ''),
-- so (dt, id) > key implies dt > now). `jobs_free` is ordered by (jobtype,
-- priority DESC, dt, id), so each (jobtype, priority) is one range in
-- (dt, id) order: the jobtypes come from a skip scan of `jobs_free`, the
-- priorities of each from a second skip scan (one descent per distinct
-- priority, the greatest below the last), and per (jobtype, priority) the
-- range after the key is read in order and stopped by the LIMIT; the merge
-- keeps $4. No index of its own: every add and retry
-- would pay for it.
WITH RECURSIVE skip (jobtype) AS (
    (SELECT jobtype FROM jobs
     WHERE lock = '' AND jobtype >= $2 AND jobtype < $3
     ORDER BY jobtype LIMIT 1)
    UNION ALL
    SELECT (SELECT j.jobtype FROM jobs j
            WHERE j.lock = '' AND j.jobtype > s.jobtype AND j.jobtype < $3
            ORDER BY j.jobtype LIMIT 1)
    FROM skip s
    WHERE s.jobtype IS NOT NULL
), types (jobtype) AS (
    SELECT unnest($1::text[])
    UNION ALL
    SELECT jobtype FROM skip WHERE jobtype IS NOT NULL
), prios (jobtype, priority) AS (
    SELECT t.jobtype,
           (SELECT j.priority FROM jobs j
            WHERE j.jobtype = t.jobtype AND j.lock = ''
            ORDER BY j.priority DESC LIMIT 1)
    FROM types t
    UNION ALL
    SELECT p.jobtype,
           (SELECT j.priority FROM jobs j
            WHERE j.jobtype = p.jobtype AND j.lock = '' AND j.priority < p.priority
            ORDER BY j.priority DESC LIMIT 1)
    FROM prios p
    WHERE p.priority IS NOT NULL
)
SELECT s.id, s.jobtype, s.data, s.priority, s.dt, s.lock, s.attempts, s.create_dt,
       NULL::int8 AS done_dt, s.code, s.status, s.output, s.cancel_requested,
       s.tags, s.history::text, s.claimed_at, s.lock AS claimed_by,
       s.traceparent, s.tracestate, s.unique_key, s.repeat_rule, s.pending, s.dep_policy
FROM prios p
CROSS JOIN LATERAL (
    SELECT id, jobtype, CASE WHEN $9 THEN data ELSE '' END AS data, priority, dt, lock,
           attempts, create_dt, code, status, output, cancel_requested,
           tags, history, claimed_at, traceparent, tracestate, unique_key, repeat_rule, pending, dep_policy
    FROM jobs
    WHERE jobtype = p.jobtype AND lock = '' AND priority = p.priority
      AND (dt, id) > ($5, $6)
      AND create_dt >= $7 AND create_dt < $8
      AND ($10::text IS NULL OR $10 = ANY (tags))
    ORDER BY dt, id
    LIMIT $4
) s
WHERE p.priority IS NOT NULL
ORDER BY s.dt, s.id
LIMIT $4
