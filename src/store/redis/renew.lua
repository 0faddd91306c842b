-- ARGV: token, ttl_ms. Returns 1 if the token held every name and all were renewed, else 0.
local token, ttl = ARGV[1], tonumber(ARGV[2])
local rest = {}
for i = 0, n - 1 do
  local h = keys(i)
  local v = redis.call('HGET', h, token)
  if not v or parse(v) <= now then return 0 end
  rest[i] = string.match(v, '^%d+|(.*)$')
end
for i = 0, n - 1 do
  local h = keys(i)
  redis.call('HSET', h, token, (now + ttl) .. '|' .. rest[i])
end
return 1
