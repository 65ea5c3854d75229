-- The schedules named in [$1, $2) (a prefix and its bound: every name
-- starting with the prefix), by name (bytewise: the "C" collation). One
-- range of the primary key. Columns as get_schedule.
SELECT version, paused, created_dt, updated_dt, fired_through, last_job, next_due,
       fired, skipped, name, definition::text, data
FROM schedules
WHERE name >= $1 AND name < $2
ORDER BY name
