-- ?1 JSON array of ids. The first statement of unblock_jobs, in its
-- BEGIN IMMEDIATE transaction: the pending and held edges of the listed
-- jobs that are blocked become skipped ('s', no code), one range of the
-- primary key per job. A skipped edge leaves edges_open: its target's end
-- no longer reaches the waiter.
UPDATE edges SET state = 's', code = NULL, status = NULL
WHERE waiter IN (SELECT j.id FROM json_each(?1) AS e JOIN jobs AS j ON j.id = e.value
                 WHERE j.lock = '__blocked')
  AND state IN ('p', 'h')
