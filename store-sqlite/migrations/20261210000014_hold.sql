-- jobstore SQLite schema, version 14: held and skipped edges.
-- See README.md ("Dependencies (migration 13)", "Hold, unblock, outputs").

-- Edge states from here on: 'p' pending, 'h' held (a dependency ended
-- other than ok under the policy 'hold': code and status are its last
-- result, the waiter stays blocked and the dependency's next end resolves
-- the edge), 'd' done, 's' skipped by unblock_jobs (code and status NULL).
-- jobs.dep_policy may now also read 'hold', and any policy may carry
-- '+outputs' (JobFlow::with_outputs). No row is rewritten: rows of
-- migration 13 read as before.

-- A target's end reads its pending and held edges.
DROP INDEX edges_open;
CREATE INDEX edges_open ON edges (target, waiter) WHERE state IN ('p', 'h');
