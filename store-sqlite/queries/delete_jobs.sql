-- ?1 JSON array of ids. Deletes the jobs that are not locked. Runs inside
-- BEGIN IMMEDIATE, before delete_locked.sql. Returns each deleted job with
-- its lock and result code: the archived ones ('__done') leave their
-- count.
DELETE FROM jobs
WHERE lock IN ('', '__done') AND id IN (SELECT value FROM json_each(?1))
RETURNING id, jobtype, lock, result_code
