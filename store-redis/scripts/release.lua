-- KEYS ready, sched, lock, codes, then the six sets of archived jobs per
-- code (see done_sets), blocked, fx. ARGV: job key prefix, owner, now
-- (15 digits), channel, jobtype, archive dt (now + 1000 years), then one
-- group per job (each id once): id, kind, and that kind's own values:
--   'r' retry:   new dt (15 digits), delay in ms, the run's status ('' for
--                none)
--   'u' unget:   -
--   'a' archive: result code, status, output
--   'd' delete:  -
--   'p' repeat:  new dt (15 digits), result code, status, output, '1' when
--                the payload is replaced else '0', the payload ('' for none)
-- Only jobs with l == owner are touched; each loses its cancel mark (x).
-- An archive writes the job's result as one field (r, see result_field)
-- with the owner of its claim when pending (ca): h stays as it is, ca
-- stays (the claimed and archived events are read from these fields);
-- one whose claim was already stored (a cancel was requested meanwhile)
-- gets its archived event in h and no owner in r. A retry or unget stores the
-- pending claim's event, then its own, in h, and clears ca.
-- An archived or deleted job with a unique key (uk) frees it, and an
-- archive records it for windows (free_key, see README, "Unique keys").
-- A repeat frees the job as a retry does (the pending claim's event, then
-- its repeated event, in h; ca cleared), with a 0, its result in r (no
-- owner: its claim is stored in h; the done_dt written is now, which a free
-- job's reader leaves out) and the payload when one is given; uk and rp
-- stay (the key stays held), codes counts nothing (see README,
-- "Repeating jobs").
-- An archived or deleted job with waiters (w) ends its edges (end_edges,
-- see README, "Dependencies"); a deleted waiter (dp) loses its edges.
-- Returns pairs: id, reservation token (for deletes, '' otherwise), for
-- every job released; then pairs '', outbox entry for waiters elsewhere.
local pre, owner, now = ARGV[1], ARGV[2], tonumber(ARGV[3])
local READY, SCHED, LOCK, CODES = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local DONES = done_sets(5)
-- how many values follow id and kind, per kind
local VALUES = { r = 3, u = 0, a = 3, d = 0, p = 6 }
local head = event_head(fmt(now), owner)
-- per released job: id, kind, ARGV index of its values, and (but for
-- archives, which need only the owner check) dt, priority, attempts; the
-- claimed-at field and the history of each (an archive with a pending
-- claim does not read its history)
local ids, kinds, at, dts, prios, atts, marks, out = {}, {}, {}, {}, {}, {}, {}, {}
local cas, hists, uks, ws, dps = {}, {}, {}, {}, {}
local i, n = 7, #ARGV
-- Every job is read before anything is written (see README, "Scripts that
-- fail midway").
while i <= n do
  local id, kind = ARGV[i], ARGV[i + 1]
  local values = VALUES[kind]
  if values == nil then
    return redis.error_reply('JSBAD unknown release kind')
  end
  if (kind == 'a' and DONES[ARGV[i + 2]] == nil) or (kind == 'p' and DONES[ARGV[i + 3]] == nil) then
    return redis.error_reply('JSBAD unknown result code')
  end
  if kind == 'a' then
    -- dt is read by unlock, and only for an expired lease a claim had
    -- moved to ready
    -- attempts and history only for an archived event to write: a job
    -- whose claim is pending (the usual case) needs neither
    local f = redis.call('HMGET', pre .. id, 'l', 'x', 'ca', 'uk', 'w')
    if f[1] == owner then
      local k = #ids + 1
      ids[k], kinds[k], at[k], dts[k], marks[k] = id, kind, i + 2, false, f[2]
      cas[k], uks[k], ws[k] = f[3], f[4], f[5]
      if not pending(f[3]) then
        local ah = redis.call('HMGET', pre .. id, 'a', 'h')
        atts[k], hists[k] = ah[1] or '0', ah[2]
      end
      out[#out + 1] = id
      out[#out + 1] = ''
    end
  else
    local f = redis.call('HMGET', pre .. id, 'l', 'dt', 'p', 'a', 'g', 'x', 'h', 'ca', 'uk', 'w', 'dp')
    if f[1] == owner then
      local k = #ids + 1
      ids[k], kinds[k], at[k], marks[k], hists[k] = id, kind, i + 2, f[6], f[7]
      cas[k], uks[k], ws[k], dps[k] = f[8], f[9], f[10], f[11]
      dts[k], prios[k], atts[k] = tonumber(f[2]), tonumber(f[3]), tonumber(f[4])
      out[#out + 1] = id
      out[#out + 1] = kind == 'd' and (f[5] or '') or ''
    end
  end
  i = i + 2 + values
end
if #ids == 0 then
  return out
end
unlock(READY, LOCK, ids, dts, pre)
local ready, sched, done, codes = {}, {}, {}, {}
local freed = false
local ended = {}
for k = 1, #ids do
  local id, kind, a = ids[k], kinds[k], at[k]
  if marks[k] and kind ~= 'd' then
    redis.call('HDEL', pre .. id, 'x')
  end
  if kind == 'r' then
    local dt = tonumber(ARGV[a])
    local e = ',"event":"retried","delay_ms":' .. ARGV[a + 1]
    if ARGV[a + 2] ~= '' then
      e = e .. ',"status":' .. ARGV[a + 2]
    end
    local h = store_claim(hists[k], cas[k], owner, fmt(atts[k]))
    h = push_event(h, head .. fmt(atts[k]) .. e .. '}')
    redis.call('HSET', pre .. id, 'l', '', 'dt', ARGV[a], 'h', h, 'ca', '')
    if dt <= now then
      ready[#ready + 1] = fmt(-prios[k])
      ready[#ready + 1] = rmember(dt, id)
    else
      sched[#sched + 1] = ARGV[a]
      sched[#sched + 1] = id
    end
    freed = true
  elseif kind == 'u' then
    local left = atts[k] - 1
    if left < 0 then
      left = 0
    end
    local h = store_claim(hists[k], cas[k], owner, fmt(atts[k]))
    h = push_event(h, head .. fmt(left) .. ',"event":"handed_back"}')
    redis.call('HSET', pre .. id, 'l', '', 'dt', ARGV[3], 'a', fmt(left), 'h', h, 'ca', '')
    ready[#ready + 1] = fmt(-prios[k])
    ready[#ready + 1] = rmember(now, id)
    freed = true
  elseif kind == 'p' then
    local dt = tonumber(ARGV[a])
    local e = ',"event":"repeated","code":"' .. ARGV[a + 1] .. '","status":' .. ARGV[a + 2]
      .. ',"next_ms":' .. fmt(dt) .. '}'
    local h = store_claim(hists[k], cas[k], owner, fmt(atts[k]))
    h = push_event(h, head .. fmt(atts[k]) .. e)
    local r = result_field(ARGV[a + 1], ARGV[a + 2], ARGV[3], '', ARGV[a + 3])
    if ARGV[a + 4] == '1' then
      redis.call('HSET', pre .. id, 'l', '', 'dt', ARGV[a], 'a', '0', 'h', h, 'ca', '', 'r', r,
        'd', ARGV[a + 5])
    else
      redis.call('HSET', pre .. id, 'l', '', 'dt', ARGV[a], 'a', '0', 'h', h, 'ca', '', 'r', r)
    end
    if dt <= now then
      ready[#ready + 1] = fmt(-prios[k])
      ready[#ready + 1] = rmember(dt, id)
    else
      sched[#sched + 1] = ARGV[a]
      sched[#sched + 1] = id
    end
    freed = true
  elseif kind == 'a' then
    -- the whole result in r, which replaces a run-again job's last one
    local code = ARGV[a]
    if pending(cas[k]) then
      redis.call('HSET', pre .. id, 'l', DONE, 'dt', ARGV[6],
        'r', result_field(code, ARGV[a + 1], ARGV[3], owner, ARGV[a + 2]))
    else
      local h = push_event(hists[k], head .. atts[k] .. ',"event":"archived","code":"' .. code
        .. '","status":' .. ARGV[a + 1] .. '}')
      redis.call('HSET', pre .. id, 'l', DONE, 'dt', ARGV[6],
        'r', result_field(code, ARGV[a + 1], ARGV[3], '', ARGV[a + 2]), 'h', h)
    end
    if uks[k] then
      free_key(pre, uks[k], id, ARGV[3])
    end
    done[code] = done[code] or {}
    local buf = done[code]
    buf[#buf + 1] = ARGV[3]
    buf[#buf + 1] = id
    codes[code] = (codes[code] or 0) + 1
    if ws[k] then
      ended[#ended + 1] = { id, code, ARGV[a + 1] }
    end
  else
    redis.call('DEL', pre .. id)
    if uks[k] then
      free_key(pre, uks[k], id, false)
    end
    if dps[k] then
      redis.call('DEL', edges_key(pre, id))
    end
    if ws[k] then
      ended[#ended + 1] = { id, 'cancelled', '0', true }
    end
  end
end
zadd_all(READY, ready)
zadd_all(SCHED, sched)
for code, buf in pairs(done) do
  zadd_all(DONES[code], buf)
end
for code, count in pairs(codes) do
  redis.call('HINCRBY', CODES, code, count)
end
if freed then
  redis.call('PUBLISH', ARGV[4], ARGV[5])
end
if #ended > 0 then
  -- the archives are in their sets: the waiters' changes follow
  local F = flow_ctx(pre, ARGV[5], ARGV[3], ARGV[6], READY, SCHED, KEYS[11], DONES['cancelled'],
    CODES, KEYS[12])
  end_edges(F, ended)
  if F.woken and freed then
    F.woken = false
  end
  flow_done(F, ARGV[4])
  for _, e in ipairs(F.out) do
    out[#out + 1] = ''
    out[#out + 1] = e
  end
end
return out
