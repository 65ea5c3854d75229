-- ?1 JSON array of ids, ?2 now, ?3 the Unblocked event (a JSON object;
-- its attempt is set here). The second statement of unblock_jobs, after
-- unblock_edges.sql: the listed blocked jobs become free at
-- max(not_before, now) (their dt less BLOCKED_BASE_MS) with nothing
-- pending, and append the event, the oldest dropped past 20. A blocked job
-- has never been claimed: it has no pending claim to store first. Returns
-- each job unblocked with its jobtype (to notify).
UPDATE jobs SET
    pending = 0,
    lock = '',
    dt = MAX(dt - 400000000000000, ?2),
    history = json_insert(CASE WHEN json_array_length(history) >= 20 THEN json_remove(history, '$[0]') ELSE history END,
                          '$[#]', json_set(?3, '$.attempt', attempts))
WHERE lock = '__blocked' AND id IN (SELECT value FROM json_each(?1))
RETURNING id, jobtype
