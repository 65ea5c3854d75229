-- ?1 now, ?2 count cap. Walks the distinct jobtypes of the free jobs'
-- index and of the locked jobs' index (one seek each), then counts at most
-- ?2 eligible entries per jobtype: free jobs due (`jobs_free`) and leases
-- run out (`jobs_locked`), the sum capped at ?2.
-- Jobtypes with a count of 0 (only scheduled or running jobs) are dropped by
-- the caller: filtering here would evaluate the count subqueries twice.
-- Paused jobtypes are left out (one probe of the paused table each).
WITH RECURSIVE free_types (jobtype) AS (
    SELECT (SELECT MIN(jobtype) FROM jobs INDEXED BY jobs_free WHERE lock = '')
    UNION ALL
    SELECT (SELECT MIN(j.jobtype) FROM jobs AS j INDEXED BY jobs_free
            WHERE j.lock = '' AND j.jobtype > free_types.jobtype)
    FROM free_types WHERE free_types.jobtype IS NOT NULL
), locked_types (jobtype) AS (
    SELECT (SELECT MIN(jobtype) FROM jobs INDEXED BY jobs_locked WHERE lock NOT IN ('', '__done'))
    UNION ALL
    SELECT (SELECT MIN(j.jobtype) FROM jobs AS j INDEXED BY jobs_locked
            WHERE j.lock NOT IN ('', '__done') AND j.jobtype > locked_types.jobtype)
    FROM locked_types WHERE locked_types.jobtype IS NOT NULL
), types (jobtype) AS (
    SELECT jobtype FROM free_types WHERE jobtype IS NOT NULL
    UNION
    SELECT jobtype FROM locked_types WHERE jobtype IS NOT NULL
)
SELECT types.jobtype AS jobtype,
       MIN(?2,
           (SELECT COUNT(*) FROM (
                SELECT 1 FROM jobs AS e INDEXED BY jobs_free
                WHERE e.jobtype = types.jobtype AND e.lock = '' AND e.dt <= ?1
                LIMIT ?2))
           + (SELECT COUNT(*) FROM (
                SELECT 1 FROM jobs AS x INDEXED BY jobs_locked
                WHERE x.jobtype = types.jobtype AND x.lock NOT IN ('', '__done') AND x.dt <= ?1
                LIMIT ?2))) AS n
FROM types
WHERE NOT EXISTS (SELECT 1 FROM paused WHERE paused.jobtype = types.jobtype)
