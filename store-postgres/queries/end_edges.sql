-- Ends the edges to the targets that left the live states (the flow path
-- of a release, cancel or delete, in its transaction): see the function
-- `jobstore_end_edges` in migrations/ (version 18: open edges, pending or
-- held, end held or done). $1 targets, $2 their codes, $3 statuses, $4
-- deleted jobs whose own edges are dropped, $5 now, $6 dt of archived
-- rows (now + horizon), $7 channel.
SELECT jobstore_end_edges($1::text[], $2::text[], $3::int4[], $4::text[], $5, $6, $7)
