-- jobstore schema, version 10: a job's current claim kept in its row. See
-- the README, "Data layout" (migration 10).
--
-- A claim writes `claimed_at` (when; who is the job's `lock`, its attempts
-- after the claim are `attempts`) instead of appending a `claimed` event to
-- `history`, and the release that archives the job copies `claimed_at` and
-- the lock (`claimed_by`) into the archived row instead of appending
-- `claimed` and `archived`: the two writes every job goes through neither
-- read nor rewrite its history. Readers show the pending claim's events
-- after the stored ones (`jobstore_api::history::complete_history`). Every
-- other change to a job with a pending claim first appends its `claimed`
-- event to `history` and clears `claimed_at`, then appends its own event,
-- so stored and pending events never overlap.
--
-- Nullable, no default: adding the columns rewrites nothing, and every job
-- stored before reads back with no pending claim, exactly as it did.
ALTER TABLE jobs ADD COLUMN claimed_at bigint;
ALTER TABLE archive
    ADD COLUMN claimed_at bigint,
    ADD COLUMN claimed_by text COLLATE "C";

-- The history functions are single expressions that the planner inlines
-- into the statements calling them, which it does only if (1) a function
-- declared IMMUTABLE calls only immutable functions, and jsonb_build_array
-- and jsonb_build_object are STABLE: so they are declared STABLE (the
-- IMMUTABLE jobstore_push_event of migration 7 was never inlined, each
-- call ran as a function call of its own, and is replaced below); and
-- (2) every argument used more than once in the body is cheap (a column or
-- a parameter): so the event, an expression, appears once.

-- History `h` with the pending claim (claimed at `at` by `by`, attempts
-- `attempt`) appended as a `claimed` event, keeping the newest 20; `h`
-- itself when `at` is NULL (no pending claim: `h` is not read).
CREATE FUNCTION jobstore_store_claim(h jsonb, at int8, by text, attempt int4) RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN at IS NULL THEN h
                WHEN jsonb_array_length(h) >= 20
                THEN (h - 0) || jsonb_build_array(jsonb_build_object(
                         'at', at, 'by', by, 'attempt', attempt, 'event', 'claimed'))
                ELSE h || jsonb_build_array(jsonb_build_object(
                         'at', at, 'by', by, 'attempt', attempt, 'event', 'claimed')) END
$$;

-- History `h` with the pending claim (as in jobstore_store_claim, if `at`
-- is not NULL) and then event `e` appended, keeping the newest 20: what
-- every change other than a claim or an archiving release writes: `h`
-- without the front that makes room (none, one or two events), then the
-- claim's event (or nothing), then `e`.
CREATE FUNCTION jobstore_push_claim_event(h jsonb, at int8, by text, attempt int4, e jsonb)
RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN jsonb_array_length(h) + (at IS NOT NULL)::int4 >= 21 THEN h - 0 - 0
                WHEN jsonb_array_length(h) + (at IS NOT NULL)::int4 = 20 THEN h - 0
                ELSE h END
           || CASE WHEN at IS NULL THEN '[]'::jsonb
                   ELSE jsonb_build_array(jsonb_build_object(
                            'at', at, 'by', by, 'attempt', attempt, 'event', 'claimed')) END
           || jsonb_build_array(e)
$$;

-- As in migration 7 (`h` with `e` appended, keeping the newest 20), now
-- inlined: STABLE, and `e` written once.
CREATE OR REPLACE FUNCTION jobstore_push_event(h jsonb, e jsonb) RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN jsonb_array_length(h) >= 20 THEN h - 0 ELSE h END
           || jsonb_build_array(e)
$$;
