-- $1 ids, $2 owner, $3 new lease expiry. Returns each job renewed with its
-- cancel mark. The jobs are locked first, in id order like every statement
-- that locks jobs by id, so two of them never wait on each other in a
-- cycle.
WITH l AS (
    SELECT id FROM jobs WHERE id = ANY($1::text[]) AND lock = $2 ORDER BY id FOR UPDATE
)
UPDATE jobs j SET dt = $3
FROM l
WHERE j.id = l.id AND j.lock = $2
RETURNING j.id, j.cancel_requested
