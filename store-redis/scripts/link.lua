-- KEYS blocked (for the slot: every key below is of this jobtype).
-- ARGV: job key prefix, then triples: target id, waiter "<Tw> <W>", the
-- waiter's policy letter ("c", "r" or "h").
-- The link step of an add with dependencies (see README,
-- "Dependencies"): per target, atomically with every change of it, a live
-- one (free, blocked or locked) gets the waiter in up:<X> (uh:<X> under
-- hold) and the marker w, so the change that ends it delivers to the
-- waiter; an archived one answers its result (and, for a waiter under
-- hold and a result other than ok, gets it in uh:<X> and w: its held edge
-- resolves at X's next end); a missing or staged one (not a job yet)
-- answers "m". Every target is read before the first write.
-- Returns per triple: "l" (linked), "m", or "a <code> <status>".
local pre = ARGV[1]
local out, fields = {}, {}
for i = 2, #ARGV, 3 do
  fields[i] = redis.call('HMGET', pre .. ARGV[i], 'l', 'r', 'rc', 'rs')
end
for i = 2, #ARGV, 3 do
  local x, f, hold = ARGV[i], fields[i], ARGV[i + 2] == 'h'
  if not f[1] or f[1] == STAGED then
    out[#out + 1] = 'm'
  elseif f[1] == DONE then
    local code, status = 'ok', '0'
    if f[2] then
      code, status = result_parts(f[2])
    elseif f[3] then
      code, status = f[3], f[4] or '0'
    end
    code, status = code or 'ok', status or '0'
    if hold and code ~= 'ok' then
      redis.call('SADD', holders_key(pre, x), ARGV[i + 1])
      redis.call('HSET', pre .. x, 'w', '1')
    end
    out[#out + 1] = 'a ' .. code .. ' ' .. status
  else
    redis.call('SADD', hold and holders_key(pre, x) or waiters_key(pre, x), ARGV[i + 1])
    redis.call('HSET', pre .. x, 'w', '1')
    out[#out + 1] = 'l'
  end
end
return out
