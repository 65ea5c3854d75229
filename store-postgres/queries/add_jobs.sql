-- Inserts a batch given as parallel arrays, skipping ids present in `jobs`
-- or `archive`, and notifies the channel once per jobtype that got work.
-- The work is in the function `add_jobs` (migrations/): it needs a second
-- statement with a fresh snapshot, see there. Each job inserted gets its
-- tags, its trace context and an `added` event. Returns the ids inserted.
-- $1 ids, $2 jobtypes, $3 payloads, $4 priorities, $5 dts, $6 tags (one
-- text per job, its tags joined by single spaces), $7 traceparents, $8
-- tracestates (NULL where a job has none), $9 now, $10 channel
SELECT id
FROM add_jobs($1::text[], $2::text[], $3::bytea[], $4::int4[], $5::int8[], $6::text[],
              $7::text[], $8::text[], $9, $10) AS id
