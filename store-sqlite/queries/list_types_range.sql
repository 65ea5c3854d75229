-- The jobtypes of a listing in [?9, ?10) (a prefix and its bound; every
-- jobtype: '' and '~'), walked over the state's index one seek per
-- jobtype: {index} is that index, {rows} its partial-index condition.
-- The walk ends with a NULL row.
types (jt) AS (
    SELECT (SELECT MIN(jobtype) FROM jobs INDEXED BY {index} WHERE {rows} AND jobtype >= ?9 AND jobtype < ?10)
    UNION ALL
    SELECT (SELECT MIN(jobtype) FROM jobs INDEXED BY {index} WHERE {rows} AND jobtype > types.jt AND jobtype < ?10)
    FROM types WHERE types.jt IS NOT NULL
)
