-- $1 jobtype.
DELETE FROM handlers WHERE jobtype = $1
