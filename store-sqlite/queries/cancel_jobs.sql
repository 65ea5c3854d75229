-- ?1 now, ?2 now + 1000 years, ?3 JSON array of ids, ?4 the Cancelled
-- event, ?5 the CancelRequested event (JSON objects; their attempt is set
-- here). Free and blocked jobs are archived as cancelled; locked jobs are marked
-- (cancel_requested = 1) and keep everything else. Either first stores
-- the job's pending claim, if it has one (a locked job claimed since its
-- last event: claimed_at, lock, attempts), as a Claimed event and clears
-- it, then appends its own event, the oldest dropped past 20. SET reads
-- the old row, RETURNING the new one: lock '__done' means cancelled (the
-- caller counts it), an owner means marked; waited (migration 13) set
-- on a cancelled job means its edges end in this transaction.
UPDATE jobs SET
    lock = CASE WHEN lock IN ('', '__blocked') THEN '__done' ELSE lock END,
    done_dt = CASE WHEN lock IN ('', '__blocked') THEN ?1 ELSE done_dt END,
    dt = CASE WHEN lock IN ('', '__blocked') THEN ?2 ELSE dt END,
    result_code = CASE WHEN lock IN ('', '__blocked') THEN 'cancelled' ELSE result_code END,
    result_status = CASE WHEN lock IN ('', '__blocked') THEN 0 ELSE result_status END,
    result_output = CASE WHEN lock IN ('', '__blocked') THEN x'' ELSE result_output END,
    cancel_requested = CASE WHEN lock IN ('', '__blocked') THEN 0 ELSE 1 END,
    claimed_at = NULL,
    claimed_by = NULL,
    history = CASE WHEN claimed_at IS NULL THEN
        json_insert(CASE WHEN json_array_length(history) >= 20 THEN json_remove(history, '$[0]') ELSE history END,
                    '$[#]', json_set(CASE WHEN lock IN ('', '__blocked') THEN ?4 ELSE ?5 END, '$.attempt', attempts))
    ELSE
        json_insert(CASE MAX(json_array_length(history) - 18, 0)
                        WHEN 0 THEN history
                        WHEN 1 THEN json_remove(history, '$[0]')
                        ELSE json_remove(history, '$[0]', '$[0]') END,
                    '$[#]', json_object('at', claimed_at, 'by', lock, 'attempt', attempts, 'event', 'claimed'),
                    '$[#]', json_set(CASE WHEN lock IN ('', '__blocked') THEN ?4 ELSE ?5 END, '$.attempt', attempts))
    END
WHERE lock <> '__done' AND id IN (SELECT value FROM json_each(?3))
RETURNING id, lock, jobtype, waited
