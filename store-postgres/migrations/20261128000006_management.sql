-- jobstore schema, version 6: management (listing, run again, delete,
-- edit, cancelling running jobs, pausing jobtypes). See the README, "Data
-- layout" and "Management".

-- The cancel mark of a locked job (set by cancel_jobs, read by renewals and
-- claims, cleared by every release). A constant default: adding the column
-- rewrites nothing, and every job stored before reads back unmarked.
-- The last result of a job run again (rerun_jobs moves it from `archive`
-- back here with its result; archiving it again replaces the result). NULL
-- is "never archived"; no default, so nothing is rewritten either.
ALTER TABLE jobs
    ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false,
    ADD COLUMN code   text,
    ADD COLUMN status integer,
    ADD COLUMN output bytea;

-- Paused jobtypes: claims of a jobtype listed here return nothing (one
-- primary-key probe per claim), waiting_jobtypes leaves it out.
CREATE TABLE paused (
    jobtype text COLLATE "C" PRIMARY KEY,
    dt      bigint NOT NULL
);

-- Listing archived jobs, newest first (done_dt DESC, id DESC), with keyset
-- paging: both archive indexes get `id` as their last column, so each
-- (code) and each (jobtype, code) range is in exactly the listing order
-- (read backwards). The archive keeps three indexes (the primary key and
-- these two), as before: each replaces one of version 5's.
--
-- archive_by_code (code, done_dt, id) replaces archive_purge (code,
-- done_dt): purges read it as before (a range per code, oldest first);
-- listings of every jobtype merge one backward range per code.
DROP INDEX archive_purge;
CREATE INDEX archive_by_code ON archive (code, done_dt, id);

-- archive_by_type (jobtype, code, done_dt, id) replaces archive_counts
-- (jobtype, code): job_counts reads its leading columns (index-only, as
-- before); listings of some jobtypes merge one backward range per
-- (jobtype, code), and find the jobtypes of a prefix by skip scan.
DROP INDEX archive_counts;
CREATE INDEX archive_by_type ON archive (jobtype, code, done_dt, id);
