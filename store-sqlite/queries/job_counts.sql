-- ?1 now. One row per jobtype with live jobs (code NULL): waiting and
-- scheduled-or-running along the claim index, running along the
-- locked-jobs index (both partial: live rows only); then one row per
-- jobtype and archive code from the counts the triggers keep (never the
-- archive itself).
WITH live (jobtype, due, later) AS (
    SELECT jobtype, SUM(dt <= ?1), SUM(dt > ?1)
    FROM jobs INDEXED BY jobs_claim WHERE lock <> '__done'
    GROUP BY jobtype
),
locked (jobtype, running) AS (
    SELECT jobtype, SUM(dt > ?1)
    FROM jobs INDEXED BY jobs_locked WHERE lock NOT IN ('', '__done')
    GROUP BY jobtype
)
SELECT live.jobtype AS jobtype, NULL AS code,
       live.due AS waiting,
       live.later - COALESCE(locked.running, 0) AS scheduled,
       COALESCE(locked.running, 0) AS running,
       0 AS total
FROM live LEFT JOIN locked ON locked.jobtype = live.jobtype
UNION ALL
SELECT jobtype, code, 0, 0, 0, n FROM counts WHERE n > 0
