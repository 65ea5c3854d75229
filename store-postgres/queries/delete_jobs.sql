-- Deletes the jobs of $1 (ids) that are not locked: free live jobs and
-- archived ones. Locked jobs (running or expired) are left alone and
-- reported. Returns (id, 'd') per job deleted, (id, 'r') per job refused.
-- Live rows are locked first (FOR UPDATE reads their newest version), so
-- a job is deleted or refused as it is now; the archive is reached by
-- primary key.
WITH l AS (
    SELECT id, lock FROM jobs WHERE id = ANY($1::text[]) FOR UPDATE
), live AS (
    DELETE FROM jobs j
    USING l
    WHERE j.id = l.id AND l.lock = ''
    RETURNING j.id
), archived AS (
    DELETE FROM archive
    WHERE id = ANY($1::text[])
    RETURNING id
)
SELECT id, 'd' AS what FROM live
UNION ALL
SELECT id, 'd' FROM archived
UNION ALL
SELECT id, 'r' FROM l WHERE lock <> ''
