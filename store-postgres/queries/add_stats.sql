-- Adds a batch of stats deltas at now, in one statement. The deltas come
-- as parallel arrays: $1 jobtypes, $2 minutes, $3 wait counts, $4 wait
-- sums (ms), $5 wait sums of squares, $6 wait histograms (flat: $11
-- buckets per delta, in delta order), $7 run counts, $8 run sums, $9 run
-- sums of squares, $10 run histograms (flat); $11 buckets per histogram
-- (17), $12 the width of a day (ms), $13 the oldest minute kept at now,
-- $14 the oldest day kept at now, $15 the most rows pruned per resolution.
--
-- Each delta gives a minute row (when its minute is kept) and goes into
-- a day row (when its day is kept). Validation lists each (jobtype,
-- minute) once, so the minute rows are distinct keys; deltas of one
-- jobtype in different minutes of one day are summed into one day row
-- first (GROUP BY): an upsert may not touch a row twice. The upsert adds
-- each row under its lock, re-evaluated on the newest version, so
-- concurrent adds sum exactly. Its rows are sorted by key (jobtype
-- bytewise): concurrent adds lock the rows they share in one order and
-- never deadlock on them.
--
-- Then the rows older than the buckets kept at now are deleted: per
-- resolution, the front of its range of `stats_by_age`, oldest first, up
-- to $15 rows. The delete starts once the upsert is done (its one-time
-- filter counts the upsert's rows) and skips rows others hold (SKIP
-- LOCKED): a statement waits for rows only while upserting, in key order,
-- and never waits once it holds rows out of that order. By ctid, as
-- purge_archived does.
WITH d AS (
    SELECT d.jobtype, d.minute, d.minute - d.minute % $12 AS day,
           d.wait_count, d.wait_sum_ms, d.wait_sum_sq_ms,
           ($6::int8[])[(d.i::int4 - 1) * $11 + 1 : d.i::int4 * $11] AS wait_buckets,
           d.run_count, d.run_sum_ms, d.run_sum_sq_ms,
           ($10::int8[])[(d.i::int4 - 1) * $11 + 1 : d.i::int4 * $11] AS run_buckets
    FROM unnest($1::text[], $2::int8[], $3::int8[], $4::int8[], $5::float8[],
                $7::int8[], $8::int8[], $9::float8[])
        WITH ORDINALITY AS d (jobtype, minute, wait_count, wait_sum_ms, wait_sum_sq_ms,
                              run_count, run_sum_ms, run_sum_sq_ms, i)
), added AS (
    INSERT INTO stats AS s (resolution, jobtype, start,
                            wait_count, wait_sum_ms, wait_sum_sq_ms, wait_buckets,
                            run_count, run_sum_ms, run_sum_sq_ms, run_buckets)
    SELECT * FROM (
        SELECT 'minute', jobtype, minute,
               wait_count, wait_sum_ms, wait_sum_sq_ms, wait_buckets,
               run_count, run_sum_ms, run_sum_sq_ms, run_buckets
        FROM d
        WHERE minute >= $13
        UNION ALL
        SELECT 'day', jobtype, day,
               sum(wait_count)::int8, sum(wait_sum_ms)::int8, sum(wait_sum_sq_ms),
               jobstore_sum_buckets(wait_buckets),
               sum(run_count)::int8, sum(run_sum_ms)::int8, sum(run_sum_sq_ms),
               jobstore_sum_buckets(run_buckets)
        FROM d
        WHERE day >= $14
        GROUP BY jobtype, day
    ) r (resolution, jobtype, start,
         wait_count, wait_sum_ms, wait_sum_sq_ms, wait_buckets,
         run_count, run_sum_ms, run_sum_sq_ms, run_buckets)
    ORDER BY resolution, jobtype COLLATE "C", start
    ON CONFLICT (resolution, jobtype, start) DO UPDATE SET
        wait_count     = s.wait_count + excluded.wait_count,
        wait_sum_ms    = s.wait_sum_ms + excluded.wait_sum_ms,
        wait_sum_sq_ms = s.wait_sum_sq_ms + excluded.wait_sum_sq_ms,
        wait_buckets   = jobstore_add_buckets(s.wait_buckets, excluded.wait_buckets),
        run_count      = s.run_count + excluded.run_count,
        run_sum_ms     = s.run_sum_ms + excluded.run_sum_ms,
        run_sum_sq_ms  = s.run_sum_sq_ms + excluded.run_sum_sq_ms,
        run_buckets    = jobstore_add_buckets(s.run_buckets, excluded.run_buckets)
    RETURNING 1
), pruned AS (
    DELETE FROM stats
    WHERE ctid = ANY (ARRAY(
        SELECT o.ctid
        FROM (VALUES ('minute', $13::int8), ('day', $14::int8)) AS k (resolution, oldest)
        CROSS JOIN LATERAL (
            SELECT ctid FROM stats
            WHERE resolution = k.resolution AND start < k.oldest
              AND (SELECT count(*) FROM added) >= 0
            ORDER BY start
            LIMIT $15
            FOR UPDATE SKIP LOCKED
        ) o
    ))
    RETURNING 1
)
SELECT (SELECT count(*) FROM added) AS added, (SELECT count(*) FROM pruned) AS pruned
