-- KEYS ready, sched, the set of archived jobs of code cancelled, codes,
-- blocked, fx. ARGV: job key prefix, now (15 digits), archive dt (15
-- digits), channel, jobtype, ids...
-- A blocked job is cancelled as a free one (out of blocked); a staged one
-- is left (it reads as absent). A cancelled job with waiters (w) ends its
-- edges (end_edges); pairs '', outbox entry follow for waiters elsewhere.
-- Free jobs (waiting or scheduled) become archived "cancelled"; locked
-- jobs (running, or expired and not taken again) get the cancel mark
-- (x = "1"), which their holder learns at its next renewal or a claimer
-- with the job. Each gets its event in its history (h): cancelled or
-- cancel_requested (every marking); a locked job's pending claim (ca) is
-- stored first (its claimed event, then ca cleared). A free job has no
-- pending claim (every release that frees a job stores it). A free job
-- with a unique key (uk) frees it and records it for windows (free_key). Returns pairs: id, "c" (cancelled) or "m" (marked).
local pre = ARGV[1]
local head = event_head(fmt(tonumber(ARGV[2])), '')
-- Every job hash is read before the first write, and each job's hash is
-- written before its sets change (into done, then out of ready/sched), so
-- a script failing midway never leaves a job outside every set.
local out, fields = {}, {}
local cancelled = 0
local ended = {}
for i = 6, #ARGV do
  fields[i] = redis.call('HMGET', pre .. ARGV[i], 'l', 'dt', 'a', 'h', 'ca', 'uk', 'w')
end
for i = 6, #ARGV do
  local id = ARGV[i]
  local f = fields[i]
  if f[1] == '' or f[1] == BLOCKED then
    local h = push_event(f[4], head .. (f[3] or '0') .. ',"event":"cancelled"}')
    redis.call('HSET', pre .. id, 'l', DONE, 'dt', ARGV[3],
      'r', result_field('cancelled', '0', ARGV[2], '', ''), 'h', h)
    if f[6] then
      free_key(pre, f[6], id, ARGV[2])
    end
    redis.call('ZADD', KEYS[3], ARGV[2], id)
    if f[1] == BLOCKED then
      redis.call('ZREM', KEYS[5], id)
    else
      redis.call('ZREM', KEYS[2], id)
      redis.call('ZREM', KEYS[1], rmember(tonumber(f[2]), id))
    end
    if f[7] then
      ended[#ended + 1] = { id, 'cancelled', '0' }
    end
    cancelled = cancelled + 1
    out[#out + 1] = id
    out[#out + 1] = 'c'
  elseif f[1] and f[1] ~= DONE and f[1] ~= STAGED then
    local a = f[3] or '0'
    local h, stored = store_claim(f[4], f[5], f[1], a)
    h = push_event(h, head .. a .. ',"event":"cancel_requested"}')
    if stored then
      redis.call('HSET', pre .. id, 'x', MARK, 'h', h, 'ca', '')
    else
      redis.call('HSET', pre .. id, 'x', MARK, 'h', h)
    end
    out[#out + 1] = id
    out[#out + 1] = 'm'
  end
end
if cancelled > 0 then
  redis.call('HINCRBY', KEYS[4], 'cancelled', cancelled)
end
if #ended > 0 then
  local F = flow_ctx(pre, ARGV[5], ARGV[2], ARGV[3], KEYS[1], KEYS[2], KEYS[5], KEYS[3], KEYS[4],
    KEYS[6])
  end_edges(F, ended)
  flow_done(F, ARGV[4])
  for _, e in ipairs(F.out) do
    out[#out + 1] = ''
    out[#out + 1] = e
  end
end
return out
