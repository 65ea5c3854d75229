-- KEYS ready, sched. ARGV: job key prefix, now (15 zero-padded digits),
-- channel, jobtype, token, then groups of 6: id, mode, data, priority,
-- ready score (-priority), dt (15 zero-padded digits). Padded times
-- compare as strings: no number conversion per job.
-- mode "c": create the job if its hash is missing; mode "r": only report.
-- Returns per job 1 created, 2 missing (mode "r"), or, for an existing
-- job, its reservation token `g` (a string): the caller then makes the
-- index carry that token (compare-and-set), so the index always names the
-- live job's token even when two adds of one id raced.
local pre, nowp = ARGV[1], ARGV[2]
local ready, sched, out = {}, {}, {}
local created = 0
for i = 6, #ARGV, 6 do
  local id = ARGV[i]
  local key = pre .. id
  local g = redis.call('HGET', key, 'g')
  if g then
    out[#out + 1] = g
  elseif ARGV[i + 1] == 'r' then
    out[#out + 1] = 2
  else
    local dtp = ARGV[i + 5]
    redis.call('HSET', key, 'd', ARGV[i + 2], 'p', ARGV[i + 3], 'dt', dtp,
      'l', '', 'a', '0', 'c', nowp, 'g', ARGV[5])
    if dtp <= nowp then
      ready[#ready + 1] = ARGV[i + 4]
      ready[#ready + 1] = dtp .. id
    else
      sched[#sched + 1] = dtp
      sched[#sched + 1] = id
    end
    created = created + 1
    out[#out + 1] = 1
  end
end
zadd_all(KEYS[1], ready)
zadd_all(KEYS[2], sched)
if created > 0 then
  redis.call('PUBLISH', ARGV[3], ARGV[4])
end
return out
