-- Jobtypes with eligible jobs and their counts, capped at $2.
-- The distinct jobtypes come from skip scans of the two claim indexes
-- (free jobs in `jobs_free`, leased ones in `jobs_leased`: one index
-- descent per jobtype, recursive CTEs), and each count stops after $2 rows
-- (LIMIT inside a LATERAL subquery), so a call never reads every waiting
-- row. Paused jobtypes (rows of `paused`) are left out. $1 now, $2 cap.
WITH RECURSIVE free (jobtype) AS (
    (SELECT jobtype FROM jobs WHERE lock = '' ORDER BY jobtype LIMIT 1)
    UNION ALL
    SELECT (SELECT j.jobtype FROM jobs j
            WHERE j.lock = '' AND j.jobtype > t.jobtype ORDER BY j.jobtype LIMIT 1)
    FROM free t
    WHERE t.jobtype IS NOT NULL
), leased (jobtype) AS (
    (SELECT jobtype FROM jobs WHERE lock <> '' ORDER BY jobtype LIMIT 1)
    UNION ALL
    SELECT (SELECT j.jobtype FROM jobs j
            WHERE j.lock <> '' AND j.jobtype > t.jobtype ORDER BY j.jobtype LIMIT 1)
    FROM leased t
    WHERE t.jobtype IS NOT NULL
), types (jobtype) AS (
    SELECT jobtype FROM free WHERE jobtype IS NOT NULL
    UNION
    SELECT jobtype FROM leased WHERE jobtype IS NOT NULL
)
SELECT t.jobtype, c.n
FROM types t
CROSS JOIN LATERAL (
    SELECT count(*) AS n
    FROM (
        (SELECT 1 FROM jobs j WHERE j.jobtype = t.jobtype AND j.lock = '' AND j.dt <= $1 LIMIT $2)
        UNION ALL
        (SELECT 1 FROM jobs j WHERE j.jobtype = t.jobtype AND j.lock <> '' AND j.dt <= $1 LIMIT $2)
        LIMIT $2
    ) e
) c
WHERE c.n > 0
  AND NOT EXISTS (SELECT 1 FROM paused p WHERE p.jobtype = t.jobtype)
ORDER BY t.jobtype
