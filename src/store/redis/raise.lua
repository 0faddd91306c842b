-- ARGV: one fence per name. Raises each name's counter to at least that value.
for i = 0, n - 1 do
  local _, f = keys(i)
  local want = tonumber(ARGV[i + 1])
  if tonumber(redis.call('HGET', f, 'fence') or '0') < want then
    redis.call('HSET', f, 'fence', ARGV[i + 1])
  end
end
return 1
