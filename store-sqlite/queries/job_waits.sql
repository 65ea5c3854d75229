-- ?1 waiter id, ?2 the target the page starts after ('' for the first),
-- ?3 the page size + 1. One statement, one snapshot: part 0 whether the
-- job exists, part 1 its edges counted by state and code, part 2 one page
-- of its edges in target order (the primary key, from ?2 on).
SELECT 0 AS part, NULL AS target, NULL AS state, NULL AS code, NULL AS status,
       EXISTS (SELECT 1 FROM jobs WHERE id = ?1) AS n
UNION ALL
SELECT 1, NULL, state, code, NULL, count(*) FROM edges WHERE waiter = ?1 GROUP BY state, code
UNION ALL
SELECT * FROM (
    SELECT 2, target, state, code, status, 0 FROM edges
    WHERE waiter = ?1 AND target > ?2 ORDER BY target LIMIT ?3
)
