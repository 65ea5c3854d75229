-- Counts by jobtype and state (live jobs) or result code (archive).
-- state is 'waiting', 'scheduled', 'running', 'blocked' or 'archived' (then
-- code is set).
-- $1 now. Live jobs are counted; archived ones are read from
-- `archive_counts` (kept by triggers on `archive`), at most 16 slots per
-- (jobtype, code) summed, whatever the size of the archive.
SELECT jobtype,
       CASE WHEN lock = '__blocked' THEN 'blocked'
            WHEN dt <= $1 THEN 'waiting'
            WHEN lock = '' THEN 'scheduled'
            ELSE 'running' END AS state,
       NULL::text AS code,
       count(*) AS n
FROM jobs
GROUP BY 1, 2
UNION ALL
SELECT jobtype, 'archived', code, sum(n)::int8
FROM archive_counts
GROUP BY jobtype, code
HAVING sum(n) > 0
