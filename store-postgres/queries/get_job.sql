-- A job in any state: live jobs first, then the archive. $1 id.
SELECT id, jobtype, data, priority, dt, lock, attempts, create_dt,
       NULL::int8 AS done_dt, NULL::text AS code, NULL::int4 AS status, NULL::bytea AS output
FROM jobs WHERE id = $1
UNION ALL
SELECT id, jobtype, data, priority, dt, '__done', attempts, create_dt,
       done_dt, code, status, output
FROM archive WHERE id = $1
LIMIT 1
