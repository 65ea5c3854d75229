-- ?1 owner, ?2 lease expiry, ?3 JSON array of the ids picked by claim_pick.sql,
-- ?4 the Claimed event (a JSON object; its attempt is set here). The event
-- is appended to the history, the oldest dropped past 20.
UPDATE jobs SET lock = ?1, dt = ?2, attempts = attempts + 1,
    history = json_insert(CASE WHEN json_array_length(history) >= 20 THEN json_remove(history, '$[0]') ELSE history END,
                      '$[#]', json_set(?4, '$.attempt', attempts + 1))
WHERE id IN (SELECT value FROM json_each(?3))
RETURNING id, jobtype, priority, dt, lock, attempts, create_dt, done_dt, result_code, result_status, result_output, cancel_requested, data, tags, history
