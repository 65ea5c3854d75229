-- ?1 new dt (now + delay), ?2 JSON array of ids, ?3 the Rerun event (a JSON
-- object, attempt 0). Archived jobs become free; the last result stays
-- readable until the next archive. A job archived by the release that
-- ended its pending claim (claimed_at) first stores that claim's Claimed
-- event and the Archived event of its result (claimed_by, attempts;
-- done_dt, result_code, result_status), then the Rerun event; the oldest
-- events dropped past 20. Returns each job with the code it was counted
-- under (NULL: 'ok').
UPDATE jobs SET lock = '', dt = ?1, attempts = 0, done_dt = NULL, cancel_requested = 0,
    claimed_at = NULL,
    claimed_by = NULL,
    history = CASE WHEN claimed_at IS NULL THEN
        json_insert(CASE WHEN json_array_length(history) >= 20 THEN json_remove(history, '$[0]') ELSE history END,
                    '$[#]', json(?3))
    ELSE
        json_insert(CASE MAX(json_array_length(history) - 17, 0)
                        WHEN 0 THEN history
                        WHEN 1 THEN json_remove(history, '$[0]')
                        WHEN 2 THEN json_remove(history, '$[0]', '$[0]')
                        ELSE json_remove(history, '$[0]', '$[0]', '$[0]') END,
                    '$[#]', json_object('at', claimed_at, 'by', claimed_by, 'attempt', attempts, 'event', 'claimed'),
                    '$[#]', json_object('at', done_dt, 'by', claimed_by, 'attempt', attempts,
                                        'event', 'archived', 'code', result_code, 'status', result_status),
                    '$[#]', json(?3))
    END
WHERE lock = '__done' AND id IN (SELECT value FROM json_each(?2))
RETURNING id, jobtype, result_code
