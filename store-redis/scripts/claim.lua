-- KEYS ready, sched, lock, paused. ARGV: job key prefix, now, limit, owner,
-- lease expiry, promotion slice, now as 15 zero-padded digits.
-- Each job taken gets its claim in its fields (l owner, a attempts, ca
-- now), not in its history: h is written only for a job whose previous
-- claim is still pending (an expired lease taken again), which gets that
-- claim's event stored first.
-- Returns groups of 7: id, data, priority, create_dt, attempts, the
-- fields a job claimed usually lacks as one array [cancel mark (x),
-- stored history (h, without this claim's event, which the client adds),
-- tags (t), trace context (tc), unique key (uk), repeat rule (rp), last
-- result (r, read only for a repeating job: see README, "Repeating
-- jobs"), dependencies (dp: pending count and policy)], each false when absent, or false when all are (every value returned is one more for the server to encode
-- and the client to decode), due time (the job's dt before the claim, as
-- 15 digits: the dt part of its ready member).
local pre, now, limit, owner, exp = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
local slice = tonumber(ARGV[6])
local nowp = ARGV[7]
local READY, SCHED, LOCK = KEYS[1], KEYS[2], KEYS[3]

-- A paused jobtype hands out nothing (and promotes nothing).
if redis.call('EXISTS', KEYS[4]) == 1 then
  return {}
end

-- Due jobs (sched) and expired leases (lock) become eligible: into ready.
promote(READY, SCHED, pre, ARGV[2], slice)
promote(READY, LOCK, pre, ARGV[2], slice)

-- Hand out the first `limit` of ready. Redis keeps the writes of a script
-- that fails midway, so no step may leave a job outside every set: each
-- round reads its candidates with ZRANGE (nothing is popped), reads every
-- candidate's hash (a job key that cannot be accessed fails here, before
-- any write), then locks each job's hash, and only then moves the round's
-- members out of ready (into lock, or back to sched/lock) in slices. A job
-- whose hash is locked but still in ready is an expired lease in ready: a
-- valid state (the failed call's owner never learnt of it).
local out = {}
local got, putback = 0, 0
while got < limit and putback <= slice do
  local members = redis.call('ZRANGE', READY, 0, limit - got - 1)
  if #members == 0 then
    break
  end
  -- A free job (l == '') has no cancel mark and no pending claim: x and
  -- ca are read only for a locked one (an expired lease): fields 11 and
  -- 12 of its f, false for a free job.
  local fields = {}
  for i = 1, #members do
    local key = pre .. string.sub(members[i], 16)
    local f = redis.call('HMGET', key, 'l', 'd', 'p', 'c', 'a', 'h', 't', 'tc', 'uk', 'rp', 'dp')
    -- dependencies (dp) at 14, its cancel mark and pending claim at 11, 12
    f[14] = f[11]
    if f[1] and f[1] ~= '' and f[1] ~= DONE then
      local more = redis.call('HMGET', key, 'x', 'ca')
      f[11], f[12] = more[1], more[2]
    else
      -- false, not nil: a nil would end the reply array built from f
      f[11], f[12] = false, false
    end
    -- a repeating job's last result (a plain job pays nothing for it)
    f[13] = f[10] and redis.call('HGET', key, 'r') or false
    fields[i] = f
  end
  local locked, sched_back, lock_back = {}, {}, {}
  for i = 1, #members do
    local m, f = members[i], fields[i]
    -- dt stays a string: padded times compare as strings
    local dtp = string.sub(m, 1, 15)
    local id = string.sub(m, 16)
    if f[1] == false or f[1] == DONE or f[1] == BLOCKED or f[1] == STAGED then
      -- not a live job: nothing to keep
    elseif dtp > nowp then
      -- made eligible by a caller whose clock is ahead: not yet ours
      if f[1] == '' then
        sched_back[#sched_back + 1] = dtp
        sched_back[#sched_back + 1] = id
      else
        lock_back[#lock_back + 1] = dtp
        lock_back[#lock_back + 1] = id
      end
      putback = putback + 1
    else
      local a = tonumber(f[5]) + 1
      local h, stored = store_claim(f[6], f[12], f[1], f[5])
      -- a Lua number goes to Redis as its shortest decimal form
      if stored then
        redis.call('HSET', pre .. id, 'l', owner, 'dt', exp, 'a', a, 'ca', ARGV[2], 'h', h)
      else
        redis.call('HSET', pre .. id, 'l', owner, 'dt', exp, 'a', a, 'ca', ARGV[2])
      end
      locked[#locked + 1] = exp
      locked[#locked + 1] = id
      out[#out + 1] = id
      out[#out + 1] = f[2]
      out[#out + 1] = f[3]
      out[#out + 1] = f[4]
      out[#out + 1] = a
      if f[11] or h or f[7] or f[8] or f[9] or f[10] or f[14] then
        out[#out + 1] = { f[11], h, f[7], f[8], f[9], f[10], f[13], f[14] }
      else
        out[#out + 1] = false
      end
      out[#out + 1] = dtp
      got = got + 1
    end
  end
  -- into their new set first, then out of ready: a job is never in none
  zadd_all(LOCK, locked)
  zadd_all(SCHED, sched_back)
  zadd_all(LOCK, lock_back)
  zrem_all(READY, members)
end
return out
