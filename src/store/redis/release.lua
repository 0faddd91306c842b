-- ARGV: token. Releases what the token holds and withdraws it as a waiter.
-- Returns 1 if it held any name.
local token = ARGV[1]
local held = 0
for i = 0, n - 1 do
  local h, f, w, wd = keys(i)
  local v = redis.call('HGET', h, token)
  unwait(w, wd, token)
  if v then
    redis.call('HDEL', h, token)
    if parse(v) > now then
      held = 1
      redis.call('HSET', f, 'previous', 'released')
    else
      redis.call('HSET', f, 'previous', 'expired')
    end
    wake(w, wd)
  end
end
return held
