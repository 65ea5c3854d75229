-- ?1 prefix ('': every name), ?2 the bound after it
-- (JobtypeFilter::prefix_bound: the prefix and '~', which sorts after every
-- character of the name alphabet): one range of the primary key, in order.
SELECT name, version, paused, created_dt, updated_dt, fired_through, last_job, next_due,
       fired, skipped, definition, data
FROM schedules WHERE name >= ?1 AND name < ?2
ORDER BY name
