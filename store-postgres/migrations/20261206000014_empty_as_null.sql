-- jobstore schema, version 14: an empty history or tag list is NULL.
-- See README.md ("Empty as NULL (migration 14)").
--
-- Most jobs never get a stored event (the `added` event is implicit since
-- version 13, a pending claim lives in claimed_at) nor a tag, yet every
-- row carried '[]' and '{}': about 18 bytes a row in `jobs` and in
-- `archive`, copied by every claim and every archive, and compared by
-- every claim to tell a plain job from one with something to return.
-- NULL takes a bit of the null bitmap and is tested by IS NULL. Rows
-- stored before keep '[]' and '{}', which read the same. Nothing is
-- rewritten: dropping NOT NULL and changing a default touch the catalog
-- only.
ALTER TABLE jobs
    ALTER COLUMN history DROP NOT NULL, ALTER COLUMN history DROP DEFAULT,
    ALTER COLUMN tags DROP NOT NULL, ALTER COLUMN tags DROP DEFAULT;
ALTER TABLE archive
    ALTER COLUMN history DROP NOT NULL, ALTER COLUMN history DROP DEFAULT,
    ALTER COLUMN tags DROP NOT NULL, ALTER COLUMN tags DROP DEFAULT;

-- The history functions of version 10, reading a NULL history as '[]'.
CREATE OR REPLACE FUNCTION jobstore_store_claim(h jsonb, at int8, by text, attempt int4)
RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN at IS NULL THEN h
                WHEN jsonb_array_length(coalesce(h, '[]')) >= 20
                THEN (h - 0) || jsonb_build_array(jsonb_build_object(
                         'at', at, 'by', by, 'attempt', attempt, 'event', 'claimed'))
                ELSE coalesce(h, '[]') || jsonb_build_array(jsonb_build_object(
                         'at', at, 'by', by, 'attempt', attempt, 'event', 'claimed')) END
$$;

CREATE OR REPLACE FUNCTION jobstore_push_claim_event(h jsonb, at int8, by text, attempt int4,
                                                     e jsonb)
RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN jsonb_array_length(coalesce(h, '[]')) + (at IS NOT NULL)::int4 >= 21
                THEN h - 0 - 0
                WHEN jsonb_array_length(coalesce(h, '[]')) + (at IS NOT NULL)::int4 = 20
                THEN h - 0
                ELSE coalesce(h, '[]') END
           || CASE WHEN at IS NULL THEN '[]'::jsonb
                   ELSE jsonb_build_array(jsonb_build_object(
                            'at', at, 'by', by, 'attempt', attempt, 'event', 'claimed')) END
           || jsonb_build_array(e)
$$;

CREATE OR REPLACE FUNCTION jobstore_push_event(h jsonb, e jsonb) RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN jsonb_array_length(coalesce(h, '[]')) >= 20 THEN h - 0
                ELSE coalesce(h, '[]') END
           || jsonb_build_array(e)
$$;

-- Version 13's add_jobs (same signature), storing no tags as NULL.
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
               string_to_array(nullif(t.tags, ''), ' '),
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
