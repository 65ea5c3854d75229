-- Inserts a batch without a unique key and with at least one repeat rule:
-- add_jobs.sql with one more array, the rules (the function `add_jobs` of
-- migration 16; a batch without a rule keeps add_jobs.sql, unchanged).
-- $1 ids, $2 jobtypes, $3 payloads, $4 priorities, $5 dts, $6 tags (one
-- text per job, its tags joined by single spaces), $7 traceparents, $8
-- tracestates, $9 repeat rules as stored (Repeat::to_text) (NULL where a
-- job has none), $10 now, $11 channel. Returns the ids inserted.
SELECT id
FROM add_jobs($1::text[], $2::text[], $3::bytea[], $4::int4[], $5::int8[], $6::text[],
              $7::text[], $8::text[], $9::text[], $10, $11) AS id
