-- KEYS[1] sysid hash. ARGV: token. Frees the sysid if token holds it.
if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
