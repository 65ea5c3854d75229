-- Takes the sysid if it is free or its lease expired; no row means it is
-- held. $1 sysid, $2 token, $3 expires, $4 now.
INSERT INTO sysids AS s (sysid, token, expires)
VALUES ($1, $2, $3)
ON CONFLICT (sysid) DO UPDATE
    SET token = EXCLUDED.token, expires = EXCLUDED.expires
    WHERE s.expires <= $4
RETURNING expires
