-- KEYS[1] sysid hash. ARGV: token, expires. Returns 1 if token holds it.
if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'expires', ARGV[2])
  return 1
end
return 0
