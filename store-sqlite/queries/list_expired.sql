-- Expired jobs in claim order (priority DESC, dt, id): per jobtype the
-- range of the locked-jobs index with dt <= ?1 now (only jobs whose
-- holder let the lease run out), after the cursor ?3 ?4 ?5, sorted; at
-- most ?2 per jobtype; merged by the final sort. ?6 ?7 created range.
-- {tag}: with a tag, only jobs whose tags hold ?13 (checked along the range).
WITH RECURSIVE {types}
SELECT {cols}
FROM types AS g JOIN jobs AS j ON j.rowid IN (
    SELECT rowid FROM jobs INDEXED BY jobs_locked
    WHERE lock NOT IN ('', '__done') AND jobtype = g.jt AND dt <= ?1
        AND (priority < ?3 OR (priority = ?3 AND (dt, id) > (?4, ?5)))
        AND create_dt >= ?6 AND create_dt < ?7 {tag}
    ORDER BY priority DESC, dt, id
    LIMIT ?2
)
WHERE g.jt IS NOT NULL
ORDER BY j.priority DESC, j.dt, j.id
LIMIT ?2
