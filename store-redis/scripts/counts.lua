-- KEYS ready, sched, lock, codes, paused, blocked. ARGV: now, what ("w" waiting
-- only, where a paused jobtype counts none; "a" all).
-- Returns {waiting} or {waiting, scheduled, running, blocked, code, n,
-- code, n...}.
local now = ARGV[1]
if ARGV[2] == 'w' and redis.call('EXISTS', KEYS[5]) == 1 then
  return { 0 }
end
local waiting = redis.call('ZCARD', KEYS[1])
  + redis.call('ZCOUNT', KEYS[2], '-inf', now)
  + redis.call('ZCOUNT', KEYS[3], '-inf', now)
if ARGV[2] == 'w' then
  return { waiting }
end
local out = { waiting,
  redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf'),
  redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf'),
  redis.call('ZCARD', KEYS[6]) }
local codes = redis.call('HGETALL', KEYS[4])
for i = 1, #codes do
  out[#out + 1] = codes[i]
end
return out
