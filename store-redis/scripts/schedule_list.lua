-- KEYS: the names {P}:schn. ARGV: the hash key prefix "{P}:sch:" (same
-- slot as KEYS[1]), ZRANGEBYLEX min and max, then the fields to read.
-- Returns name, {fields} pairs, by name.
local out = {}
for _, name in ipairs(redis.call('ZRANGEBYLEX', KEYS[1], ARGV[2], ARGV[3])) do
  out[#out + 1] = name
  out[#out + 1] = redis.call('HMGET', ARGV[1] .. name, unpack(ARGV, 4))
end
return out
