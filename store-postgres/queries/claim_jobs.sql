-- Claims up to $3 eligible jobs of jobtype $1 at now = $2 for owner $4 with
-- lease expiry $5. `jobs` holds no archived rows, so "eligible" is just
-- dt <= now: one range of the claim index, read in claim order. SKIP LOCKED
-- lets concurrent claimers pass each other's rows instead of queueing.
-- UPDATE ... RETURNING does not keep order: the final SELECT restores it
-- (by the dt each job had before the claim).
WITH picked AS (
    SELECT id, dt
    FROM jobs
    WHERE jobtype = $1 AND dt <= $2
    ORDER BY priority DESC, dt, id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE jobs j
    SET lock = $4, dt = $5, attempts = j.attempts + 1
    FROM picked p
    WHERE j.id = p.id
    RETURNING j.id, j.jobtype, j.data, j.priority, j.dt, j.lock, j.attempts, j.create_dt,
              p.dt AS was_dt
)
SELECT id, jobtype, data, priority, dt, lock, attempts, create_dt
FROM claimed
ORDER BY priority DESC, was_dt, id
