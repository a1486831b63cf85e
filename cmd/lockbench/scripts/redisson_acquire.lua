-- redisson_acquire.lua: the acquire of the Redisson-style baseline (mode
-- redisson), written after Redisson's RLock and RFencedLock: a hash whose
-- field per owner counts its holds, and a fencing counter beside it.
--
-- KEYS[1] lock hash      <prefix>{name}
-- KEYS[2] fence counter  <prefix>{name}:token
-- ARGV[1] lease time in milliseconds
-- ARGV[2] owner: "<client uuid>:<thread id>"
--
-- Returns {-1, token} when granted (fresh or reentrant), or {ms left, 0}
-- when another owner holds the lock.

if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
	redis.call('hincrby', KEYS[1], ARGV[2], 1)
	redis.call('pexpire', KEYS[1], ARGV[1])
	return {-1, redis.call('incr', KEYS[2])}
end
return {redis.call('pttl', KEYS[1]), 0}
