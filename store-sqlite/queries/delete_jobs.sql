-- ?1 JSON array of ids. Deletes the jobs that are not locked. Runs inside
-- BEGIN IMMEDIATE, before delete_locked.sql.
DELETE FROM jobs
WHERE lock IN ('', '__done') AND id IN (SELECT value FROM json_each(?1))
RETURNING id
