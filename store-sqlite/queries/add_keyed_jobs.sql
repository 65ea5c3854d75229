-- add_jobs.sql for a batch with a flow: keyed jobs (migration 11) or
-- repeating ones (migration 12). The rows are appended at {rows}: one
-- "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)" per job, bound as id, jobtype,
-- priority, dt, create_dt, data, tags, traceparent, tracestate,
-- unique_key (NULL: none), repeat (Repeat::to_text; NULL: none). The
-- keyed jobs are those the store decided are new (unique_lookup.sql, under
-- the write lock), so none meets jobs_unique; if one did, the insert fails
-- (no silent drop).
INSERT INTO jobs (id, jobtype, priority, dt, create_dt, data, tags, traceparent, tracestate, unique_key, repeat)
VALUES {rows}
ON CONFLICT (id) DO NOTHING
RETURNING id
