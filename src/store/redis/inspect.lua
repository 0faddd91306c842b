-- Read-only snapshot of one name: {now, holders, record, waiters in order, waiter details}.
local h, f, w, wd = keys(0)
return {now, redis.call('HGETALL', h), redis.call('HGETALL', f),
        redis.call('ZRANGE', w, 0, -1), redis.call('HGETALL', wd)}
