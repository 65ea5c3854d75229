-- jobstore schema, version 13: a job's `added` event is implicit.
-- See README.md ("The implicit added event (migration 13)").
--
-- Every job's first event is `added`, at its create_dt, by nobody,
-- attempt 0: readers put it back (jobstore_api::history::with_added), so
-- adds store no history and a fresh job's row carries '[]' from the add
-- to the archive. Rows stored before keep theirs, which starts with
-- `added` and reads the same. The signature is migration 12's, so a
-- daemon of the previous version running on this schema calls this one
-- too: its readers show such a job's history without `added`.
CREATE OR REPLACE FUNCTION add_jobs(
    p_ids text[], p_jobtypes text[], p_datas bytea[], p_priorities int4[], p_dts int8[],
    p_tags text[], p_traceparents text[], p_tracestates text[], p_now int8, p_channel text
) RETURNS SETOF text
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
    v_inserted text[];
    v_types text[];
    v_archived text[];
BEGIN
    WITH ins AS (
        INSERT INTO jobs (id, jobtype, data, priority, dt, lock, attempts, create_dt,
                          tags, traceparent, tracestate)
        SELECT t.id, t.jobtype, t.data, t.priority, t.dt, '', 0, p_now,
               coalesce(string_to_array(nullif(t.tags, ''), ' '), '{}'),
               t.traceparent, t.tracestate
        FROM unnest(p_ids, p_jobtypes, p_datas, p_priorities, p_dts, p_tags,
                    p_traceparents, p_tracestates)
            AS t (id, jobtype, data, priority, dt, tags, traceparent, tracestate)
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
