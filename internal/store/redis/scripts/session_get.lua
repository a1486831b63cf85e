-- session_get.lua: read a live session with its leases. The keys are those
-- of the session scripts, listed in lib.lua.
--
-- ARGV[1]  principal that must own the session; "" for anyone
-- ARGV[2]  events: see events_from in lib.lua (unused); "c" on Redis
--          Cluster (session_begin in lib.lua)
--
-- Returns what session_answer in lib.lua does, {-5} for an unknown session
-- (or another principal's), {-6} for one that ended.

session_begin(ARGV[2])
local _, now = clock()
local v, refused = session_live(ARGV[1], now)
if not v then
	return refused
end
return session_answer(v)
