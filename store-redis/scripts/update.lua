-- KEYS[1] job hash. ARGV: owner, data. Replaces the data of a job locked
-- by owner; returns 1 if it did.
if redis.call('HGET', KEYS[1], 'l') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'd', ARGV[2])
  return 1
end
return 0
