-- jobstore SQLite schema, version 11: unique keys.
-- See README.md ("Unique keys (migration 11)").

-- The unique key the job was added with (jobstore_api::Unique::key),
-- scoped by its jobtype. NULL: none (a plain job). Written once by the
-- add, never changed, read with the job (also once it is archived). Old
-- rows read NULL: no row is rewritten.
ALTER TABLE jobs ADD COLUMN unique_key TEXT;

-- The live holders of keys: at most one job that is not archived per
-- (jobtype, key). Archiving a job (lock = '__done') takes it out and
-- deleting it removes it, so every path that archives or deletes frees
-- the key in its own statement. Plain rows are never in it.
CREATE UNIQUE INDEX jobs_unique ON jobs (jobtype, unique_key)
    WHERE unique_key IS NOT NULL AND lock <> '__done';

-- Archived keyed jobs, newest last per (jobtype, key): the window of an add
-- reads the most recent one (ties by the larger id, as the reference store
-- breaks them), a run again finds the others of its call. Plain rows are
-- never in it; a purge or a delete takes the row out.
CREATE INDEX jobs_unique_done ON jobs (jobtype, unique_key, done_dt, id)
    WHERE unique_key IS NOT NULL AND lock = '__done';
