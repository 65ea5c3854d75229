-- KEYS ready, sched, done, codes. ARGV: job key prefix, now, archive dt,
-- ids... Free jobs (waiting or scheduled) become archived "cancelled".
-- Returns the ids cancelled.
local pre = ARGV[1]
local out, done = {}, {}
for i = 4, #ARGV do
  local id = ARGV[i]
  local key = pre .. id
  local f = redis.call('HMGET', key, 'l', 'dt')
  if f[1] == '' then
    redis.call('ZREM', KEYS[2], id)
    redis.call('ZREM', KEYS[1], rmember(tonumber(f[2]), id))
    redis.call('HSET', key, 'l', DONE, 'dt', ARGV[3], 'dd', ARGV[2],
      'rc', 'cancelled', 'rs', '0', 'ro', '')
    done[#done + 1] = ARGV[2]
    done[#done + 1] = id
    out[#out + 1] = id
  end
end
zadd_all(KEYS[3], done)
if #out > 0 then
  redis.call('HINCRBY', KEYS[4], 'cancelled', #out)
end
return out
