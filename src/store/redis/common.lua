-- Shared by every dlock script. Per lock name the caller passes four keys, all with the same
-- hash tag so a Redis Cluster keeps them on one master:
--   h  holders:  token -> "deadline_ms|fence|mode|meta"   (no TTL: expired holders are
--                dropped here, by the server's clock, so the grant knows one expired)
--   f  record:   fence (last fence handed out), previous (how the last lease ended),
--                wseq (the waiters' arrival counter)
--   w  waiters:  token scored by its arrival number (wake order)
--   wd waiters:  token -> "deadline_ms|mode" (a waiter that stops refreshing is dropped),
--                or "deadline_ms|mode|ttl_ms|meta" from a waiter a release may hand the lock to
redis.replicate_commands()
local t_now = redis.call('TIME')
local now = tonumber(t_now[1]) * 1000 + math.floor(tonumber(t_now[2]) / 1000)
-- The least fence a grant hands out: this server's clock since 2020-01-01 in microseconds,
-- counted in whole milliseconds (store::fence_floor), so a server that lost its counters, or
-- went back to an older copy of them, still hands out more than before.
local floor = (tonumber(t_now[1]) - 1577836800) * 1000000 + math.floor(tonumber(t_now[2]) / 1000) * 1000
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

-- Withdraw a waiter from the line; true if it was in it.
local function unwait(w, wd, token)
  if redis.call('ZREM', w, token) == 1 then
    redis.call('HDEL', wd, token)
    return true
  end
  return false
end

-- The live waiters in line order: visit(token, mode) for each until it returns false. A waiter
-- refreshes its deadline at every attempt, so one that stopped (killed, cut off) is dropped
-- here, by whichever script meets it first, once its deadline passed: it leaves the line
-- within its life, whoever comes next. Returns whether it dropped any.
local function line(w, wd, visit)
  local after, dropped = '-inf', false
  while true do
    local batch = redis.call('ZRANGEBYSCORE', w, after, '+inf', 'WITHSCORES', 'LIMIT', 0, 16)
    if #batch == 0 then return dropped end
    local tokens = {}
    for i = 1, #batch, 2 do tokens[#tokens + 1] = batch[i] end
    local details = redis.call('HMGET', wd, unpack(tokens))
    for i, token in ipairs(tokens) do
      local d, m, heir
      if details[i] then d, m, heir = string.match(details[i], '^(%d+)|([^|]*)|?(.*)$') end
      -- A mode this version cannot read waits as an exclusive one (fail closed).
      if m ~= 's' and not (m and string.match(m, '^l%d+$')) then m = 'x' end
      if d and tonumber(d) > now then
        if not visit(token, m, heir) then return dropped end
      else
        unwait(w, wd, token)
        dropped = true
      end
    end
    after = '(' .. batch[#batch]
  end
end

-- Whether a lease of `mode` fits beside `count` others, all of the same mode when `same`
-- (admits, counted as it goes: a waiter's check walks a line of any length once).
local function fits(mode, count, same)
  if mode == 'x' then return count == 0 end
  return same and (mode == 's' or count < tonumber(string.sub(mode, 2)))
end

-- Whether `token` may hold `mode` now: its mode admits the live holders' `modes` and every
-- live waiter ahead of it in line (every one, for a newcomer), as queue::turn has it for etcd
-- and ZooKeeper. Nobody overtakes an earlier waiter. Also returns whether dead waiters were
-- dropped on the way (the line moved).
local function turn(w, wd, token, mode, modes)
  if not admits(mode, modes) then return false, false end
  local count, ok = #modes, true
  local dropped = line(w, wd, function(t, m)
    if t == token then return false end
    count = count + 1
    ok = m == mode and fits(mode, count, true)
    return ok
  end)
  return ok, dropped
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

-- Hand out the next fence of a name (its record `f`): one above the last, never below this
-- server's clock floor. As text in full: Lua would write a number this long with an exponent.
local function next_fence(f)
  local fence = math.max(tonumber(redis.call('HGET', f, 'fence') or '0') + 1, floor)
  local fs = string.format('%.0f', fence)
  redis.call('HSET', f, 'fence', fs)
  return fs
end

-- Write `token`'s holder row on `h`: a lease of `ttl` ms from now, under fence text `fs`.
local function hold(h, token, ttl, fs, mode, meta)
  redis.call('HSET', h, token, (now + ttl) .. '|' .. fs .. '|' .. mode .. '|' .. meta)
end

-- The server's clock as `acquired_at` is written (RFC 3339 in whole seconds, UTC), from the
-- days since the epoch to a civil date (H. Hinnant's algorithm).
local function rfc3339(secs)
  local days = math.floor(secs / 86400)
  local rem = secs - days * 86400
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400 + (m <= 2 and 1 or 0)
  return string.format('%04d-%02d-%02dT%02d:%02d:%02dZ', y, m, d,
    math.floor(rem / 3600), math.floor(rem % 3600 / 60), rem % 60)
end

-- Grant waiter `t` the lock in a release's own script (`to`: its h and f keys), as its grant
-- would: the next fence, a lease of the ttl it asked for, from now. It is told on its channel
-- "g|seq|fence|marked|horizon|previous": its place in line (seq: a waiter queued again since
-- ignores an old handover) and what its own grant would have answered. It reckons its lease
-- from the last attempt that found it in line, which came before this. Only a waiter still
-- subscribed to its channel: one killed since its last poll would hold the lock for its whole
-- ttl; it is woken as before, to nobody, and leaves the line within its waiter life.
local function hand_over(to, w, wd, t, m, heir)
  local h, f = to[1], to[2]
  local channel = 'dlock:wake:' .. t
  local ttl, meta = string.match(heir, '^(%d+)|(.*)$')
  local seq = redis.call('ZSCORE', w, t)
  if not ttl or not seq or redis.call('PUBSUB', 'NUMSUB', channel)[2] == 0 then
    redis.call('PUBLISH', channel, '1')
    return
  end
  local marked, horizon = recall(h, f)
  local fs = next_fence(f)
  -- Its metadata was stamped at its last look: held since now, as `inspect` shows it.
  local at = '"acquired_at":"' .. rfc3339(tonumber(t_now[1])) .. '"'
  meta = (string.gsub(meta, '"acquired_at":"[^"]*"', at, 1))
  hold(h, t, tonumber(ttl), fs, m, meta)
  unwait(w, wd, t)
  local previous = redis.call('HGET', f, 'previous') or 'none'
  redis.call('PUBLISH', channel, table.concat({'g', seq, fs, marked, horizon, previous}, '|'))
end

-- Wake the waiters at the front of the line that may hold beside the live holders' `modes`:
-- the next exclusive one, or the next run of sharers (or of `limit K` ones, as many as there
-- is room for), each on its own channel. One release wakes those it lets in, not the herd.
-- With `to` (a release's h and f keys) a waiter that asked for it is handed the lock here
-- (hand_over) rather than woken to ask for it: one round trip fewer per handoff.
local function wake(w, wd, modes, to)
  local first, count = nil, #modes
  line(w, wd, function(t, m, heir)
    if first == nil then
      if not admits(m, modes) then return false end
      first = m
    elseif m ~= first or not fits(m, count, true) then
      return false
    end
    count = count + 1
    if to and heir ~= '' then
      hand_over(to, w, wd, t, m, heir)
    else
      redis.call('PUBLISH', 'dlock:wake:' .. t, '1')
    end
    return m ~= 'x'
  end)
end
