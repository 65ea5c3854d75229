-- Creates schedule $1 (version 1, not paused, created and updated at $4,
-- nothing fired) or replaces its definition $2 (JSON text), payload $3
-- and next_due $5 (NULL: never due), one more version, updated at $4,
-- keeping paused, created_dt and the firing state. The update runs under
-- the row's lock on its newest version: concurrent sets each count.
-- Returns the state columns.
INSERT INTO schedules AS s (name, definition, data, version, paused, created_dt, updated_dt,
                            next_due, fired, skipped)
VALUES ($1, $2::jsonb, $3, 1, false, $4, $4, $5, 0, 0)
ON CONFLICT (name) DO UPDATE
    SET definition = EXCLUDED.definition,
        data = EXCLUDED.data,
        version = s.version + 1,
        updated_dt = EXCLUDED.updated_dt,
        next_due = EXCLUDED.next_due
RETURNING version, paused, created_dt, updated_dt, fired_through, last_job, next_due,
          fired, skipped
