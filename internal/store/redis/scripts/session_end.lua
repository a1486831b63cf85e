-- session_end.lua: end a live session (DELETE): it is marked released;
-- the store then runs session_sweep.lua until every lease is released (no
-- lock-delay). It is due in the sessions' expiries ENDING_GRACE ms from
-- now, so that any instance's sweeper finishes the work should this one
-- die first. The keys are those of the session scripts, listed in lib.lua.
--
-- ARGV[1]  principal that must own the session; "" for anyone
-- ARGV[2]  session id
-- ARGV[3]  events: see events_from in lib.lua (unused); "c" on Redis
--          Cluster (session_begin in lib.lua), where the store then ends
--          each shadow (session_shadow.lua) and sweeps it
--
-- Returns what session_answer in lib.lua does (the session as it was, its
-- expiry now), {-5} for an unknown session (or another principal's), {-6}
-- for one that ended.

session_begin(ARGV[3])
local us, now = clock()
local v, refused = session_live(ARGV[1], now)
if not v then
	return refused
end
v[5] = fmt(now)
local ENDING_GRACE = 2000
local due = fmt(now + ENDING_GRACE)
v[8] = fmt(us)
redis.call('HSET', KEYS[1], 'ended', 'released', 'exp', v[5], 'due', due, 'ver', v[8])
redis.call('PEXPIRE', KEYS[1], SESSION_MEMORY)
session_due(ARGV[2], due)
return session_answer(v)
