-- Pauses ($2 true) or resumes ($2 false) schedule $1 if it is not so
-- already, at $4; a resume also sets next_due to $3, a pause keeps it.
-- A row changed means it changed.
UPDATE schedules
SET paused = $2,
    updated_dt = $4,
    next_due = CASE WHEN $2 THEN next_due ELSE $3::bigint END
WHERE name = $1 AND paused <> $2
