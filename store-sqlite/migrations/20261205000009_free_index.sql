-- jobstore SQLite schema, version 9: the claim index holds free jobs only.
-- See README.md ("Free and locked jobs apart (migration 9)").

-- Until now `jobs_claim` held every live job, free and locked, so a claim
-- moved its job within it (its dt became the lease expiry) and also
-- entered it into `jobs_locked`, and an archive took it out of both. Now
-- free jobs (waiting and scheduled) are in `jobs_free` alone and locked
-- jobs (running and expired) in `jobs_locked` alone, as in the PostgreSQL
-- store: a claim moves its job from one to the other, an archive takes it
-- out of `jobs_locked`. Claims read both (free jobs in claim order along
-- `jobs_free`, expired leases along `jobs_locked`, merged).
DROP INDEX jobs_claim;
CREATE INDEX jobs_free ON jobs (jobtype, priority DESC, dt, id) WHERE lock = '';
