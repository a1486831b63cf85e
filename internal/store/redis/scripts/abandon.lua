-- abandon.lua: undo the hold of an acquire whose answer never reached its
-- caller (the call timed out, the connection broke, the caller left).
--
-- KEYS[1]  lock hash   <prefix>{name}:lock
-- KEYS[2]  fence hash  <prefix>{name}:fence
-- KEYS[3]  abandoned   <prefix>{name}:abandoned (set of request ids)
-- ARGV[1]  request id of the acquire
-- ARGV[2]  unlock channel
-- ARGV[3]  how long to remember the request id, in milliseconds
-- ARGV[4]  publish command: PUBLISH, or SPUBLISH on Redis Cluster (sharded pub/sub)
--
-- The request id goes into the abandoned set first: an acquire that is still
-- on its way (in a socket buffer of a paused Redis, say) and runs after this
-- script finds it there and grants nothing.
--
-- The acquire added a hold if the lease is the one it granted (the request
-- id is the lease id) or it was the lease's latest acquire ('op'). That hold
-- is dropped once: 's:<request id>' = 'x' marks it abandoned, and an
-- idempotent replay that claimed the answer first ('c') keeps it.
--
-- Returns 0 when there was nothing to undo, 1 when a hold was dropped and
-- the lock stays held, 2 when the lock became free.
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('PEXPIRE', KEYS[3], ARGV[3])

local h = redis.call('HMGET', KEYS[1], 'lease', 'op')
if not h[1] or (h[1] ~= ARGV[1] and h[2] ~= ARGV[1]) then
	return 0
end
if redis.call('HSETNX', KEYS[1], 's:' .. ARGV[1], 'x') == 0 then
	return 0
end
redis.call('HINCRBY', KEYS[2], 'ver', 1)
if redis.call('HINCRBY', KEYS[1], 'count', -1) > 0 then
	redis.call(ARGV[4], ARGV[2], 'c')
	return 1
end
redis.call('DEL', KEYS[1])
redis.call(ARGV[4], ARGV[2], 'r')
return 2
