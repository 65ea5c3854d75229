-- KEYS ready, sched, codes, the six sets of archived jobs per code (see
-- done_sets), the old archive set of every code (done), blocked, fx. ARGV:
-- job key prefix, now (15 digits), archive dt (15 digits), channel,
-- jobtype, ids... A blocked job is deleted as a free one; a staged one
-- reads as absent. A deleted waiter (dp) loses its edges; a live job
-- deleted with waiters (w) ends its edges as cancelled, 0 (end_edges):
-- triples '', '', outbox entry follow for waiters elsewhere. Deletes the jobs that are not locked (waiting, scheduled,
-- archived): the hash, its entry in ready, sched or its archive set, and
-- one from codes for an archived job. Returns triples: id, "d" (deleted)
-- or "r" (locked, refused), reservation token ('' when refused). A deleted
-- job with a unique key (uk) frees it and ends its window (free_key).
local pre = ARGV[1]
local READY, SCHED, CODES = KEYS[1], KEYS[2], KEYS[3]
local DONES = done_sets(4)
local OLD = KEYS[10]
-- Every job is read before the first write.
local fields = {}
local ended = {}
for i = 6, #ARGV do
  local f = redis.call('HMGET', pre .. ARGV[i], 'l', 'dt', 'rc', 'g', 'r', 'uk', 'w', 'dp')
  if f[5] then
    -- the code of the result in one field (rc: archived before r)
    f[3] = result_parts(f[5])
  end
  fields[i] = f
end
local out, per = {}, {}
for i = 6, #ARGV do
  local id, f = ARGV[i], fields[i]
  local l = f[1]
  if l == '' or l == DONE or l == BLOCKED then
    -- the hash goes first: an entry left behind without its hash is
    -- dropped by the next claim or purge that meets it
    redis.call('DEL', pre .. id)
    if f[6] then
      free_key(pre, f[6], id, false)
    end
    if f[8] then
      redis.call('DEL', edges_key(pre, id))
    end
    if f[7] and l ~= DONE then
      ended[#ended + 1] = { id, 'cancelled', '0', true }
    elseif f[7] then
      -- waiters held on it stay held for good: it never runs again
      redis.call('DEL', holders_key(pre, id))
    end
    if l == BLOCKED then
      redis.call('ZREM', KEYS[11], id)
    elseif l == '' then
      redis.call('ZREM', READY, rmember(tonumber(f[2]), id))
      redis.call('ZREM', SCHED, id)
    else
      local set = f[3] and DONES[f[3]]
      if set then
        redis.call('ZREM', set, id)
        per[f[3]] = (per[f[3]] or 0) + 1
      end
      redis.call('ZREM', OLD, id)
    end
    out[#out + 1] = id
    out[#out + 1] = 'd'
    out[#out + 1] = f[4] or ''
  elseif l and l ~= STAGED then
    out[#out + 1] = id
    out[#out + 1] = 'r'
    out[#out + 1] = ''
  end
end
for code, n in pairs(per) do
  if redis.call('HINCRBY', CODES, code, -n) <= 0 then
    redis.call('HDEL', CODES, code)
  end
end
if #ended > 0 then
  local F = flow_ctx(pre, ARGV[5], ARGV[2], ARGV[3], READY, SCHED, KEYS[11], DONES['cancelled'],
    CODES, KEYS[12])
  end_edges(F, ended)
  flow_done(F, ARGV[4])
  for _, e in ipairs(F.out) do
    out[#out + 1] = ''
    out[#out + 1] = ''
    out[#out + 1] = e
  end
end
return out
