-- acquire_fast.lua: acquire.lua for the common case, a plain exclusive try
-- (no shared mode, limit, fairness, queue place or idempotency key) on a
-- name without shared leases, permits, queue or abandoned requests.
--
-- KEYS[1] lock hash, KEYS[2] fence hash, KEYS[3] abandoned request ids,
-- KEYS[4] expiries of shared leases and permits, KEYS[5] queue (KEYS[1],
-- [2], [3], [5] and [6] of lib.lua), then the event log and its expiries
-- when events are recorded outside Redis Cluster
-- ARGV[1]  request id (ULID): the lease id of a fresh grant
-- ARGV[2]  owner
-- ARGV[3]  principal ("" when the server runs open)
-- ARGV[4]  ttl in milliseconds
-- ARGV[5]  metadata, JSON, stored as given; "" for none
-- ARGV[6]  unlock channel
-- ARGV[7]  publish command: PUBLISH, or SPUBLISH on Redis Cluster (sharded pub/sub)
-- ARGV[8]  events: see events_from in lib.lua ("0" to record none)
--
-- Returns, for a fresh grant, "<token> <acquired ms>" (a string costs Redis
-- less than an array), for a refusal what acquire.lua returns ({0, owner,
-- token, look again in ms, 0, 0, lease ttl in ms}: with no queue, look
-- again is the lease's ttl), and FALLBACK for all it leaves to
-- acquire.lua: a name with any of KEYS[3..5] or a lock-delay, a reentrant
-- acquire, a lease bound to a session (acquire.lua asks whether the
-- session lives), or an expired lease whose expiry is not recorded yet. It
-- changes nothing then. A lock hash or fence of a layout this version does
-- not know ends it with the error of lease_layout (lib.lua), before it
-- changes anything.

local owner, principal = ARGV[2], ARGV[3]
events_from(ARGV[8])
-- One look tells that the name is free and plain, the common case; when
-- it is not, a second tells which.
if redis.call('EXISTS', KEYS[1], KEYS[3], KEYS[4], KEYS[5], delay_key()) > 0 then
	if redis.call('EXISTS', KEYS[3], KEYS[4], KEYS[5], delay_key()) > 0 then
		return FALLBACK
	end
	local held = redis.call('HMGET', KEYS[1], 'lease', 'owner', 'principal', 'token', 'sess', 'v')
	lease_layout(held[6])
	if held[1] then
		if held[5] or (held[2] == owner and held[3] == principal) then
			return FALLBACK
		end
		local ttl = redis.call('PTTL', KEYS[1])
		return {0, held[2], held[4], ttl, 0, 0, ttl}
	end
end
RARE = false
local last
if EVENTS_MAX > 0 then
	local f = redis.call('HMGET', KEYS[2], 'token', 'evx', 'released', 'v')
	lease_layout(f[4])
	if f[2] and not released_member(f[2], f[3]) then
		return FALLBACK
	end
	last = f[1]
else
	local f = redis.call('HMGET', KEYS[2], 'token', 'v')
	lease_layout(f[2])
	last = f[1]
end

-- A fresh grant, as acquire.lua makes it (next_token, the lock hash), each
-- record with its layout (LEASE_LAYOUT in lib.lua).
local now_us, now = clock()
local token = (tonumber(last) or 0) + 1
if now_us > token then
	token = now_us
end
if token > 9007199254740991 then
	return redis.error_reply('ERR fencing token space exhausted')
end
local req, tok, acq, exp = ARGV[1], fmt(token), fmt(now), fmt(now + ARGV[4])
if ARGV[5] == '' then
	redis.call('HSET', KEYS[1], 'lease', req, 'owner', owner, 'principal', principal,
		'token', tok, 'count', '1', 'ttl', ARGV[4], 'acq', acq, 'exp', exp, 'v', LEASE_LAYOUT)
else
	redis.call('HSET', KEYS[1], 'lease', req, 'owner', owner, 'principal', principal,
		'token', tok, 'count', '1', 'ttl', ARGV[4], 'acq', acq, 'exp', exp, 'v', LEASE_LAYOUT, 'meta', ARGV[5])
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if EVENTS_MAX > 0 then
	redis.call('HSET', KEYS[2], 'token', tok, 'v', LEASE_LAYOUT, 'evx', lease_member(req, 'exclusive', tok, owner, principal))
else
	redis.call('HSET', KEYS[2], 'token', tok, 'v', LEASE_LAYOUT)
end
redis.call(ARGV[7], ARGV[6], 'c:' .. ARGV[4])
if EVENTS_MAX > 0 then
	-- The lease's expiry as record would add it, in one ZADD where record
	-- reads the set's first member first: the lease is new to the set,
	-- and LT puts the mark (member '') in at exp when none is pending,
	-- or down to exp when exp is earlier; either way (2 changed) every
	-- sweeper hears of exp (see EV_EXP in lib.lua).
	if redis.call('ZADD', EV_EXP, 'LT', 'CH', exp, lease_member(req, 'exclusive', tok, owner, principal), exp, '') == 2 then
		redis.call(EV_PUB, EV_CHAN, exp)
	end
	record(now, 'granted', req, 'exclusive', tok, owner, principal, '1')
end
return tok .. ' ' .. acq
