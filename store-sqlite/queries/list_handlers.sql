-- The newest version of each jobtype.
SELECT seq, jobtype, dt, lang, body, eid, before_run, before_each, after_each,
       max_attempts, max_age_ms, time_limit_ms, concurrency, backoff_base_ms, backoff_max_ms
FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY jobtype ORDER BY dt DESC, seq DESC) AS rn
    FROM handlers
)
WHERE rn = 1
