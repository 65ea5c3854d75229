-- ?1 now, ?2 limit. The index's own conditions written out (literals), so
-- the planner sees that the query implies them; the index is in
-- (next_due, name) order: no sort.
SELECT name, version, paused, created_dt, updated_dt, fired_through, last_job, next_due,
       fired, skipped, definition, data
FROM schedules INDEXED BY schedules_due
WHERE paused = 0 AND next_due IS NOT NULL AND next_due <= ?1
ORDER BY next_due, name
LIMIT ?2
