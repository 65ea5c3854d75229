-- KEYS versions zset, versions hash. Returns {version id, dt, JSON} of the
-- newest version (greatest dt, then the last set), or {}.
local top = redis.call('ZREVRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #top == 0 then
  return {}
end
return { top[1], top[2], redis.call('HGET', KEYS[2], top[1]) }
