-- ?1 JSON array of {"id", "n" its pending count now, "k" what becomes of
-- it: "n" nothing else, "u" unblocked, "c" cancelled because a
-- dependency failed, "o" the cancel's output as hex} objects, each waiter
-- once; ?2 now, ?3 now + 1000 years, ?4 the Unblocked event, ?5 the
-- Cancelled event (JSON objects; their attempt is set here). Decided by
-- the store from waiters_read.sql in the same transaction. An unblocked
-- job becomes free at max(not_before, now) (its dt less BLOCKED_BASE_MS);
-- a cancelled one is archived as cancel_jobs.sql archives a free job,
-- with the output naming the dependency. A blocked job has never been
-- claimed: it has no pending claim to store first.
WITH w AS MATERIALIZED (
    SELECT value ->> 'id' AS id, value ->> 'n' AS n, value ->> 'k' AS k, value ->> 'o' AS o
    FROM jsonb_each(?1)
)
UPDATE jobs SET
    pending = w.n,
    lock = CASE w.k WHEN 'u' THEN '' WHEN 'c' THEN '__done' ELSE lock END,
    dt = CASE w.k WHEN 'u' THEN MAX(dt - 400000000000000, ?2) WHEN 'c' THEN ?3 ELSE dt END,
    done_dt = CASE w.k WHEN 'c' THEN ?2 ELSE done_dt END,
    result_code = CASE w.k WHEN 'c' THEN 'cancelled' ELSE result_code END,
    result_status = CASE w.k WHEN 'c' THEN 0 ELSE result_status END,
    result_output = CASE w.k WHEN 'c' THEN unhex(w.o) ELSE result_output END,
    history = CASE WHEN w.k IN ('u', 'c') THEN
        json_insert(CASE WHEN json_array_length(history) >= 20 THEN json_remove(history, '$[0]') ELSE history END,
                    '$[#]', json_set(CASE w.k WHEN 'u' THEN ?4 ELSE ?5 END, '$.attempt', attempts))
        ELSE history END
FROM w
WHERE jobs.id = w.id
