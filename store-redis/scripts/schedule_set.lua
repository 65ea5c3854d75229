-- KEYS: the schedule's hash, the due index {P}:sch, the names {P}:schn.
-- ARGV: name, definition JSON, payload, next_due ('' for none), now, then
-- the state fields to return. Creates the schedule (version 1) or replaces
-- its definition and next_due (version + 1, the firing state, pause and
-- created_dt kept). Returns the state fields (HMGET).
local h, due, names = KEYS[1], KEYS[2], KEYS[3]
local name, nd, now = ARGV[1], ARGV[4], ARGV[5]
-- Reads first: a key of the wrong type fails here, before any write.
local cur = redis.call('HMGET', h, 'version', 'paused')
redis.call('ZSCORE', due, name)
redis.call('ZSCORE', names, name)
local paused = false
if cur[1] then
  redis.call('HINCRBY', h, 'version', 1)
  redis.call('HSET', h, 'definition', ARGV[2], 'data', ARGV[3], 'updated_dt', now)
  paused = cur[2] == '1'
else
  redis.call('DEL', h)
  redis.call('HSET', h, 'definition', ARGV[2], 'data', ARGV[3], 'version', 1, 'paused', '0',
    'created_dt', now, 'updated_dt', now, 'fired', 0, 'skipped', 0)
end
if nd == '' then
  redis.call('HDEL', h, 'next_due')
else
  redis.call('HSET', h, 'next_due', nd)
end
if nd ~= '' and not paused then
  redis.call('ZADD', due, nd, name)
else
  redis.call('ZREM', due, name)
end
redis.call('ZADD', names, 0, name)
return redis.call('HMGET', h, unpack(ARGV, 6))
