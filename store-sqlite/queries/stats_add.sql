-- The buckets are appended at {rows}: one "(?, ?, ..., ?)" of 43 parameters
-- per bucket, bound as resolution ('minute' or 'day'), jobtype, start, then
-- the wait durations and the run durations, each as count, sum_ms,
-- sum_sq_ms and the 17 histogram counts b0..b16. A bucket already stored
-- is added to, column by column, in the order of the rows (the deltas of
-- several minutes of one day are several rows for one day bucket: each
-- adds in turn). The integer columns saturate at 2^63 - 1: past it SQLite
-- computes a sum as a REAL, which MIN() brings back to the largest integer.
INSERT INTO stats (resolution, jobtype, start,
    wait_count, wait_sum_ms, wait_sum_sq_ms,
    wait_b0, wait_b1, wait_b2, wait_b3, wait_b4, wait_b5, wait_b6, wait_b7, wait_b8,
    wait_b9, wait_b10, wait_b11, wait_b12, wait_b13, wait_b14, wait_b15, wait_b16,
    run_count, run_sum_ms, run_sum_sq_ms,
    run_b0, run_b1, run_b2, run_b3, run_b4, run_b5, run_b6, run_b7, run_b8,
    run_b9, run_b10, run_b11, run_b12, run_b13, run_b14, run_b15, run_b16)
VALUES {rows}
ON CONFLICT (resolution, jobtype, start) DO UPDATE SET
    wait_count = MIN(wait_count + excluded.wait_count, 9223372036854775807),
    wait_sum_ms = MIN(wait_sum_ms + excluded.wait_sum_ms, 9223372036854775807),
    wait_sum_sq_ms = wait_sum_sq_ms + excluded.wait_sum_sq_ms,
    wait_b0 = MIN(wait_b0 + excluded.wait_b0, 9223372036854775807),
    wait_b1 = MIN(wait_b1 + excluded.wait_b1, 9223372036854775807),
    wait_b2 = MIN(wait_b2 + excluded.wait_b2, 9223372036854775807),
    wait_b3 = MIN(wait_b3 + excluded.wait_b3, 9223372036854775807),
    wait_b4 = MIN(wait_b4 + excluded.wait_b4, 9223372036854775807),
    wait_b5 = MIN(wait_b5 + excluded.wait_b5, 9223372036854775807),
    wait_b6 = MIN(wait_b6 + excluded.wait_b6, 9223372036854775807),
    wait_b7 = MIN(wait_b7 + excluded.wait_b7, 9223372036854775807),
    wait_b8 = MIN(wait_b8 + excluded.wait_b8, 9223372036854775807),
    wait_b9 = MIN(wait_b9 + excluded.wait_b9, 9223372036854775807),
    wait_b10 = MIN(wait_b10 + excluded.wait_b10, 9223372036854775807),
    wait_b11 = MIN(wait_b11 + excluded.wait_b11, 9223372036854775807),
    wait_b12 = MIN(wait_b12 + excluded.wait_b12, 9223372036854775807),
    wait_b13 = MIN(wait_b13 + excluded.wait_b13, 9223372036854775807),
    wait_b14 = MIN(wait_b14 + excluded.wait_b14, 9223372036854775807),
    wait_b15 = MIN(wait_b15 + excluded.wait_b15, 9223372036854775807),
    wait_b16 = MIN(wait_b16 + excluded.wait_b16, 9223372036854775807),
    run_count = MIN(run_count + excluded.run_count, 9223372036854775807),
    run_sum_ms = MIN(run_sum_ms + excluded.run_sum_ms, 9223372036854775807),
    run_sum_sq_ms = run_sum_sq_ms + excluded.run_sum_sq_ms,
    run_b0 = MIN(run_b0 + excluded.run_b0, 9223372036854775807),
    run_b1 = MIN(run_b1 + excluded.run_b1, 9223372036854775807),
    run_b2 = MIN(run_b2 + excluded.run_b2, 9223372036854775807),
    run_b3 = MIN(run_b3 + excluded.run_b3, 9223372036854775807),
    run_b4 = MIN(run_b4 + excluded.run_b4, 9223372036854775807),
    run_b5 = MIN(run_b5 + excluded.run_b5, 9223372036854775807),
    run_b6 = MIN(run_b6 + excluded.run_b6, 9223372036854775807),
    run_b7 = MIN(run_b7 + excluded.run_b7, 9223372036854775807),
    run_b8 = MIN(run_b8 + excluded.run_b8, 9223372036854775807),
    run_b9 = MIN(run_b9 + excluded.run_b9, 9223372036854775807),
    run_b10 = MIN(run_b10 + excluded.run_b10, 9223372036854775807),
    run_b11 = MIN(run_b11 + excluded.run_b11, 9223372036854775807),
    run_b12 = MIN(run_b12 + excluded.run_b12, 9223372036854775807),
    run_b13 = MIN(run_b13 + excluded.run_b13, 9223372036854775807),
    run_b14 = MIN(run_b14 + excluded.run_b14, 9223372036854775807),
    run_b15 = MIN(run_b15 + excluded.run_b15, 9223372036854775807),
    run_b16 = MIN(run_b16 + excluded.run_b16, 9223372036854775807)
