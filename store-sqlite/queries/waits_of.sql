-- ?1 JSON array of ids (no id twice), ?2 the page size + 1. One
-- statement, one snapshot: part 1 the edges of the listed jobs counted by
-- waiter, state and code, part 2 each one's first page of edges in target
-- order (row_number() over its primary-key range). Jobs without edges and
-- unknown ids give no row.
WITH w (id) AS (SELECT value FROM json_each(?1))
SELECT 1 AS part, e.waiter AS waiter, NULL AS target, e.state AS state, e.code AS code,
       NULL AS status, count(*) AS n
FROM w JOIN edges AS e ON e.waiter = w.id
GROUP BY e.waiter, e.state, e.code
UNION ALL
SELECT 2, waiter, target, state, code, status, 0 FROM (
    SELECT e.waiter, e.target, e.state, e.code, e.status,
           row_number() OVER (PARTITION BY e.waiter ORDER BY e.target) AS r
    FROM w JOIN edges AS e ON e.waiter = w.id
)
WHERE r <= ?2
