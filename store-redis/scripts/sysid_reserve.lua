-- KEYS[1] sysid hash. ARGV: now, token, expires.
-- Returns {1} reserved, or {0, expires} held by someone else.
local e = redis.call('HGET', KEYS[1], 'expires')
if e and tonumber(e) > tonumber(ARGV[1]) then
  return { 0, e }
end
redis.call('HSET', KEYS[1], 'token', ARGV[2], 'expires', ARGV[3])
return { 1 }
