-- inspect.lua: read a lock's lease and fence atomically (no writes).
--
-- KEYS[1]  lock hash   <prefix>{name}:lock
-- KEYS[2]  fence hash  <prefix>{name}:fence
--
-- Returns {lease id or false, owner, principal, token, hold count, acquired ms,
--          expires ms, metadata, last token, version, remaining ttl ms}
-- The remaining TTL (PTTL) lets a watcher time the expiry on its own clock,
-- whatever the skew between its clock and Redis's.
local h = redis.call('HMGET', KEYS[1], 'lease', 'owner', 'principal', 'token', 'count', 'acq', 'exp', 'meta')
local f = redis.call('HMGET', KEYS[2], 'token', 'ver')
h[9] = f[1]
h[10] = f[2]
h[11] = redis.call('PTTL', KEYS[1])
return h
