-- KEYS ready, sched, lock, the six sets of archived jobs per code (see
-- done_sets), the old archive set of every code (done), blocked.
-- ARGV: job key prefix, state ("w" waiting, "e" expired, "s" scheduled,
-- "r" running, "a" archived, "b" blocked), now, now (15 digits), n (how many jobs at
-- most), "1" with payloads, promotion slice, "1" if a cursor follows,
-- cursor priority, cursor dt, cursor id, created from, created to,
-- archived from, archived to (times; '' leaves that end open), the tag
-- ('' for any job), then the result codes of an archived query.
-- Reads, in the state's order, the first n jobs of this jobtype after the
-- cursor that are in the state at `now` and pass the ranges:
--   waiting, expired: ready (score -priority, member <dt><id>: the order
--     priority desc, dt, id), after promoting what a claim at `now` would
--     (due jobs of sched, expired leases of lock); a job free in ready is
--     waiting, a locked one expired;
--   scheduled, running: sched, lock (score dt, member id) from the first
--     score after now;
--   blocked: blocked (score the not-before time, member id);
--   archived: each code's set (score done_dt, member id) backwards from
--     the cursor, within the archived range; also the old set of every
--     code, filtered by code.
-- With a tag, jobs without it (field t, the JSON array of the job's tags)
-- are passed over like those of another state.
-- Returns {1} when promotion is not finished (call again), else 0 and
-- groups of 21 per job: id, data ('' without payloads), p, dt, l, a, c,
-- dd, rc, rs, ro, x, h, t, ca, cb, tc, r, uk, rp, dp (false where missing; dd, rc,
-- rs, ro and cb are those of hashes archived before r). Only the sentinel of
-- rank_after is written besides the promotion, and removed at once.
local pre, state, now, nowp = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local n, with_data, slice = tonumber(ARGV[5]), ARGV[6] == '1', tonumber(ARGV[7])
local has_cursor = ARGV[8] == '1'
local cdt, cid = ARGV[10], ARGV[11]
local function bound(v)
  if v == '' then
    return nil
  end
  return tonumber(v)
end
local cfrom, cto, afrom, ato = bound(ARGV[12]), bound(ARGV[13]), bound(ARGV[14]), bound(ARGV[15])
local READY, SCHED, LOCK = KEYS[1], KEYS[2], KEYS[3]
local DONES = done_sets(4)
local OLD = KEYS[10]
local FIELDS = { 'p', 'dt', 'l', 'a', 'c', 'dd', 'rc', 'rs', 'ro', 'x', 'h', 't', 'ca', 'cb', 'tc', 'r', 'uk', 'rp', 'dp' }
-- tags are [A-Za-z0-9_.:-]: the quoted tag occurs in the JSON array text
-- exactly when the job carries it
local tag = ARGV[16] ~= '' and ('"' .. ARGV[16] .. '"') or nil
local out = { 0 }

local function read(id)
  return redis.call('HMGET', pre .. id, unpack(FIELDS))
end
-- the created range and the tag, of the fields `f`
local function selected(f)
  if tag and not (f[12] and string.find(f[12], tag, 1, true)) then
    return false
  end
  local c = f[5]
  if not c then
    return false
  end
  local t = tonumber(c)
  return (cfrom == nil or t >= cfrom) and (cto == nil or t < cto)
end
local function locked(l)
  return l and l ~= '' and l ~= DONE and l ~= BLOCKED and l ~= STAGED
end
local function emit(id, f)
  out[#out + 1] = id
  if with_data then
    out[#out + 1] = redis.call('HGET', pre .. id, 'd') or ''
  else
    out[#out + 1] = ''
  end
  for k = 1, #FIELDS do
    out[#out + 1] = f[k]
  end
end

if state == 'w' or state == 'e' then
  local a = promote(READY, SCHED, pre, now, slice)
  local b = promote(READY, LOCK, pre, now, slice)
  if a >= slice or b >= slice then
    return { 1 }
  end
  local start = 0
  if has_cursor then
    start = rank_after(READY, fmt(-tonumber(ARGV[9])), rmember(tonumber(cdt), cid))
  end
  local got = 0
  while got < n do
    local members = redis.call('ZRANGE', READY, start, start + n - 1)
    for k = 1, #members do
      local m = members[k]
      if string.sub(m, 1, 15) <= nowp then
        local id = string.sub(m, 16)
        local f = read(id)
        local l = f[3]
        local ok = (state == 'w' and l == '') or (state == 'e' and locked(l))
        if ok and selected(f) then
          emit(id, f)
          got = got + 1
          if got >= n then
            break
          end
        end
      end
    end
    if #members < n then
      break
    end
    start = start + #members
  end
elseif state == 'b' then
  local key = KEYS[11]
  local start = 0
  if has_cursor then
    start = rank_after(key, cdt, cid)
  end
  local got = 0
  while got < n do
    local ids = redis.call('ZRANGE', key, start, start + n - 1)
    for k = 1, #ids do
      local f = read(ids[k])
      if f[3] == BLOCKED and selected(f) then
        emit(ids[k], f)
        got = got + 1
        if got >= n then
          break
        end
      end
    end
    if #ids < n then
      break
    end
    start = start + #ids
  end
elseif state == 's' or state == 'r' then
  local key = state == 's' and SCHED or LOCK
  local start = redis.call('ZCOUNT', key, '-inf', now)
  if has_cursor then
    start = math.max(start, rank_after(key, cdt, cid))
  end
  local t = tonumber(now)
  local got = 0
  while got < n do
    local ids = redis.call('ZRANGE', key, start, start + n - 1)
    for k = 1, #ids do
      local f = read(ids[k])
      local l = f[3]
      local ok = (state == 's' and l == '') or (state == 'r' and locked(l))
      if ok and tonumber(f[2]) > t and selected(f) then
        emit(ids[k], f)
        got = got + 1
        if got >= n then
          break
        end
      end
    end
    if #ids < n then
      break
    end
    start = start + #ids
  end
else
  local codes = {}
  for i = 17, #ARGV do
    codes[ARGV[i]] = true
  end
  -- newest first: backwards from the last member before the cursor
  local function archived(src, by_code)
    local hi
    if has_cursor then
      hi = rank_after(src, cdt, cid)
      local s = redis.call('ZSCORE', src, cid)
      if s and tonumber(s) == tonumber(cdt) then
        hi = hi - 1
      end
    else
      hi = redis.call('ZCARD', src)
    end
    if ato then
      hi = math.min(hi, redis.call('ZCOUNT', src, '-inf', '(' .. ato))
    end
    local lo = 0
    if afrom then
      lo = redis.call('ZCOUNT', src, '-inf', '(' .. afrom)
    end
    local got = 0
    while got < n and hi > lo do
      local first = math.max(lo, hi - n)
      local ids = redis.call('ZRANGE', src, first, hi - 1)
      for k = #ids, 1, -1 do
        local f = read(ids[k])
        if f[3] == DONE and selected(f) and (not by_code or codes[f[16] and result_parts(f[16]) or f[7]]) then
          emit(ids[k], f)
          got = got + 1
          if got >= n then
            break
          end
        end
      end
      hi = first
    end
  end
  for i = 17, #ARGV do
    local src = DONES[ARGV[i]]
    if src == nil then
      return redis.error_reply('JSBAD unknown result code')
    end
    archived(src, false)
  end
  if redis.call('EXISTS', OLD) == 1 then
    archived(OLD, true)
  end
end
return out
