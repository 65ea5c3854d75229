-- jobstore SQLite schema, version 13: dependencies.
-- See README.md ("Dependencies (migration 13)").

-- A job added with dependencies (a waiter): how many of its edges are
-- still pending, and its policy ('cancel' or 'run'). NULL, NULL: added
-- without dependencies (every plain job, every row older than this
-- migration: no row is rewritten).
ALTER TABLE jobs ADD COLUMN pending INTEGER;
ALTER TABLE jobs ADD COLUMN dep_policy TEXT;

-- The marker of a target: 1 once an edge to the job was made while it
-- was live (some job waits, or waited, for it), never cleared; NULL for
-- every other job. The statements that archive or delete a job read it
-- in the row they change anyway, so a plain job pays no statement to
-- learn that nobody waits for it.
ALTER TABLE jobs ADD COLUMN waited INTEGER;

-- One row per (waiter, target): 'p' pending, 'd' done with the target's
-- result code and status (deleted: 'cancelled', 0). The primary key
-- orders a waiter's edges by target (job_waits pages, the edges of a
-- deleted or purged waiter dropped as one range).
CREATE TABLE edges (
    waiter TEXT NOT NULL,
    target TEXT NOT NULL,
    state TEXT NOT NULL,
    code TEXT,
    status INTEGER,
    PRIMARY KEY (waiter, target)
) WITHOUT ROWID;

-- The pending edges by target: a target that ends reads exactly its
-- waiters still waiting; ended edges leave the index.
CREATE INDEX edges_open ON edges (target, waiter) WHERE state = 'p';
