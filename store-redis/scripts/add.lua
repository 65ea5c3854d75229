-- KEYS ready, sched. ARGV: job key prefix, now (15 zero-padded digits),
-- channel, jobtype, token, then groups of 6: id, mode, data, priority,
-- ready score (-priority), dt (15 zero-padded digits). Padded times
-- compare as strings: no number conversion per job.
-- mode "c": create the job if its hash is missing; mode "r": only report.
-- Returns per job 1 created, 2 missing (mode "r"), or, for an existing
-- job, its reservation token `g` (a string): the caller then makes the
-- index carry that token (compare-and-set), so the index always names the
-- live job's token even when two adds of one id raced.
-- Redis keeps the writes of a script that fails midway: every job hash is
-- read before the first write (a job key that cannot be accessed fails
-- there), and each created job goes into its set right after its hash is
-- written, so a failure never leaves a job outside every set.
local pre, nowp = ARGV[1], ARGV[2]
local out, tokens = {}, {}
local created = 0
for i = 6, #ARGV, 6 do
  tokens[#tokens + 1] = redis.call('HGET', pre .. ARGV[i], 'g')
end
local n = 0
for i = 6, #ARGV, 6 do
  n = n + 1
  local id = ARGV[i]
  local g = tokens[n]
  if g then
    out[n] = g
  elseif ARGV[i + 1] == 'r' then
    out[n] = 2
  else
    local dtp = ARGV[i + 5]
    redis.call('HSET', pre .. id, 'd', ARGV[i + 2], 'p', ARGV[i + 3], 'dt', dtp,
      'l', '', 'a', '0', 'c', nowp, 'g', ARGV[5])
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
