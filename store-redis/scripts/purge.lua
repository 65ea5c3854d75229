-- KEYS done (the one archive set of every code, as kept before the sets
-- per code), codes, then the six sets of archived jobs per code (see
-- done_sets). ARGV: job key prefix, before, slice, then the result codes
-- to purge, each once.
-- Moves up to slice jobs of the old set into the set of their code, and
-- deletes up to slice archived jobs with done_dt < before from the sets
-- of the codes given (oldest first, code after code). Every hash is read
-- before the first write.
-- A purged job with a unique key (uk) ends its window (free_key).
-- Returns how many jobs were moved, then pairs: id, reservation token.
local pre, slice = ARGV[1], tonumber(ARGV[3])
local DONES = done_sets(3)
for a = 4, #ARGV do
  if DONES[ARGV[a]] == nil then
    return redis.error_reply('JSBAD unknown result code')
  end
end
-- Reads: the old set's first slice with each job's code; then the jobs to
-- purge, code after code, with their reservation tokens.
local old = redis.call('ZRANGE', KEYS[1], 0, slice - 1, 'WITHSCORES')
local old_ids, old_codes = {}, {}
for i = 1, #old, 2 do
  old_ids[#old_ids + 1] = old[i]
  local f = redis.call('HMGET', pre .. old[i], 'rc', 'r')
  old_codes[#old_codes + 1] = f[2] and result_parts(f[2]) or f[1]
end
local ids, sets, left = {}, {}, slice
for a = 4, #ARGV do
  if left <= 0 then
    break
  end
  local got = redis.call('ZRANGEBYSCORE', DONES[ARGV[a]], '-inf', '(' .. ARGV[2], 'LIMIT', 0, left)
  for i = 1, #got do
    ids[#ids + 1] = got[i]
    sets[#sets + 1] = ARGV[a]
  end
  left = left - #got
end
local out, uks, dps, ws = { #old_ids }, {}, {}, {}
for i = 1, #ids do
  local f = redis.call('HMGET', pre .. ids[i], 'g', 'uk', 'dp', 'w')
  out[#out + 1] = ids[i]
  out[#out + 1] = f[1] or ''
  uks[i] = f[2]
  dps[i] = f[3]
  ws[i] = f[4]
end
-- Writes: each old job into its code's set before it leaves the old one
-- (a job whose hash is gone has no code, and just leaves).
local moved = {}
for k = 1, #old_ids do
  local set = old_codes[k] and DONES[old_codes[k]]
  if set then
    moved[set] = moved[set] or {}
    local buf = moved[set]
    buf[#buf + 1] = old[2 * k]
    buf[#buf + 1] = old_ids[k]
  end
end
for set, buf in pairs(moved) do
  zadd_all(set, buf)
end
zrem_all(KEYS[1], old_ids)
-- Then the purge, code after code.
local per = {}
for i = 1, #ids do
  redis.call('DEL', pre .. ids[i])
  if uks[i] then
    free_key(pre, uks[i], ids[i], false)
  end
  if dps[i] then
    -- a purged waiter's edges go with it
    redis.call('DEL', edges_key(pre, ids[i]))
  end
  if ws[i] then
    -- waiters held on it stay held for good
    redis.call('DEL', holders_key(pre, ids[i]))
  end
  local code = sets[i]
  per[code] = per[code] or {}
  local list = per[code]
  list[#list + 1] = ids[i]
end
for code, list in pairs(per) do
  zrem_all(DONES[code], list)
  if redis.call('HINCRBY', KEYS[2], code, -#list) <= 0 then
    redis.call('HDEL', KEYS[2], code)
  end
end
return out
