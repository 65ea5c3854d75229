-- $1 name; a row deleted means it existed.
DELETE FROM schedules WHERE name = $1
