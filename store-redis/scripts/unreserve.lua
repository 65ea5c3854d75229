-- KEYS[1] index bucket. ARGV pairs: id, value. Deletes each entry only if
-- it still holds that value (the reservation of the deleted job).
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
