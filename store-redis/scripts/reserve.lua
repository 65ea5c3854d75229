-- KEYS[1] index bucket. ARGV[1] token, then pairs: id, jobtype.
-- Reserves each free id for its jobtype; returns per id "" (reserved now)
-- or the value already stored ("<jobtype> <token>").
local out = {}
for i = 2, #ARGV, 2 do
  local v = ARGV[i + 1] .. ' ' .. ARGV[1]
  if redis.call('HSETNX', KEYS[1], ARGV[i], v) == 1 then
    out[#out + 1] = ''
  else
    out[#out + 1] = redis.call('HGET', KEYS[1], ARGV[i])
  end
end
return out
