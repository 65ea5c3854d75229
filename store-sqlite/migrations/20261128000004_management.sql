-- jobstore SQLite schema, version 4: management (listing, cancelling
-- locked jobs, pausing jobtypes). See README.md ("Data layout").

-- The cancel mark of a locked job. Old rows read the default 0 (unmarked).
ALTER TABLE jobs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;

-- Paused jobtypes: claims and waiting counts leave them out.
CREATE TABLE paused (
    jobtype TEXT PRIMARY KEY NOT NULL,
    dt INTEGER NOT NULL
) WITHOUT ROWID;

-- Listing running and expired jobs: only locked rows (as many as the
-- daemons hold), by jobtype, then lease expiry.
CREATE INDEX jobs_locked ON jobs (jobtype, dt, id) WHERE lock NOT IN ('', '__done');

-- Listing archived jobs newest first: per result code (every jobtype), and
-- per jobtype and result code. The code index also serves purges (its
-- first two columns are the purge index's), so it replaces it.
DROP INDEX jobs_purge_code;

CREATE INDEX jobs_done_code ON jobs (result_code, done_dt, id) WHERE lock = '__done';

CREATE INDEX jobs_done_type ON jobs (jobtype, result_code, done_dt, id) WHERE lock = '__done';
