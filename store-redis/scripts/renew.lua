-- KEYS ready, lock. ARGV: job key prefix, owner, new expiry, ids...
-- Returns pairs: id, cancel mark (x, or '') of each job renewed.
local pre, owner, exp = ARGV[1], ARGV[2], ARGV[3]
local out, ids, olddt = {}, {}, {}
for i = 4, #ARGV do
  local id = ARGV[i]
  local key = pre .. id
  local f = redis.call('HMGET', key, 'l', 'dt', 'x')
  if f[1] == owner then
    redis.call('HSET', key, 'dt', exp)
    olddt[#olddt + 1] = tonumber(f[2])
    ids[#ids + 1] = id
    out[#out + 1] = id
    out[#out + 1] = f[3] or ''
  end
end
-- ZADD in slices; a slice that added members (instead of updating their
-- scores) held jobs a claim had moved to ready: take them out of ready.
local n = #ids
local i = 1
while i <= n do
  local j = math.min(i + SLICE - 1, n)
  local args = {}
  for k = i, j do
    args[#args + 1] = exp
    args[#args + 1] = ids[k]
  end
  if redis.call('ZADD', KEYS[2], unpack(args)) > 0 then
    for k = i, j do
      redis.call('ZREM', KEYS[1], rmember(olddt[k], ids[k]))
    end
  end
  i = j + 1
end
return out
