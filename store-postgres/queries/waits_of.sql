-- What the jobs $1 (ids, each once) wait, or waited, for, in one
-- statement: ('c', waiter, NULL, state, code, NULL, n) per waiter, state
-- and code of its edges; then ('e', waiter, target, state, code, status)
-- for the first $2 edges of each waiter by target id (the primary key's
-- order; the caller asks one more than its page). A job without edges,
-- and an unknown id, return no row (a deleted or purged waiter's edges
-- are dropped with it).
SELECT 'c' AS kind, g.waiter, NULL::text AS target, g.state::text AS state, g.code,
       NULL::int4 AS status, count(*) AS n
FROM edges g
WHERE g.waiter = ANY($1::text[])
GROUP BY g.waiter, g.state, g.code
UNION ALL
SELECT 'e', w.id, p.target, p.state::text, p.code, p.status, NULL
FROM unnest($1::text[]) AS w (id)
CROSS JOIN LATERAL (
    SELECT g.target, g.state, g.code, g.status
    FROM edges g
    WHERE g.waiter = w.id
    ORDER BY g.target
    LIMIT $2
) p
