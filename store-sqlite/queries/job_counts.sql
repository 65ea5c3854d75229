-- ?1 now. One row per jobtype and archive code (NULL code: live jobs).
SELECT jobtype,
       CASE WHEN lock = '__done' THEN COALESCE(result_code, 'ok') END AS code,
       SUM(lock <> '__done' AND dt <= ?1) AS waiting,
       SUM(lock = '' AND dt > ?1) AS scheduled,
       SUM(lock NOT IN ('', '__done') AND dt > ?1) AS running,
       COUNT(*) AS total
FROM jobs
GROUP BY jobtype, code
