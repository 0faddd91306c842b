-- Drops every holder of the names. Returns 1 if any was live.
local any = 0
for i = 0, n - 1 do
  local h, f, w, wd = keys(i)
  local modes = purge(h, f)
  if #modes > 0 then
    any = 1
    redis.call('DEL', h)
    -- The holder did not finish by itself: its successor should know.
    redis.call('HSET', f, 'previous', 'expired')
    wake(w, wd, {})
  end
end
return any
