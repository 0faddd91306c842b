-- ARGV: token, modes (one per name, space-separated), ttl_ms, meta, queue (1: join the line
-- if busy), waiter_life_ms (how long a waiter's place is kept without its coming back),
-- heir (1: a release may hand the lock to this waiter, see hand_over)
-- Returns {1, fence1, previous1, ...} when every name is granted, else {0, retry_after_ms | -1,
-- the waiter's place in line (of the first name) | -1}; either followed by each name's marker
-- (1/0) and horizon in ms, before this grant. A name the token holds already (handed over
-- while this attempt was on its way) counts as granted, with its fence, from now.
local token, ttl, meta = ARGV[1], tonumber(ARGV[3]), ARGV[4]
local mode_of = {}
for m in string.gmatch(ARGV[2], '%S+') do mode_of[#mode_of + 1] = m end
local busy, retry = false, nil
local memo, holding, moved = {}, {}, {}
for i = 0, n - 1 do
  local h, f, w, wd = keys(i)
  local modes, soonest = purge(h, f)
  local marked, horizon = recall(h, f)
  memo[#memo + 1], memo[#memo + 2] = marked, horizon
  local ok
  if redis.call('HEXISTS', h, token) == 1 then
    ok, moved[i] = true, false
  else
    ok, moved[i] = turn(w, wd, token, mode_of[i + 1], modes)
  end
  holding[i] = modes
  if not ok then
    busy = true
    if soonest and (not retry or soonest < retry) then retry = soonest end
    -- Dead waiters left the front of the line: whoever stands there now may hold.
    if moved[i] then wake(w, wd, modes) end
  end
end
if busy then
  if ARGV[5] == '1' then
    for i = 0, n - 1 do
      local _, f, w, wd = keys(i)
      -- A per-name sequence, not the time: waiters in one millisecond keep their order.
      if not redis.call('ZSCORE', w, token) then
        redis.call('ZADD', w, redis.call('HINCRBY', f, 'wseq', 1), token)
      end
      local detail = (now + tonumber(ARGV[6])) .. '|' .. mode_of[i + 1]
      if ARGV[7] == '1' then detail = detail .. '|' .. ttl .. '|' .. meta end
      redis.call('HSET', wd, token, detail)
      -- A waiter that can no longer clean up after itself (killed, or cut off from the server
      -- when it gave up) must not leave the line behind for good: the line lives only as
      -- long as some waiter keeps coming back.
      redis.call('PEXPIRE', w, tonumber(ARGV[6]))
      redis.call('PEXPIRE', wd, tonumber(ARGV[6]))
    end
  end
  local _, _, w = keys(0)
  return {0, retry or -1, tonumber(redis.call('ZSCORE', w, token) or '-1'), unpack(memo)}
end
local out = {1}
for i = 0, n - 1 do
  local h, f, w, wd = keys(i)
  local mode = mode_of[i + 1]
  local mine = redis.call('HGET', h, token)
  local fs
  if mine then
    fs = string.match(mine, '^%d+|([^|]*)|')
  else
    fs = next_fence(f)
  end
  hold(h, token, ttl, fs, mode, meta)
  unwait(w, wd, token)
  -- Sharers behind a dead waiter this grant passed over were never woken: wake them now.
  if moved[i] and mode ~= 'x' then
    local beside = holding[i]
    beside[#beside + 1] = mode
    wake(w, wd, beside)
  end
  out[#out + 1] = tonumber(fs)
  out[#out + 1] = redis.call('HGET', f, 'previous') or 'none'
end
for _, v in ipairs(memo) do out[#out + 1] = v end
return out
