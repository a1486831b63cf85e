-- redisson_release.lua: the release of the Redisson-style baseline (mode
-- redisson), written after Redisson's RLock unlock: drop one hold, and when
-- none is left delete the lock and tell the waiters.
--
-- KEYS[1] lock hash       <prefix>{name}
-- KEYS[2] unlock channel  <prefix>{name}:channel
-- ARGV[1] unlock message
-- ARGV[2] lease time in milliseconds, to extend a hold that stays
-- ARGV[3] owner: "<client uuid>:<thread id>"
--
-- Returns 1 when the lock was released, 0 when holds are left, nil when
-- the owner does not hold it.

if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
	return nil
end
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if counter > 0 then
	redis.call('pexpire', KEYS[1], ARGV[2])
	return 0
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
return 1
