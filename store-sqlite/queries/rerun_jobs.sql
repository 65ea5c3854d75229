-- ?1 new dt (now + delay), ?2 JSON array of ids. Archived jobs become free;
-- the last result stays readable until the next archive.
UPDATE jobs SET lock = '', dt = ?1, attempts = 0, done_dt = NULL, cancel_requested = 0
WHERE lock = '__done' AND id IN (SELECT value FROM json_each(?2))
RETURNING id, jobtype
