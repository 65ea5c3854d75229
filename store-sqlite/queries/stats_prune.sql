-- ?1 the start of the oldest minute kept, ?2 the start of the oldest day
-- kept: the buckets before them are deleted, each resolution one range at
-- the front of stats_by_age (empty but for the first add of a new minute).
DELETE FROM stats
WHERE (resolution = 'minute' AND start < ?1) OR (resolution = 'day' AND start < ?2)
