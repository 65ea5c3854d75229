-- One page of blocked jobs (lock '__blocked', dt = 400000000000000 +
-- not-before) by not-before time: dt, id; the running template
-- (list_running.sql) over the blocked range of `jobs_leased`, past every
-- lease. The key ($5, $6) is the cursor's stored (dt, id), or
-- (400000000000000, '') on the first page.
-- $1 jobtypes (text[], for an exact list; NULL otherwise), $2, $3 the
-- jobtype range [from, to) when $1 is NULL (as in list_waiting.sql), $4
-- rows to return (the page's limit + 1), $5, $6 the key to start after:
-- the cursor's (dt, id) or (now + 1, ''), whichever is greater, so that
-- (dt, id) > key also means dt > now, and the scan starts at the key; $7,
-- $8 the created range [from, to), $9 whether to return payloads, $10
-- the tag a job must carry (NULL: any job; jobs without it are passed
-- over along the index order).
--
-- The jobtypes come from a skip scan of `jobs_leased`; per jobtype, its
-- range of `jobs_leased` after the key, read in dt order (jobs of one dt,
-- such as one claim's batch, sorted by id) and stopped by the LIMIT; the
-- merge keeps $4.
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
    SELECT id, jobtype, CASE WHEN $9 THEN data ELSE '' END AS data, priority, dt, lock,
           attempts, create_dt, code, status, output, cancel_requested,
           tags, history, claimed_at, traceparent, tracestate, unique_key, repeat_rule, pending, dep_policy
    FROM jobs
    WHERE jobtype = t.jobtype AND lock <> '' AND (dt, id) > ($5, $6)
      AND lock = '__blocked'
      AND create_dt >= $7 AND create_dt < $8
      AND ($10::text IS NULL OR $10 = ANY (tags))
    ORDER BY dt, id
    LIMIT $4
) p
ORDER BY p.dt, p.id
LIMIT $4
