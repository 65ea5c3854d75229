-- Adds a batch with at least one job with dependencies (see the function
-- `add_flow_jobs` in migrations/, version 18, and README.md
-- "Dependencies"). The parameters of add_unique_jobs.sql up to $12, then
-- $13 the batch position (1-based) of each dependency's waiter, $14 the
-- dependency ids (a waiter's in depends_on order), $15 per job its stored policy
-- ('cancel', 'run' or 'hold', then '+outputs' with with_outputs; NULL
-- without dependencies), $16 now, $17 dt of
-- archived rows (now + horizon), $18 channel. One row per job: position,
-- what ('n' new, 'e' existing, 'd' duplicate, 'r' refused), holder
-- (duplicates) or unknown dependency (refused), replaced, the unknown
-- dependency's index (refused).
SELECT o_pos, o_what::text, o_holder, o_replaced, o_field
FROM add_flow_jobs($1::text[], $2::text[], $3::bytea[], $4::int4[], $5::int8[], $6::text[],
                   $7::text[], $8::text[], $9::text[], $10::text[], $11::int8[], $12::bool[],
                   $13::int4[], $14::text[], $15::text[], $16, $17, $18)
