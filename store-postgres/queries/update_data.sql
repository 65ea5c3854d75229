-- $1 id, $2 owner, $3 data.
UPDATE jobs SET data = $3 WHERE id = $1 AND lock = $2
