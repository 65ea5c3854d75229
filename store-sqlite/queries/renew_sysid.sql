-- ?1 expires, ?2 sysid, ?3 token
UPDATE sysids SET expires = ?1 WHERE sysid = ?2 AND token = ?3
