-- Counts by jobtype and state (live jobs) or result code (archive).
-- state is 'waiting', 'scheduled', 'running' or 'archived' (then code is set).
-- $1 now.
SELECT jobtype,
       CASE WHEN dt <= $1 THEN 'waiting'
            WHEN lock = '' THEN 'scheduled'
            ELSE 'running' END AS state,
       NULL::text AS code,
       count(*) AS n
FROM jobs
GROUP BY 1, 2
UNION ALL
SELECT jobtype, 'archived', code, count(*)
FROM archive
GROUP BY jobtype, code
