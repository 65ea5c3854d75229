-- Deletes the jobs of $1 (ids) that are not locked: free live jobs and
-- archived ones. Locked jobs (running or expired) are left alone and
-- reported. Returns (id, 'd') per job deleted, (id, 'r') per job refused.
-- Rows are locked first, in id order like every statement that locks jobs
-- by id (so two of them never wait on each other in a cycle); FOR UPDATE
-- reads their newest version, so a job is deleted or refused as it is now.
-- Blocked jobs are deleted as free ones. A job with edges (a live one
-- with waiters, `waited`, or one added with dependencies, `pending` not
-- NULL) is deleted here only with $2 (the flow path: this statement in a
-- transaction followed by jobstore_end_edges, which drops its own edges
-- and ends those to it); without it, it comes back as (id, 'f'),
-- untouched. Returns (id, 'd', live) per job deleted.
WITH l AS (
    SELECT id, lock, waited, pending FROM jobs WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE
), la AS (
    SELECT id, pending FROM archive WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE
), live AS (
    DELETE FROM jobs j
    USING l
    WHERE j.id = l.id AND l.lock IN ('', '__blocked')
      AND ($2 OR (l.waited IS NULL AND l.pending IS NULL))
    RETURNING j.id
), archived AS (
    DELETE FROM archive a
    USING la
    WHERE a.id = la.id AND ($2 OR la.pending IS NULL)
    RETURNING a.id
)
SELECT id, 'd' AS what, true AS live FROM live
UNION ALL
SELECT id, 'd', false FROM archived
UNION ALL
SELECT id, 'r', false FROM l WHERE lock NOT IN ('', '__blocked')
UNION ALL
SELECT id, 'f', false FROM l
WHERE NOT $2 AND lock IN ('', '__blocked') AND (waited IS NOT NULL OR pending IS NOT NULL)
UNION ALL
SELECT id, 'f', false FROM la WHERE NOT $2 AND pending IS NOT NULL
