-- jobstore schema, version 7: job history, tags, and maintained archive
-- counts. See the README, "Data layout" and "History, tags and counts".

-- Writes to `archive` wait until this migration commits: the counts below
-- are taken from the rows present, and the triggers count every row
-- written after.
LOCK TABLE jobs, archive IN SHARE ROW EXCLUSIVE MODE;

-- The newest 20 events of a job, oldest first (a JSON array of
-- JobEvent objects), and the tags it was added with. Constant defaults:
-- adding the columns rewrites nothing, and every job stored before reads
-- back with no events and no tags. A job keeps both when it moves between
-- `jobs` and `archive`.
ALTER TABLE jobs
    ADD COLUMN history jsonb  NOT NULL DEFAULT '[]',
    ADD COLUMN tags    text[] NOT NULL DEFAULT '{}';
ALTER TABLE archive
    ADD COLUMN history jsonb  NOT NULL DEFAULT '[]',
    ADD COLUMN tags    text[] NOT NULL DEFAULT '{}';

-- Appends event `e` to history `h`, keeping the newest 20 (every
-- statement appends one event per job, so `h` holds at most 20 and one
-- removal from the front is enough). A single expression, so the planner
-- inlines it into the statements that call it.
CREATE FUNCTION jobstore_push_event(h jsonb, e jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN jsonb_array_length(h) >= 20
                THEN (h - 0) || jsonb_build_array(e)
                ELSE h || jsonb_build_array(e) END
$$;

-- Archived jobs per (jobtype, result code): job_counts reads this table
-- instead of counting the archive. Kept by the statement-level triggers
-- below, in the same statement (so the same transaction) as every write
-- to `archive`: archives and cancels (insert, or update on conflict),
-- purges, deletes and reruns (delete). Each upsert adds its delta under
-- the row's lock (`n = n + excluded.n`, re-evaluated on the newest
-- version), so concurrent writers add up exactly. A row that reaches 0 is
-- removed by the statement that brought it there.
CREATE TABLE archive_counts (
    jobtype text COLLATE "C" NOT NULL,
    code    text NOT NULL,
    n       bigint NOT NULL,
    PRIMARY KEY (jobtype, code)
);

-- Per statement: one upsert adding each (jobtype, code)'s delta, its
-- rows in key order (concurrent statements lock counter rows in the same
-- order, so they never deadlock on them), then the rows brought to 0 are
-- removed (this statement holds their locks already). A statement that
-- wrote no archive row upserts nothing.
CREATE FUNCTION archive_counts_track() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO archive_counts AS c (jobtype, code, n)
        SELECT jobtype, code, count(*) FROM new_rows
        GROUP BY jobtype, code ORDER BY jobtype, code
        ON CONFLICT (jobtype, code) DO UPDATE SET n = c.n + excluded.n;
        RETURN NULL;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO archive_counts AS c (jobtype, code, n)
        SELECT jobtype, code, -count(*) FROM old_rows
        GROUP BY jobtype, code ORDER BY jobtype, code
        ON CONFLICT (jobtype, code) DO UPDATE SET n = c.n + excluded.n;
    ELSE
        INSERT INTO archive_counts AS c (jobtype, code, n)
        SELECT jobtype, code, sum(d)
        FROM (SELECT jobtype, code, 1 AS d FROM new_rows
              UNION ALL
              SELECT jobtype, code, -1 FROM old_rows) x
        GROUP BY jobtype, code HAVING sum(d) <> 0 ORDER BY jobtype, code
        ON CONFLICT (jobtype, code) DO UPDATE SET n = c.n + excluded.n;
    END IF;
    DELETE FROM archive_counts c
    USING (SELECT DISTINCT jobtype, code FROM old_rows) o
    WHERE c.jobtype = o.jobtype AND c.code = o.code AND c.n = 0;
    RETURN NULL;
END
$$;

CREATE TRIGGER archive_counts_insert AFTER INSERT ON archive
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION archive_counts_track();
CREATE TRIGGER archive_counts_delete AFTER DELETE ON archive
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION archive_counts_track();
CREATE TRIGGER archive_counts_update AFTER UPDATE ON archive
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION archive_counts_track();

-- The archive as it stands (writes to it wait for this migration).
INSERT INTO archive_counts (jobtype, code, n)
SELECT jobtype, code, count(*) FROM archive GROUP BY jobtype, code;

-- Adds now also store each job's tags (one text per job: its tags joined
-- by single spaces, which tags never contain) and its first event.
DROP FUNCTION add_jobs(text[], text[], bytea[], int4[], int8[], int8, text);

CREATE FUNCTION add_jobs(
    p_ids text[], p_jobtypes text[], p_datas bytea[], p_priorities int4[], p_dts int8[],
    p_tags text[], p_now int8, p_channel text
) RETURNS SETOF text
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
    v_inserted text[];
    v_types text[];
    v_archived text[];
    v_added jsonb := jsonb_build_array(jsonb_build_object('at', p_now, 'attempt', 0, 'event', 'added'));
BEGIN
    WITH ins AS (
        INSERT INTO jobs (id, jobtype, data, priority, dt, lock, attempts, create_dt,
                          history, tags)
        SELECT t.id, t.jobtype, t.data, t.priority, t.dt, '', 0, p_now,
               v_added, coalesce(string_to_array(nullif(t.tags, ''), ' '), '{}')
        FROM unnest(p_ids, p_jobtypes, p_datas, p_priorities, p_dts, p_tags)
            AS t (id, jobtype, data, priority, dt, tags)
        ON CONFLICT (id) DO NOTHING
        RETURNING jobs.id, jobs.jobtype
    )
    SELECT coalesce(array_agg(ins.id), '{}'), coalesce(array_agg(DISTINCT ins.jobtype), '{}')
    INTO v_inserted, v_types
    FROM ins;

    -- As in version 1: an id archived meanwhile counts as existing (see
    -- the first migration).
    SELECT coalesce(array_agg(a.id), '{}') INTO v_archived
    FROM archive a WHERE a.id = ANY (v_inserted);
    IF cardinality(v_archived) > 0 THEN
        DELETE FROM jobs j WHERE j.id = ANY (v_archived);
        v_inserted := ARRAY(SELECT x FROM unnest(v_inserted) x WHERE x <> ALL (v_archived));
    END IF;

    PERFORM pg_notify(p_channel, t) FROM unnest(v_types) t;

    RETURN QUERY SELECT unnest(v_inserted);
END
$fn$;
