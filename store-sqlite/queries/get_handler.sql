-- ?1 jobtype. Newest: greatest dt, the last set (greatest seq) among equal dt.
SELECT seq, jobtype, dt, lang, body, eid, before_run, before_each, after_each
FROM handlers WHERE jobtype = ?1
ORDER BY dt DESC, seq DESC
LIMIT 1
