-- KEYS ready, sched, blocked, the set of archived jobs of code cancelled,
-- codes, fx. ARGV: job key prefix, now (15 digits), archive dt (15
-- digits), channel, jobtype, then outbox entries "<code> <status> <Tx>
-- <X>\n<W>" whose waiter W is of this jobtype.
-- The apply step (see README, "Dependencies"): each entry's edge ends
-- once (apply_edge is keyed on it: a redelivery changes nothing), and a
-- waiter cancelled by it ends its own edges (end_edges: waiters of this
-- slot at once, the others get entries in this slot's outbox).
-- Returns the new outbox entries.
local F = flow_ctx(ARGV[1], ARGV[5], ARGV[2], ARGV[3], KEYS[1], KEYS[2], KEYS[3], KEYS[4],
  KEYS[5], KEYS[6])
local queue = {}
for i = 6, #ARGV do
  local code, status, x, w = string.match(ARGV[i], '^(%S+) (%S+) %S+ ([^\n]*)\n(.*)$')
  if not code then
    return redis.error_reply('JSBAD malformed outbox entry')
  end
  apply_edge(F, x, code, status, w, queue)
end
end_edges(F, queue)
flow_done(F, ARGV[4])
return F.out
