-- jobstore schema, version 5: purges by result code. The purge index is a
-- B-tree by code, then age, in place of the BRIN index by age: a purge of
-- some codes reads one range per code, exactly the rows it deletes. With
-- codes kept for different times, the rows a purge must keep (failures
-- kept longer) sit among the ones it deletes, in the same block ranges,
-- so the BRIN index could not skip them: every purge of `ok` results
-- read every block holding a failure still kept. Each archived job adds
-- one entry, at the end of its code's range. Nothing else reads
-- archive_done_dt.
--
-- Building the index blocks writes to `archive` (archives, cancels) until
-- it is built: once, at the first connect of this version.
DROP INDEX archive_done_dt;

CREATE INDEX archive_purge ON archive (code, done_dt);
