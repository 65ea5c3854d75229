-- KEYS: the schedule's hash, the due index {P}:sch. ARGV: name, '1'
-- (pause) or '0' (resume), next_due of a resume ('' for none), now.
-- Returns 1 if the flag changed; 0 for an unknown schedule or one
-- already so. A pause leaves next_due in the hash and takes the schedule
-- out of the index; a resume sets next_due and puts it back (if any).
local h, due, name, nd = KEYS[1], KEYS[2], ARGV[1], ARGV[3]
-- Reads first: a key of the wrong type fails here, before any write.
local cur = redis.call('HMGET', h, 'version', 'paused')
redis.call('ZSCORE', due, name)
if not cur[1] or cur[2] == ARGV[2] then
  return 0
end
if ARGV[2] == '1' then
  redis.call('HSET', h, 'paused', '1', 'updated_dt', ARGV[4])
  redis.call('ZREM', due, name)
  return 1
end
if nd == '' then
  redis.call('HSET', h, 'paused', '0', 'updated_dt', ARGV[4])
  redis.call('HDEL', h, 'next_due')
  redis.call('ZREM', due, name)
else
  redis.call('HSET', h, 'paused', '0', 'updated_dt', ARGV[4], 'next_due', nd)
  redis.call('ZADD', due, nd, name)
end
return 1
