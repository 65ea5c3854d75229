-- KEYS ready, sched, blocked. ARGV: job key prefix, now (15 digits),
-- channel, jobtype, ids...
-- unblock_jobs (see README, "Dependencies"): every job is read first;
-- each blocked one gets its pending and held edges skipped ("<i> s"), its
-- open count 0 (policy and outputs kept), and is freed as by its last
-- dependency's end (dt = max(not-before, now), event unblocked, into
-- ready or sched, out of blocked). Its entries in its targets' up and uh
-- sets (other slots) are left: a later delivery finds the edge skipped.
-- Publishes the jobtype once if any was unblocked.
-- Returns pairs per job found (a staged one is not a job yet): id, "u"
-- (unblocked) or "n" (left as it is).
local pre = ARGV[1]
local F = flow_ctx(pre, ARGV[4], ARGV[2], ARGV[2], KEYS[1], KEYS[2], KEYS[3], nil, nil, nil)
local fields = {}
for i = 5, #ARGV do
  fields[i] = redis.call('HMGET', pre .. ARGV[i], unpack(WFIELDS))
end
local out = {}
for i = 5, #ARGV do
  local id, f = ARGV[i], fields[i]
  if f[1] == BLOCKED then
    local ek = edges_key(pre, id)
    local e = redis.call('HGETALL', ek)
    local buf = {}
    for q = 1, #e, 2 do
      local idx, st = string.match(e[q + 1], '^(%d+) (%a)')
      if st == 'p' or st == 'h' then
        buf[#buf + 1] = e[q]
        buf[#buf + 1] = idx .. ' s'
        if #buf >= 2 * SLICE then
          redis.call('HSET', ek, unpack(buf))
          buf = {}
        end
      end
    end
    if #buf > 0 then
      redis.call('HSET', ek, unpack(buf))
    end
    local _, pol, o = dep_parts(f[3] or '0 c')
    redis.call('HSET', pre .. id, 'dp', '0 ' .. pol .. o)
    free_waiter(F, id, f, true, F.blocked)
    out[#out + 1] = id
    out[#out + 1] = 'u'
  elseif f[1] and f[1] ~= STAGED then
    out[#out + 1] = id
    out[#out + 1] = 'n'
  end
end
flow_done(F, ARGV[3])
return out
