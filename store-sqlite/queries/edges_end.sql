-- ?1 JSON array of [target, code, status] arrays: jobs that left the live
-- states (archived with that result; deleted: 'cancelled', 0), each once.
-- Ends their open edges, pending and held (one range of edges_open per
-- target), and returns each one's waiter, target and new state: 'h' held
-- again with this result when the code is not ok and the waiter is
-- blocked under the policy 'hold' (its row read only for such an end),
-- else 'd' done. An edge ends once: a second delivery finds it done, and
-- a held one is reached again only by the target's next end.
UPDATE edges SET
    state = CASE WHEN e.value ->> 1 <> 'ok' AND EXISTS (
                SELECT 1 FROM jobs AS w WHERE w.id = edges.waiter AND w.lock = '__blocked'
                    AND w.dep_policy IN ('hold', 'hold+outputs'))
            THEN 'h' ELSE 'd' END,
    code = e.value ->> 1, status = e.value ->> 2
FROM json_each(?1) AS e
WHERE edges.target = e.value ->> 0 AND edges.state IN ('p', 'h')
RETURNING edges.waiter, edges.target, edges.state
