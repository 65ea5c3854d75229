-- The newest version of each jobtype's handler.
SELECT DISTINCT ON (jobtype)
       seq, jobtype, dt, lang, body, eid, before, before_each, after_each
FROM handlers
ORDER BY jobtype, dt DESC, seq DESC
