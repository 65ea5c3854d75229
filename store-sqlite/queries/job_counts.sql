-- ?1 now. One row per jobtype with live jobs (code NULL), from the two
-- partial indexes of live rows: free jobs along `jobs_free` (waiting when
-- due, else scheduled), locked jobs along `jobs_locked` (running until
-- their lease runs out, then waiting again: expired; blocked jobs,
-- migration 13, at dt >= BLOCKED_BASE_MS, after every lease); then one row per
-- jobtype and archive code from the counts table (never the archive
-- itself).
WITH live (jobtype, waiting, scheduled, running, blocked) AS (
    SELECT jobtype, SUM(dt <= ?1), SUM(dt > ?1), 0, 0
    FROM jobs INDEXED BY jobs_free WHERE lock = ''
    GROUP BY jobtype
    UNION ALL
    SELECT jobtype, SUM(dt <= ?1), 0, SUM(dt > ?1 AND dt < 400000000000000), SUM(dt >= 400000000000000)
    FROM jobs INDEXED BY jobs_locked WHERE lock NOT IN ('', '__done')
    GROUP BY jobtype
)
SELECT jobtype, NULL AS code, SUM(waiting) AS waiting, SUM(scheduled) AS scheduled,
       SUM(running) AS running, SUM(blocked) AS blocked, 0 AS total
FROM live
GROUP BY jobtype
UNION ALL
SELECT jobtype, code, 0, 0, 0, 0, n FROM counts WHERE n > 0
