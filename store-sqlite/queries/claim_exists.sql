-- ?1 jobtype, ?2 now
SELECT EXISTS (
    SELECT 1 FROM jobs
    WHERE jobtype = ?1 AND lock <> '__done' AND dt <= ?2
)
