-- jobstore SQLite schema, version 12: repeating jobs.
-- See README.md ("Repeating jobs (migration 12)").

-- The repeat rule the job was added with, as jobstore_api::Repeat::to_text
-- gives it (the rule alone in UTC, else "TZ=<zone> <rule>"). NULL: none (a
-- plain job). Written once by the add, never changed, read with the job
-- (also once it is archived, so a run again repeats again). No index holds
-- it: the store never reads the rule. Old rows read NULL: no row is
-- rewritten.
ALTER TABLE jobs ADD COLUMN repeat TEXT;
