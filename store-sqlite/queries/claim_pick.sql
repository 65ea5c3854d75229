-- ?1 jobtype, ?2 now, ?3 limit. Runs inside BEGIN IMMEDIATE.
SELECT id FROM jobs
WHERE jobtype = ?1 AND lock <> '__done' AND dt <= ?2
ORDER BY priority DESC, dt, id
LIMIT ?3
