-- Resumes jobtype $1 and, if it was paused, notifies the channel $2 with
-- it. Returns how many rows it removed (0 or 1).
WITH gone AS (
    DELETE FROM paused WHERE jobtype = $1 RETURNING jobtype
)
SELECT count(pg_notify($2, jobtype)) AS n FROM gone
