-- KEYS the hashes of jobs of one jobtype (one slot). Returns, per key in
-- KEYS order, its HGETALL (an empty array for a missing job): what
-- `get_job` reads of one job, for many in one call.
local out = {}
for i = 1, #KEYS do
  out[i] = redis.call('HGETALL', KEYS[i])
end
return out
