-- What job $1 waits, or waited, for, in one statement: ('k') if the job
-- exists (in `jobs` or `archive`); ('c', state, code, n) per state and
-- code of its edges; then ('e', target, state, code, status) for up to $3
-- edges after target $2 ('' for the first page), by target id (the
-- primary key's order).
SELECT 'k' AS kind, NULL::text AS target, NULL::text AS state, NULL::text AS code,
       NULL::int4 AS status, NULL::int8 AS n
WHERE EXISTS (SELECT 1 FROM jobs WHERE id = $1) OR EXISTS (SELECT 1 FROM archive WHERE id = $1)
UNION ALL
SELECT 'c', NULL, state::text, code, NULL, count(*)
FROM edges WHERE waiter = $1
GROUP BY state, code
UNION ALL
(SELECT 'e', target, state::text, code, status, NULL
 FROM edges WHERE waiter = $1 AND target > $2
 ORDER BY target
 LIMIT $3)
