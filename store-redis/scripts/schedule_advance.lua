-- KEYS: the schedule's hash, the due index {P}:sch. ARGV: name, version,
-- fired_through, last_job ('' keeps the stored one), next_due ('' for
-- none), fired, skipped (decimal counts to add), '1' if the advance
-- moves (fires or skips anything) else '0'.
-- Compare-and-set: applies only if the stored version is ARGV[2] and the
-- stored watermark is absent, before fired_through, or equal to it for
-- an advance that moves nothing. Returns 1 if it applied.
local h, due, name, nd = KEYS[1], KEYS[2], ARGV[1], ARGV[5]
-- Reads first: a key of the wrong type fails here, before any write.
local cur = redis.call('HMGET', h, 'version', 'fired_through', 'paused')
redis.call('ZSCORE', due, name)
if cur[1] ~= ARGV[2] then
  return 0
end
if cur[2] then
  local stored, ft = tonumber(cur[2]), tonumber(ARGV[3])
  if not stored then
    return redis.error_reply('JSBAD stored fired_through is not a number')
  end
  if stored > ft or (stored == ft and ARGV[8] == '1') then
    return 0
  end
end
-- The counters first: after the reads, they are the only writes that can
-- fail (a sum past the largest Redis integer). A failing one takes back
-- the other before raising, so a failing advance changes nothing.
local function failed(r)
  return type(r) == 'table' and r.err ~= nil
end
if ARGV[6] ~= '0' then
  local r = redis.pcall('HINCRBY', h, 'fired', ARGV[6])
  if failed(r) then
    return redis.error_reply('JSBAD fired counter: ' .. r.err)
  end
end
if ARGV[7] ~= '0' then
  local r = redis.pcall('HINCRBY', h, 'skipped', ARGV[7])
  if failed(r) then
    if ARGV[6] ~= '0' then
      redis.call('HINCRBY', h, 'fired', '-' .. ARGV[6])
    end
    return redis.error_reply('JSBAD skipped counter: ' .. r.err)
  end
end
if ARGV[4] == '' then
  redis.call('HSET', h, 'fired_through', ARGV[3])
else
  redis.call('HSET', h, 'fired_through', ARGV[3], 'last_job', ARGV[4])
end
if nd == '' then
  redis.call('HDEL', h, 'next_due')
else
  redis.call('HSET', h, 'next_due', nd)
end
if nd ~= '' and cur[3] ~= '1' then
  redis.call('ZADD', due, nd, name)
else
  redis.call('ZREM', due, name)
end
return 1
