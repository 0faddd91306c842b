-- ARGV: token, ttl_ms. Returns 1 if the token held every name and all were renewed, else 0;
-- -1 when a name's lease is gone and its record tells of no lease ending (every end writes
-- 'previous'): the server lost its data under the holder (FLUSHALL, a restart without it).
local token, ttl = ARGV[1], tonumber(ARGV[2])
local rest = {}
for i = 0, n - 1 do
  local h, f = keys(i)
  local v = redis.call('HGET', h, token)
  if not v and not redis.call('HGET', f, 'previous') then return -1 end
  if not v or parse(v) <= now then return 0 end
  rest[i] = string.match(v, '^%d+|(.*)$')
end
for i = 0, n - 1 do
  local h = keys(i)
  redis.call('HSET', h, token, (now + ttl) .. '|' .. rest[i])
end
return 1
