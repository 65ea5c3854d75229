-- The newest version of each jobtype's handler.
SELECT DISTINCT ON (jobtype)
       seq, jobtype, dt, lang, body, eid, before, before_each, after_each,
       max_attempts, max_age_ms, time_limit_ms, concurrency, backoff_base_ms, backoff_max_ms
FROM handlers
ORDER BY jobtype, dt DESC, seq DESC
