-- KEYS ready, sched, blocked, the set of archived jobs of code cancelled,
-- codes, staged, fx. ARGV: job key prefix, now (15 digits), archive dt (15
-- digits), channel, jobtype, then per staged job: its id, k, and k pairs:
-- target id, what the link step found ("l" linked, "m" not a job, "a
-- <code> <status>" archived).
-- The commit of an add with dependencies (see README, "Dependencies"). A
-- job no longer staged (committed already, or gone) is left. One with a
-- dependency that is not a job (the lowest position in depends_on among
-- "m" edges and "m" answers) is deleted and refused. Else the results of
-- archived targets end their pending edges (under policy h one that ended
-- other than ok holds the edge, which stays open), and the job becomes archived
-- cancelled (a dependency that ended other than ok under policy c: the
-- first in depends_on order among those the link found archived, else
-- among those delivered while it was staged), blocked while any edge is
-- open (pending or held), else free (with the event unblocked and dt = max(not-before,
-- now) when deliveries while staged ended its last edges).
-- Returns groups of 5 per job: id, "n" (stored), "x" (not staged), or
-- "r" (refused), then for a refusal the position and id of the
-- dependency and the job's reservation token ('' otherwise).
local F = flow_ctx(ARGV[1], ARGV[5], ARGV[2], ARGV[3], KEYS[1], KEYS[2], KEYS[3], KEYS[4],
  KEYS[5], KEYS[7])
local out, queue = {}, {}
local i = 6
while i <= #ARGV do
  local j, k = ARGV[i], tonumber(ARGV[i + 1])
  local res = {}
  for d = 0, k - 1 do
    res[ARGV[i + 2 + 2 * d]] = ARGV[i + 3 + 2 * d]
  end
  i = i + 2 + 2 * k
  local key = F.pre .. j
  local f = redis.call('HMGET', key, unpack(WFIELDS))
  if f[1] ~= STAGED then
    out[#out + 1] = j
    out[#out + 1] = 'x'
    out[#out + 1] = ''
    out[#out + 1] = ''
    out[#out + 1] = ''
  else
    local ek = edges_key(F.pre, j)
    local e = redis.call('HGETALL', ek)
    local missing, mdep
    local fail, fx, fc, dfail, dfx, dfc
    local delivered = false
    local pending = 0
    local updates = {}
    local _, pol, o = dep_parts(f[3] or '0 c')
    for q = 1, #e, 2 do
      local x, v = e[q], e[q + 1]
      local idx, st = string.match(v, '^(%d+) (%a)')
      idx = tonumber(idx)
      local r = res[x]
      if st == 'm' or r == 'm' then
        if not missing or idx < missing then
          missing, mdep = idx, x
        end
      elseif st == 'h' then
        -- held by a delivery while staged
        pending = pending + 1
      elseif st == 'd' then
        delivered = true
        local code = string.match(v, '^%d+ d (%S+)')
        if code ~= 'ok' and (not dfail or idx < dfail) then
          dfail, dfx, dfc = idx, x, code
        end
      elseif r and string.sub(r, 1, 2) == 'a ' then
        local code, status = string.match(r, '^a (%S+) (%S+)$')
        updates[#updates + 1] = x
        if pol == 'h' and code ~= 'ok' then
          updates[#updates + 1] = fmt(idx) .. ' h ' .. code .. ' ' .. status
          pending = pending + 1
        else
          updates[#updates + 1] = fmt(idx) .. ' d ' .. code .. ' ' .. status
        end
        if code ~= 'ok' and (not fail or idx < fail) then
          fail, fx, fc = idx, x, code
        end
      else
        pending = pending + 1
      end
    end
    local g = redis.call('HGET', key, 'g') or ''
    if missing then
      redis.call('DEL', key, ek)
      redis.call('ZREM', KEYS[6], j)
      if f[7] then
        free_key(F.pre, f[7], j, false)
      end
      out[#out + 1] = j
      out[#out + 1] = 'r'
      out[#out + 1] = fmt(missing)
      out[#out + 1] = mdep
      out[#out + 1] = g
    else
      local s = 1
      while s <= #updates do
        local t = math.min(s + 2 * SLICE - 1, #updates)
        redis.call('HSET', ek, unpack(updates, s, t))
        s = t + 1
      end
      redis.call('HSET', key, 'dp', fmt(pending) .. ' ' .. pol .. o)
      if not fail then
        fail, fx, fc = dfail, dfx, dfc
      end
      if fail and pol == 'c' then
        cancel_for_dependency(F, j, f, fx, fc, queue, nil)
      elseif pending > 0 then
        redis.call('HSET', key, 'l', BLOCKED)
        redis.call('ZADD', KEYS[3], f[2], j)
      else
        free_waiter(F, j, f, delivered, nil)
      end
      redis.call('ZREM', KEYS[6], j)
      out[#out + 1] = j
      out[#out + 1] = 'n'
      out[#out + 1] = ''
      out[#out + 1] = ''
      out[#out + 1] = ''
    end
  end
end
end_edges(F, queue)
flow_done(F, ARGV[4])
return out
