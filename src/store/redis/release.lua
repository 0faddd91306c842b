-- ARGV: token, ended. Releases what the token holds and withdraws it from the line. `ended` is
-- how the lease ended as the next holder is to be told ("released", "failed:3"), or "" for a
-- waiter's attempt given back, which leaves the previous holder's outcome as it was.
-- Returns 1 if it held any name.
local token, ended = ARGV[1], ARGV[2]
local held = 0
for i = 0, n - 1 do
  local h, f, w, wd = keys(i)
  local v = redis.call('HGET', h, token)
  local waited = unwait(w, wd, token)
  if v then
    redis.call('HDEL', h, token)
    if parse(v) > now then
      held = 1
      if ended ~= '' then redis.call('HSET', f, 'previous', ended) end
    elseif ended ~= '' then
      redis.call('HSET', f, 'previous', 'expired')
    end
  end
  -- A holder gone, or a waiter that stood ahead of others: the front of the line may hold now.
  -- The first of them is handed the lock here if it asked for that (hand_over).
  if v or waited then wake(w, wd, (purge(h, f)), {h, f}) end
end
return held
