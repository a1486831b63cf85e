-- release.lua: drop one hold, or all holds, of the current lease.
--
-- KEYS[1]  lock hash   <prefix>{name}:lock
-- KEYS[2]  fence hash  <prefix>{name}:fence
-- ARGV[1]  lease id
-- ARGV[2]  "1" to release all holds, "0" for one
-- ARGV[3]  unlock channel
-- ARGV[4]  principal that must own the lease; "" for anyone (admin, open server)
-- ARGV[5]  publish command: PUBLISH, or SPUBLISH on Redis Cluster (sharded pub/sub)
--
-- Returns {1, holds left, freed (1|0), retried (1|0)}, {0} when the lease is
-- not the holder, or {-1} when it belongs to another principal. A retry of
-- the release that freed the lock finds the lease id in the fence hash's
-- "released" field and succeeds again without touching whoever holds the
-- lock now.
local h = redis.call('HMGET', KEYS[1], 'lease', 'principal')
if h[1] ~= ARGV[1] then
	local last = redis.call('HMGET', KEYS[2], 'released', 'released_by')
	if last[1] == ARGV[1] then
		if ARGV[4] ~= '' and last[2] ~= ARGV[4] then
			return {-1}
		end
		return {1, 0, 1, 1}
	end
	return {0}
end
if ARGV[4] ~= '' and h[2] ~= ARGV[4] then
	return {-1}
end
redis.call('HINCRBY', KEYS[2], 'ver', 1)
if ARGV[2] ~= '1' then
	local left = redis.call('HINCRBY', KEYS[1], 'count', -1)
	if left > 0 then
		redis.call(ARGV[5], ARGV[3], 'c')
		return {1, left, 0, 0}
	end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[2], 'released', ARGV[1], 'released_by', h[2])
redis.call(ARGV[5], ARGV[3], 'r')
return {1, 0, 1, 0}
