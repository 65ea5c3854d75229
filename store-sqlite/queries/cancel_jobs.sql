-- ?1 now, ?2 now + 1000 years, ?3 JSON array of ids
UPDATE jobs
SET lock = '__done', done_dt = ?1, dt = ?2, result_code = 'cancelled', result_status = 0, result_output = x''
WHERE lock = '' AND id IN (SELECT value FROM json_each(?3))
RETURNING id
