-- $1 ids, $2 owner, $3 new lease expiry.
UPDATE jobs SET dt = $3
WHERE id = ANY($1::text[]) AND lock = $2
RETURNING id
