-- jobstore SQLite schema, version 6: per-jobtype timing stats (add_stats,
-- job_stats). See README.md ("Data layout", "Stats").

-- One row per (resolution, jobtype, bucket start): the jobtype's wait and
-- run durations in that minute or UTC day, each as a count, a sum (ms), a
-- sum of squares (ms², a double) and a histogram of 17 counts, one column
-- each: b0..b15 hold the durations up to each bound of
-- HISTOGRAM_BOUNDS_MS, b16 those past the last. Every add_stats upserts
-- its buckets, adding to these columns (`col = col + excluded.col`), and
-- deletes the rows older than the buckets kept, in one transaction.
CREATE TABLE stats (
    resolution TEXT NOT NULL CHECK (resolution IN ('minute', 'day')),
    jobtype TEXT NOT NULL,
    start INTEGER NOT NULL,
    wait_count INTEGER NOT NULL,
    wait_sum_ms INTEGER NOT NULL,
    wait_sum_sq_ms REAL NOT NULL,
    wait_b0 INTEGER NOT NULL,
    wait_b1 INTEGER NOT NULL,
    wait_b2 INTEGER NOT NULL,
    wait_b3 INTEGER NOT NULL,
    wait_b4 INTEGER NOT NULL,
    wait_b5 INTEGER NOT NULL,
    wait_b6 INTEGER NOT NULL,
    wait_b7 INTEGER NOT NULL,
    wait_b8 INTEGER NOT NULL,
    wait_b9 INTEGER NOT NULL,
    wait_b10 INTEGER NOT NULL,
    wait_b11 INTEGER NOT NULL,
    wait_b12 INTEGER NOT NULL,
    wait_b13 INTEGER NOT NULL,
    wait_b14 INTEGER NOT NULL,
    wait_b15 INTEGER NOT NULL,
    wait_b16 INTEGER NOT NULL,
    run_count INTEGER NOT NULL,
    run_sum_ms INTEGER NOT NULL,
    run_sum_sq_ms REAL NOT NULL,
    run_b0 INTEGER NOT NULL,
    run_b1 INTEGER NOT NULL,
    run_b2 INTEGER NOT NULL,
    run_b3 INTEGER NOT NULL,
    run_b4 INTEGER NOT NULL,
    run_b5 INTEGER NOT NULL,
    run_b6 INTEGER NOT NULL,
    run_b7 INTEGER NOT NULL,
    run_b8 INTEGER NOT NULL,
    run_b9 INTEGER NOT NULL,
    run_b10 INTEGER NOT NULL,
    run_b11 INTEGER NOT NULL,
    run_b12 INTEGER NOT NULL,
    run_b13 INTEGER NOT NULL,
    run_b14 INTEGER NOT NULL,
    run_b15 INTEGER NOT NULL,
    run_b16 INTEGER NOT NULL,
    PRIMARY KEY (resolution, jobtype, start)
) WITHOUT ROWID;

-- Pruning: the rows older than the buckets kept are the front of each
-- resolution's range of this index.
CREATE INDEX stats_by_age ON stats (resolution, start);
