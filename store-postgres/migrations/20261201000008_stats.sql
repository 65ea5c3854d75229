-- jobstore schema, version 8: per-jobtype timing stats (add_stats,
-- job_stats). See the README, "Data layout" and "Stats".

-- One row per (resolution, jobtype, bucket start): the jobtype's wait and
-- run durations in that minute or UTC day, each as a count, a sum (ms), a
-- sum of squares (ms², a double) and a histogram of 17 buckets (one per
-- bound of HISTOGRAM_BOUNDS_MS and one past them) in one bigint[]. Every
-- add_stats is one upsert adding its deltas to these columns under the
-- row's lock (`col = stats.col + excluded.col`), then a delete of the rows
-- older than the buckets kept. Half-filled pages: the rows of the current
-- minute and day are updated again by every add, and an update stays on
-- its page (HOT, no index entry) while the page has room.
CREATE TABLE stats (
    resolution     text NOT NULL CHECK (resolution IN ('minute', 'day')),
    jobtype        text COLLATE "C" NOT NULL,
    start          bigint NOT NULL,
    wait_count     bigint NOT NULL,
    wait_sum_ms    bigint NOT NULL,
    wait_sum_sq_ms double precision NOT NULL,
    wait_buckets   bigint[] NOT NULL CHECK (cardinality(wait_buckets) = 17),
    run_count      bigint NOT NULL,
    run_sum_ms     bigint NOT NULL,
    run_sum_sq_ms  double precision NOT NULL,
    run_buckets    bigint[] NOT NULL CHECK (cardinality(run_buckets) = 17),
    PRIMARY KEY (resolution, jobtype, start)
) WITH (fillfactor = 50);

-- Pruning: the rows older than the buckets kept are the front of each
-- resolution's range, read oldest first.
CREATE INDEX stats_by_age ON stats (resolution, start);

-- Two histograms added bucket by bucket (both of 17 buckets).
CREATE FUNCTION jobstore_add_buckets(a bigint[], b bigint[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT ARRAY(SELECT x + y FROM unnest(a, b) WITH ORDINALITY AS t (x, y, n) ORDER BY n)
$$;

-- The histograms of a group added bucket by bucket (the day rows of one
-- batch). The transition function is strict and there is no initial
-- value: the first histogram is the start.
CREATE AGGREGATE jobstore_sum_buckets(bigint[]) (
    SFUNC = jobstore_add_buckets,
    STYPE = bigint[]
);
