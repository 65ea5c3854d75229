-- ?1 JSON array of ids: waiters deleted or purged. Drops their edges (one
-- range of the primary key each), pending ones included, so an id added
-- again starts with none.
DELETE FROM edges WHERE waiter IN (SELECT value FROM json_each(?1))
