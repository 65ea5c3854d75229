-- ?1 JSON array of [jobtype, code, n] arrays, each (jobtype, code) once:
-- what one statement moved into the archive (n > 0) or out of it (n < 0),
-- grouped by the caller from the rows the statement returned, and run in
-- the same transaction. A count that falls to 0 stays, at 0.
INSERT INTO counts (jobtype, code, n)
SELECT value ->> 0, value ->> 1, value ->> 2 FROM json_each(?1) WHERE true
ON CONFLICT (jobtype, code) DO UPDATE SET n = n + excluded.n
