-- renew.lua: reset the TTL of the current lease, and only of it.
--
-- KEYS[1]  lock hash   <prefix>{name}:lock
-- KEYS[2]  fence hash  <prefix>{name}:fence
-- ARGV[1]  lease id
-- ARGV[2]  ttl in milliseconds; 0 keeps the lease's TTL
-- ARGV[3]  unlock channel
-- ARGV[4]  principal that must own the lease; "" for anyone (admin, open server)
-- ARGV[5]  publish command: PUBLISH, or SPUBLISH on Redis Cluster (sharded pub/sub)
--
-- Publishes "c:<ttl ms>", so that waiters time the lease's new expiry (a
-- renewal may shorten it).
--
-- Returns {0} when the lease is not the holder (expired, released,
-- superseded or unknown), {-1} when it belongs to another principal, else
--   {1, lease id, owner, principal, token, hold count, ttl ms, acquired ms,
--    expires ms, metadata}
if redis.replicate_commands then pcall(redis.replicate_commands) end

local h = redis.call('HMGET', KEYS[1], 'lease', 'owner', 'principal', 'token', 'count', 'ttl', 'acq', 'meta')
if h[1] ~= ARGV[1] then
	return {0}
end
if ARGV[4] ~= '' and h[3] ~= ARGV[4] then
	return {-1}
end
local ttl = tonumber(ARGV[2])
if ttl == 0 then
	ttl = tonumber(h[6])
end
local t = redis.call('TIME')
local exp = string.format('%.0f', math.floor((tonumber(t[1]) * 1000000 + tonumber(t[2])) / 1000) + ttl)
redis.call('HSET', KEYS[1], 'ttl', string.format('%.0f', ttl), 'exp', exp)
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('HINCRBY', KEYS[2], 'ver', 1)
redis.call(ARGV[5], ARGV[3], 'c:' .. string.format('%.0f', ttl))
return {1, h[1], h[2], h[3], h[4], tonumber(h[5]), ttl, h[7], exp, h[8]}
