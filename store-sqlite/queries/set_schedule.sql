-- ?1 name, ?2 definition (JSON), ?3 data, ?4 next_due (NULL: never), ?5 now.
-- Creates (version 1, not paused, nothing fired) or replaces the definition
-- and next_due, one more version; the pause, created_dt and the firing
-- state are kept by being left out of the SET.
INSERT INTO schedules (name, version, paused, created_dt, updated_dt, fired_through, last_job,
                       next_due, fired, skipped, definition, data)
VALUES (?1, 1, 0, ?5, ?5, NULL, NULL, ?4, 0, 0, ?2, ?3)
ON CONFLICT (name) DO UPDATE SET
    version = version + 1,
    updated_dt = excluded.updated_dt,
    next_due = excluded.next_due,
    definition = excluded.definition,
    data = excluded.data
RETURNING version, paused, created_dt, updated_dt, fired_through, last_job, next_due, fired, skipped
