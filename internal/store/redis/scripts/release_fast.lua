-- release_fast.lua: release.lua for the common case, the last hold of an
-- exclusive lease on a name without a queue.
--
-- KEYS[1] lock hash, KEYS[2] fence hash, KEYS[3] queue (KEYS[1], [2] and
-- [6] of lib.lua), then the event log and its expiries when events are
-- recorded outside Redis Cluster
-- ARGV[1]  lease id
-- ARGV[2]  principal that must own the lease; "" for anyone (admin, open server)
-- ARGV[3]  unlock channel
-- ARGV[4]  publish command: PUBLISH, or SPUBLISH on Redis Cluster (sharded pub/sub)
-- ARGV[5]  events: see events_from in lib.lua ("0" to record none)
--
-- Returns 1 when the lease ended, {-1} when it belongs to another principal
-- (as release.lua does), and FALLBACK for all it leaves to release.lua: a
-- lease that is not the exclusive one (shared, a permit, or none: a retry,
-- a lost lease), holds left after this one, a queue, a lease bound to a
-- session. It changes nothing then. A lock hash of a layout this version
-- does not know ends it with the error of lease_layout (lib.lua), before it
-- changes anything.

local id, principal = ARGV[1], ARGV[2]
events_from(ARGV[5])
local h
if EVENTS_MAX > 0 then
	h = redis.call('HMGET', KEYS[1], 'lease', 'principal', 'count', 'sess', 'v', 'owner', 'token')
else
	h = redis.call('HMGET', KEYS[1], 'lease', 'principal', 'count', 'sess', 'v')
end
lease_layout(h[5])
if h[1] ~= id or h[3] ~= '1' or h[4] then
	return FALLBACK
end
if principal ~= '' and h[2] ~= principal then
	return {-1}
end
if redis.call('EXISTS', KEYS[3]) == 1 then
	return FALLBACK
end
RARE = false
redis.call('DEL', KEYS[1])
-- The fence's evx stays, naming this lease, which 'released' now names
-- too: no lease to settle (released_member in lib.lua), one command less.
redis.call('HSET', KEYS[2], 'released', id, 'released_by', h[2])
redis.call(ARGV[4], ARGV[3], 'r')
record(nil, 'released', id, 'exclusive', h[7], h[6], h[2], '0')
return 1
