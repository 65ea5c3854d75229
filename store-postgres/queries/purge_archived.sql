-- $1 before. A range of archive_done_dt.
DELETE FROM archive WHERE done_dt < $1
