-- ?1 JSON array of [id, jobtype, key, since] per keyed job of an add
-- batch, since = now - window (NULL: no window). Run inside the add's
-- BEGIN IMMEDIATE transaction. Per job: whether its id exists, the live
-- holder of its key and whether that one is free (lock = ''), and with a
-- window the most recently archived job with the key archived after
-- since (ties on done_dt: the larger id). The batch is decided in Rust.
SELECT e.value ->> 0 AS id,
    EXISTS (SELECT 1 FROM jobs WHERE jobs.id = e.value ->> 0) AS known,
    (SELECT h.id FROM jobs AS h INDEXED BY jobs_unique
        WHERE h.jobtype = e.value ->> 1 AND h.unique_key = e.value ->> 2
          AND h.unique_key IS NOT NULL AND h.lock <> '__done') AS live,
    (SELECT h.lock = '' FROM jobs AS h INDEXED BY jobs_unique
        WHERE h.jobtype = e.value ->> 1 AND h.unique_key = e.value ->> 2
          AND h.unique_key IS NOT NULL AND h.lock <> '__done') AS live_free,
    (SELECT a.id FROM jobs AS a INDEXED BY jobs_unique_done
        WHERE a.jobtype = e.value ->> 1 AND a.unique_key = e.value ->> 2
          AND a.unique_key IS NOT NULL AND a.lock = '__done' AND a.done_dt > e.value ->> 3
        ORDER BY a.done_dt DESC, a.id DESC LIMIT 1) AS recent
FROM json_each(?1) AS e
