-- One page of waiting jobs (free, dt <= now) in claim order: priority
-- DESC, dt, id. Parameters shared by the list_* statements:
--   $1 jobtypes (text[], for an exact list; NULL otherwise),
--   $2, $3 the jobtype range [from, to) to find jobtypes in when $1 is
--      NULL ('' and '~' for every jobtype, the prefix and its bound for a
--      prefix; both '' for an exact list),
--   $4 now, $5 rows to return (the page's limit + 1),
--   $6 the cursor's priority (int8; 2^31, above every priority, for a first
--      page), $7 its dt, $8 its id (-1 and '' for a first page),
--   $9, $10 the created range [from, to), $11 whether to return payloads,
--   $12 the tag a job must carry (NULL: any job).
--
-- The jobtypes: the exact list, or a skip scan of the range over
-- `jobs_free` (one index descent per jobtype). Per jobtype, two ranges of
-- `jobs_free`, each read in order and stopped by its LIMIT: the rest of the
-- cursor's priority (priority = $6 AND (dt, id) > ($7, $8)), then the lower
-- priorities. Each reads at most $5 rows with dt <= now (stepping over
-- scheduled jobs of the same priorities, as claims do); the merge sorts
-- those and keeps $5.
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
)
SELECT p.id, p.jobtype, p.data, p.priority, p.dt, p.lock, p.attempts, p.create_dt,
       NULL::int8 AS done_dt, p.code, p.status, p.output, p.cancel_requested,
       p.tags, p.history::text, p.claimed_at, p.lock AS claimed_by,
       p.traceparent, p.tracestate, p.unique_key, p.repeat_rule, p.pending, p.dep_policy
FROM types t
CROSS JOIN LATERAL (
    (SELECT id, jobtype, CASE WHEN $11 THEN data ELSE '' END AS data, priority, dt, lock,
            attempts, create_dt, code, status, output, cancel_requested,
            tags, history, claimed_at, traceparent, tracestate, unique_key, repeat_rule, pending, dep_policy
     FROM jobs
     WHERE jobtype = t.jobtype AND lock = '' AND priority = $6::int8 AND (dt, id) > ($7, $8)
       AND dt <= $4 AND create_dt >= $9 AND create_dt < $10
       AND ($12::text IS NULL OR $12 = ANY (tags))
     ORDER BY dt, id
     LIMIT $5)
    UNION ALL
    (SELECT id, jobtype, CASE WHEN $11 THEN data ELSE '' END, priority, dt, lock,
            attempts, create_dt, code, status, output, cancel_requested,
            tags, history, claimed_at, traceparent, tracestate, unique_key, repeat_rule, pending, dep_policy
     FROM jobs
     WHERE jobtype = t.jobtype AND lock = '' AND priority < $6::int8
       AND dt <= $4 AND create_dt >= $9 AND create_dt < $10
       AND ($12::text IS NULL OR $12 = ANY (tags))
     ORDER BY priority DESC, dt, id
     LIMIT $5)
) p
ORDER BY p.priority DESC, p.dt, p.id
LIMIT $5
