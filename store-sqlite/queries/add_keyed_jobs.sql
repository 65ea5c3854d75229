-- add_jobs.sql for a batch with a flow: keyed jobs (migration 11),
-- repeating ones (migration 12) or jobs with dependencies (migration 13).
-- The rows are appended at {rows}: one row of 19 parameters per job, bound
-- as id, jobtype, priority, dt, create_dt, data, tags, traceparent,
-- tracestate, unique_key (NULL: none), repeat (Repeat::to_text; NULL:
-- none), then the state the store decided from the dependencies: lock
-- ('' free, '__blocked', '__done' for a job cancelled at once because a
-- dependency already failed), pending and dep_policy (NULL, NULL: no
-- dependencies), done_dt, result_code, result_status, result_output (the
-- cancel's; NULL otherwise) and history ('[]', or the Cancelled event).
-- A blocked job's dt is BLOCKED_BASE_MS + its not-before time. The
-- keyed jobs are those the store decided are new (unique_lookup.sql, under
-- the write lock), so none meets jobs_unique; if one did, the insert fails
-- (no silent drop).
INSERT INTO jobs (id, jobtype, priority, dt, create_dt, data, tags, traceparent, tracestate, unique_key, repeat,
                  lock, pending, dep_policy, done_dt, result_code, result_status, result_output, history)
VALUES {rows}
ON CONFLICT (id) DO NOTHING
RETURNING id
