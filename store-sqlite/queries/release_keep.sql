-- The entries of a release that keep their job: retry ("r"), unget ("u")
-- and archive ("a"), each with its own values, for the jobs locked by the
-- owner. ?1 owner, ?2 now (done_dt), ?3 now + 1000 years, ?4 JSON array of
-- {"id", "k", "dt" (retry: now + delay, unget: now), "c" code, "s" status,
-- "o" output as hex, "e" the event (a JSON object; its attempt is set
-- here)} objects, each id once. The event is appended to the history, the
-- oldest dropped past 20. One primary-key lookup per entry. jsonb_each
-- hands out each element as binary JSONB, which ->> reads without parsing
-- the element's text again for every field.
-- Returns the jobs changed with their new lock: '' means freed (to notify
-- its jobtype), '__done' archived. Every kind clears the cancel mark.
UPDATE jobs SET
    lock = CASE r.k WHEN 'a' THEN '__done' ELSE '' END,
    dt = CASE r.k WHEN 'a' THEN ?3 ELSE r.dt END,
    attempts = CASE r.k WHEN 'u' THEN MAX(attempts - 1, 0) ELSE attempts END,
    done_dt = CASE r.k WHEN 'a' THEN ?2 ELSE done_dt END,
    result_code = CASE r.k WHEN 'a' THEN r.c ELSE result_code END,
    result_status = CASE r.k WHEN 'a' THEN r.s ELSE result_status END,
    result_output = CASE r.k WHEN 'a' THEN unhex(r.o) ELSE result_output END,
    cancel_requested = 0,
    history = json_insert(CASE WHEN json_array_length(history) >= 20 THEN json_remove(history, '$[0]') ELSE history END,
                      '$[#]', json_set(r.e, '$.attempt', CASE r.k WHEN 'u' THEN MAX(attempts - 1, 0) ELSE attempts END))
FROM (
    SELECT value ->> 'id' AS id, value ->> 'k' AS k, value ->> 'dt' AS dt,
           value ->> 'c' AS c, value ->> 's' AS s, value ->> 'o' AS o,
           value -> 'e' AS e
    FROM jsonb_each(?4)
) AS r
WHERE jobs.id = r.id AND jobs.lock = ?1
RETURNING id, jobtype, lock
