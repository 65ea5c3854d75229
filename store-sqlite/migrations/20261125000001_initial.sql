-- jobstore SQLite schema, version 1. See README.md ("Data layout").

CREATE TABLE jobs (
    id TEXT PRIMARY KEY NOT NULL,
    jobtype TEXT NOT NULL,
    priority INTEGER NOT NULL,
    dt INTEGER NOT NULL,
    lock TEXT NOT NULL DEFAULT '',
    attempts INTEGER NOT NULL DEFAULT 0,
    create_dt INTEGER NOT NULL,
    done_dt INTEGER,
    result_code TEXT,
    result_status INTEGER,
    result_output BLOB,
    -- Last, so that reading the columns above never touches overflow pages.
    data BLOB NOT NULL
);

-- Claims and waiting counts: live (non-archived) jobs in claim order.
CREATE INDEX jobs_claim ON jobs (jobtype, priority DESC, dt, id) WHERE lock <> '__done';

-- Purges: archived jobs by age.
CREATE INDEX jobs_purge ON jobs (done_dt) WHERE lock = '__done';

CREATE TABLE handlers (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    jobtype TEXT NOT NULL,
    dt INTEGER NOT NULL,
    lang TEXT NOT NULL,
    body TEXT NOT NULL,
    eid TEXT,
    before_run TEXT,
    before_each TEXT,
    after_each TEXT
);

CREATE INDEX handlers_newest ON handlers (jobtype, dt DESC, seq DESC);

CREATE TABLE sysids (
    sysid TEXT PRIMARY KEY NOT NULL,
    token TEXT NOT NULL,
    expires INTEGER NOT NULL
);
