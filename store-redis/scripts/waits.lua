-- KEYS the job's hash, its edges hash (e:<W>). Returns {l} (false for no
-- job) then the edges' fields and values (HGETALL: at most
-- MAX_DEPENDENCIES of them).
local l = redis.call('HGET', KEYS[1], 'l')
if not l then
  return { false }
end
local out = { l }
local e = redis.call('HGETALL', KEYS[2])
for i = 1, #e do
  out[#out + 1] = e[i]
end
return out
