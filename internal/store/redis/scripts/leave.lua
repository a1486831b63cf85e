-- leave.lua: take a waiter out of a lock's queue (it gave up or was
-- cancelled). The keys are listed in lib.lua.
--
-- ARGV[1]  waiter id
-- ARGV[2]  unlock channel
-- ARGV[3]  publish command: PUBLISH, or SPUBLISH on Redis Cluster (sharded pub/sub)
--
-- When the waiter was the head, the next head learns it may go, or, when
-- the queue is now empty, one waiter per instance (the queue held them
-- off). Returns 1 if the waiter had a place, else 0.

local _, now = clock()
local was_head = queue_head() == ARGV[1]
if redis.call('ZREM', KEYS[6], ARGV[1]) == 0 then
	return 0
end
redis.call('ZREM', KEYS[7], ARGV[1])
if was_head then
	lease_ended(now, ARGV[2], ARGV[3])
end
return 1
