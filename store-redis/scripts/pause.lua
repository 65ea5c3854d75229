-- KEYS[1] the jobtype's paused flag ({P:T}:paused). ARGV: "p" (pause) or
-- "r" (resume), channel, jobtype. Returns 1 if the flag changed. A resume
-- publishes the jobtype on the channel, as new work does.
if ARGV[1] == 'p' then
  if redis.call('SET', KEYS[1], '1', 'NX') then
    return 1
  end
  return 0
end
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  return 1
end
return 0
