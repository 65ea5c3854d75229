-- A job's W3C trace context (jobstore_api::TraceContext): its traceparent,
-- and its tracestate if it had one, as given at add; NULL traceparent: none.
-- Written by the add, carried along when a job moves between `jobs` and
-- `archive` (release and cancel archive it, run again brings it back),
-- never changed, read with the job. No index: nothing filters or sorts by
-- them. Adding a column without a default rewrites no row; old rows read
-- NULL, no trace context.
ALTER TABLE jobs ADD COLUMN traceparent text, ADD COLUMN tracestate text;
ALTER TABLE archive ADD COLUMN traceparent text, ADD COLUMN tracestate text;

-- Adds store each job's trace context too (two more parallel arrays, NULL
-- where a job has none). The version of migration 7 stays for a daemon of
-- the previous version still running on this schema (its jobs get no
-- trace context); this one is the same with the two columns.
CREATE FUNCTION add_jobs(
    p_ids text[], p_jobtypes text[], p_datas bytea[], p_priorities int4[], p_dts int8[],
    p_tags text[], p_traceparents text[], p_tracestates text[], p_now int8, p_channel text
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
                          history, tags, traceparent, tracestate)
        SELECT t.id, t.jobtype, t.data, t.priority, t.dt, '', 0, p_now,
               v_added, coalesce(string_to_array(nullif(t.tags, ''), ' '), '{}'),
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
