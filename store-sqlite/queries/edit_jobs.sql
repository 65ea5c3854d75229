-- ?1 JSON array of {"id", "p" priority, "dt" due time, "d" payload as hex}
-- objects, each id once; a missing (null) field is left as it is. Edits
-- free jobs (waiting or scheduled) and blocked ones, whose due time is
-- their not-before time (stored as BLOCKED_BASE_MS + it). One primary-key lookup per entry.
-- Returns the jobs edited with their new dt (the caller wakes watchers of
-- the jobtypes of jobs now due). ?2 the Edited event (a JSON object; its
-- attempt is set here), appended to the history, the oldest dropped past 20.
UPDATE jobs SET
    priority = COALESCE(e.p, jobs.priority),
    dt = CASE WHEN e.dt IS NULL THEN jobs.dt
              WHEN jobs.lock = '__blocked' THEN 400000000000000 + e.dt ELSE e.dt END,
    data = CASE WHEN e.d IS NULL THEN jobs.data ELSE unhex(e.d) END,
    history = json_insert(CASE WHEN json_array_length(history) >= 20 THEN json_remove(history, '$[0]') ELSE history END,
                      '$[#]', json_set(?2, '$.attempt', jobs.attempts))
FROM (
    SELECT value ->> 'id' AS id, value ->> 'p' AS p, value ->> 'dt' AS dt,
           value ->> 'd' AS d
    FROM jsonb_each(?1)
) AS e
WHERE jobs.id = e.id AND jobs.lock IN ('', '__blocked')
RETURNING id, jobtype, dt
