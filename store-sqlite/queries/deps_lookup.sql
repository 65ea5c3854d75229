-- ?1 JSON array of ids: the dependencies of an add batch's jobs and those
-- jobs' own ids. Run inside the add's BEGIN IMMEDIATE transaction, before
-- the insert, so a job of the batch is not yet a job a dependency may
-- name. Per id found: its lock and, archived, its result code and status
-- (a job archived without a code counts as 'ok', status 0). One
-- primary-key lookup per id.
SELECT j.id, j.lock, j.result_code, j.result_status
FROM json_each(?1) AS e JOIN jobs AS j ON j.id = e.value
