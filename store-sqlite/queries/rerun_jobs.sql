-- ?1 new dt (now + delay), ?2 JSON array of ids, ?3 the Rerun event (a JSON
-- object, attempt 0). Archived jobs become free; the last result stays
-- readable until the next archive. A job archived by the release that
-- ended its pending claim (claimed_at) first stores that claim's Claimed
-- event and the Archived event of its result (claimed_by, attempts;
-- done_dt, result_code, result_status), then the Rerun event; the oldest
-- events dropped past 20. Returns each job with the code it was counted
-- under (NULL: 'ok').
-- A job with a unique key (migration 11) takes it back only if no live job
-- of its jobtype holds it (jobs_unique) and it is the first archived job
-- of its (jobtype, key) in the call's order (f: per key the id at the
-- lowest position of ?2, min() with bare columns); the others stay
-- archived and are not returned. f is materialized the first time the OR
-- reaches a keyed row: a run again of plain jobs never computes it.
WITH f (jobtype, unique_key, id, pos) AS MATERIALIZED (
    SELECT j.jobtype, j.unique_key, j.id, min(e.key)
    FROM json_each(?2) AS e JOIN jobs AS j ON j.id = e.value
    WHERE j.unique_key IS NOT NULL AND j.lock = '__done'
    GROUP BY j.jobtype, j.unique_key
)
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
    AND (unique_key IS NULL OR (
        NOT EXISTS (SELECT 1 FROM jobs AS h INDEXED BY jobs_unique
                    WHERE h.jobtype = jobs.jobtype AND h.unique_key = jobs.unique_key
                      AND h.unique_key IS NOT NULL AND h.lock <> '__done')
        AND jobs.id = (SELECT f.id FROM f WHERE f.jobtype = jobs.jobtype AND f.unique_key = jobs.unique_key)))
RETURNING id, jobtype, result_code
