-- Shared prelude, prepended to every job script (see src/scripts.rs).
-- Integers are formatted with %d, never tostring (which switches to
-- exponent notation past 14 digits). Long lists go to Redis in slices of
-- SLICE members: unpack() fails past ~8,000 values.
local SLICE = 500
local DONE = '__done'
local function fmt(n)
  return string.format('%d', n)
end
-- member of a ready zset: dt as 15 decimal digits, then the id
local function rmember(dt, id)
  return string.format('%015d', dt) .. id
end
-- ZADD of a flat {score, member, ...} list, in slices
local function zadd_all(key, buf)
  local n = #buf
  local i = 1
  while i <= n do
    local j = math.min(i + 2 * SLICE - 1, n)
    redis.call('ZADD', key, unpack(buf, i, j))
    i = j + 1
  end
end
-- ZREM of a list of members, in slices
local function zrem_all(key, buf)
  local n = #buf
  local i = 1
  while i <= n do
    local j = math.min(i + SLICE - 1, n)
    redis.call('ZREM', key, unpack(buf, i, j))
    i = j + 1
  end
end
-- Takes owned jobs out of the lock zset; those a claim had moved to the
-- ready zset (expired leases) are taken out of ready instead.
-- `dts` may be nil: then each such job's dt is read from its hash (`pre`
-- .. id), only in that rare case.
local function unlock(ready, lock, ids, dts, pre)
  local n = #ids
  local i = 1
  while i <= n do
    local j = math.min(i + SLICE - 1, n)
    local removed = redis.call('ZREM', lock, unpack(ids, i, j))
    if removed < j - i + 1 then
      for k = i, j do
        local dt = dts and dts[k] or tonumber(redis.call('HGET', pre .. ids[k], 'dt'))
        if dt then
          redis.call('ZREM', ready, rmember(dt, ids[k]))
        end
      end
    end
    i = j + 1
  end
end
-- The sets of archived jobs, one per result code (score done_dt, member
-- id): a table code -> key of the six KEYS from `first` on, given in the
-- order of ResultCode::ALL.
local function done_sets(first)
  local sets = {}
  for i, code in ipairs({ 'ok', 'failed', 'retry', 'error', 'cancelled', 'timeout' }) do
    sets[code] = KEYS[first + i - 1]
  end
  return sets
