-- ?1 now, ?2 now + 1000 years, ?3 JSON array of ids, ?4 the Cancelled
-- event, ?5 the CancelRequested event (JSON objects; their attempt is set
-- here), appended to the history, the oldest dropped past 20. Free jobs
-- are archived as cancelled; locked jobs are marked (cancel_requested = 1)
-- and keep everything else. SET reads the old row, RETURNING the new one:
-- lock '__done' means cancelled, an owner means marked.
UPDATE jobs SET
    lock = CASE lock WHEN '' THEN '__done' ELSE lock END,
    done_dt = CASE lock WHEN '' THEN ?1 ELSE done_dt END,
    dt = CASE lock WHEN '' THEN ?2 ELSE dt END,
    result_code = CASE lock WHEN '' THEN 'cancelled' ELSE result_code END,
    result_status = CASE lock WHEN '' THEN 0 ELSE result_status END,
    result_output = CASE lock WHEN '' THEN x'' ELSE result_output END,
    cancel_requested = CASE lock WHEN '' THEN 0 ELSE 1 END,
    history = json_insert(CASE WHEN json_array_length(history) >= 20 THEN json_remove(history, '$[0]') ELSE history END,
                      '$[#]', json_set(CASE lock WHEN '' THEN ?4 ELSE ?5 END, '$.attempt', attempts))
WHERE lock <> '__done' AND id IN (SELECT value FROM json_each(?3))
RETURNING id, lock
