-- KEYS: stats bucket hashes of one jobtype. ARGV, one group per key in
-- KEYS order: its TTL in ms, how many integer fields (n), how many float
-- fields (m), then n field/increment pairs (HINCRBY) and m field/increment
-- pairs (HINCRBYFLOAT). Returns how many keys it wrote.
-- Every key is read first: one of another type fails here, before any
-- write, so a failing call adds nothing.
for i = 1, #KEYS do
  redis.call('HLEN', KEYS[i])
end
local a = 1
for i = 1, #KEYS do
  local key = KEYS[i]
  local ttl, n, m = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  a = a + 3
  for _ = 1, n do
    redis.call('HINCRBY', key, ARGV[a], ARGV[a + 1])
    a = a + 2
  end
  for _ = 1, m do
    redis.call('HINCRBYFLOAT', key, ARGV[a], ARGV[a + 1])
    a = a + 2
  end
  redis.call('PEXPIRE', key, ttl)
end
return #KEYS
