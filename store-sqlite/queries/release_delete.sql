-- ?1 owner, ?2 JSON array of ids. Alone, in autocommit: only jobs that
-- take part in no edge (waited and pending NULL, migration 13); an entry
-- that does not come back (lost to another owner, or a job with edges) is
-- left to release_delete_flow.sql in a transaction.
-- The owner is compared as `+?1`, an expression, not a bare parameter: SQLite's
-- planner would test a bare one's bound value against the partial indexes'
-- `lock = '__done'`, and so prepare the statement again on every call.
DELETE FROM jobs
WHERE lock = +?1 AND id IN (SELECT value FROM json_each(?2))
    AND waited IS NULL AND pending IS NULL
RETURNING id
