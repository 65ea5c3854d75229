-- Jobtypes with eligible jobs and their counts, capped at $2.
-- The distinct jobtypes come from a skip scan of the claim index (one index
-- descent per jobtype, recursive CTE), and each count stops after $2 rows
-- (LIMIT inside a LATERAL subquery), so a call never reads every waiting
-- row. $1 now, $2 cap.
WITH RECURSIVE types (jobtype) AS (
    (SELECT jobtype FROM jobs ORDER BY jobtype LIMIT 1)
    UNION ALL
    SELECT (SELECT j.jobtype FROM jobs j WHERE j.jobtype > t.jobtype ORDER BY j.jobtype LIMIT 1)
    FROM types t
    WHERE t.jobtype IS NOT NULL
)
SELECT t.jobtype, c.n
FROM types t
CROSS JOIN LATERAL (
    SELECT count(*) AS n
    FROM (SELECT 1 FROM jobs j WHERE j.jobtype = t.jobtype AND j.dt <= $1 LIMIT $2) e
) c
WHERE t.jobtype IS NOT NULL AND c.n > 0
