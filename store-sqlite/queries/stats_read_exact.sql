-- ?1 resolution ('minute' or 'day'), ?2 the start of the oldest bucket kept,
-- ?3 JSON array of jobtypes: one range of the primary key per jobtype.
SELECT
    jobtype, start,
    wait_count, wait_sum_ms, wait_sum_sq_ms,
    wait_b0, wait_b1, wait_b2, wait_b3, wait_b4, wait_b5, wait_b6, wait_b7, wait_b8,
    wait_b9, wait_b10, wait_b11, wait_b12, wait_b13, wait_b14, wait_b15, wait_b16,
    run_count, run_sum_ms, run_sum_sq_ms,
    run_b0, run_b1, run_b2, run_b3, run_b4, run_b5, run_b6, run_b7, run_b8,
    run_b9, run_b10, run_b11, run_b12, run_b13, run_b14, run_b15, run_b16
FROM stats
WHERE resolution = ?1 AND jobtype IN (SELECT value FROM json_each(?3)) AND start >= ?2
ORDER BY jobtype, start
