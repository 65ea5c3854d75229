-- Counts by jobtype and state (live jobs) or result code (archive).
-- state is 'waiting', 'scheduled', 'running' or 'archived' (then code is set).
-- $1 now. Live jobs are counted; archived ones are read from
-- `archive_counts` (kept by triggers on `archive`), one row per (jobtype,
-- code), whatever the size of the archive.
SELECT jobtype,
       CASE WHEN dt <= $1 THEN 'waiting'
            WHEN lock = '' THEN 'scheduled'
            ELSE 'running' END AS state,
       NULL::text AS code,
       count(*) AS n
FROM jobs
GROUP BY 1, 2
UNION ALL
SELECT jobtype, 'archived', code, n
FROM archive_counts
WHERE n > 0
