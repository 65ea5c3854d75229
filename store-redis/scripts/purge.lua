-- KEYS done, codes. ARGV: job key prefix, before, slice.
-- Deletes up to slice archived jobs with done_dt < before.
-- Returns pairs: id, reservation token.
local pre = ARGV[1]
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
local out, per = {}, {}
for i = 1, #ids do
  local key = pre .. ids[i]
  local f = redis.call('HMGET', key, 'rc', 'g')
  if f[1] then
    per[f[1]] = (per[f[1]] or 0) + 1
  end
  redis.call('DEL', key)
  out[#out + 1] = ids[i]
  out[#out + 1] = f[2] or ''
end
zrem_all(KEYS[1], ids)
for code, n in pairs(per) do
  if redis.call('HINCRBY', KEYS[2], code, -n) <= 0 then
    redis.call('HDEL', KEYS[2], code)
  end
end
return out
