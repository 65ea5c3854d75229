-- ?1 jobtype. Newest: greatest dt, the last set (greatest seq) among equal dt.
SELECT seq, jobtype, dt, lang, body, eid, before_run, before_each, after_each,
       max_attempts, max_age_ms, time_limit_ms, concurrency, backoff_base_ms, backoff_max_ms
FROM handlers WHERE jobtype = ?1
ORDER BY dt DESC, seq DESC
LIMIT 1
