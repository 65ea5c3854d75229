-- KEYS fx, staged. ARGV: job key prefix, before (entries and staged jobs
-- recorded at or before it are due), limit.
-- Returns {entries..., '', staged id, its policy letter, its pending
-- targets as "<Tx> <X>" ..., '', staged id, ...}: up to limit outbox
-- entries, then up to limit staged jobs, each after an empty string and
-- followed by its policy and the targets its commit needs linked.
local pre, before, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local out = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', before, 'LIMIT', 0, limit)
local staged = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', before, 'LIMIT', 0, limit)
for _, id in ipairs(staged) do
  out[#out + 1] = ''
  out[#out + 1] = id
  local _, pol = dep_parts(redis.call('HGET', pre .. id, 'dp') or '0 c')
  out[#out + 1] = pol
  local e = redis.call('HGETALL', edges_key(pre, id))
  for i = 1, #e, 2 do
    local tx = string.match(e[i + 1], '^%d+ p (%S+)$')
    if tx then
      out[#out + 1] = tx .. ' ' .. e[i]
    end
  end
end
return out
