-- release.lua: drop one hold, or all holds, of a lease of any mode. The keys
-- are listed in lib.lua.
--
-- ARGV[1]  lease id
-- ARGV[2]  "1" to release all holds, "0" for one
-- ARGV[3]  unlock channel
-- ARGV[4]  principal that must own the lease; "" for anyone (admin, open server)
-- ARGV[5]  publish command: PUBLISH, or SPUBLISH on Redis Cluster (sharded pub/sub)
-- ARGV[6]  events: see events_from in lib.lua ("0" to record none)
--
-- Returns {1, holds left, ended (1|0), retried (1|0)}, {0} when the lease
-- does not hold the lock, or {-1} when it belongs to another principal. A
-- retry of the release that ended a lease finds the lease id in the fence
-- hash's "released" field and succeeds again without touching anything.
-- Records released with the holds left (0 when the lease ended); a retry
-- records nothing. Only a release that leaves holds bumps the fence's
-- version (the blocking-query index): a lease that ends changes the index
-- anyway, and can never come back.

local _, now = clock()
local id, all, channel, principal, publish = ARGV[1], ARGV[2] == '1', ARGV[3], ARGV[4], ARGV[5]
events_from(ARGV[6])

local function ended(by)
	redis.call('HSET', KEYS[2], 'released', id, 'released_by', by)
	lease_ended(now, channel, publish)
	return {1, 0, 1, 0}
end

local h = redis.call('HMGET', KEYS[1], 'lease', 'principal', 'owner', 'token', 'sess', 'v')
lease_layout(h[6])
if h[5] and lapse_exclusive(now, h[1], h[3], h[2], h[4], h[5]) then
	h = {}
end
settle_exclusive(now, h[1])
if h[1] == id then
	if principal ~= '' and h[2] ~= principal then
		return {-1}
	end
	if not all then
		local left = redis.call('HINCRBY', KEYS[1], 'count', -1)
		if left > 0 then
			redis.call('HINCRBY', KEYS[2], 'ver', 1)
			redis.call(publish, channel, 'c')
			record(now, 'released', id, 'exclusive', h[4], h[3], h[2], left, nil, nil, h[5])
			return {1, left, 0, 0}
		end
	end
	redis.call('DEL', KEYS[1])
	untrack_exclusive()
	unbind(h[5], id)
	local reply = ended(h[2])
	record(now, 'released', id, 'exclusive', h[4], h[3], h[2], 0, nil, nil, h[5])
	return reply
end

prune_shared(now)
local rec = load_record(id)
if rec and rec.sess and not lease_live(rec.sess, now) then
	rec = nil -- its session ended a moment ago; the sweeper ends it
end
if rec then
	if principal ~= '' and rec.principal ~= principal then
		return {-1}
	end
	local left = tonumber(rec.count) - 1
	if not all and left > 0 then
		redis.call('HINCRBY', KEYS[2], 'ver', 1)
		rec.count = fmt(left)
		save_record(id, rec)
		redis.call(publish, channel, 'c')
		record(now, 'released', id, record_mode(rec), rec.token, rec.owner, rec.principal, left, nil, nil, rec.sess)
		return {1, left, 0, 0}
	end
	drop_record(id, rec)
	unbind(rec.sess, id)
	local reply = ended(rec.principal)
	record(now, 'released', id, record_mode(rec), rec.token, rec.owner, rec.principal, 0, nil, nil, rec.sess)
	return reply
end

local last = redis.call('HMGET', KEYS[2], 'released', 'released_by', 'v')
lease_layout(last[3])
if last[1] == id then
	if principal ~= '' and last[2] ~= principal then
		return {-1}
	end
	return {1, 0, 1, 1}
end
return {0}
