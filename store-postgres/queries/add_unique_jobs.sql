-- Adds a batch with at least one unique key (see the function
-- `add_unique_jobs` in migrations/, and README.md "Unique keys"). The
-- parameters of add_jobs.sql, then $9 keys (NULL: no key), $10 windows in
-- ms (NULL: none), $11 replace (OnConflict::ReplaceData), $12 now, $13
-- channel. One row per job: position (1-based), what ('n' new, 'e'
-- existing, 'd' duplicate), holder (duplicates), replaced.
SELECT o_pos, o_what::text, o_holder, o_replaced
FROM add_unique_jobs($1::text[], $2::text[], $3::bytea[], $4::int4[], $5::int8[], $6::text[],
                     $7::text[], $8::text[], $9::text[], $10::int8[], $11::bool[], $12, $13)
