-- ?1 now, ?2 now + 1000 years, ?3 JSON array of ids. Free jobs are archived
-- as cancelled; locked jobs are marked (cancel_requested = 1) and keep
-- everything else. SET reads the old row, RETURNING the new one: lock
-- '__done' means cancelled, an owner means marked.
UPDATE jobs SET
    lock = CASE lock WHEN '' THEN '__done' ELSE lock END,
    done_dt = CASE lock WHEN '' THEN ?1 ELSE done_dt END,
    dt = CASE lock WHEN '' THEN ?2 ELSE dt END,
    result_code = CASE lock WHEN '' THEN 'cancelled' ELSE result_code END,
    result_status = CASE lock WHEN '' THEN 0 ELSE result_status END,
    result_output = CASE lock WHEN '' THEN x'' ELSE result_output END,
    cancel_requested = CASE lock WHEN '' THEN 0 ELSE 1 END
WHERE lock <> '__done' AND id IN (SELECT value FROM json_each(?3))
RETURNING id, lock
