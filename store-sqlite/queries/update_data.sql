-- ?1 data, ?2 id, ?3 owner
UPDATE jobs SET data = ?1 WHERE id = ?2 AND lock = ?3
