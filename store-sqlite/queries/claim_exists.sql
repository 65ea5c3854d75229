-- ?1 jobtype, ?2 now. False while the jobtype is paused.
SELECT EXISTS (
    SELECT 1 FROM jobs
    WHERE jobtype = ?1 AND lock <> '__done' AND dt <= ?2
) AND NOT EXISTS (SELECT 1 FROM paused WHERE jobtype = ?1)
