-- jobstore schema, version 14: stored schedules (set_schedule,
-- get_schedule, list_schedules, delete_schedule, pause_schedule,
-- due_schedules, advance_schedule). See the README, "Data layout" and
-- "Schedules". A new table: nothing else changes.

-- One row per schedule, keyed by name (bytewise order: the "C"
-- collation). `definition` is Schedule::definition() (the definition but
-- its name and payload), read back through Schedule::from_definition;
-- `data` the payload of the jobs it adds. The firing state is one column
-- per field of ScheduleRecord, NULL where the field is None.
CREATE TABLE schedules (
    name          text COLLATE "C" PRIMARY KEY,
    definition    jsonb   NOT NULL,
    data          bytea   NOT NULL,
    version       bigint  NOT NULL,
    paused        boolean NOT NULL,
    created_dt    bigint  NOT NULL,
    updated_dt    bigint  NOT NULL,
    fired_through bigint,
    last_job      text COLLATE "C",
    next_due      bigint,
    fired         bigint  NOT NULL,
    skipped       bigint  NOT NULL
);

-- due_schedules: the schedules a firer may have to fire, by next_due.
-- Paused schedules and ended ones (no next_due) are not in it, and those
-- not yet due lie past the range a due read takes.
CREATE INDEX schedules_due ON schedules (next_due, name) WHERE NOT paused AND next_due IS NOT NULL;
