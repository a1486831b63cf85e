-- acquire.lua: grant a lock, re-enter it, or report its holder.
--
-- KEYS[1]  lock hash   <prefix>{name}:lock
-- KEYS[2]  fence hash  <prefix>{name}:fence
-- KEYS[3]  abandoned   <prefix>{name}:abandoned (set of request ids)
-- ARGV[1]  request id (ULID): the lease id of a fresh grant
-- ARGV[2]  owner
-- ARGV[3]  principal ("" when the server runs open)
-- ARGV[4]  ttl in milliseconds
-- ARGV[5]  metadata, JSON, stored as given
-- ARGV[6]  unlock channel
-- ARGV[7]  idempotency key, "" for none
-- ARGV[8]  publish command: PUBLISH, or SPUBLISH on Redis Cluster (sharded pub/sub)
--
-- Returns, when granted:
--   {1, fresh (1|0), lease id, owner, principal, token, hold count, ttl ms,
--    acquired ms, expires ms, metadata, request id, replayed (1|0)}
-- when another owner holds the lock:
--   {0, holder owner, holder token, remaining ttl ms}
-- and {-1} when this request was abandoned before it ran (see abandon.lua).
--
-- Every acquire records its request id in the lock hash ('op'), so that
-- abandon.lua can undo the hold of an acquire whose answer was lost. With an
-- idempotency key, the hash also remembers the key and the request that used
-- it ('idem', 'idemop'); a repeat of that key by the same owner is answered
-- with the lease as it is and marks the request's answer as claimed
-- ('s:<request id>' = 'c'), so that it is no longer abandoned.
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

if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then
	return {-1}
end

local held = redis.call('HMGET', KEYS[1], 'lease', 'owner', 'principal', 'token', 'acq', 'meta', 'idem', 'idemop')
if held[1] then
	if held[2] ~= ARGV[2] or held[3] ~= ARGV[3] then
		return {0, held[2], held[4], redis.call('PTTL', KEYS[1])}
	end
	-- A repeat of an idempotent acquire whose hold was not abandoned: the
	-- lease as it is now, nothing added.
	if ARGV[7] ~= '' and held[7] == ARGV[7] then
		local state = 's:' .. held[8]
		if redis.call('HGET', KEYS[1], state) ~= 'x' then
			redis.call('HSET', KEYS[1], state, 'c')
			local cur = redis.call('HMGET', KEYS[1], 'count', 'ttl', 'exp')
			local fresh = 0
			if held[8] == held[1] then
				fresh = 1
			end
			return {1, fresh, held[1], held[2], held[3], held[4], tonumber(cur[1]), tonumber(cur[2]), held[5], cur[3], held[6], held[8], 1}
		end
	end
	-- Reentrant: same lease and token, one more hold, a fresh TTL.
	local count = redis.call('HINCRBY', KEYS[1], 'count', 1)
	redis.call('HSET', KEYS[1], 'ttl', ARGV[4], 'exp', string.format('%.0f', exp), 'op', ARGV[1])
	if ARGV[7] ~= '' then
		redis.call('HSET', KEYS[1], 'idem', ARGV[7], 'idemop', ARGV[1])
	end
	redis.call('PEXPIRE', KEYS[1], ttl)
	redis.call('HINCRBY', KEYS[2], 'ver', 1)
	redis.call(ARGV[8], ARGV[6], 'c:' .. ARGV[4])
	return {1, 0, held[1], held[2], held[3], held[4], count, ttl, held[5], string.format('%.0f', exp), held[6], ARGV[1], 0}
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
	'exp', string.format('%.0f', exp), 'meta', ARGV[5], 'op', ARGV[1])
if ARGV[7] ~= '' then
	redis.call('HSET', KEYS[1], 'idem', ARGV[7], 'idemop', ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call(ARGV[8], ARGV[6], 'c:' .. ARGV[4])
return {1, 1, ARGV[1], ARGV[2], ARGV[3], tok, 1, ttl, string.format('%.0f', now), string.format('%.0f', exp), ARGV[5], ARGV[1], 0}
