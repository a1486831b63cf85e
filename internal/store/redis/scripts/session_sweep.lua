-- session_sweep.lua: the sweeper's look at a session found due in the
-- sessions' expiries (and DELETE's work after session_end.lua). The keys
-- are those of the session scripts, listed in lib.lua.
--
-- ARGV[1]  session id
-- ARGV[2]  events: see events_from in lib.lua ("0" to record none)
--
-- A session that lives on (it was renewed) gets its real expiry as its
-- score. One that is past its expiry is marked expired (remembered an
-- hour for its 410), and up to SESSION_CHUNK of its leases end, each as
-- its name's scripts would end it (end_bound in lib.lua): an expired event
-- naming the session and its lock-delay, or a released event after a
-- DELETE.
--
-- Returns -1 when the session lives on, else how many leases are left to
-- end (0: done, the session is out of the expiries).

local _, now = clock()
local sid, evarg = ARGV[1], ARGV[2]
local skeys = {KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]}
local v = redis.call('HMGET', skeys[1], 'exp', 'ended')
if not v[1] then
	redis.call('DEL', skeys[2])
	redis.call('ZREM', skeys[3], sid)
	return 0
end
if not v[2] then
	local exp = tonumber(v[1])
	if exp > now then
		redis.call('HSET', skeys[1], 'due', v[1])
		redis.call('ZADD', skeys[3], v[1], sid)
		return -1
	end
	v[2] = 'expired'
	redis.call('HSET', skeys[1], 'ended', 'expired')
	redis.call('PEXPIREAT', skeys[1], fmt(exp + SESSION_MEMORY))
end
local fields = redis.call('HKEYS', skeys[2])
local n = math.min(#fields, SESSION_CHUNK)
for i = 1, n do
	local name, id = string.match(fields[i], '^(.*)\n([^\n]*)$')
	end_bound(sid, name, id, v[2], now, skeys, evarg)
end
if n > 0 then
	redis.call('HDEL', skeys[2], unpack(fields, 1, n))
end
if #fields > n then
	return #fields - n
end
redis.call('DEL', skeys[2])
redis.call('ZREM', skeys[3], sid)
return 0
