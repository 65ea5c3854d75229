-- $1 before, $2 most rows. One bounded batch of a range of
-- archive_done_dt; the caller repeats it until a batch comes back short.
-- By ctid: the rows found are deleted with a TID scan (by id, the planner
-- joins against a scan of the whole archive for every batch).
DELETE FROM archive
WHERE ctid = ANY (ARRAY(SELECT ctid FROM archive WHERE done_dt < $1 LIMIT $2))
