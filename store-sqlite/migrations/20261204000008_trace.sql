-- jobstore SQLite schema, version 8: a job's W3C trace context.
-- See README.md ("Data layout").

-- The trace context the job was added with (jobstore_api::TraceContext),
-- as given: its traceparent, and its tracestate if it had one. NULL: none.
-- Written once by the add, never changed, read with the job. Old rows read
-- NULL: they were added without one.
ALTER TABLE jobs ADD COLUMN traceparent TEXT;
ALTER TABLE jobs ADD COLUMN tracestate TEXT;
