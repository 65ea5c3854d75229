-- KEYS versions zset, versions hash, jobtypes set. ARGV: jobtype.
-- Returns 1 if any version existed.
local n = redis.call('DEL', KEYS[1], KEYS[2])
redis.call('SREM', KEYS[3], ARGV[1])
if n > 0 then
  return 1
end
return 0
