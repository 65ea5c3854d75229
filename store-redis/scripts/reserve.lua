-- KEYS[1] index bucket. ARGV[1] token, then pairs: id, jobtype.
-- Reserves each free id for its jobtype; returns per id "" (reserved now)
-- or the value already stored ("<jobtype> <token>"). One HMGET and one
-- HSET per slice of ids (an id at most once per call).
local SLICE = 500
local n = (#ARGV - 1) / 2
local out = {}
local i = 1
while i <= n do
  local j = math.min(i + SLICE - 1, n)
  local ids = {}
  for k = i, j do
    ids[#ids + 1] = ARGV[2 * k]
  end
  local cur = redis.call('HMGET', KEYS[1], unpack(ids))
  local set = {}
  for k = i, j do
    local v = cur[k - i + 1]
    if v then
      out[k] = v
    else
      out[k] = ''
      set[#set + 1] = ARGV[2 * k]
      set[#set + 1] = ARGV[2 * k + 1] .. ' ' .. ARGV[1]
    end
  end
  if #set > 0 then
    redis.call('HSET', KEYS[1], unpack(set))
  end
  i = j + 1
end
return out
