-- $1 before, $2 most rows, $3 result codes. One bounded batch: per code,
-- the oldest rows of its range of archive_purge (`code = c.code ... ORDER
-- BY done_dt LIMIT`, which the index answers in order, so the plan never
-- depends on how many rows the codes hold); the caller repeats it until a
-- batch comes back short. Rows another statement holds (a run again or a
-- delete) are skipped, so a purge never waits on one. By ctid: the rows found are deleted with a TID
-- scan (by id, the planner joins against a scan of the whole archive for
-- every batch).
--
-- A purged waiter (`pending` not NULL: added with dependencies) loses its
-- edges in the same statement (`gone_edges`, by the primary key's
-- prefix; nothing for plain rows); edges to a purged target stay, with
-- its code and status. Returns the number of rows purged.
WITH purged AS (
DELETE FROM archive
WHERE ctid = ANY (ARRAY(
    SELECT a.ctid
    FROM unnest($3::text[]) AS c (code)
    CROSS JOIN LATERAL (
        SELECT ctid FROM archive
        WHERE code = c.code AND done_dt < $1
        ORDER BY done_dt
        LIMIT $2
        FOR UPDATE SKIP LOCKED
    ) a
    LIMIT $2
))
RETURNING id, pending
), gone_edges AS (
    DELETE FROM edges g
    WHERE g.waiter = ANY (ARRAY(SELECT id FROM purged WHERE pending IS NOT NULL))
)
SELECT count(*) FROM purged
