-- force_release.lua: end every lease of a name, whoever holds them (admin).
-- The keys are listed in lib.lua.
--
-- ARGV[1]  unlock channel
-- ARGV[2]  publish command: PUBLISH, or SPUBLISH on Redis Cluster (sharded pub/sub)
--
-- Returns 1 if anything was held, else 0. The fence is left alone, so the
-- next grant still gets a larger token; "released" is not set, so an
-- evicted holder's own release answers lease-lost. The queue stays.
if redis.replicate_commands then pcall(redis.replicate_commands) end

local _, now = clock()
-- After pruning, the keys that exist hold live leases only.
prune_shared(now)
if redis.call('DEL', KEYS[1], KEYS[4], KEYS[5]) == 0 then
	return 0
end
redis.call('HINCRBY', KEYS[2], 'ver', 1)
lease_ended(now, ARGV[1], ARGV[2])
return 1
