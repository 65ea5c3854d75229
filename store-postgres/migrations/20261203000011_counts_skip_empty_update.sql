-- Archive counters (migrations 7 and 9): the trigger function returns at
-- once when its statement updated no archived row. Every archive insert
-- has an `ON CONFLICT (id) DO UPDATE` (releases and cancels: an id that
-- should not be in `jobs` replaces its archived row instead of failing),
-- and PostgreSQL fires the statement-level UPDATE trigger of such an
-- INSERT whether or not a row conflicted, with empty transition tables:
-- every release ran the grouped upsert and the delete of zero rows for
-- nothing (0.2 ms of a release of 100 archived jobs, median; 0.08 ms with
-- the early return). The inserts and deletes count as in migration 9.
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
        -- No row updated (an insert none of whose rows conflicted).
        IF NOT EXISTS (SELECT FROM old_rows) THEN
            RETURN NULL;
        END IF;
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
