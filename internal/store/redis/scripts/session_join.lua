-- session_join.lua: on Redis Cluster, before an acquire binds a lease to a
-- session on a master that may hold no shadow of it yet: note the master
-- (its log's slot) in the session's 'masters', so that every renewal and
-- the DELETE reach its shadow, and answer what the shadow holds, for
-- session_shadow.lua to write there. The keys are those of the session
-- scripts on Redis Cluster, listed in lib.lua.
--
-- ARGV[1]  principal that must own the session; "" for anyone
-- ARGV[2]  the slot of the master's event log (its lowest)
-- ARGV[3]  events: "c" (session_begin in lib.lua)
--
-- A renewal that runs after it reaches the new shadow; one that ran before
-- it is what it reads.
--
-- Returns {1, expires ms, ttl, delay, principal, ver}, {-5} for an unknown
-- session (or another principal's), {-6} for one that ended.

session_begin(ARGV[3])
local _, now = clock()
local v, refused = session_live(ARGV[1], now)
if not v then
	return refused
end
local mine = ARGV[2] .. ' '
if not string.find(' ' .. (v[9] or ''), ' ' .. mine, 1, true) then
	redis.call('HSET', KEYS[1], 'masters', (v[9] or '') .. mine)
end
return {1, v[5], v[3], v[4], v[2], v[8] or '0'}
