-- ?1 sysid, ?2 token, ?3 expires, ?4 now. No row back: held under a valid lease.
INSERT INTO sysids (sysid, token, expires) VALUES (?1, ?2, ?3)
ON CONFLICT (sysid) DO UPDATE SET token = excluded.token, expires = excluded.expires
WHERE sysids.expires <= ?4
RETURNING token
