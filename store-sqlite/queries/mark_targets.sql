-- ?1 JSON array of ids: the targets of the open edges an add made (live
-- ones, and archived ones an edge is held on). Sets their marker
-- (waited = 1), so that the statement that archives or deletes one of
-- them (for an archived one: after a run again) ends its edges.
UPDATE jobs SET waited = 1
WHERE id IN (SELECT value FROM json_each(?1)) AND waited IS NULL
