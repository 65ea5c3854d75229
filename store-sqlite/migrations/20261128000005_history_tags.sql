-- jobstore SQLite schema, version 5: job histories, tags, and archive
-- counts kept up to date. See README.md ("Data layout").

-- A job's newest 20 events, oldest first, as a JSON array of JobEvent
-- objects; its tags, as a JSON array of strings. Old rows read the
-- defaults: no events, no tags. ADD COLUMN puts both after `data`.
ALTER TABLE jobs ADD COLUMN history TEXT NOT NULL DEFAULT '[]';
ALTER TABLE jobs ADD COLUMN tags TEXT NOT NULL DEFAULT '[]';

-- Archived jobs per jobtype and result code, kept by the triggers below in
-- the same statement as every change that archives a job or takes one out
-- of the archive (purges, deletes, runs again), so counts never read the
-- archive. A count that reaches 0 stays, at 0.
CREATE TABLE counts (
    jobtype TEXT NOT NULL,
    code TEXT NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (jobtype, code)
) WITHOUT ROWID;

INSERT INTO counts (jobtype, code, n)
SELECT jobtype, COALESCE(result_code, 'ok'), COUNT(*)
FROM jobs WHERE lock = '__done'
GROUP BY 1, 2;

CREATE TRIGGER jobs_counts_insert AFTER INSERT ON jobs
WHEN NEW.lock = '__done'
BEGIN
    INSERT INTO counts (jobtype, code, n)
    VALUES (NEW.jobtype, COALESCE(NEW.result_code, 'ok'), 1)
    ON CONFLICT (jobtype, code) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER jobs_counts_leave AFTER UPDATE OF lock, result_code, jobtype ON jobs
WHEN OLD.lock = '__done'
BEGIN
    UPDATE counts SET n = n - 1
    WHERE jobtype = OLD.jobtype AND code = COALESCE(OLD.result_code, 'ok');
END;

CREATE TRIGGER jobs_counts_enter AFTER UPDATE OF lock, result_code, jobtype ON jobs
WHEN NEW.lock = '__done'
BEGIN
    INSERT INTO counts (jobtype, code, n)
    VALUES (NEW.jobtype, COALESCE(NEW.result_code, 'ok'), 1)
    ON CONFLICT (jobtype, code) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER jobs_counts_delete AFTER DELETE ON jobs
WHEN OLD.lock = '__done'
BEGIN
    UPDATE counts SET n = n - 1
    WHERE jobtype = OLD.jobtype AND code = COALESCE(OLD.result_code, 'ok');
END;
