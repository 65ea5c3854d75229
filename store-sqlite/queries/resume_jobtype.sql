-- ?1 jobtype. No row changed: it was not paused.
DELETE FROM paused WHERE jobtype = ?1
