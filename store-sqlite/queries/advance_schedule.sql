-- ?1 name, ?2 version, ?3 fired_through, ?4 last_job (NULL: keep the
-- stored one), ?5 next_due (NULL: never), ?6 fired, ?7 skipped (both
-- clamped to 2^63 - 1). The compare-and-set: the version, and a later
-- watermark, or the same one for an advance that fires and skips nothing
-- (ScheduleAdvance::applies_after). Sums saturate at 2^63 - 1 (an integer
-- sum that overflows would turn REAL).
UPDATE schedules SET
    fired_through = ?3,
    last_job = COALESCE(?4, last_job),
    next_due = ?5,
    fired = MIN(fired + ?6, 9223372036854775807),
    skipped = MIN(skipped + ?7, 9223372036854775807)
WHERE name = ?1 AND version = ?2
  AND (fired_through IS NULL OR fired_through < ?3
       OR (fired_through = ?3 AND ?6 = 0 AND ?7 = 0))
