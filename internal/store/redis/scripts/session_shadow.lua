-- session_shadow.lua: on Redis Cluster, write the copy of a session that a
-- master keeps beside its event log (its shadow, docs/SESSIONS.md), which
-- the scripts of the names it serves read (session_key in lib.lua): when a
-- lease is first bound there, at every renewal, and at the DELETE. The
-- keys are a shadow's, listed in lib.lua.
--
-- ARGV[1]  session id
-- ARGV[2]  expires ms
-- ARGV[3]  ttl in milliseconds
-- ARGV[4]  lock-delay in milliseconds
-- ARGV[5]  principal
-- ARGV[6]  ver: the primary's clock (us) when it wrote these
-- ARGV[7]  "released" when the session was deleted, "" otherwise
-- ARGV[8]  events: the master's log (events_from in lib.lua)
--
-- A write older than the shadow's (ver) changes nothing. The shadow is due
-- in the master's lease expiries (its member is the session id) at its
-- expiry, or at once when released, so that the master's sweeper (any
-- instance's) ends its leases: session_sweep.lua on the shadow's keys. A
-- renewal leaves the score alone unless it shortens the session, as on a
-- single Redis; the sweeper moves it on.
--
-- Returns {1, then each lease's field and value (bind in lib.lua)}: the
-- leases as they were, for a DELETE, before any sweeper ends them; only
-- {1} when it ended already, or {-6} when it ended otherwise than asked
-- (it expired: its leases here are gone, or are going).

local _, now = clock()
events_from(ARGV[8])
local sid, ver, released = ARGV[1], ARGV[6], ARGV[7] == 'released'

-- due puts the shadow into the master's lease expiries at ms at, and
-- announces at when it is the earliest, as record in lib.lua does.
local function due(at)
	local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
	redis.call('ZADD', KEYS[3], at, sid)
	if not first[2] or tonumber(at) < tonumber(first[2]) then
		redis.call('ZADD', KEYS[3], at, '')
		redis.call(EV_PUB, EV_CHAN, at)
	end
end

local cur = redis.call('HMGET', KEYS[1], 'ver', 'due', 'ended')
if cur[3] then
	if released or cur[3] == 'released' and (tonumber(cur[1]) or 0) >= tonumber(ver) then
		return {1}
	end
	return {-6}
end
if cur[1] and tonumber(cur[1]) >= tonumber(ver) then
	if released then
		return {1}
	end
	local r = redis.call('HGETALL', KEYS[2])
	table.insert(r, 1, 1)
	return r
end
if released then
	local r = redis.call('HGETALL', KEYS[2])
	table.insert(r, 1, 1)
	local at = fmt(now)
	redis.call('HSET', KEYS[1], 'ended', 'released', 'exp', at, 'due', at, 'ver', ver, 'delay', ARGV[4],
		'principal', ARGV[5], 'ttl', ARGV[3])
	redis.call('PEXPIRE', KEYS[1], SESSION_MEMORY)
	due(at)
	return r
end
redis.call('HSET', KEYS[1], 'exp', ARGV[2], 'ttl', ARGV[3], 'delay', ARGV[4], 'principal', ARGV[5], 'ver', ver)
if not cur[2] or tonumber(ARGV[2]) < tonumber(cur[2]) then
	redis.call('HSET', KEYS[1], 'due', ARGV[2])
	due(ARGV[2])
end
local r = redis.call('HGETALL', KEYS[2])
table.insert(r, 1, 1)
return r
