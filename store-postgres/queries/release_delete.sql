-- $1 ids, $2 owner.
DELETE FROM jobs
WHERE id = ANY($1::text[]) AND lock = $2
RETURNING id
