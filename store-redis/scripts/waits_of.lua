-- KEYS the jobtype's blocked set (for the slot). ARGV: job key prefix,
-- ids... (of this jobtype).
-- waits_of (see README, "Dependencies"): per job found (a staged one is
-- not a job yet), its id and its edges (HGETALL e:<W>, at most
-- MAX_DEPENDENCIES) as one string: "<target>\n<value>\n" each ('' for a
-- job without edges). Ids hold no control character, values no newline.
local pre = ARGV[1]
local out = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local l = redis.call('HGET', pre .. id, 'l')
  if l and l ~= STAGED then
    local e = redis.call('HGETALL', edges_key(pre, id))
    local parts = {}
    for q = 1, #e do
      parts[q] = e[q]
    end
    out[#out + 1] = id
    if #parts > 0 then
      out[#out + 1] = table.concat(parts, '\n') .. '\n'
    else
      out[#out + 1] = ''
    end
  end
end
return out
