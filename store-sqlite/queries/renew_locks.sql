-- ?1 new lease expiry, ?2 owner, ?3 JSON array of ids. Returns each renewed
-- id with its cancel mark.
-- The owner is compared as `+?2`, an expression, not a bare parameter: SQLite's
-- planner would test a bare one's bound value against the partial indexes'
-- `lock = '__done'`, and so prepare the statement again on every call.
UPDATE jobs SET dt = ?1
WHERE lock = +?2 AND id IN (SELECT value FROM json_each(?3))
RETURNING id, cancel_requested
