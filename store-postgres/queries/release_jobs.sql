-- Lets go of the jobs locked by $2, each as its own entry says, in one
-- statement. The entries come as parallel arrays, one element per job
-- (each id once): $1 ids, $3 kinds ('r' retry, 'u' unget, 'a' archive,
-- 'd' delete), $4 new dt (retry: now + delay, unget: now; NULL otherwise),
-- $5 result codes (archive; NULL otherwise), $6 statuses (archive: the
-- result's; retry: the run's, or NULL), $7 outputs (archive; NULL
-- otherwise).
-- $8 now (done_dt), $9 now + 1000 years (dt of archived jobs), $10 channel.
--
-- Retry and unget update the job in place (clearing its cancel mark) and
-- notify the channel once per jobtype freed; archive moves it to `archive` with its own result;
-- delete removes it. The entries are joined to their jobs by id and the
-- jobs locked first, in id order like every statement that locks jobs by
-- id (so two of them never wait on each other in a cycle); a job is
-- re-checked on its newest version (`lock = $2`) as it is locked, and
-- only the jobs locked change. (One CTE carries both the entries and the
-- lock: joining a second CTE of the locked ids to the entries planned a
-- nested loop over CTE scans, 100 x 100 rows per release of 100.) The
-- update and the delete join the CTE's rows by id alone: the CTE holds the
-- lock of each, taken on its newest version with lock = $2, so nobody else
-- changes them before this statement ends, and an update or delete that
-- finds an older version (one a cancel marked after this statement's
-- snapshot) follows it to the version locked. With `j.lock = $2` there
-- too, once ANALYZE had seen the jobs free (an empty `jobs_leased`), the
-- planner read the owner's rows from `jobs_leased` expecting one, and
-- joined them to the CTE with a nested loop over it, again 100 x 100 rows
-- per release of 100; by id alone, each row is a primary-key lookup. (By
-- ctid, as claims do, a job marked after the snapshot was missed: the
-- version locked is newer than the snapshot, and a TID scan does not see
-- it.) The two data-modifying CTEs touch disjoint rows: an id is listed
-- once, with one kind. Returns the ids released.
--
-- Every job changed gets one event (by $2, at $8): `retried` (delay_ms =
-- dt - now, and the run's status if given), `handed_back` (attempts after
-- the decrement) or `archived` (code, status). A retry or unget appends
-- the job's pending claim (claimed_at, by $2, its attempts before the
-- decrement) and then its own event to its history and clears claimed_at
-- (jobstore_push_claim_event). An archive of a job with a pending claim
-- copies its history unchanged, with claimed_at and claimed_by = $2, into
-- the row the archive receives: readers show `claimed` and `archived`
-- (done_dt, code, status) from those columns, and the history is neither
-- read nor written. Only a job whose claim was stored already (a cancel
-- was requested meanwhile: claimed_at is NULL) gets its `archived` event
-- appended, as before. A delete records nothing. An archived job keeps
-- its trace context (traceparent, tracestate), copied into its row.
WITH r AS (
    SELECT j.id, e.kind, e.dt, e.code, e.status, e.output
    FROM unnest($1::text[], $3::text[], $4::int8[], $5::text[], $6::int4[], $7::bytea[])
        AS e (id, kind, dt, code, status, output)
    JOIN jobs j ON j.id = e.id
    WHERE j.lock = $2
    ORDER BY j.id
    FOR UPDATE OF j
), freed AS (
    UPDATE jobs j
    SET lock = '',
        dt = r.dt,
        cancel_requested = false,
        attempts = CASE WHEN r.kind = 'u' THEN greatest(j.attempts - 1, 0) ELSE j.attempts END,
        claimed_at = NULL,
        history = jobstore_push_claim_event(j.history, j.claimed_at, $2, j.attempts, CASE WHEN r.kind = 'u'
            THEN jsonb_build_object('at', $8::int8, 'by', $2::text,
                                    'attempt', greatest(j.attempts - 1, 0), 'event', 'handed_back')
            ELSE jsonb_strip_nulls(jsonb_build_object('at', $8::int8, 'by', $2::text,
                                    'attempt', j.attempts, 'event', 'retried',
                                    'delay_ms', r.dt - $8::int8, 'status', r.status))
            END)
    FROM r
    WHERE j.id = r.id AND r.kind IN ('r', 'u')
    RETURNING j.id, j.jobtype
), gone AS (
    DELETE FROM jobs j
    USING r
    WHERE j.id = r.id AND r.kind IN ('a', 'd')
    RETURNING j.id, j.jobtype, j.data, j.priority, j.attempts, j.create_dt,
              j.tags, j.history, j.claimed_at, j.traceparent, j.tracestate,
              r.kind, r.code, r.status, r.output
), archived AS (
    INSERT INTO archive (id, jobtype, data, priority, dt, attempts, create_dt,
                         done_dt, code, status, output, tags, history,
                         claimed_at, claimed_by, traceparent, tracestate)
    SELECT id, jobtype, data, priority, $9, attempts, create_dt, $8, code, status, output,
           tags,
           CASE WHEN claimed_at IS NOT NULL THEN history
                ELSE jobstore_push_event(history, jsonb_build_object(
                    'at', $8::int8, 'by', $2::text, 'attempt', attempts, 'event', 'archived',
                    'code', code, 'status', status)) END,
           claimed_at, CASE WHEN claimed_at IS NOT NULL THEN $2::text END,
           traceparent, tracestate
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
        traceparent = EXCLUDED.traceparent, tracestate = EXCLUDED.tracestate
), notified AS (
    SELECT count(pg_notify($10, d.jobtype)) AS n
    FROM (SELECT DISTINCT jobtype FROM freed) d
)
SELECT freed.id FROM freed, notified
UNION ALL
SELECT id FROM gone
