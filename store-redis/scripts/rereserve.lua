-- KEYS[1] index bucket. ARGV triples: id, expected value, new value.
-- Compare-and-set; returns 1/0 per id.
local out = {}
for i = 1, #ARGV, 3 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 2])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
