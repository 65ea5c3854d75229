-- KEYS ready, sched, lock. ARGV: job key prefix, now, limit, owner,
-- lease expiry, promotion slice, now as 15 zero-padded digits.
-- Returns groups of 5: id, data, priority, create_dt, attempts.
local pre, now, limit, owner, exp = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
local slice = tonumber(ARGV[6])
local nowp = ARGV[7]
local READY, SCHED, LOCK = KEYS[1], KEYS[2], KEYS[3]

-- Due jobs (sched) and expired leases (lock) become eligible: into ready.
local function promote(src)
  local due = redis.call('ZRANGEBYSCORE', src, '-inf', ARGV[2], 'WITHSCORES', 'LIMIT', 0, slice)
  if #due == 0 then
    return
  end
  local add, rem = {}, {}
  for i = 1, #due, 2 do
    local id = due[i]
    rem[#rem + 1] = id
    local p = redis.call('HGET', pre .. id, 'p')
    if p then
      add[#add + 1] = fmt(-tonumber(p))
      add[#add + 1] = rmember(tonumber(due[i + 1]), id)
    end
  end
  zrem_all(src, rem)
  zadd_all(READY, add)
end
promote(SCHED)
promote(LOCK)

local out, locked = {}, {}
local got, putback = 0, 0
while got < limit and putback <= slice do
  local popped = redis.call('ZPOPMIN', READY, limit - got)
  if #popped == 0 then
    break
  end
  for i = 1, #popped, 2 do
    local m = popped[i]
    -- dt stays a string: padded times compare as strings
    local dtp = string.sub(m, 1, 15)
    local id = string.sub(m, 16)
    local key = pre .. id
    local f = redis.call('HMGET', key, 'l', 'd', 'p', 'c', 'a')
    if f[1] == false or f[1] == DONE then
      -- not a live job: nothing to keep
    elseif dtp > nowp then
      -- made eligible by a caller whose clock is ahead: not yet ours
      if f[1] == '' then
        redis.call('ZADD', SCHED, dtp, id)
      else
        redis.call('ZADD', LOCK, dtp, id)
      end
      putback = putback + 1
    else
      local a = tonumber(f[5]) + 1
      -- a Lua number goes to Redis as its shortest decimal form
      redis.call('HSET', key, 'l', owner, 'dt', exp, 'a', a)
      locked[#locked + 1] = exp
      locked[#locked + 1] = id
      out[#out + 1] = id
      out[#out + 1] = f[2]
      out[#out + 1] = f[3]
      out[#out + 1] = f[4]
      out[#out + 1] = a
      got = got + 1
    end
  end
end
zadd_all(LOCK, locked)
return out
