-- ?1 name, ?2 paused (0 or 1), ?3 next_due on a resume (NULL: never), ?4 now.
-- No row changed: unknown, or already so. A pause keeps next_due.
UPDATE schedules SET
    paused = ?2,
    updated_dt = ?4,
    next_due = CASE WHEN ?2 THEN next_due ELSE ?3 END
WHERE name = ?1 AND paused <> ?2
