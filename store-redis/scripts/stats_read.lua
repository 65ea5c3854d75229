-- KEYS: the stats bucket hashes of one jobtype that a window holds,
-- oldest first. Returns, for each one that exists, its position in KEYS
-- (1-based) and its fields and values (HGETALL).
local out = {}
for i = 1, #KEYS do
  local fields = redis.call('HGETALL', KEYS[i])
  if #fields > 0 then
    out[#out + 1] = i
    out[#out + 1] = fields
  end
end
return out
