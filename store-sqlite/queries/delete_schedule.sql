-- ?1 name
DELETE FROM schedules WHERE name = ?1
