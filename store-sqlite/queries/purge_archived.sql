-- ?1 before
DELETE FROM jobs WHERE lock = '__done' AND done_dt < ?1
