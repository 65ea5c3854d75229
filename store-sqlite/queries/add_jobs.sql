-- The rows are appended at {rows}: one "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)" per
-- job, bound as id, jobtype, priority, dt, create_dt, data, tags (JSON array
-- of strings), history (a JSON array of the one Added event), traceparent,
-- tracestate (NULL when the job has none).
INSERT INTO jobs (id, jobtype, priority, dt, create_dt, data, tags, history, traceparent, tracestate)
VALUES {rows}
ON CONFLICT (id) DO NOTHING
RETURNING id
