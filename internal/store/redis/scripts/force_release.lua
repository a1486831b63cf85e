-- force_release.lua: free a lock whoever holds it (admin).
--
-- KEYS[1]  lock hash   <prefix>{name}:lock
-- KEYS[2]  fence hash  <prefix>{name}:fence
-- ARGV[1]  unlock channel
-- ARGV[2]  publish command: PUBLISH, or SPUBLISH on Redis Cluster (sharded pub/sub)
--
-- Returns 1 if the lock was held, else 0. The fence is left alone, so the
-- next grant still gets a larger token; "released" is not set, so the
-- evicted holder's own release answers lease-lost.
if redis.call('DEL', KEYS[1]) == 0 then
	return 0
end
redis.call('HINCRBY', KEYS[2], 'ver', 1)
redis.call(ARGV[2], ARGV[1], 'r')
return 1
