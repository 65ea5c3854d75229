-- The newest version: greatest dt, then the last set. $1 jobtype.
SELECT seq, jobtype, dt, lang, body, eid, before, before_each, after_each
FROM handlers
WHERE jobtype = $1
ORDER BY dt DESC, seq DESC
LIMIT 1
