-- The rows are appended at {rows}: one "(?, ?, ?, ?, ?, ?, ?, ?, ?)" per
-- job, bound as id, jobtype, priority, dt, create_dt, data, tags (JSON
-- array of strings), traceparent, tracestate (NULL when the job has none).
-- The history stays empty: the Added event is implicit
-- (jobstore_api::history::with_added puts it back on reads).
INSERT INTO jobs (id, jobtype, priority, dt, create_dt, data, tags, traceparent, tracestate)
VALUES {rows}
ON CONFLICT (id) DO NOTHING
RETURNING id
