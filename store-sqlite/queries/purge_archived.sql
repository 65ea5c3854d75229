-- ?1 before, ?2 most rows, ?3 result codes (JSON array). One bounded
-- batch (the purge index, one range per code); the caller repeats it until
-- a batch comes back short. Returns each deleted job's jobtype and result
-- code, which the caller takes out of the counts in the same transaction,
-- and the id of each waiter (pending not NULL, migration 13), whose edges
-- the caller drops in the same transaction (NULL for the others).
DELETE FROM jobs WHERE rowid IN (
    SELECT rowid FROM jobs
    WHERE lock = '__done' AND result_code IN (SELECT value FROM json_each(?3))
        AND done_dt < ?1
    LIMIT ?2
)
RETURNING jobtype, result_code, CASE WHEN pending IS NOT NULL THEN id END
