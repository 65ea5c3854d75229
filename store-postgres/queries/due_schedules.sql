-- Up to $2 schedules not paused with next_due <= $1, by next_due then
-- name: the front of schedules_due. Columns as get_schedule.
SELECT version, paused, created_dt, updated_dt, fired_through, last_job, next_due,
       fired, skipped, name, definition::text, data
FROM schedules
WHERE NOT paused AND next_due IS NOT NULL AND next_due <= $1
ORDER BY next_due, name
LIMIT $2
