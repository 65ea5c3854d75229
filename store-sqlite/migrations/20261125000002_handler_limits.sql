-- jobstore SQLite schema, version 2: per-handler limits (HandlerLimits),
-- one nullable column per field; NULL is "not set", so versions stored
-- before this migration read back with no limits.

ALTER TABLE handlers ADD COLUMN max_attempts INTEGER;
ALTER TABLE handlers ADD COLUMN max_age_ms INTEGER;
ALTER TABLE handlers ADD COLUMN time_limit_ms INTEGER;
ALTER TABLE handlers ADD COLUMN concurrency INTEGER;
ALTER TABLE handlers ADD COLUMN backoff_base_ms INTEGER;
ALTER TABLE handlers ADD COLUMN backoff_max_ms INTEGER;
