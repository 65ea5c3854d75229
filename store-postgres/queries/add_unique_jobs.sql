-- Adds a batch with at least one unique key (see the function
-- `add_unique_jobs` in migrations/, and README.md "Unique keys"; migration
-- 16's, which also writes the rules). The parameters of add_jobs.sql, then
-- $9 repeat rules as stored (NULL: none; the whole array NULL for a batch
-- without one), $10 keys (NULL: no key), $11 windows in ms (NULL: none),
-- $12 replace (OnConflict::ReplaceData), $13 now, $14 channel. One row per
-- job: position (1-based), what ('n' new, 'e' existing, 'd' duplicate),
-- holder (duplicates), replaced.
SELECT o_pos, o_what::text, o_holder, o_replaced
FROM add_unique_jobs($1::text[], $2::text[], $3::bytea[], $4::int4[], $5::int8[], $6::text[],
                     $7::text[], $8::text[], $9::text[], $10::text[], $11::int8[], $12::bool[],
                     $13, $14)
