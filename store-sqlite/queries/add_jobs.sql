-- The rows are appended at {rows}: one "(?, ?, ?, ?, ?, ?, ?, ?)" per job,
-- bound as id, jobtype, priority, dt, create_dt, data, tags (JSON array of
-- strings), history (a JSON array of the one Added event).
INSERT INTO jobs (id, jobtype, priority, dt, create_dt, data, tags, history)
VALUES {rows}
ON CONFLICT (id) DO NOTHING
RETURNING id
