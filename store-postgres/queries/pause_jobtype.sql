-- Pauses jobtype $1 (at $2); a row inserted means it was not paused.
INSERT INTO paused (jobtype, dt) VALUES ($1, $2)
ON CONFLICT (jobtype) DO NOTHING
