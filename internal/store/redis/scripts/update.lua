-- update.lua: replace the metadata of a live lease of any mode, and only
-- of it; its token, TTL, expiry and holds stay as they are. The keys are
-- listed in lib.lua.
--
-- ARGV[1]  lease id
-- ARGV[2]  metadata, JSON, stored as given; "" for none
-- ARGV[3]  unlock channel
-- ARGV[4]  principal that must own the lease; "" for anyone (admin, open server)
-- ARGV[5]  publish command: PUBLISH, or SPUBLISH on Redis Cluster (sharded pub/sub)
-- ARGV[6]  events: see events_from in lib.lua ("0" to record none)
--
-- Bumps the blocking-query index and publishes "c", so that watchers look
-- again. Records updated, with the new metadata.
--
-- A lock hash or shared record of a layout this version does not know ends
-- it with the error of lease_layout (lib.lua), before it changes anything.
--
-- Returns {0} when the lease does not hold the lock (expired, released,
-- superseded or unknown), {-1} when it belongs to another principal, else
--   {1, lease id, owner, principal, token, hold count, ttl ms, acquired ms,
--    expires ms, metadata, mode, limit[, session id]}
-- as renew.lua does.

local _, now = clock()
local id, meta, channel, principal, publish = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
events_from(ARGV[6])

local h, denied = held_exclusive(now, id, principal)
if denied then
	return denied
end
if h then
	if meta == '' then
		redis.call('HDEL', KEYS[1], 'meta')
	else
		redis.call('HSET', KEYS[1], 'meta', meta)
	end
	redis.call('HINCRBY', KEYS[2], 'ver', 1)
	redis.call(publish, channel, 'c')
	record(now, 'updated', id, 'exclusive', h[4], h[2], h[3], h[5], nil, nil, h[9], meta)
	local ttl, exp = tonumber(h[6]), h[11]
	if h[9] then
		local st = session_state(h[9])
		return {1, h[1], h[2], h[3], h[4], tonumber(h[5]), tonumber(st.ttl), h[7], fmt(st.exp), meta, 'exclusive', 0, h[9]}
	end
	return {1, h[1], h[2], h[3], h[4], tonumber(h[5]), ttl, h[7], exp, meta, 'exclusive', 0}
end

prune_shared(now)
local rec = load_record(id)
if not rec then
	return {0}
end
if principal ~= '' and rec.principal ~= principal then
	return {-1}
end
if rec.sess and not lease_live(rec.sess, now) then
	return {0} -- its session ended a moment ago; the sweeper ends it
end
rec.meta = meta
save_record(id, rec)
redis.call('HINCRBY', KEYS[2], 'ver', 1)
redis.call(publish, channel, 'c')
local mode = record_mode(rec)
record(now, 'updated', id, mode, rec.token, rec.owner, rec.principal, rec.count, nil, nil, rec.sess, meta)
if rec.sess then
	local st = session_state(rec.sess)
	return {1, id, rec.owner, rec.principal, rec.token, tonumber(rec.count), tonumber(st.ttl), rec.acq, fmt(st.exp), meta, mode, tonumber(rec.limit), rec.sess}
end
return {1, id, rec.owner, rec.principal, rec.token, tonumber(rec.count), tonumber(rec.ttl), rec.acq, rec.exp, meta, mode, tonumber(rec.limit)}
