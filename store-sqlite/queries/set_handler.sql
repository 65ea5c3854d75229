-- ?1 jobtype, ?2 dt, ?3 lang, ?4 body, ?5 eid, ?6 before, ?7 before_each, ?8 after_each,
-- ?9 max_attempts, ?10 max_age_ms, ?11 time_limit_ms, ?12 concurrency,
-- ?13 backoff_base_ms, ?14 backoff_max_ms (NULL: not set)
INSERT INTO handlers (jobtype, dt, lang, body, eid, before_run, before_each, after_each,
                      max_attempts, max_age_ms, time_limit_ms, concurrency,
                      backoff_base_ms, backoff_max_ms)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
RETURNING seq
