-- ?1 jobtype, ?2 now. No row changed: it was paused already.
INSERT INTO paused (jobtype, dt) VALUES (?1, ?2)
ON CONFLICT (jobtype) DO NOTHING
