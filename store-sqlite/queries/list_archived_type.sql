-- Archived jobs of some jobtypes, newest first (done_dt DESC, id DESC):
-- per jobtype of {types} and result code of ?12 (JSON array) one range of
-- jobs_done_type below the bound ?4 ?5 (the earlier of the cursor and
-- (archived.to, '')) and from ?8 (archived.from) up, at most ?2 entries;
-- merged by the final sort. ?6 ?7 created range.
-- {tag}: with a tag, only jobs whose tags hold ?13 (checked along the range).
WITH RECURSIVE {types},
groups (jt, code) AS (
    SELECT types.jt, c.value FROM types, json_each(?12) AS c
    WHERE types.jt IS NOT NULL
)
SELECT {cols}
FROM groups AS g JOIN jobs AS j ON j.rowid IN (
    SELECT rowid FROM jobs INDEXED BY jobs_done_type
    WHERE lock = '__done' AND jobtype = g.jt AND result_code = g.code
        AND (done_dt, id) < (?4, ?5) AND done_dt >= ?8
        AND create_dt >= ?6 AND create_dt < ?7 {tag}
    ORDER BY done_dt DESC, id DESC
    LIMIT ?2
)
ORDER BY j.done_dt DESC, j.id DESC
LIMIT ?2
