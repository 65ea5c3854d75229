-- KEYS ready, sched, blocked. ARGV: job key prefix, now (15 digits), channel,
-- jobtype, then groups of 5 (each id once): id, new priority ('' keeps
-- it), new dt (15 digits; '' keeps it), "1" if a new payload follows
-- (else "0"), the payload.
-- A blocked job changes too: its dt is its not-before time, its score
-- in blocked (it stays blocked).
-- Only free jobs (l == '') change: the fields given, then the job's entry
-- moves to where its new dt and priority put it (ready if due, else
-- sched), and the event edited goes into its history (h). Publishes the jobtype if an edited job is due. Returns the ids
-- edited.
local pre, nowp = ARGV[1], ARGV[2]
local READY, SCHED = KEYS[1], KEYS[2]
local head = event_head(fmt(tonumber(nowp)), '')
-- Every job is read before the first write; each job goes into its new
-- set before it leaves its old one.
local fields = {}
for i = 5, #ARGV, 5 do
  fields[i] = redis.call('HMGET', pre .. ARGV[i], 'l', 'p', 'dt', 'a', 'h')
end
local out = {}
local due = false
for i = 5, #ARGV, 5 do
  local id, f = ARGV[i], fields[i]
  if f[1] == BLOCKED then
    local key = pre .. id
    local p = ARGV[i + 1] ~= '' and ARGV[i + 1] or f[2]
    local dtp = ARGV[i + 2] ~= '' and ARGV[i + 2] or string.format('%015d', tonumber(f[3]))
    local h = push_event(f[5], head .. (f[4] or '0') .. ',"event":"edited"}')
    if ARGV[i + 3] == '1' then
      redis.call('HSET', key, 'p', p, 'dt', dtp, 'd', ARGV[i + 4], 'h', h)
    else
      redis.call('HSET', key, 'p', p, 'dt', dtp, 'h', h)
    end
    redis.call('ZADD', KEYS[3], dtp, id)
    out[#out + 1] = id
  elseif f[1] == '' then
    local key = pre .. id
    local p = ARGV[i + 1] ~= '' and ARGV[i + 1] or f[2]
    local dtp = ARGV[i + 2] ~= '' and ARGV[i + 2] or string.format('%015d', tonumber(f[3]))
    local h = push_event(f[5], head .. (f[4] or '0') .. ',"event":"edited"}')
    if ARGV[i + 3] == '1' then
      redis.call('HSET', key, 'p', p, 'dt', dtp, 'd', ARGV[i + 4], 'h', h)
    else
      redis.call('HSET', key, 'p', p, 'dt', dtp, 'h', h)
    end
    local old = rmember(tonumber(f[3]), id)
    if dtp <= nowp then
      local new = dtp .. id
      redis.call('ZADD', READY, fmt(-tonumber(p)), new)
      redis.call('ZREM', SCHED, id)
      if new ~= old then
        redis.call('ZREM', READY, old)
      end
      due = true
    else
      redis.call('ZADD', SCHED, dtp, id)
      redis.call('ZREM', READY, old)
    end
    out[#out + 1] = id
  end
end
if due then
  redis.call('PUBLISH', ARGV[3], ARGV[4])
end
return out
