-- inspect.lua: read everything that holds a name, atomically and without
-- writing. The keys are listed in lib.lua.
--
-- Returns {lease id or false, owner, principal, token, hold count,
--          acquired ms, expires ms, metadata, last token, version,
--          remaining ttl ms, limit, queue length, now ms,
--          then per live shared lease or permit: its record (JSON)}
-- The remaining TTL (PTTL) lets a watcher time the expiry on its own clock,
-- whatever the skew between its clock and Redis's; so does 'now' for the
-- shared records' expiries.
local _, now = clock()
local h = redis.call('HMGET', KEYS[1], 'lease', 'owner', 'principal', 'token', 'count', 'acq', 'exp', 'meta')
local f = redis.call('HMGET', KEYS[2], 'token', 'ver')
h[9] = f[1]
h[10] = f[2]
h[11] = redis.call('PTTL', KEYS[1])
h[12] = tonumber(redis.call('HGET', KEYS[4], 'limit') or '0')
h[13] = redis.call('ZCOUNT', KEYS[7], '(' .. now, '+inf')
h[14] = now
local live = redis.call('ZRANGEBYSCORE', KEYS[5], '(' .. now, '+inf')
for _, id in ipairs(live) do
	h[#h + 1] = redis.call('HGET', KEYS[4], id)
end
return h
