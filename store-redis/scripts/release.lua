-- KEYS ready, sched, lock, done, codes. ARGV: job key prefix, owner, now,
-- mode (retry|unget|archive|delete), new dt (retry), result code, status,
-- output, channel, jobtype, archive dt, ids...
-- Returns pairs: id, reservation token, for every job released.
local pre, owner, now, mode = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local READY, SCHED, LOCK, DONEZ, CODES = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local ids, dts, prios, atts, out = {}, {}, {}, {}, {}
if mode == 'archive' then
  -- only the owner check: nothing else of the job is needed (dt only
  -- for an expired lease a claim moved to ready, read by unlock then)
  for i = 12, #ARGV do
    local id = ARGV[i]
    if redis.call('HGET', pre .. id, 'l') == owner then
      ids[#ids + 1] = id
      out[#out + 1] = id
      out[#out + 1] = ''
    end
  end
  dts = nil
else
  for i = 12, #ARGV do
    local id = ARGV[i]
    local f = redis.call('HMGET', pre .. id, 'l', 'dt', 'p', 'a', 'g')
    if f[1] == owner then
      ids[#ids + 1] = id
      dts[#dts + 1] = tonumber(f[2])
      prios[#prios + 1] = tonumber(f[3])
      atts[#atts + 1] = tonumber(f[4])
      out[#out + 1] = id
      out[#out + 1] = f[5] or ''
    end
  end
end
if #ids == 0 then
  return out
end
unlock(READY, LOCK, ids, dts, pre)
local ready, sched, done = {}, {}, {}
if mode == 'retry' then
  local dt = tonumber(ARGV[5])
  for k = 1, #ids do
    redis.call('HSET', pre .. ids[k], 'l', '', 'dt', ARGV[5])
    if dt <= now then
      ready[#ready + 1] = fmt(-prios[k])
      ready[#ready + 1] = rmember(dt, ids[k])
    else
      sched[#sched + 1] = ARGV[5]
      sched[#sched + 1] = ids[k]
    end
  end
elseif mode == 'unget' then
  for k = 1, #ids do
    local a = atts[k] - 1
    if a < 0 then
      a = 0
    end
    redis.call('HSET', pre .. ids[k], 'l', '', 'dt', ARGV[3], 'a', fmt(a))
    ready[#ready + 1] = fmt(-prios[k])
    ready[#ready + 1] = rmember(now, ids[k])
  end
elseif mode == 'archive' then
  for k = 1, #ids do
    if ARGV[8] == '' then
      redis.call('HSET', pre .. ids[k], 'l', DONE, 'dt', ARGV[11], 'dd', ARGV[3],
        'rc', ARGV[6], 'rs', ARGV[7])
    else
      redis.call('HSET', pre .. ids[k], 'l', DONE, 'dt', ARGV[11], 'dd', ARGV[3],
        'rc', ARGV[6], 'rs', ARGV[7], 'ro', ARGV[8])
    end
    done[#done + 1] = ARGV[3]
    done[#done + 1] = ids[k]
  end
  redis.call('HINCRBY', CODES, ARGV[6], #ids)
elseif mode == 'delete' then
  for k = 1, #ids do
    redis.call('DEL', pre .. ids[k])
  end
else
  return redis.error_reply('JSBAD unknown release mode')
end
zadd_all(READY, ready)
zadd_all(SCHED, sched)
zadd_all(DONEZ, done)
if mode == 'retry' or mode == 'unget' then
  redis.call('PUBLISH', ARGV[9], ARGV[10])
end
return out
