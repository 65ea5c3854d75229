-- Claims up to $3 eligible jobs of jobtype $1 at now = $2 for owner $4 with
-- lease expiry $5. Eligible jobs are free ones with dt <= now (the front of
-- the jobtype's range in `jobs_free`, read in claim order) and leased ones
-- whose lease expired (the range dt <= now of `jobs_leased`, sorted: expired
-- leases are few). `jobs` holds no archived rows. The merge of both, in
-- claim order, stops after $3 rows. Each branch locks up to $3 rows; those
-- the merge does not take are left unchanged (and unlocked when the
-- statement ends; the expired branch is normally empty). SKIP LOCKED
-- lets concurrent claimers pass each other's rows instead of queueing. A row
-- another transaction just claimed is re-checked on its new version before
-- it is locked. The update finds each locked row by its ctid (the version
-- just locked, which nobody else can change before this statement ends).
-- UPDATE ... RETURNING does not keep order: the final SELECT restores it
-- (by the dt each job had before the claim, returned last: the job's
-- claimed_due). A paused jobtype (a row in `paused`) claims nothing: the
-- NOT EXISTS is uncorrelated, so it is one
-- primary-key probe of `paused` per branch, evaluated once before the
-- branch reads (or locks) anything. Each claimed job gets `claimed_at =
-- $2` (its pending claim: by its lock, $4, with its attempts after the
-- claim), and its history is neither read nor written; only a job taken
-- over from an expired lease that still has a pending claim first has
-- that claim appended to its history as a `claimed` event (its old
-- claimed_at, lock and attempts; see jobstore_store_claim).
-- Each job comes back as id, data, priority, attempts (after the claim),
-- create_dt, its dt before the claim, and `rare`: NULL for the usual job
-- (no result, no cancel mark, no tags, no stored history, no trace
-- context), else one record of the eight columns that hold them (code,
-- status, output, cancel_requested, tags, history as JSON text,
-- traceparent, tracestate; a job run again or repeated keeps its last
-- result), its unique key and its repeat rule (NULL for a plain job: a
-- bit in the null bitmap each). What
-- the claim set (jobtype, dt, lock, claimed_at, so the pending claim) the
-- caller knows and is not sent back: every column of a claimed row costs
-- the CTE's tuplestore, the wire and the reader, for every job.
WITH picked AS (
    SELECT * FROM (
        SELECT ctid AS tid, id, priority, dt
        FROM jobs
        WHERE jobtype = $1 AND lock = '' AND dt <= $2
          AND NOT EXISTS (SELECT 1 FROM paused WHERE jobtype = $1)
        ORDER BY priority DESC, dt, id
        LIMIT $3
        FOR UPDATE SKIP LOCKED
    ) free
    UNION ALL
    SELECT * FROM (
        SELECT ctid AS tid, id, priority, dt
        FROM jobs
        WHERE jobtype = $1 AND lock <> '' AND dt <= $2
          AND NOT EXISTS (SELECT 1 FROM paused WHERE jobtype = $1)
        ORDER BY priority DESC, dt, id
        LIMIT $3
        FOR UPDATE SKIP LOCKED
    ) expired
    ORDER BY priority DESC, dt, id
    LIMIT $3
), claimed AS (
    UPDATE jobs j
    SET lock = $4, dt = $5, attempts = j.attempts + 1, claimed_at = $2,
        history = jobstore_store_claim(j.history, j.claimed_at, j.lock, j.attempts)
    FROM picked p
    WHERE j.ctid = p.tid AND j.id = p.id
    RETURNING j.id, j.data, j.priority, j.attempts, j.create_dt, p.dt AS was_dt,
              CASE WHEN j.code IS NULL AND NOT j.cancel_requested AND j.tags = '{}'
                        AND j.history = '[]' AND j.traceparent IS NULL THEN NULL
                   ELSE ROW(j.code, j.status, j.output, j.cancel_requested, j.tags,
                            j.history::text, j.traceparent, j.tracestate) END AS rare,
              j.unique_key, j.repeat_rule, j.pending, j.dep_policy
)
SELECT id, data, priority, attempts, create_dt, was_dt, rare, unique_key, repeat_rule,
       pending, dep_policy
FROM claimed
ORDER BY priority DESC, was_dt, id
