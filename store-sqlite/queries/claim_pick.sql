-- ?1 jobtype, ?2 now, ?3 limit. Runs inside BEGIN IMMEDIATE. Nothing while
-- the jobtype is paused (one primary-key probe of the small paused table,
-- evaluated once per statement). Each job's dt before the claim is its
-- claimed_due.
SELECT id, dt FROM jobs
WHERE jobtype = ?1 AND lock <> '__done' AND dt <= ?2
    AND NOT EXISTS (SELECT 1 FROM paused WHERE jobtype = ?1)
ORDER BY priority DESC, dt, id
LIMIT ?3
