-- KEYS ready, sched, codes, the six sets of archived jobs per code (see
-- done_sets), the old archive set of every code (done). ARGV: job key
-- prefix, ids... Deletes the jobs that are not locked (waiting, scheduled,
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
for i = 2, #ARGV do
  local f = redis.call('HMGET', pre .. ARGV[i], 'l', 'dt', 'rc', 'g', 'r', 'uk')
  if f[5] then
    -- the code of the result in one field (rc: archived before r)
    f[3] = result_parts(f[5])
  end
  fields[i] = f
end
local out, per = {}, {}
for i = 2, #ARGV do
  local id, f = ARGV[i], fields[i]
  local l = f[1]
  if l == '' or l == DONE then
    -- the hash goes first: an entry left behind without its hash is
    -- dropped by the next claim or purge that meets it
    redis.call('DEL', pre .. id)
    if f[6] then
      free_key(pre, f[6], id, false)
    end
    if l == '' then
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
  elseif l then
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
return out
