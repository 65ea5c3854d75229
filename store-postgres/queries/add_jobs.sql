-- Inserts a batch given as parallel arrays; ids present in `jobs` or in
-- `archive` are skipped. Returns the ids inserted and, in the same
-- statement, notifies the store's channel once per jobtype that got work.
-- $1 ids, $2 jobtypes, $3 payloads, $4 priorities, $5 dts, $6 now, $7 channel
WITH input AS (
    SELECT t.id, t.jobtype, t.data, t.priority, t.dt
    FROM unnest($1::text[], $2::text[], $3::bytea[], $4::int4[], $5::int8[])
        AS t (id, jobtype, data, priority, dt)
), inserted AS (
    INSERT INTO jobs (id, jobtype, data, priority, dt, lock, attempts, create_dt)
    SELECT i.id, i.jobtype, i.data, i.priority, i.dt, '', 0, $6
    FROM input i
    WHERE NOT EXISTS (SELECT 1 FROM archive a WHERE a.id = i.id)
    ON CONFLICT (id) DO NOTHING
    RETURNING id, jobtype
), notified AS (
    SELECT count(pg_notify($7, d.jobtype)) AS n
    FROM (SELECT DISTINCT jobtype FROM inserted) d
)
SELECT inserted.id FROM inserted, notified
