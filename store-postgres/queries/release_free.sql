-- Retry and unget: frees the owner's jobs and notifies the channel once per
-- jobtype freed. $1 ids, $2 owner, $3 new dt, $4 true for unget (the
-- attempt is taken back), $5 channel.
WITH released AS (
    UPDATE jobs
    SET lock = '',
        dt = $3,
        attempts = CASE WHEN $4 THEN greatest(attempts - 1, 0) ELSE attempts END
    WHERE id = ANY($1::text[]) AND lock = $2
    RETURNING id, jobtype
), notified AS (
    SELECT count(pg_notify($5, d.jobtype)) AS n
    FROM (SELECT DISTINCT jobtype FROM released) d
)
SELECT released.id FROM released, notified
