-- KEYS: the due index {P}:sch. ARGV: the hash key prefix "{P}:sch:" (same
-- slot as KEYS[1]), now, limit, then the fields to read. Returns name,
-- {fields} pairs of up to `limit` schedules with next_due <= now, by
-- next_due then name (the zset's order).
local out = {}
for _, name in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[2], 'LIMIT', 0, ARGV[3])) do
  out[#out + 1] = name
  out[#out + 1] = redis.call('HMGET', ARGV[1] .. name, unpack(ARGV, 4))
end
return out
