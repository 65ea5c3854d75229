-- Deletes the jobs of $1 (ids) that are not locked: free live jobs and
-- archived ones. Locked jobs (running or expired) are left alone and
-- reported. Returns (id, 'd') per job deleted, (id, 'r') per job refused.
-- Rows are locked first, in id order like every statement that locks jobs
-- by id (so two of them never wait on each other in a cycle); FOR UPDATE
-- reads their newest version, so a job is deleted or refused as it is now.
WITH l AS (
    SELECT id, lock FROM jobs WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE
), la AS (
    SELECT id FROM archive WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE
), live AS (
    DELETE FROM jobs j
    USING l
    WHERE j.id = l.id AND l.lock = ''
    RETURNING j.id
), archived AS (
    DELETE FROM archive a
    USING la
    WHERE a.id = la.id
    RETURNING a.id
)
SELECT id, 'd' AS what FROM live
UNION ALL
SELECT id, 'd' FROM archived
UNION ALL
SELECT id, 'r' FROM l WHERE lock <> ''
