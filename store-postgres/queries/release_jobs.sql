-- Lets go of the jobs locked by $2, each as its own entry says, in one
-- statement. The entries come as parallel arrays, one element per job
-- (each id once): $1 ids, $3 kinds ('r' retry, 'u' unget, 'p' repeat,
-- 'a' archive, 'd' delete), $4 new dt (retry: now + delay, unget: now,
-- repeat: its time; NULL otherwise), $5 result codes (archive, repeat;
-- NULL otherwise), $6 statuses (archive, repeat: the result's; retry: the
-- run's, or NULL), $7 outputs (archive, repeat; NULL otherwise).
-- $8 now (done_dt), $9 now + 1000 years (dt of archived jobs), $10 channel,
-- $11 the payloads of repeats (NULL: keep the job's; the whole array is
-- NULL, padded by unnest, for a list without one), $12 the flow path
-- (see below).
--
-- Dependencies (README, "Dependencies"): an archive or delete applies
-- here only to a row without waiters (`waited` NULL), and a delete only
-- to a row without edges of its own (`pending` NULL), unless $12 (the
-- flow path, which runs this statement in a transaction followed by
-- jobstore_end_edges). An entry not applied does not come back, and the
-- statement reads nothing to say why: the store sends every archive or
-- delete entry missing from the rows returned through the flow path,
-- which applies those of jobs with edges and, lock re-checked, nothing
-- for a lost one (not locked by $2: its lease ran out and another
-- owner claimed it, or an id not held), at the cost of one small
-- transaction that changes nothing (rare). A plain list that its owner still holds comes back whole.
--
-- Retry, unget and repeat update the job in place (clearing its cancel
-- mark) and notify the channel once per jobtype freed; a repeat also
-- resets attempts to 0, stores its result as the job's last result (code,
-- status, output; the row stays in `jobs`, so it is never archived or
-- counted as such, and its unique key stays held) and replaces the payload
-- when it brings one; archive moves it to `archive` with its own result;
-- delete removes it. Each entry is joined to its job
-- by primary key (a nested loop driven by the entries), and a job is
-- changed only if it is locked by $2 on its newest version (`j.lock = $2`
-- is re-checked on the version found should another transaction change
-- it meanwhile). The caller sorts the entries by id and never mixes kinds
-- that update (r, u, p) with kinds that delete (a, d) in one statement: each
-- statement then locks its jobs in id order while the planner drives the
-- join from the entries, like every statement that locks jobs by id, so
-- two of them do not wait on each other in a cycle, with no locking pass
-- of its own. (On a small table the planner may hash-join and lock in
-- table order: a deadlock is then possible, and the store runs the
-- aborted statement again; README, "Lock order and deadlocks".) (Both CTEs run in one statement: with
-- both kinds, the updates would lock their ids in order, then the
-- deletes theirs, and a cancel locking both in id order between them
-- could close a cycle.) Returns (id, what, code, status) per entry
-- applied, and nothing else: what 'r' for a job freed (retry, unget,
-- repeat), else the entry's kind ('a' with its code and status, which the
-- flow path passes on to jobstore_end_edges; 'd').
--
-- Every job changed gets one event (by $2, at $8): `retried` (delay_ms =
-- dt - now, and the run's status if given), `handed_back` (attempts after
-- the decrement), `repeated` (code, status, next_ms = the new dt; the
-- run's attempt, before the reset) or `archived` (code, status). A retry,
-- unget or repeat appends the job's pending claim (claimed_at, by $2, its
-- attempts before the decrement or reset) and then its own event to its
-- history and clears claimed_at (jobstore_push_claim_event). An archive of a job with a pending claim
-- copies its history unchanged, with claimed_at and claimed_by = $2, into
-- the row the archive receives: readers show `claimed` and `archived`
-- (done_dt, code, status) from those columns, and the history is neither
-- read nor written. Only a job whose claim was stored already (a cancel
-- was requested meanwhile: claimed_at is NULL) gets its `archived` event
-- appended, as before. A delete records nothing. An archived job keeps
-- its trace context (traceparent, tracestate), its unique key and its
-- repeat rule (a failed run of a repeating job archives it), copied
-- into its row: the delete from `jobs` frees the key (jobs_unique), the
-- archived row keeps it for reads and windows (archive_unique).
WITH r AS (
    SELECT *
    FROM unnest($1::text[], $3::text[], $4::int8[], $5::text[], $6::int4[], $7::bytea[],
                $11::bytea[])
        AS r (id, kind, dt, code, status, output, data)
), freed AS (
    UPDATE jobs j
    SET lock = '',
        dt = r.dt,
        cancel_requested = false,
        attempts = CASE WHEN r.kind = 'u' THEN greatest(j.attempts - 1, 0)
                        WHEN r.kind = 'p' THEN 0 ELSE j.attempts END,
        data = CASE WHEN r.kind = 'p' THEN coalesce(r.data, j.data) ELSE j.data END,
        code = CASE WHEN r.kind = 'p' THEN r.code ELSE j.code END,
        status = CASE WHEN r.kind = 'p' THEN r.status ELSE j.status END,
        output = CASE WHEN r.kind = 'p' THEN r.output ELSE j.output END,
        claimed_at = NULL,
        history = jobstore_push_claim_event(j.history, j.claimed_at, $2, j.attempts, CASE r.kind
            WHEN 'u' THEN jsonb_build_object('at', $8::int8, 'by', $2::text,
                                    'attempt', greatest(j.attempts - 1, 0), 'event', 'handed_back')
            WHEN 'p' THEN jsonb_build_object('at', $8::int8, 'by', $2::text,
                                    'attempt', j.attempts, 'event', 'repeated',
                                    'code', r.code, 'status', r.status, 'next_ms', r.dt)
            ELSE jsonb_strip_nulls(jsonb_build_object('at', $8::int8, 'by', $2::text,
                                    'attempt', j.attempts, 'event', 'retried',
                                    'delay_ms', r.dt - $8::int8, 'status', r.status))
            END)
    FROM r
    WHERE j.id = r.id AND r.kind IN ('r', 'u', 'p') AND j.lock = $2
    RETURNING j.id, j.jobtype
), gone AS (
    DELETE FROM jobs j
    USING r
    WHERE j.id = r.id AND r.kind IN ('a', 'd') AND j.lock = $2
      -- One CASE over j and r, so that the planner keeps it a join filter
      -- and estimates the scan of jobs as before (an IS NULL pushed down to
      -- it makes the estimate of an unanalyzed table 1 row, and the plan a
      -- nested loop over r, 32 MiB of outputs, once per job).
      AND CASE WHEN j.waited IS NULL AND (r.kind = 'a' OR j.pending IS NULL) THEN true
               ELSE $12 END
    RETURNING j.id, j.jobtype, j.data, j.priority, j.attempts, j.create_dt,
              j.tags, j.history, j.claimed_at, j.traceparent, j.tracestate, j.unique_key,
              j.repeat_rule, j.pending, j.dep_policy, r.kind, r.code, r.status, r.output
), archived AS (
    INSERT INTO archive (id, jobtype, data, priority, dt, attempts, create_dt,
                         done_dt, code, status, output, tags, history,
                         claimed_at, claimed_by, traceparent, tracestate, unique_key,
                         repeat_rule, pending, dep_policy)
    SELECT id, jobtype, data, priority, $9, attempts, create_dt, $8, code, status, output,
           tags,
           CASE WHEN claimed_at IS NOT NULL THEN history
                ELSE jobstore_push_event(history, jsonb_build_object(
                    'at', $8::int8, 'by', $2::text, 'attempt', attempts, 'event', 'archived',
                    'code', code, 'status', status)) END,
           claimed_at, CASE WHEN claimed_at IS NOT NULL THEN $2::text END,
           traceparent, tracestate, unique_key, repeat_rule, pending, dep_policy
    FROM gone
    WHERE kind = 'a'
    -- add_jobs never lets an archived id back into jobs; should one get
    -- there anyway, the newer result replaces the older instead of failing.
    ON CONFLICT (id) DO UPDATE SET
        jobtype = EXCLUDED.jobtype, data = EXCLUDED.data,
        priority = EXCLUDED.priority, dt = EXCLUDED.dt,
        attempts = EXCLUDED.attempts, create_dt = EXCLUDED.create_dt,
        done_dt = EXCLUDED.done_dt, code = EXCLUDED.code,
        status = EXCLUDED.status, output = EXCLUDED.output,
        tags = EXCLUDED.tags, history = EXCLUDED.history,
        claimed_at = EXCLUDED.claimed_at, claimed_by = EXCLUDED.claimed_by,
        traceparent = EXCLUDED.traceparent, tracestate = EXCLUDED.tracestate,
        unique_key = EXCLUDED.unique_key, repeat_rule = EXCLUDED.repeat_rule,
        pending = EXCLUDED.pending, dep_policy = EXCLUDED.dep_policy
), notified AS (
    SELECT count(pg_notify($10, d.jobtype)) AS n
    FROM (SELECT DISTINCT jobtype FROM freed) d
)
SELECT freed.id, 'r' AS what, NULL::text AS code, NULL::int4 AS status FROM freed, notified
UNION ALL
SELECT id, kind, code, status FROM gone
