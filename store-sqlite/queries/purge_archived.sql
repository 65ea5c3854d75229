-- ?1 before, ?2 most rows. One bounded batch (the purge index); the
-- caller repeats it until a batch comes back short.
DELETE FROM jobs WHERE rowid IN (
    SELECT rowid FROM jobs WHERE lock = '__done' AND done_dt < ?1 LIMIT ?2
)