end
-- Due jobs (sched) and expired leases (lock) become eligible: up to
-- `slice` entries of `src` with a score <= now (ARGV-style string) move
-- into `ready`, each with its priority read from its hash (`pre` .. id).
-- Returns how many entries were read (equal to `slice` when more may be
-- left).
local function promote(ready, src, pre, now, slice)
  local due = redis.call('ZRANGEBYSCORE', src, '-inf', now, 'WITHSCORES', 'LIMIT', 0, slice)
  if #due == 0 then
    return 0
  end
  local add, rem = {}, {}
  for i = 1, #due, 2 do
    local id = due[i]
    rem[#rem + 1] = id
    local p = redis.call('HGET', pre .. id, 'p')
    if p then
      add[#add + 1] = fmt(-tonumber(p))
      add[#add + 1] = rmember(tonumber(due[i + 1]), id)
    end
  end
  -- into ready first, then out of src: a job is never in no set
  zadd_all(ready, add)
  zrem_all(src, rem)
  return #due / 2
end
-- How many members of zset `key` sort at or before (score, member): a
-- sentinel member .. "\0" (ids hold no control characters, so no real
-- member equals it, and it sorts right after `member`) is added, ranked
-- and removed again, all on the declared key. Paging resumes at that rank.
local function rank_after(key, score, member)
  local s = member .. '\0'
  redis.call('ZADD', key, score, s)
  local r = redis.call('ZRANK', key, s)
  redis.call('ZREM', key, s)
  return r
end
-- A per-job cancel mark is the hash field x = "1"; a release clears it.
local MARK = '1'
-- A job's history is the hash field h: its event count as 2 digits, then
-- "\n" and the JSON text of each event, oldest first, at most HISTORY
-- (jobstore_api::limits::MAX_HISTORY) events. Event JSON holds no raw
-- newline (cjson escapes control characters). A hash without h (stored
-- before histories existed) has none.
local HISTORY = 20
-- `h` (the field's value, or false) with `event` appended, the oldest
-- dropped past HISTORY.
local function push_event(h, event)
  if not h or string.len(h) < 3 then
    return '01\n' .. event
  end
  local n = tonumber(string.sub(h, 1, 2)) or 0
  if n >= HISTORY then
    local p = string.find(h, '\n', 4, true)
    if p then
      return string.format('%02d', n) .. string.sub(h, p) .. '\n' .. event
    end
    return '01\n' .. event
  end
  return string.format('%02d', n + 1) .. string.sub(h, 3) .. '\n' .. event
end
-- The `by` part of an event's JSON: left out when empty, as
-- JobEvent::to_json does.
local function by_part(by)
  if by == '' then
    return ''
  end
  return ',"by":' .. cjson.encode(by)
end
-- The start of an event's JSON up to its attempt: `at` (a decimal number
-- as a string) and `by` (left out when empty).
-- The caller appends the attempt and the rest (`,"event":...}`).
local function event_head(at, by)
  return '{"at":' .. at .. by_part(by) .. ',"attempt":'
end
-- A job's current claim is kept in its own fields, not in h: `ca` the
-- claim's time (decimal), the owner in `l` (in `cb` once archived by the
-- release that ended the claim), the attempts in `a`. Absent or '' is no
-- pending claim (see README, "History and tags").
local function pending(ca)
  return ca ~= nil and ca ~= false and ca ~= ''
end
-- `h` with the pending claim's `claimed` event appended (claimed at `ca`
-- by `by`, attempts `a` after the claim); `h` unchanged without one.
-- Returns the history and whether a claim was stored.
local function store_claim(h, ca, by, a)
  if not pending(ca) then
    return h, false
  end
  return push_event(h, event_head(ca, by) .. a .. ',"event":"claimed"}'), true
end
-- An archived job's result is one hash field, r: its code, status,
-- done_dt and the owner of the claim its archive ended while still
-- pending ('' when that claim was stored in h), each followed by a space
-- but the owner, which ends the first line (a sysid holds no control
-- character but may hold spaces), then "\n" and the output (see README,
-- "A result in one field").
local function result_field(code, status, dd, by, output)
  return code .. ' ' .. status .. ' ' .. dd .. ' ' .. by .. '\n' .. output
end
-- code, status, done_dt and owner of an r field (strings; nil for a
-- malformed one).
local function result_parts(r)
  return string.match(r, '^(%S+) (%S+) (%S+) ([^\n]*)\n')
end
-- Unique keys (see README, "Unique keys"): the hashes of the jobtype whose
-- job key prefix is `pre` ("{P:T}:j:"): "{P:T}:uq" (key -> id of the live
-- holder) and "{P:T}:uqd" (key -> "<done_dt> <id>" of the job archived
-- last with it). Only keyed jobs (hash field uk) reach them.
local function unique_keys(pre)
  local base = string.sub(pre, 1, -3)
  return base .. 'uq', base .. 'uqd'
end
-- The keyed job `id` leaves the live states: its key is freed if `id`
-- holds it. `dd` (15 digits) for an archive: the window entry then names
-- it, unless it names another job archived later (greater done_dt, or the
-- same and a greater id). `dd` false for a delete or purge: the window
-- entry goes if it names `id`.
-- Whether string a sorts after b bytewise (Lua's < on strings follows the
-- server's collation locale; ids compare as bytes, as Rust's do).
local function bytes_after(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x > y
    end
  end
  return #a > #b
end
local function free_key(pre, key, id, dd)
  local uq, uqd = unique_keys(pre)
  if redis.call('HGET', uq, key) == id then
    redis.call('HDEL', uq, key)
  end
  local v = redis.call('HGET', uqd, key)
  local named = v and string.sub(v, 17) or nil
  if dd then
    if v and named ~= id then
      local vd = string.sub(v, 1, 15)
      if vd > dd or (vd == dd and bytes_after(named, id)) then
        return
      end
    end
    redis.call('HSET', uqd, key, dd .. ' ' .. id)
  elseif named == id then
    redis.call('HDEL', uqd, key)
  end
end
-- Dependencies (see README, "Dependencies"). A blocked job has l =
-- BLOCKED and sits in the slot's blocked zset (score its not-before time,
-- its dt); a staged one (an add still linking it) has l = STAGED and sits
-- in no set but staged.
local BLOCKED = '__blocked'
local STAGED = '__staged'
-- "{P:T}:" of the job key prefix "{P:T}:j:"
local function flow_base(pre)
  return string.sub(pre, 1, -3)
end
-- waiter w's edges: target id -> "<i> p <Tx>" pending | "<i> h <code> <status>"
-- held | "<i> d <code> <status>" done | "<i> s" skipped | "<i> m" not a job
local function edges_key(pre, w)
  return flow_base(pre) .. 'e:' .. w
end
-- target x's pending waiters under policy c or r: "<Tw> <W>"
local function waiters_key(pre, x)
  return flow_base(pre) .. 'up:' .. x
end
-- target x's waiters under policy h with an open edge: "<Tw> <W>", kept
-- across x's ends other than ok
local function holders_key(pre, x)
  return flow_base(pre) .. 'uh:' .. x
end
-- open count, policy ('c', 'r' or 'h') and the rest ('' or ' o': with
-- outputs, kept by every rewrite) of a dp field
local function dep_parts(dp)
  local n, p, o = string.match(dp, '^(%d+) (%a)(.*)$')
  return tonumber(n) or 0, p or 'c', o or ''
end
-- The flow context of one script: the slot's keys and the change's time.
-- nowp: now as 15 digits; adt: an archive's dt as 15 digits.
local function flow_ctx(pre, jt, nowp, adt, ready, sched, blocked, cancelled, codes, fx)
  return { pre = pre, jt = jt, nowp = nowp, now = fmt(tonumber(nowp)), adt = adt,
    ready = ready, sched = sched, blocked = blocked, cancelled = cancelled, codes = codes,
    fx = fx, out = {}, woken = false, ncancel = 0 }
end
-- The fields apply_edge and commit read of a waiter.
local WFIELDS = { 'l', 'dt', 'dp', 'p', 'a', 'h', 'uk', 'w' }
-- Archives waiter w (fields f, as WFIELDS) cancelled because dependency x
-- ended with `code`; its own waiters are queued. `from` is the set it
-- leaves (blocked), or nil.
local function cancel_for_dependency(F, w, f, x, code, queue, from)
  local note = '[jobstore] dependency ' .. x .. ' ended ' .. code .. '\n'
  local h = push_event(f[6], event_head(F.now, '') .. (f[5] or '0') .. ',"event":"cancelled"}')
  redis.call('HSET', F.pre .. w, 'l', DONE, 'dt', F.adt,
    'r', result_field('cancelled', '0', F.nowp, '', note), 'h', h)
  redis.call('ZADD', F.cancelled, F.now, w)
  if from then
    redis.call('ZREM', from, w)
  end
  F.ncancel = F.ncancel + 1
  if f[7] then
    free_key(F.pre, f[7], w, F.nowp)
  end
  if f[8] then
    queue[#queue + 1] = { w, 'cancelled', '0' }
  end
end
-- Frees waiter w (fields f): dt = max(not-before, now), event unblocked,
-- into ready or sched. `event` false leaves the history (a plain add).
local function free_waiter(F, w, f, event, from)
  local dtp = f[2]
  if event and dtp < F.nowp then
    dtp = F.nowp
  end
  if event then
    local h = push_event(f[6], event_head(F.now, '') .. (f[5] or '0') .. ',"event":"unblocked"}')
    redis.call('HSET', F.pre .. w, 'l', '', 'dt', dtp, 'h', h)
  else
    redis.call('HSET', F.pre .. w, 'l', '', 'dt', dtp)
  end
  if dtp <= F.nowp then
    redis.call('ZADD', F.ready, fmt(-tonumber(f[4])), dtp .. w)
  else
    redis.call('ZADD', F.sched, dtp, w)
  end
  if from then
    redis.call('ZREM', from, w)
  end
  F.woken = true
end
-- The edge of waiter w (of this slot) to x ends with code and status,
-- once: only while e:<w>[x] is open (pending, or held: x ran again). Under
-- policy h, a code other than ok holds it again (blocked or staged w: it
-- stays open, nothing else changes). Else it is done: cancels or frees w
-- when blocked; a staged w only counts down (its commit decides); a skipped
-- or done edge is left.
local function apply_edge(F, x, code, status, w, queue)
  local ek = edges_key(F.pre, w)
  local e = redis.call('HGET', ek, x)
  if not e then
    return false
  end
  local i, st = string.match(e, '^(%d+) (%a)')
  if st ~= 'p' and st ~= 'h' then
    return false
  end
  local f = redis.call('HMGET', F.pre .. w, unpack(WFIELDS))
  local n, pol, o = dep_parts(f[3] or '0 c')
  if f[3] and pol == 'h' and code ~= 'ok' and (f[1] == BLOCKED or f[1] == STAGED) then
    -- held: still open, nothing else changes
    redis.call('HSET', ek, x, i .. ' h ' .. code .. ' ' .. status)
    return true
  end
  redis.call('HSET', ek, x, i .. ' d ' .. code .. ' ' .. status)
  if not f[3] then
    return true
  end
  n = math.max(n - 1, 0)
  redis.call('HSET', F.pre .. w, 'dp', fmt(n) .. ' ' .. pol .. o)
  if f[1] == BLOCKED then
    if code ~= 'ok' and pol == 'c' then
      cancel_for_dependency(F, w, f, x, code, queue, F.blocked)
    elseif n == 0 then
      free_waiter(F, w, f, true, F.blocked)
    end
  end
  return true
end
-- Ends the edges to each target of `queue` ({id, code, status, gone},
-- growing with the cascade; gone: the target was deleted): waiters of this
-- slot are applied at once, the others get an outbox entry (F.out). The
-- waiters under hold (uh:<x>) stay registered, with the marker w, unless
-- the code is ok or the target is gone.
local function end_edges(F, queue)
  local k = 1
  while k <= #queue do
    local x, code, status, gone = queue[k][1], queue[k][2], queue[k][3], queue[k][4]
    k = k + 1
    local wk = waiters_key(F.pre, x)
    local ws = redis.call('SMEMBERS', wk)
    if #ws > 0 then
      redis.call('DEL', wk)
    end
    local hk = holders_key(F.pre, x)
    local hs = redis.call('SMEMBERS', hk)
    if #hs > 0 and (code == 'ok' or gone) then
      redis.call('DEL', hk)
    end
    if #hs == 0 or code == 'ok' or gone then
      redis.call('HDEL', F.pre .. x, 'w')
    end
    for _, m in ipairs(hs) do
      ws[#ws + 1] = m
    end
    for _, m in ipairs(ws) do
      local tw, w = string.match(m, '^(%S+) (.*)$')
      if tw == F.jt then
        apply_edge(F, x, code, status, w, queue)
      elseif tw then
        local entry = code .. ' ' .. status .. ' ' .. tw .. ' ' .. x .. '\n' .. w
        redis.call('ZADD', F.fx, F.now, entry)
        F.out[#F.out + 1] = entry
      end
    end
  end
end
-- After end_edges: the counters of dependency cancels, and the wake-up.
local function flow_done(F, channel)
  if F.ncancel > 0 then
    redis.call('HINCRBY', F.codes, 'cancelled', F.ncancel)
  end
  if F.woken then
    redis.call('PUBLISH', channel, F.jt)
  end
end
