-- renew.lua: reset the TTL of a live lease of any mode, and only of it. The
-- keys are listed in lib.lua.
--
-- ARGV[1]  lease id
-- ARGV[2]  ttl in milliseconds; 0 keeps the lease's TTL
-- ARGV[3]  unlock channel
-- ARGV[4]  principal that must own the lease; "" for anyone (admin, open server)
-- ARGV[5]  publish command: PUBLISH, or SPUBLISH on Redis Cluster (sharded pub/sub)
-- ARGV[6]  events: see events_from in lib.lua ("0" to record none)
--
-- Publishes "c:<ttl ms>", so that waiters time the lease's new expiry (a
-- renewal may shorten it). Records renewed.
--
-- Returns {0} when the lease does not hold the lock (expired, released,
-- superseded or unknown), {-1} when it belongs to another principal, else
--   {1, lease id, owner, principal, token, hold count, ttl ms, acquired ms,
--    expires ms, metadata, mode, limit[, session id]}
-- A lease bound to a session is answered as it is: its expiry is its
-- session's, renewed by the session's renewal only.

local _, now = clock()
local id, channel, principal, publish = ARGV[1], ARGV[3], ARGV[4], ARGV[5]
local ttl = tonumber(ARGV[2])
events_from(ARGV[6])

local h, denied = held_exclusive(now, id, principal)
if denied then
	return denied
end
if h then
	if h[9] then
		-- Bound: its expiry is its session's, which only the session's
		-- renewal moves. Answered as it is.
		local st = session_state(h[9])
		return {1, h[1], h[2], h[3], h[4], tonumber(h[5]), tonumber(st.ttl), h[7], fmt(st.exp), h[8], 'exclusive', 0, h[9]}
	end
	if ttl == 0 then
		ttl = tonumber(h[6])
	end
	local exp = fmt(now + ttl)
	redis.call('HSET', KEYS[1], 'ttl', fmt(ttl), 'exp', exp)
	redis.call('PEXPIRE', KEYS[1], ttl)
	redis.call('HINCRBY', KEYS[2], 'ver', 1)
	redis.call(publish, channel, 'c:' .. fmt(ttl))
	record(now, 'renewed', id, 'exclusive', h[4], h[2], h[3], h[5], exp)
	return {1, h[1], h[2], h[3], h[4], tonumber(h[5]), ttl, h[7], exp, h[8], 'exclusive', 0}
end

prune_shared(now)
local rec = load_record(id)
if not rec then
	return {0}
end
if principal ~= '' and rec.principal ~= principal then
	return {-1}
end
if rec.sess then
	if not lease_live(rec.sess, now) then
		return {0} -- its session ended a moment ago; the sweeper ends it
	end
	local st = session_state(rec.sess)
	return {1, id, rec.owner, rec.principal, rec.token, tonumber(rec.count), tonumber(st.ttl), rec.acq, fmt(st.exp), rec.meta, record_mode(rec), tonumber(rec.limit), rec.sess}
end
if ttl == 0 then
	ttl = tonumber(rec.ttl)
end
rec.ttl, rec.exp = fmt(ttl), fmt(now + ttl)
save_record(id, rec)
redis.call('ZADD', KEYS[5], now + ttl, id)
keep_shared()
redis.call('HINCRBY', KEYS[2], 'ver', 1)
redis.call(publish, channel, 'c:' .. fmt(ttl))
local mode = record_mode(rec)
record(now, 'renewed', id, mode, rec.token, rec.owner, rec.principal, rec.count, rec.exp)
return {1, id, rec.owner, rec.principal, rec.token, tonumber(rec.count), ttl, rec.acq, rec.exp, rec.meta, mode, tonumber(rec.limit)}
