-- The stats buckets of resolution $1 starting at or after $2 (the oldest
-- kept at now), for the jobtypes $3 (an exact list; NULL otherwise) or,
-- when $3 is NULL, the jobtype range [$4, $5) (a prefix and its bound, or
-- every jobtype), sorted by jobtype (bytewise: the "C" collation), then
-- start. Each branch is one range of the primary key (resolution,
-- jobtype, start) per jobtype listed, or one over the range; the other
-- branch reads nothing (`= ANY (NULL)`, or a one-time filter).
SELECT jobtype, start,
       wait_count, wait_sum_ms, wait_sum_sq_ms, wait_buckets,
       run_count, run_sum_ms, run_sum_sq_ms, run_buckets
FROM stats
WHERE resolution = $1 AND jobtype = ANY ($3::text[]) AND start >= $2
UNION ALL
SELECT jobtype, start,
       wait_count, wait_sum_ms, wait_sum_sq_ms, wait_buckets,
       run_count, run_sum_ms, run_sum_sq_ms, run_buckets
FROM stats
WHERE $3::text[] IS NULL AND resolution = $1 AND jobtype >= $4 AND jobtype < $5
  AND start >= $2
ORDER BY jobtype, start
