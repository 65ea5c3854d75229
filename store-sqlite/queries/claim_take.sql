-- ?1 owner, ?2 lease expiry, ?3 JSON array of the ids picked by claim_pick.sql,
-- ?4 now. The claim is kept in the row (claimed_at; the owner is the
-- lock, the attempt the attempts) and appends nothing: a free job's
-- history is not read. A job taken while expired that still has a pending
-- claim first stores that claim's Claimed event (its claimed_at, lock and
-- attempts), the oldest event dropped past 20.
UPDATE jobs SET lock = ?1, dt = ?2, attempts = attempts + 1, claimed_at = ?4,
    history = CASE WHEN claimed_at IS NULL THEN history ELSE
        json_insert(CASE WHEN json_array_length(history) >= 20 THEN json_remove(history, '$[0]') ELSE history END,
                    '$[#]', json_object('at', claimed_at, 'by', lock, 'attempt', attempts, 'event', 'claimed'))
    END
WHERE id IN (SELECT value FROM json_each(?3))
RETURNING id, jobtype, priority, dt, lock, attempts, create_dt, done_dt, result_code, result_status, result_output, cancel_requested, data, tags, history, claimed_at, traceparent, tracestate
