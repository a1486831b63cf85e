-- force_release.lua: end every lease of a name, whoever holds them (admin).
-- The keys are listed in lib.lua.
--
-- ARGV[1]  unlock channel
-- ARGV[2]  publish command: PUBLISH, or SPUBLISH on Redis Cluster (sharded pub/sub)
-- ARGV[3]  principal of the admin who forces it ("" on an open server)
-- ARGV[4]  events: see events_from in lib.lua ("0" to record none)
--
-- Returns 1 if anything was held, else 0. The fence is left alone, so the
-- next grant still gets a larger token; "released" is not set, so an
-- evicted holder's own release answers lease-lost. The queue stays. A
-- lease of a layout this version does not know is not forced: the script
-- ends with the error of lease_layout (lib.lua) before it deletes
-- anything.
--
-- Records force_released once per lease ended (the exclusive lease, every
-- shared lease and permit), with the admin's principal. A lease bound to a
-- session leaves it, and the session's lock-delay closes the name.

-- forced notes a lease bound to session sid that the force release ends.
local function forced(now, sid, id)
	if not sid or not lease_live(sid, now) then
		return
	end
	unbind(sid, id)
	close_for_delay(now + session_state(sid).delay, now)
end

local _, now = clock()
local by = ARGV[3]
events_from(ARGV[4])
local ended = {}
local h = redis.call('HMGET', KEYS[1], 'lease', 'owner', 'principal', 'token', 'sess', 'v')
lease_layout(h[6])
if h[5] and lapse_exclusive(now, h[1], h[2], h[3], h[4], h[5]) then
	h = {}
end
settle_exclusive(now, h[1])
if h[1] then
	ended[1] = {h[1], 'exclusive', h[4], h[2], h[3], h[5]}
end
-- After pruning, the keys that exist hold live leases only.
prune_shared(now)
if EVENTS_MAX > 0 or redis.call('HEXISTS', KEYS[4], 'bound') == 1 then
	for _, id in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
		local rec = load_record(id)
		if rec then
			ended[#ended + 1] = {id, record_mode(rec), rec.token, rec.owner, rec.principal, rec.sess}
		end
	end
end
if redis.call('DEL', KEYS[1], KEYS[4], KEYS[5]) == 0 then
	return 0
end
for _, e in ipairs(ended) do
	forced(now, e[6], e[1])
end
redis.call('HINCRBY', KEYS[2], 'ver', 1)
untrack_exclusive()
lease_ended(now, ARGV[1], ARGV[2])
for _, e in ipairs(ended) do
	record(now, 'force_released', e[1], e[2], e[3], e[4], e[5], 0, nil, by, e[6])
end
return 1
