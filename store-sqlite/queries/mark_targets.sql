-- ?1 JSON array of ids: the live targets of the edges an add made. Sets
-- their marker (waited = 1), so that the statement that archives or
-- deletes one of them ends its edges.
UPDATE jobs SET waited = 1
WHERE id IN (SELECT value FROM json_each(?1)) AND waited IS NULL
