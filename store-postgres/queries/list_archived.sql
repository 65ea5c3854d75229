-- One page of archived jobs of some jobtypes, newest first: done_dt DESC,
-- id DESC. $1 jobtypes (text[], for an exact list; NULL otherwise), $2, $3
-- the jobtype range [from, to) when $1 is NULL (a prefix and its bound;
-- both '' for an exact list), $4 rows to return (limit + 1), $5, $6 the
-- key to start after: the cursor's (done_dt, id) or (archived.to, ''),
-- whichever is smaller, or (2^63 - 1, '') (so (done_dt, id) < key also
-- means done_dt < archived.to, and the backward scan starts at the key),
-- $7, $8 the created range [from, to), $9 whether to return payloads, $10
-- the result codes, $11 the start of the archived range (done_dt >= $11),
-- $12 the tag a job must carry (NULL: any job).
--
-- The jobtypes: the exact list, or a skip scan of the range over
-- `archive_by_type`. Per (jobtype, code), one range of `archive_by_type`
-- (jobtype, code, done_dt, id), read backwards from the cursor and stopped
-- by the LIMIT; the merge keeps $4. A page reads at most $4 entries per
-- (jobtype, code), however large the archive.
WITH RECURSIVE skip (jobtype) AS (
    (SELECT jobtype FROM archive
     WHERE jobtype >= $2 AND jobtype < $3
     ORDER BY jobtype LIMIT 1)
    UNION ALL
    SELECT (SELECT a.jobtype FROM archive a
            WHERE a.jobtype > s.jobtype AND a.jobtype < $3
            ORDER BY a.jobtype LIMIT 1)
    FROM skip s
    WHERE s.jobtype IS NOT NULL
), types (jobtype) AS (
    SELECT unnest($1::text[])
    UNION ALL
    SELECT jobtype FROM skip WHERE jobtype IS NOT NULL
)
SELECT p.id, p.jobtype, p.data, p.priority, p.dt, '__done' AS lock, p.attempts, p.create_dt,
       p.done_dt, p.code, p.status, p.output, false AS cancel_requested,
       p.tags, p.history::text, p.claimed_at, p.claimed_by,
       p.traceparent, p.tracestate, p.unique_key, p.repeat_rule, p.pending, p.dep_policy
FROM types t
CROSS JOIN unnest($10::text[]) AS c (code)
CROSS JOIN LATERAL (
    SELECT id, jobtype, CASE WHEN $9 THEN data ELSE '' END AS data, priority, dt,
           attempts, create_dt, done_dt, code, status, output, tags, history,
           claimed_at, claimed_by, traceparent, tracestate, unique_key, repeat_rule, pending, dep_policy
    FROM archive
    WHERE jobtype = t.jobtype AND code = c.code AND (done_dt, id) < ($5, $6)
      AND done_dt >= $11
      AND create_dt >= $7 AND create_dt < $8
      AND ($12::text IS NULL OR $12 = ANY (tags))
    ORDER BY done_dt DESC, id DESC
    LIMIT $4
) p
ORDER BY p.done_dt DESC, p.id DESC
LIMIT $4
