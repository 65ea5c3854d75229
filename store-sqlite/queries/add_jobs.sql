-- The rows are appended at {rows}: one "(?, ?, ?, ?, ?, ?)" per job, bound as
-- id, jobtype, priority, dt, create_dt, data.
INSERT INTO jobs (id, jobtype, priority, dt, create_dt, data)
VALUES {rows}
ON CONFLICT (id) DO NOTHING
RETURNING id
