-- ?1 owner, ?2 lease expiry, ?3 JSON array of the ids picked by claim_pick.sql
UPDATE jobs SET lock = ?1, dt = ?2, attempts = attempts + 1
WHERE id IN (SELECT value FROM json_each(?3))
RETURNING id, jobtype, priority, dt, lock, attempts, create_dt, done_dt, result_code, result_status, result_output, cancel_requested, data
