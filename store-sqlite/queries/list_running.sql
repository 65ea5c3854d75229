-- Running jobs, lease expiry first (dt, id): per jobtype one range of the
-- locked-jobs index from the bound on (?4 ?5: the later of the cursor and
-- (now + 1, '')), at most ?2 entries; merged by the final sort. ?6 ?7
-- created range. Blocked jobs (migration 13, dt >= BLOCKED_BASE_MS) are
-- past the range's end.
-- {tag}: with a tag, only jobs whose tags hold ?13 (checked along the range).
WITH RECURSIVE {types}
SELECT {cols}
FROM types AS g JOIN jobs AS j ON j.rowid IN (
    SELECT rowid FROM jobs INDEXED BY jobs_locked
    WHERE lock NOT IN ('', '__done') AND jobtype = g.jt
        AND (dt, id) > (?4, ?5) AND dt < 400000000000000
        AND create_dt >= ?6 AND create_dt < ?7 {tag}
    ORDER BY dt, id
    LIMIT ?2
)
WHERE g.jt IS NOT NULL
ORDER BY j.dt, j.id
LIMIT ?2
