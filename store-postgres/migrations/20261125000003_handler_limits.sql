-- jobstore schema, version 3: per-handler limits (HandlerLimits), one
-- nullable column per field. NULL is "not set": versions stored before
-- this migration read back with no limits. No default, so adding the
-- columns rewrites nothing. The bounds are checked by the API's validation.
ALTER TABLE handlers
    ADD COLUMN max_attempts    bigint,
    ADD COLUMN max_age_ms      bigint,
    ADD COLUMN time_limit_ms   bigint,
    ADD COLUMN concurrency     bigint,
    ADD COLUMN backoff_base_ms bigint,
    ADD COLUMN backoff_max_ms  bigint;
