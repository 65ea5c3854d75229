-- ?1 jobtype, ?2 now. A free job due (`jobs_free`) or a lease run out
-- (`jobs_locked`). False while the jobtype is paused.
SELECT (
    EXISTS (SELECT 1 FROM jobs INDEXED BY jobs_free WHERE jobtype = ?1 AND lock = '' AND dt <= ?2)
    OR EXISTS (SELECT 1 FROM jobs INDEXED BY jobs_locked
               WHERE jobtype = ?1 AND lock NOT IN ('', '__done') AND dt <= ?2)
) AND NOT EXISTS (SELECT 1 FROM paused WHERE jobtype = ?1)
