-- KEYS the jobtype's blocked set (for the slot). ARGV: job key prefix,
-- limit, ids... (of this jobtype).
-- waits_of (see README, "Dependencies"): per job found (a staged one is
-- not a job yet), three values: its id; its counts over every edge of
-- e:<W> as "<kind>\n<n>\n" each, kind "p" pending, "h" held, "s" skipped
-- or "d <code>" done; and the first limit + 1 edges in target order
-- (bytewise) as "<target>\n<value>\n" each (all of them, unsorted, when
-- there are no more). Ids hold no control character, values no newline.
local pre, limit = ARGV[1], tonumber(ARGV[2])
local function before(a, b)
  return bytes_after(b, a)
end
local out = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local l = redis.call('HGET', pre .. id, 'l')
  if l and l ~= STAGED then
    local e = redis.call('HGETALL', edges_key(pre, id))
    local counts, kinds, targets, values = {}, {}, {}, {}
    for q = 1, #e, 2 do
      local st, code = string.match(e[q + 1], '^%d+ (%a) ?(%S*)')
      local kind = st
      if st == 'd' then
        kind = 'd ' .. code
      elseif st == 'm' then
        kind = 'p'
      end
      if not counts[kind] then
        counts[kind] = 0
        kinds[#kinds + 1] = kind
      end
      counts[kind] = counts[kind] + 1
      targets[#targets + 1] = e[q]
      values[e[q]] = e[q + 1]
    end
    if #targets > limit + 1 then
      table.sort(targets, before)
    end
    local c, page = {}, {}
    for _, kind in ipairs(kinds) do
      c[#c + 1] = kind .. '\n' .. fmt(counts[kind]) .. '\n'
    end
    for q = 1, math.min(#targets, limit + 1) do
      page[#page + 1] = targets[q] .. '\n' .. values[targets[q]] .. '\n'
    end
    out[#out + 1] = id
    out[#out + 1] = table.concat(c)
    out[#out + 1] = table.concat(page)
  end
end
return out
