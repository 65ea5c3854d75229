-- KEYS jobtypes set. ARGV: key prefix "{P}:" (same slot as KEYS[1]).
-- Returns groups of 4: jobtype, version id, dt, JSON (newest per jobtype).
local out = {}
for _, t in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local top = redis.call('ZREVRANGE', ARGV[1] .. 'hv:' .. t, 0, 0, 'WITHSCORES')
  if #top > 0 then
    out[#out + 1] = t
    out[#out + 1] = top[1]
    out[#out + 1] = top[2]
    out[#out + 1] = redis.call('HGET', ARGV[1] .. 'hd:' .. t, top[1])
  end
end
return out
