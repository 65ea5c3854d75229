-- The jobtypes of a listing, given: ?11 JSON array of jobtypes.
types (jt) AS (SELECT value FROM json_each(?11))
