-- ?1 owner, ?2 JSON array of ids
-- The owner is compared as `+?1`, an expression, not a bare parameter: SQLite's
-- planner would test a bare one's bound value against the partial indexes'
-- `lock = '__done'`, and so prepare the statement again on every call.
DELETE FROM jobs
WHERE lock = +?1 AND id IN (SELECT value FROM json_each(?2))
RETURNING id
