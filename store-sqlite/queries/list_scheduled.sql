-- Scheduled jobs due first (dt, id). Groups as in list_waiting.sql: one
-- `jobs_free` range per (jobtype, priority), in (dt, id) order, from the
-- bound on: ?4 ?5 is the later of the cursor and (now + 1, ''), so every
-- row read is due later than now; merged by the final sort. ?2 rows
-- (limit + 1), ?6 ?7 created range.
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
        AND (dt, id) > (?4, ?5)
        AND create_dt >= ?6 AND create_dt < ?7 {tag}
    ORDER BY dt, id
    LIMIT ?2
)
WHERE g.p IS NOT NULL
ORDER BY j.dt, j.id
LIMIT ?2
