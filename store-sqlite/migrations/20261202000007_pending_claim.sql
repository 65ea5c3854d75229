-- jobstore SQLite schema, version 7: a job's current claim kept in its
-- row, and archive counts kept by the statements that change the archive.
-- See README.md ("Data layout").

-- The pending claim (jobstore_api::history::PendingClaim): when the job
-- was claimed, by the claim that holds it or, archived, by the claim its
-- archive ended; NULL, no claim pending (its Claimed event is stored in
-- `history`, or there is none). Who claimed it is `lock` while the job is
-- locked, and `claimed_by` once it is archived. Old rows read NULL: their
-- claims are all among their stored events, as before.
ALTER TABLE jobs ADD COLUMN claimed_at INTEGER;
ALTER TABLE jobs ADD COLUMN claimed_by TEXT;

-- Archive counts: one grouped upsert per statement that changes the
-- archive (queries/counts_add.sql, in the same transaction), in place of
-- one upsert per row by these triggers.
DROP TRIGGER jobs_counts_insert;
DROP TRIGGER jobs_counts_leave;
DROP TRIGGER jobs_counts_enter;
DROP TRIGGER jobs_counts_delete;
