-- KEYS ready, sched, fence. ARGV: job key prefix, now (15 zero-padded
-- digits), channel, jobtype, token, then groups of 8: id, mode, data,
-- priority, ready score (-priority), dt (15 zero-padded digits), tags (the
-- JSON array text, '' for none), trace context (the traceparent, then a
-- space and the tracestate if any; '' for none). Padded times compare as
-- strings: no number conversion per job. A created job gets its tags
-- (field t) and its trace context (field tc), each only when it has one,
-- and no history: its `added` event is implicit (reads put it back from c,
-- see README, "History and tags"), so h is first written by a later event.
-- mode "c": create the job if its hash is missing, unless this call's
-- reservation token was fenced (taken over) for that id.
-- mode "r": only report; the group's data field is then the token of the
-- reservation found in the index: if the job is missing, that token is
-- fenced (member "<token> <id>" of the fence set) before the caller takes
-- the reservation over, so the add that made it can no longer create the
-- job, however late its add.lua arrives.
-- mode "k": a job with a unique key (see README, "Unique keys"): its group
-- has 4 more values, 12 in all: the key, now - window in ms ('' for no
-- window) and "1" for on_conflict ReplaceData ("0" keep). Created as in
-- mode "c" (plus its key in uk, and uq naming it) unless a live job holds
-- the key in uq, or the job archived last with it (uqd) is inside the
-- window: then nothing is created and the reply names that job. A batch
-- without keys sends no group of mode "k", and takes none of this.
-- A job with a repeat rule (see README, "Repeating jobs") carries it as
-- one more value: mode "p" is a group of 9 (the 8 of mode "c", then the
-- rule's text), and a keyed group has a 12th value, the rule's text or ''
-- for none. The rule goes into the created job's field rp; a batch
-- without rules sends no group of mode "p".
-- mode "f": a job with dependencies (see README, "Dependencies"): the 12
-- values of mode "k" (key '' for none, rule '' for none), then its policy
-- ("c" cancel, "r" run), n, and n pairs: the target's jobtype ('' when the
-- id index does not know it) and id. Checked as mode "k" (a key only when
-- given), then stored staged: l = "__staged", dp = "<n> <policy>", its
-- edges in e:<id> ("<i> p <Tx>", or "<i> m" for a target not in the
-- index), in the slot's staged zset (score now), in no other set; the
-- commit (commit.lua) makes it blocked, free or archived, or deletes it.
-- Returns per job 1 created, 2 missing (mode "r"), 3 refused (fenced; a
-- fenced keyed job whose key is held is a duplicate instead), {holder id,
-- 1 if its payload was replaced else 0} for a duplicate, or,
-- for an existing job, its reservation token `g` (a string): the caller
-- then makes the index carry that token (compare-and-set).
-- Redis keeps the writes of a script that fails midway: every job hash is
-- read before the first write (a job key that cannot be accessed fails
-- there), and each created job goes into its set right after its hash is
-- written, so a failure never leaves a job outside every set.
local pre, nowp, token = ARGV[1], ARGV[2], ARGV[5]
local out, tokens, starts = {}, {}, {}
local created = 0
local fenced = redis.call('EXISTS', KEYS[3]) == 1
-- values per group, by mode
local WIDTH = { c = 8, r = 8, p = 9, k = 12 }
local i = 6
while i <= #ARGV do
  local width = WIDTH[ARGV[i + 1]]
  if ARGV[i + 1] == 'f' then
    width = 14 + 2 * (tonumber(ARGV[i + 13]) or 0)
  end
  if width == nil or i + width - 1 > #ARGV then
    return redis.error_reply('JSBAD malformed add group')
  end
  starts[#starts + 1] = i
  tokens[#tokens + 1] = redis.call('HGET', pre .. ARGV[i], 'g')
  i = i + width
end
-- The live holder of a keyed job's key, or the job archived last with it
-- inside the window: its id, and whether it is a free live job (whose
-- payload ReplaceData replaces) with its attempts and history; nil when
-- the key is free.
local uq, uqd
local function holder(key, since)
  local id = redis.call('HGET', uq, key)
  if id then
    local f = redis.call('HMGET', pre .. id, 'l', 'a', 'h')
    -- an entry naming a missing or archived job (a lost write) is free
    if f[1] and f[1] ~= DONE then
      return id, f[1] == '', f[2], f[3]
    end
  end
  if since ~= '' then
    local v = redis.call('HGET', uqd, key)
    if v and tonumber(string.sub(v, 1, 15)) > tonumber(since) then
      return string.sub(v, 17), false
    end
  end
  return nil
end
for n = 1, #starts do
  local i = starts[n]
  local id = ARGV[i]
  local g = tokens[n]
  local mode = ARGV[i + 1]
  local dup, free, a, h
  if g then
    out[n] = g
  elseif mode == 'r' then
    redis.call('SADD', KEYS[3], ARGV[i + 2] .. ' ' .. id)
    out[n] = 2
  elseif fenced and redis.call('SISMEMBER', KEYS[3], token .. ' ' .. id) == 1 then
    out[n] = 3
    -- The add that fenced this one creates the job only if its key is
    -- free: a key held now makes this one a duplicate too, never an
    -- "existing" job that nothing will store.
    if mode == 'k' or (mode == 'f' and ARGV[i + 8] ~= '') then
      if not uq then
        uq, uqd = unique_keys(pre)
      end
      local held = holder(ARGV[i + 8], ARGV[i + 9])
      if held then
        out[n] = { held, 0 }
      end
    end
  else
    local keyed = mode == 'k' or (mode == 'f' and ARGV[i + 8] ~= '')
    if keyed then
      if not uq then
        uq, uqd = unique_keys(pre)
      end
      dup, free, a, h = holder(ARGV[i + 8], ARGV[i + 9])
    end
    if dup then
      if free and ARGV[i + 10] == '1' then
        h = push_event(h, event_head(fmt(tonumber(nowp)), '') .. (a or '0') .. ',"event":"edited"}')
        redis.call('HSET', pre .. dup, 'd', ARGV[i + 2], 'h', h)
        out[n] = { dup, 1 }
      else
        out[n] = { dup, 0 }
      end
    else
      local dtp = ARGV[i + 5]
      local tags, tc = ARGV[i + 6], ARGV[i + 7]
      redis.call('HSET', pre .. id, 'd', ARGV[i + 2], 'p', ARGV[i + 3], 'dt', dtp,
        'l', mode == 'f' and STAGED or '', 'a', '0', 'c', nowp, 'g', ARGV[5])
      if tags ~= '' then
        redis.call('HSET', pre .. id, 't', tags)
      end
      if tc ~= '' then
        redis.call('HSET', pre .. id, 'tc', tc)
      end
      if mode == 'k' then
        redis.call('HSET', pre .. id, 'uk', ARGV[i + 8])
        redis.call('HSET', uq, ARGV[i + 8], id)
        if ARGV[i + 11] ~= '' then
          redis.call('HSET', pre .. id, 'rp', ARGV[i + 11])
        end
      elseif mode == 'p' then
        redis.call('HSET', pre .. id, 'rp', ARGV[i + 8])
      elseif mode == 'f' then
        if keyed then
          redis.call('HSET', pre .. id, 'uk', ARGV[i + 8])
          redis.call('HSET', uq, ARGV[i + 8], id)
        end
        if ARGV[i + 11] ~= '' then
          redis.call('HSET', pre .. id, 'rp', ARGV[i + 11])
        end
        local nd = tonumber(ARGV[i + 13])
        redis.call('HSET', pre .. id, 'dp', fmt(nd) .. ' ' .. ARGV[i + 12])
        local ek = edges_key(pre, id)
        redis.call('DEL', ek)
        local buf = {}
        for d = 0, nd - 1 do
          local tx, x = ARGV[i + 14 + 2 * d], ARGV[i + 15 + 2 * d]
          buf[#buf + 1] = x
          buf[#buf + 1] = tx == '' and (fmt(d) .. ' m') or (fmt(d) .. ' p ' .. tx)
          if #buf >= 2 * SLICE then
            redis.call('HSET', ek, unpack(buf))
            buf = {}
          end
        end
        if #buf > 0 then
          redis.call('HSET', ek, unpack(buf))
        end
        redis.call('ZADD', flow_base(pre) .. 'staged', nowp, id)
      end
      if mode == 'f' then
        -- staged: in no set but staged until its commit
      elseif dtp <= nowp then
        redis.call('ZADD', KEYS[1], ARGV[i + 4], dtp .. id)
      else
        redis.call('ZADD', KEYS[2], dtp, id)
      end
      if mode ~= 'f' then
        created = created + 1
      end
      out[n] = 1
    end
  end
end
if created > 0 then
  redis.call('PUBLISH', ARGV[3], ARGV[4])
end
return out
