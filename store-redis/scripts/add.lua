-- KEYS ready, sched, fence. ARGV: job key prefix, now (15 zero-padded
-- digits), channel, jobtype, token, then groups of 8: id, mode, data,
-- priority, ready score (-priority), dt (15 zero-padded digits), tags (the
-- JSON array text, '' for none), trace context (the traceparent, then a
-- space and the tracestate if any; '' for none). Padded times compare as
-- strings: no number conversion per job. A created job gets its tags
-- (field t) and its trace context (field tc), each only when it has one,
-- and its history with the one event `added` (field h).
-- mode "c": create the job if its hash is missing, unless this call's
-- reservation token was fenced (taken over) for that id.
-- mode "r": only report; the group's data field is then the token of the
-- reservation found in the index: if the job is missing, that token is
-- fenced (member "<token> <id>" of the fence set) before the caller takes
-- the reservation over, so the add that made it can no longer create the
-- job, however late its add.lua arrives.
-- Returns per job 1 created, 2 missing (mode "r"), 3 refused (fenced), or,
-- for an existing job, its reservation token `g` (a string): the caller
-- then makes the index carry that token (compare-and-set).
-- Redis keeps the writes of a script that fails midway: every job hash is
-- read before the first write (a job key that cannot be accessed fails
-- there), and each created job goes into its set right after its hash is
-- written, so a failure never leaves a job outside every set.
local pre, nowp, token = ARGV[1], ARGV[2], ARGV[5]
local out, tokens = {}, {}
local created = 0
local fenced = redis.call('EXISTS', KEYS[3]) == 1
local added = push_event(false, event_head(fmt(tonumber(nowp)), '') .. '0,"event":"added"}')
for i = 6, #ARGV, 8 do
  tokens[#tokens + 1] = redis.call('HGET', pre .. ARGV[i], 'g')
end
local n = 0
for i = 6, #ARGV, 8 do
  n = n + 1
  local id = ARGV[i]
  local g = tokens[n]
  if g then
    out[n] = g
  elseif ARGV[i + 1] == 'r' then
    redis.call('SADD', KEYS[3], ARGV[i + 2] .. ' ' .. id)
    out[n] = 2
  elseif fenced and redis.call('SISMEMBER', KEYS[3], token .. ' ' .. id) == 1 then
    out[n] = 3
  else
    local dtp = ARGV[i + 5]
    local tags, tc = ARGV[i + 6], ARGV[i + 7]
    redis.call('HSET', pre .. id, 'd', ARGV[i + 2], 'p', ARGV[i + 3], 'dt', dtp,
      'l', '', 'a', '0', 'c', nowp, 'g', ARGV[5], 'h', added)
    if tags ~= '' then
      redis.call('HSET', pre .. id, 't', tags)
    end
    if tc ~= '' then
      redis.call('HSET', pre .. id, 'tc', tc)
    end
    if dtp <= nowp then
      redis.call('ZADD', KEYS[1], ARGV[i + 4], dtp .. id)
    else
      redis.call('ZADD', KEYS[2], dtp, id)
    end
    created = created + 1
    out[n] = 1
  end
end
if created > 0 then
  redis.call('PUBLISH', ARGV[3], ARGV[4])
end
return out
