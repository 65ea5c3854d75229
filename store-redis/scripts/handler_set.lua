-- KEYS versions zset, versions hash, sequence, jobtypes set.
-- ARGV: jobtype, dt, handler JSON. Returns the new version id.
local seq = redis.call('INCR', KEYS[3])
local vid = string.format('v%020d', seq)
redis.call('ZADD', KEYS[1], ARGV[2], vid)
redis.call('HSET', KEYS[2], vid, ARGV[3])
redis.call('SADD', KEYS[4], ARGV[1])
return vid
