-- ?1 new lease expiry, ?2 owner, ?3 JSON array of ids. Returns each renewed
-- id with its cancel mark.
UPDATE jobs SET dt = ?1
WHERE lock = ?2 AND id IN (SELECT value FROM json_each(?3))
RETURNING id, cancel_requested
