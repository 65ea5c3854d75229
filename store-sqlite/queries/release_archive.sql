-- ?1 now, ?2 now + 1000 years, ?3 code, ?4 status, ?5 output, ?6 owner, ?7 JSON array of ids
UPDATE jobs
SET lock = '__done', done_dt = ?1, dt = ?2, result_code = ?3, result_status = ?4, result_output = ?5
WHERE lock = ?6 AND id IN (SELECT value FROM json_each(?7))
RETURNING id
