-- acquire.lua: grant a lock, re-enter it, or report its holder.
--
-- KEYS[1]  lock hash   <prefix>{name}:lock
-- KEYS[2]  fence hash  <prefix>{name}:fence
-- ARGV[1]  lease id to use for a fresh grant (ULID)
-- ARGV[2]  owner
-- ARGV[3]  principal ("" when the server runs open)
-- ARGV[4]  ttl in milliseconds
-- ARGV[5]  metadata, JSON, stored as given
-- ARGV[6]  unlock channel
--
-- Returns, when granted:
--   {1, fresh (1|0), lease id, owner, principal, token, hold count, ttl ms,
--    acquired ms, expires ms, metadata}
-- and when another owner holds the lock:
--   {0, holder owner, holder token, remaining ttl ms}
--
-- A grant publishes "c:<ttl ms>" on the unlock channel, so that waiters time
-- the new holder's expiry.
--
-- Numbers go into Redis with string.format('%.0f'): Lua's own conversion
-- keeps 14 significant digits and would round microsecond tokens.
if redis.replicate_commands then pcall(redis.replicate_commands) end

local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
local ttl = tonumber(ARGV[4])
local exp = now + ttl

local held = redis.call('HMGET', KEYS[1], 'lease', 'owner', 'principal', 'token', 'acq', 'meta')
if held[1] then
	if held[2] ~= ARGV[2] or held[3] ~= ARGV[3] then
		return {0, held[2], held[4], redis.call('PTTL', KEYS[1])}
	end
	-- Reentrant: same lease and token, one more hold, a fresh TTL.
	local count = redis.call('HINCRBY', KEYS[1], 'count', 1)
	redis.call('HSET', KEYS[1], 'ttl', ARGV[4], 'exp', string.format('%.0f', exp))
	redis.call('PEXPIRE', KEYS[1], ttl)
	redis.call('HINCRBY', KEYS[2], 'ver', 1)
	redis.call('PUBLISH', ARGV[6], 'c:' .. ARGV[4])
	return {1, 0, held[1], held[2], held[3], held[4], count, ttl, held[5], string.format('%.0f', exp), held[6]}
end

-- Fresh grant. The token is max(counter + 1, now in microseconds): the
-- counter orders grants while Redis keeps its data, the clock keeps tokens
-- rising when the counter is lost. 2^53 - 1 keeps them exact in JavaScript.
local token = redis.call('HINCRBY', KEYS[2], 'token', 1)
if now_us > token then
	token = now_us
end
if token > 9007199254740991 then
	return redis.error_reply('ERR fencing token space exhausted')
end
local tok = string.format('%.0f', token)
redis.call('HSET', KEYS[2], 'token', tok)
redis.call('HINCRBY', KEYS[2], 'ver', 1)
redis.call('HSET', KEYS[1], 'lease', ARGV[1], 'owner', ARGV[2], 'principal', ARGV[3],
	'token', tok, 'count', 1, 'ttl', ARGV[4], 'acq', string.format('%.0f', now),
	'exp', string.format('%.0f', exp), 'meta', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PUBLISH', ARGV[6], 'c:' .. ARGV[4])
return {1, 1, ARGV[1], ARGV[2], ARGV[3], tok, 1, ttl, string.format('%.0f', now), string.format('%.0f', exp), ARGV[5]}
