-- KEYS: the schedule's hash, the due index {P}:sch, the names {P}:schn.
-- ARGV: name. Returns 1 if the schedule existed.
-- Reads first: a key of the wrong type fails here, before any write.
redis.call('ZSCORE', KEYS[2], ARGV[1])
redis.call('ZSCORE', KEYS[3], ARGV[1])
local n = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return n
