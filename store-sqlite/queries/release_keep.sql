-- The entries of a release that keep their job: retry ("r"), unget ("u"),
-- archive ("a") and repeat ("p", migration 12), each with its own values,
-- for the jobs locked by the owner. ?1 owner, ?2 now (done_dt), ?3 now +
-- 1000 years, ?4 JSON array of {"id", "k", "dt" (retry: now + delay,
-- unget: now, repeat: the next time), "c" code, "s" status, "o" output as
-- hex (archive, repeat), "d" the repeat's new payload as hex (null: keep
-- the payload), "e" the retry's, unget's or repeat's event (a JSON object;
-- its attempt is set here)} objects, each id once. One primary-key lookup
-- per entry. jsonb_each hands out each element as binary JSONB, which ->>
-- reads without parsing the element's text again for every field; r is
-- MATERIALIZED so that each field is read once per entry (a subquery in
-- FROM is flattened, and every use of r.k, a dozen per row, would run its
-- ->> again).
--
-- A repeat frees the job (lock '', dt the next time, attempts 0) and
-- stores the run's result as its last result with done_dt left as it is
-- (NULL: the job is live); its payload is replaced when "d" is given.
--
-- History: an archive of a job with a pending claim (claimed_at) keeps
-- the history as it is and the claim in the row (claimed_by = the lock),
-- so reads show Claimed and Archived from the row. Every other entry
-- first stores the pending claim's Claimed event (claimed_at, lock,
-- attempts) if there is one and clears it, then appends its own event
-- (an archive's Archived is built here; a repeat's Repeated carries the
-- run's attempts, as SET reads the row as it was), the oldest dropped
-- past 20.
-- Returns the jobs changed with their jobtype and their target marker
-- (waited, migration 13: an archived job some job waits for has its
-- edges ended in this transaction; NULL for every plain job) (the caller knows from
-- each entry's kind whether it freed the job, whose jobtype it notifies,
-- or archived it, which it counts under the jobtype and the entry's result
-- code; every value returned costs a copy in the driver). Every kind
-- clears the cancel mark.
-- The owner is compared as `+?1`, an expression, not a bare parameter: SQLite's
-- planner would test a bare one's bound value against the partial indexes'
-- `lock = '__done'`, and so prepare the statement again on every call.
WITH r AS MATERIALIZED (
    SELECT value ->> 'id' AS id, value ->> 'k' AS k, value ->> 'dt' AS dt,
           value ->> 'c' AS c, value ->> 's' AS s, value ->> 'o' AS o,
           value ->> 'd' AS d, value -> 'e' AS e
    FROM jsonb_each(?4)
)
UPDATE jobs SET
    lock = CASE r.k WHEN 'a' THEN '__done' ELSE '' END,
    dt = CASE r.k WHEN 'a' THEN ?3 ELSE r.dt END,
    attempts = CASE r.k WHEN 'u' THEN MAX(attempts - 1, 0) WHEN 'p' THEN 0 ELSE attempts END,
    done_dt = CASE r.k WHEN 'a' THEN ?2 ELSE done_dt END,
    result_code = CASE WHEN r.k IN ('a', 'p') THEN r.c ELSE result_code END,
    result_status = CASE WHEN r.k IN ('a', 'p') THEN r.s ELSE result_status END,
    result_output = CASE WHEN r.k IN ('a', 'p') THEN unhex(r.o) ELSE result_output END,
    data = CASE WHEN r.d IS NULL THEN data ELSE unhex(r.d) END,
    cancel_requested = 0,
    claimed_at = CASE r.k WHEN 'a' THEN claimed_at END,
    claimed_by = CASE WHEN r.k = 'a' AND claimed_at IS NOT NULL THEN lock END,
    history = CASE
        WHEN claimed_at IS NOT NULL AND r.k = 'a' THEN history
        WHEN claimed_at IS NULL THEN
            json_insert(CASE WHEN json_array_length(history) >= 20 THEN json_remove(history, '$[0]') ELSE history END,
                        '$[#]', CASE r.k
                            WHEN 'a' THEN json_object('at', ?2, 'by', ?1, 'attempt', attempts,
                                                      'event', 'archived', 'code', r.c, 'status', r.s)
                            ELSE json_set(r.e, '$.attempt', CASE r.k WHEN 'u' THEN MAX(attempts - 1, 0) ELSE attempts END)
                        END)
        ELSE
            json_insert(CASE MAX(json_array_length(history) - 18, 0)
                            WHEN 0 THEN history
                            WHEN 1 THEN json_remove(history, '$[0]')
                            ELSE json_remove(history, '$[0]', '$[0]') END,
                        '$[#]', json_object('at', claimed_at, 'by', lock, 'attempt', attempts, 'event', 'claimed'),
                        '$[#]', json_set(r.e, '$.attempt', CASE r.k WHEN 'u' THEN MAX(attempts - 1, 0) ELSE attempts END))
    END
FROM r
WHERE jobs.id = r.id AND jobs.lock = +?1
RETURNING id, jobtype, waited
