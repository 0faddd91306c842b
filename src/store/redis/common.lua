-- Shared by every dlock script. Per lock name the caller passes four keys, all with the same
-- hash tag so a Redis Cluster keeps them on one master:
--   h  holders:  token -> "deadline_ms|fence|mode|meta"   (no TTL: expired holders are
--                dropped here, by the server's clock, so the grant knows one expired)
--   f  record:   fence (last fence handed out), previous (how the last lease ended),
--                wseq (the waiters' arrival counter)
--   w  waiters:  token scored by its arrival number (wake order)
--   wd waiters:  token -> "deadline_ms|mode" (a waiter that stops refreshing is dropped)
redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- The least fence a grant hands out: this server's clock since 2020-01-01 in microseconds,
-- counted in whole milliseconds (store::fence_floor), so a server that lost its counters, or
-- went back to an older copy of them, still hands out more than before.
local floor = (tonumber(t[1]) - 1577836800) * 1000000 + math.floor(tonumber(t[2]) / 1000) * 1000
local n = #KEYS / 4

local function keys(i)
  return KEYS[4 * i + 1], KEYS[4 * i + 2], KEYS[4 * i + 3], KEYS[4 * i + 4]
end

local function parse(v)
  -- Any fence text: a client before fences were floored at the clock wrote a fence this
  -- long with an exponent; its holder must still expire and be released here.
  local d, f, m = string.match(v, '^(%d+)|([^|]*)|([^|]*)|')
  return tonumber(d), tonumber(f), m
end

-- Drop expired holders; return the live holders' modes and the least time any has left.
local function purge(h, f)
  local all = redis.call('HGETALL', h)
  local modes, soonest, expired = {}, nil, false
  for i = 1, #all, 2 do
    local d, _, m = parse(all[i + 1])
    if d <= now then
      redis.call('HDEL', h, all[i])
      expired = true
    else
      modes[#modes + 1] = m
      if not soonest or d - now < soonest then soonest = d - now end
    end
  end
  if expired then redis.call('HSET', f, 'previous', 'expired') end
  return modes, soonest
end

-- The compatibility rule of dlock's modes (Mode::admits): x alone; s with s; lK with fewer
-- than K others, all lK with the same K (a different K would break their promise).
local function admits(mode, modes)
  if mode == 'x' then return #modes == 0 end
  for _, m in ipairs(modes) do
    if m ~= mode then return false end
  end
  if mode == 's' then return true end
  return #modes < tonumber(string.sub(mode, 2))
end

local function unwait(w, wd, token)
  if redis.call('ZREM', w, token) == 1 then redis.call('HDEL', wd, token) end
end

-- Wake the longest-waiting live waiter (one, not the herd), dropping dead ones on the way.
local function wake(w, wd)
  while true do
    local first = redis.call('ZRANGE', w, 0, 0)[1]
    if not first then return end
    local d = redis.call('HGET', wd, first)
    if d and tonumber(string.match(d, '^(%d+)')) > now then
      redis.call('PUBLISH', 'dlock:wake:' .. first, '1')
      return
    end
    unwait(w, wd, first)
  end
end

-- What this server remembers of a name (engine::amnesia): whether the engine's marker is
-- there, and how long the live holders run on (0 if none).
local function recall(h, f)
  local horizon = 0
  for _, v in ipairs(redis.call('HVALS', h)) do
    local d = parse(v)
    if d > now and d - now > horizon then horizon = d - now end
  end
  return redis.call('HEXISTS', f, 'mark'), horizon
end
