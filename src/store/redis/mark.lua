-- Sets each name's marker (engine::amnesia): the engine's sign that this server voted for a
-- lease on the name; it goes only with the server's data.
for i = 0, n - 1 do
  local _, f = keys(i)
  redis.call('HSET', f, 'mark', '1')
end
return 1
