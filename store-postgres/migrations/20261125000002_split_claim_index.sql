-- jobstore schema, version 2: the claim index is split in two partial
-- indexes, one over free jobs and one over leased jobs (see the README,
-- "The claim indexes").
--
-- A claim moves a row from `jobs_free` to `jobs_leased`: the free index gets
-- no new entry (only the dead one the claim leaves behind), and the leased
-- index gets a small one. With a single index over every live job, each
-- claimed job added a second entry to the range claims read (at its lease
-- expiry, behind the eligible jobs of its priority), so a claim stepped over
-- every running job (and every dead entry they left) of a higher priority
-- before reaching the next one; and its page splits left the front of the
-- index half empty.
DROP INDEX jobs_claim;

-- Free jobs (waiting and scheduled) in exactly the contract's claim order:
-- a claim reads the jobtype's range from the front and stops after `limit`
-- entries with dt <= now.
CREATE INDEX jobs_free ON jobs (jobtype, priority DESC, dt, id) WHERE lock = '';

-- Leased jobs (running and expired) by lease expiry: `dt <= now` is exactly
-- the expired ones, one range per jobtype.
CREATE INDEX jobs_leased ON jobs (jobtype, dt) WHERE lock <> '';
