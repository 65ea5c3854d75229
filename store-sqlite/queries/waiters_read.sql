-- ?1 JSON array of ids: the waiters of the edges edges_end.sql ended done.
-- Per waiter what the store decides from: its jobtype, lock, pending
-- count, policy and target marker (its own waiters, if it is cancelled).
SELECT id, jobtype, lock, pending, dep_policy, waited
FROM jobs WHERE id IN (SELECT value FROM json_each(?1))
