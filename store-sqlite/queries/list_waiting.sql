-- Waiting jobs in claim order (priority DESC, dt, id). {types} lists the
-- jobtypes; per jobtype the distinct priorities of free jobs are walked
-- over `jobs_free` (one seek each), and each (jobtype, priority) group is one
-- range of `jobs_free` in (dt, id) order, read after the cursor and
-- at most ?2 entries deep; the groups are merged by the final sort.
-- ?1 now, ?2 rows (limit + 1), ?3 ?4 ?5 cursor (priority, dt, id; no
-- cursor: a priority above every other), ?6 ?7 created range.
-- {tag}: with a tag, only jobs whose tags hold ?13 (checked along the range).
WITH RECURSIVE {types},
prios (jt, p) AS (
    SELECT jt, (SELECT MAX(priority) FROM jobs INDEXED BY jobs_free WHERE lock = '' AND jobtype = types.jt)
    FROM types WHERE types.jt IS NOT NULL
    UNION ALL
    SELECT jt, (SELECT MAX(priority) FROM jobs INDEXED BY jobs_free
                WHERE lock = '' AND jobtype = prios.jt AND priority < prios.p)
    FROM prios WHERE prios.p IS NOT NULL
)
SELECT {cols}
FROM prios AS g JOIN jobs AS j ON j.rowid IN (
    SELECT rowid FROM jobs INDEXED BY jobs_free
    WHERE lock = '' AND jobtype = g.jt AND priority = g.p
        AND (dt, id) > (CASE WHEN g.p = ?3 THEN ?4 ELSE -1 END,
                        CASE WHEN g.p = ?3 THEN ?5 ELSE '' END)
        AND dt <= ?1
        AND create_dt >= ?6 AND create_dt < ?7 {tag}
    ORDER BY dt, id
    LIMIT ?2
)
WHERE g.p IS NOT NULL AND g.p <= ?3
ORDER BY j.priority DESC, j.dt, j.id
LIMIT ?2
