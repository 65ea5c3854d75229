-- ?1 jobtype, ?2 now, ?3 limit. Runs inside BEGIN IMMEDIATE. The jobs due
-- in claim order (priority DESC, dt, id): free ones along `jobs_free`,
-- read in that order, merged with the leases that ran out (`jobs_locked`,
-- dt <= now, sorted: normally none); the merge stops after ?3 rows.
-- Nothing while the jobtype is paused (one primary-key probe of the small
-- paused table per branch, evaluated once per statement). Each job's dt
-- before the claim is its claimed_due. (The outer SELECT leaves the
-- priority out of what the driver copies.)
SELECT id, dt FROM (
SELECT id, dt, priority FROM jobs INDEXED BY jobs_free
WHERE jobtype = ?1 AND lock = '' AND dt <= ?2
    AND NOT EXISTS (SELECT 1 FROM paused WHERE jobtype = ?1)
UNION ALL
SELECT id, dt, priority FROM jobs INDEXED BY jobs_locked
WHERE jobtype = ?1 AND lock NOT IN ('', '__done') AND dt <= ?2
    AND NOT EXISTS (SELECT 1 FROM paused WHERE jobtype = ?1)
ORDER BY priority DESC, dt, id
LIMIT ?3
)
