-- add_jobs.sql for a batch with keyed jobs (migration 11): the rows are
-- appended at {rows}: one "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)" per job, bound
-- as id, jobtype, priority, dt, create_dt, data, tags, traceparent,
-- tracestate, unique_key (NULL for a plain job). The keyed jobs are those
-- the store decided are new (unique_lookup.sql, under the write lock), so
-- none meets jobs_unique; if one did, the insert fails (no silent drop).
INSERT INTO jobs (id, jobtype, priority, dt, create_dt, data, tags, traceparent, tracestate, unique_key)
VALUES {rows}
ON CONFLICT (id) DO NOTHING
RETURNING id
