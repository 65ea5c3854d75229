-- ?1 owner, ?2 JSON array of ids
DELETE FROM jobs
WHERE lock = ?1 AND id IN (SELECT value FROM json_each(?2))
RETURNING id
