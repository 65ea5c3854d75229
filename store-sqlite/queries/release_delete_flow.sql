-- ?1 owner, ?2 JSON array of ids. In a transaction: the release's delete
-- entries that release_delete.sql did not take (jobs with edges), or all
-- of them beside other entries. Returns each deleted job with its target
-- marker (its edges end as cancelled in the same transaction) and whether
-- it is a waiter (its own edges go).
-- The owner is compared as `+?1` (see release_delete.sql).
DELETE FROM jobs
WHERE lock = +?1 AND id IN (SELECT value FROM json_each(?2))
RETURNING id, waited, pending IS NOT NULL
