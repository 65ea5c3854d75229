-- $1 ids, $2 owner, $3 new lease expiry. Returns each job renewed with its
-- cancel mark.
UPDATE jobs SET dt = $3
WHERE id = ANY($1::text[]) AND lock = $2
RETURNING id, cancel_requested
