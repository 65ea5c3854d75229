-- One page of archived jobs of every jobtype, newest first: done_dt DESC,
-- id DESC. $1 the result codes, $2 rows to return (limit + 1), $3, $4 the
-- key to start after (as in list_archived.sql), $5, $6 the created range
-- [from, to), $7 whether to return payloads, $8 the start of the archived
-- range (done_dt >= $8), $9 the tag a job must carry (NULL: any job).
--
-- Per code, one range of `archive_by_code` (code, done_dt, id), read
-- backwards from the cursor and stopped by the LIMIT; the merge keeps $2.
-- A page reads at most $2 entries per code, however large the archive.
SELECT p.id, p.jobtype, p.data, p.priority, p.dt, '__done' AS lock, p.attempts, p.create_dt,
       p.done_dt, p.code, p.status, p.output, false AS cancel_requested,
       p.tags, p.history::text, p.claimed_at, p.claimed_by,
       p.traceparent, p.tracestate, p.unique_key, p.repeat_rule, p.pending, p.dep_policy
FROM unnest($1::text[]) AS c (code)
CROSS JOIN LATERAL (
    SELECT id, jobtype, CASE WHEN $7 THEN data ELSE '' END AS data, priority, dt,
           attempts, create_dt, done_dt, code, status, output, tags, history,
           claimed_at, claimed_by, traceparent, tracestate, unique_key, repeat_rule, pending, dep_policy
    FROM archive
    WHERE code = c.code AND (done_dt, id) < ($3, $4)
      AND done_dt >= $8
      AND create_dt >= $5 AND create_dt < $6
      AND ($9::text IS NULL OR $9 = ANY (tags))
    ORDER BY done_dt DESC, id DESC
    LIMIT $2
) p
ORDER BY p.done_dt DESC, p.id DESC
LIMIT $2
