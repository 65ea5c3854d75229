-- ?1 owner, ?2 lease expiry, ?3 JSON array of the ids picked by claim_pick.sql,
-- ?4 now. The claim is kept in the row (claimed_at; the owner is the
-- lock, the attempt the attempts) and appends nothing: a free job's
-- history is not read. A job taken while expired that still has a pending
-- claim first stores that claim's Claimed event (its claimed_at, lock and
-- attempts), the oldest event dropped past 20.
-- Returns what the caller does not know already (the jobtype, lock, dt and
-- claimed_at are its own arguments): id, priority, attempts, create_dt,
-- data, then the fields a job usually has empty when claimed (the last
-- result of a job run again, its cancel mark, tags, stored history and
-- trace context, its unique key, its repeat rule and its dependencies'
-- pending count and policy) as one JSON array
-- [code, status, output as hex, cancel mark, tags, history, traceparent,
-- tracestate, unique_key, repeat, pending, dep_policy], or NULL when all are
-- empty: every value returned is copied once more by the driver, so a
-- fresh job comes back as six values, not eighteen.
UPDATE jobs SET lock = ?1, dt = ?2, attempts = attempts + 1, claimed_at = ?4,
    history = CASE WHEN claimed_at IS NULL THEN history ELSE
        json_insert(CASE WHEN json_array_length(history) >= 20 THEN json_remove(history, '$[0]') ELSE history END,
                    '$[#]', json_object('at', claimed_at, 'by', lock, 'attempt', attempts, 'event', 'claimed'))
    END
WHERE id IN (SELECT value FROM json_each(?3))
RETURNING id, priority, attempts, create_dt, data,
    CASE WHEN result_code IS NULL AND cancel_requested = 0 AND tags = '[]' AND history = '[]'
              AND traceparent IS NULL AND unique_key IS NULL AND repeat IS NULL
              AND pending IS NULL THEN NULL
         ELSE json_array(result_code, result_status, hex(result_output), cancel_requested, json(tags), json(history),
                         traceparent, tracestate, unique_key, repeat, pending, dep_policy)
    END
