-- ?1 JSON array of ids. Deletes the jobs that are not locked (free,
-- blocked, archived). Runs inside BEGIN IMMEDIATE, before
-- delete_locked.sql. Returns each deleted job with its lock and result
-- code (the archived ones, '__done', leave their count), its target
-- marker (a live one some job waits for ends its edges as cancelled) and
-- whether it is a waiter (its own edges go).
DELETE FROM jobs
WHERE lock IN ('', '__done', '__blocked') AND id IN (SELECT value FROM json_each(?1))
RETURNING id, jobtype, lock, result_code, waited, pending IS NOT NULL
