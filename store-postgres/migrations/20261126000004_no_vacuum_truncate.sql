-- jobstore schema, version 4. Vacuums of `jobs` never truncate it: cutting
-- the empty pages off its end takes an ACCESS EXCLUSIVE lock, which a busy
-- queue's claims hold off (the vacuum then waits for it in vain for up to
-- five seconds) or queue behind; the table grows back at once anyway.
ALTER TABLE jobs SET (vacuum_truncate = false);
