-- Compare-and-set of schedule $1's firing state: applies only at version
-- $2 and past the watermark (a later $3, or the same one for an advance
-- that fires and skips nothing: $6 = 0 AND $7 = 0; any $3 when none is
-- stored). Sets the watermark $3, the last job $4 (NULL keeps it),
-- next_due $5 (NULL: never), adds $6 fired and $7 skipped. An update that
-- waited on a concurrent one re-checks the WHERE on the row's newest
-- version, so of concurrent advances to one watermark one applies. A row
-- back means it applied.
UPDATE schedules
SET fired_through = $3,
    last_job = coalesce($4, last_job),
    next_due = $5,
    fired = fired + $6,
    skipped = skipped + $7
WHERE name = $1 AND version = $2
  AND (fired_through IS NULL OR fired_through < $3
       OR (fired_through = $3 AND $6 = 0 AND $7 = 0))
RETURNING true
