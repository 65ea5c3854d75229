-- $1 sysid, $2 token, $3 new expiry.
UPDATE sysids SET expires = $3 WHERE sysid = $1 AND token = $2
RETURNING expires
