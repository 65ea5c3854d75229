-- ?1 new dt (now + delay), ?2 JSON array of ids, ?3 the Rerun event (a JSON
-- object, attempt 0), appended to the history, the oldest dropped past 20.
-- Archived jobs become free; the last result stays readable until the next
-- archive.
UPDATE jobs SET lock = '', dt = ?1, attempts = 0, done_dt = NULL, cancel_requested = 0,
    history = json_insert(CASE WHEN json_array_length(history) >= 20 THEN json_remove(history, '$[0]') ELSE history END,
                      '$[#]', json(?3))
WHERE lock = '__done' AND id IN (SELECT value FROM json_each(?2))
RETURNING id, jobtype
