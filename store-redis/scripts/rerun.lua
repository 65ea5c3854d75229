-- KEYS ready, sched, codes, the six sets of archived jobs per code (see
-- done_sets), the old archive set of every code (done). ARGV: job key
-- prefix, now (15 digits), new dt (15 digits), channel, jobtype, ids...
-- Each archived job becomes free again: l = '', dt = new dt, a = 0, no
-- done_dt (a free job has none: its r, with the done_dt in it, stays; a
-- hash archived before r loses dd and keeps rc, rs, ro); into ready (due) or sched, out of its
-- archive set, one less in codes; the event rerun in its history (h),
-- after the claimed and archived events of a claim still pending (ca, cb:
-- archived by the release that ended it), whose fields are cleared. Publishes the jobtype if any ran again.
-- A job with a unique key (uk) takes it back (HSET uq): it stays archived,
-- and is not returned, while a live job other than itself holds the key
-- (uq), or an earlier id of this call took it.
-- Returns the ids run again.
local pre, nowp, dtp = ARGV[1], ARGV[2], ARGV[3]
local READY, SCHED, CODES = KEYS[1], KEYS[2], KEYS[3]
local DONES = done_sets(4)
local OLD = KEYS[10]
local event = event_head(fmt(tonumber(nowp)), '') .. '0,"event":"rerun","delay_ms":'
  .. fmt(tonumber(dtp) - tonumber(nowp)) .. '}'
-- Every job is read before the first write; each job goes into its new
-- set before it leaves its archive set.
local fields = {}
for i = 6, #ARGV do
  local f = redis.call('HMGET', pre .. ARGV[i], 'l', 'p', 'rc', 'h', 'ca', 'cb', 'a', 'dd', 'rs', 'r', 'uk')
  if f[10] then
    -- the result in one field; rc, cb, dd, rs of hashes archived before
    f[3], f[9], f[8], f[6] = result_parts(f[10])
  end
  if f[1] == DONE and f[11] then
    -- the key's live holder (f[12]); an entry naming a missing or
    -- archived job (a lost write) holds nothing
    local uq = unique_keys(pre)
    local holder = redis.call('HGET', uq, f[11])
    if holder and holder ~= ARGV[i] then
      local l = redis.call('HGET', pre .. holder, 'l')
      if l and l ~= DONE then
        f[12] = holder
      end
    end
  end
  fields[i] = f
end
local out, per, taken = {}, {}, {}
for i = 6, #ARGV do
  local id, f = ARGV[i], fields[i]
  local key = f[11]
  if f[1] == DONE and key and (f[12] or taken[key]) then
    -- its key is held: it stays archived
  elseif f[1] == DONE then
    if key then
      taken[key] = true
      redis.call('HSET', unique_keys(pre), key, id)
    end
    local key = pre .. id
    local by, a = f[6] or '', f[7] or '0'
    local h, stored = store_claim(f[4], f[5], by, a)
    if stored and f[8] and f[3] then
      h = push_event(h, event_head(fmt(tonumber(f[8])), by) .. a .. ',"event":"archived","code":"'
        .. f[3] .. '","status":' .. (f[9] or '0') .. '}')
    end
    redis.call('HSET', key, 'l', '', 'dt', dtp, 'a', '0', 'h', push_event(h, event))
    if stored then
      redis.call('HDEL', key, 'dd', 'ca', 'cb')
    else
      redis.call('HDEL', key, 'dd')
    end
    if dtp <= nowp then
      redis.call('ZADD', READY, fmt(-tonumber(f[2])), dtp .. id)
    else
      redis.call('ZADD', SCHED, dtp, id)
    end
    local set = f[3] and DONES[f[3]]
    if set then
      redis.call('ZREM', set, id)
      per[f[3]] = (per[f[3]] or 0) + 1
    end
    redis.call('ZREM', OLD, id)
    out[#out + 1] = id
  end
end
for code, n in pairs(per) do
  if redis.call('HINCRBY', CODES, code, -n) <= 0 then
    redis.call('HDEL', CODES, code)
  end
end
if #out > 0 then
  redis.call('PUBLISH', ARGV[4], ARGV[5])
end
return out
