-- $1 jobtype, $2 dt, $3 lang, $4 body, $5 eid, $6 before, $7 before_each, $8 after_each.
INSERT INTO handlers (jobtype, dt, lang, body, eid, before, before_each, after_each)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
RETURNING seq
