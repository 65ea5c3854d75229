-- ?1 JSON array of ids. After delete_jobs.sql in the same transaction: the
-- ids still there are the locked jobs it refused.
SELECT id FROM jobs WHERE id IN (SELECT value FROM json_each(?1))
