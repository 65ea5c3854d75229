-- Archive counters in slots: each row of `archive_counts` becomes up to 16
-- rows per (jobtype, code), one per slot, and a statement adds its delta
-- to the slot of its connection (`pg_backend_pid() % 16`). One counter row
-- per (jobtype, code) made every release that archived jobs of one
-- jobtype and code wait for the previous one to commit (the upsert holds
-- the row's lock until then); connections now add to their own rows.
-- Readers sum the slots. A slot may go below 0 (a purge on one connection
-- of jobs archived on another); the sum over slots is the count. A row
-- that reaches 0 is still removed by the statement that brought it there.
ALTER TABLE archive_counts ADD COLUMN slot smallint NOT NULL DEFAULT 0;
ALTER TABLE archive_counts DROP CONSTRAINT archive_counts_pkey;
ALTER TABLE archive_counts ADD PRIMARY KEY (jobtype, code, slot);
ALTER TABLE archive_counts ALTER COLUMN slot DROP DEFAULT;

-- As in migration 7, with the statement's slot in every row it writes:
-- one upsert per statement, rows in key order (concurrent statements lock
-- counter rows in one order, so they never deadlock on them).
CREATE OR REPLACE FUNCTION archive_counts_track() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    s smallint := pg_backend_pid() % 16;
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO archive_counts AS c (jobtype, code, slot, n)
        SELECT jobtype, code, s, count(*) FROM new_rows
        GROUP BY jobtype, code ORDER BY jobtype, code
        ON CONFLICT (jobtype, code, slot) DO UPDATE SET n = c.n + excluded.n;
        RETURN NULL;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO archive_counts AS c (jobtype, code, slot, n)
        SELECT jobtype, code, s, -count(*) FROM old_rows
        GROUP BY jobtype, code ORDER BY jobtype, code
        ON CONFLICT (jobtype, code, slot) DO UPDATE SET n = c.n + excluded.n;
    ELSE
        INSERT INTO archive_counts AS c (jobtype, code, slot, n)
        SELECT jobtype, code, s, sum(d)
        FROM (SELECT jobtype, code, 1 AS d FROM new_rows
              UNION ALL
              SELECT jobtype, code, -1 FROM old_rows) x
        GROUP BY jobtype, code HAVING sum(d) <> 0 ORDER BY jobtype, code
        ON CONFLICT (jobtype, code, slot) DO UPDATE SET n = c.n + excluded.n;
    END IF;
    DELETE FROM archive_counts c
    USING (SELECT DISTINCT jobtype, code FROM old_rows) o
    WHERE c.jobtype = o.jobtype AND c.code = o.code AND c.slot = s AND c.n = 0;
    RETURN NULL;
END
$$;
