-- jobstore SQLite schema, version 10: stored schedules (recurring jobs).
-- See README.md ("Schedules (migration 10)").

-- One row per schedule, keyed by its name. The definition but the name and
-- payload is one JSON text (jobstore_api::Schedule::definition), which the
-- store keeps and never reads; the firing state is one column per field,
-- compared and added to by the statements. The payload comes last, so the
-- small columns of a row with a large payload are read without its
-- overflow pages.
CREATE TABLE schedules (
    name TEXT PRIMARY KEY NOT NULL,
    version INTEGER NOT NULL,            -- 1 when created, + 1 at every set
    paused INTEGER NOT NULL,             -- 0 or 1
    created_dt INTEGER NOT NULL,
    updated_dt INTEGER NOT NULL,
    fired_through INTEGER,               -- the watermark; NULL: nothing fired or skipped yet
    last_job TEXT,                       -- NULL: no job fired yet
    next_due INTEGER,                    -- NULL: never due (ended)
    fired INTEGER NOT NULL,
    skipped INTEGER NOT NULL,
    definition TEXT NOT NULL,
    data BLOB NOT NULL
) WITHOUT ROWID;

-- Due reads: only schedules that are not paused and have a next_due. An
-- index of a WITHOUT ROWID table ends with its primary key, so this one is
-- in (next_due, name) order, the due order.
CREATE INDEX schedules_due ON schedules (next_due) WHERE paused = 0 AND next_due IS NOT NULL;
