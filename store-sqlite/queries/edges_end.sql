-- ?1 JSON array of [target, code, status] arrays: jobs that left the live
-- states (archived with that result; deleted: 'cancelled', 0), each once.
-- Ends their pending edges (one range of edges_open per target) and
-- returns each ended edge's waiter and target. An edge ends once: a
-- second delivery finds it done.
UPDATE edges SET state = 'd', code = e.value ->> 1, status = e.value ->> 2
FROM json_each(?1) AS e
WHERE edges.target = e.value ->> 0 AND edges.state = 'p'
RETURNING edges.waiter, edges.target
