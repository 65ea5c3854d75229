-- ?1 name
SELECT name, version, paused, created_dt, updated_dt, fired_through, last_job, next_due,
       fired, skipped, definition, data
FROM schedules WHERE name = ?1
