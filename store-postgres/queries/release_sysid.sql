-- $1 sysid, $2 token.
DELETE FROM sysids WHERE sysid = $1 AND token = $2
