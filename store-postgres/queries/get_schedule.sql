-- Schedule $1: the state columns, then name, definition (JSON text), data.
SELECT version, paused, created_dt, updated_dt, fired_through, last_job, next_due,
       fired, skipped, name, definition::text, data
FROM schedules
WHERE name = $1
