-- KEYS ready, sched. ARGV: job key prefix, now, channel, jobtype, token,
-- then groups of 5: id, mode, data, priority, dt.
-- mode "c": create the job if its hash is missing; mode "r": only report.
-- Returns per job 1 created, 0 existing, 2 missing (mode "r").
local pre, now = ARGV[1], tonumber(ARGV[2])
local ready, sched, out = {}, {}, {}
local created = 0
for i = 6, #ARGV, 5 do
  local id = ARGV[i]
  local key = pre .. id
  if redis.call('EXISTS', key) == 1 then
    out[#out + 1] = 0
  elseif ARGV[i + 1] == 'r' then
    out[#out + 1] = 2
  else
    local p, dt = tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
    redis.call('HSET', key, 'd', ARGV[i + 2], 'p', ARGV[i + 3], 'dt', ARGV[i + 4],
      'l', '', 'a', '0', 'c', ARGV[2], 'g', ARGV[5])
    if dt <= now then
      ready[#ready + 1] = fmt(-p)
      ready[#ready + 1] = rmember(dt, id)
    else
      sched[#sched + 1] = ARGV[i + 4]
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
