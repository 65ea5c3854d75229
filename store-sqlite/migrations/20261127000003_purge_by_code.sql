-- jobstore SQLite schema, version 3: purges by result code. The purge
-- index is by code, then age: a purge of some codes reads one range per
-- code, exactly the rows it deletes, and never the archived jobs of the
-- codes it keeps (by age alone, a purge of `ok` results read past every
-- failure kept longer, on every purge). Nothing else reads `jobs_purge`.

DROP INDEX jobs_purge;

CREATE INDEX jobs_purge_code ON jobs (result_code, done_dt) WHERE lock = '__done';
