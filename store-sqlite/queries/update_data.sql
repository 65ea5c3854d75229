-- ?1 data, ?2 id, ?3 owner
-- The owner is compared as `+?3`, an expression, not a bare parameter: SQLite's
-- planner would test a bare one's bound value against the partial indexes'
-- `lock = '__done'`, and so prepare the statement again on every call.
UPDATE jobs SET data = ?1 WHERE id = ?2 AND lock = +?3
