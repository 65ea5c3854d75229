-- ?1 now, ?2 count cap. Walks the distinct jobtypes of the claim index (one
-- seek each), then counts at most ?2 eligible index entries per jobtype.
-- Jobtypes with a count of 0 (only scheduled or running jobs) are dropped by
-- the caller: filtering here would evaluate the count subquery twice.
-- Paused jobtypes are left out (one probe of the paused table each).
WITH RECURSIVE types (jobtype) AS (
    SELECT (SELECT MIN(jobtype) FROM jobs WHERE lock <> '__done')
    UNION ALL
    SELECT (SELECT MIN(j.jobtype) FROM jobs AS j WHERE j.lock <> '__done' AND j.jobtype > types.jobtype)
    FROM types WHERE types.jobtype IS NOT NULL
)
SELECT types.jobtype AS jobtype,
       (SELECT COUNT(*) FROM (
            SELECT 1 FROM jobs AS e
            WHERE e.jobtype = types.jobtype AND e.lock <> '__done' AND e.dt <= ?1
            LIMIT ?2)) AS n
FROM types
WHERE types.jobtype IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM paused WHERE paused.jobtype = types.jobtype)
