-- session_end.lua: end a live session (DELETE): it is marked released;
-- the store then runs session_sweep.lua until every lease is released (no
-- lock-delay). It is due in the sessions' expiries ENDING_GRACE ms from
-- now, so that any instance's sweeper finishes the work should this one
-- die first. The keys are those of the session scripts, listed in lib.lua.
--
-- ARGV[1]  principal that must own the session; "" for anyone
-- ARGV[2]  session id
-- ARGV[3]  events: see events_from in lib.lua (unused)
--
-- Returns what session_reply in lib.lua does (the session as it was, its
-- expiry now), {-5} for an unknown session (or another principal's), {-6}
-- for one that ended.

local _, now = clock()
local v, refused = session_live(ARGV[1], now)
if not v then
	return refused
end
v[5] = fmt(now)
local ENDING_GRACE = 2000
local due = fmt(now + ENDING_GRACE)
redis.call('HSET', KEYS[1], 'ended', 'released', 'exp', v[5], 'due', due)
redis.call('PEXPIRE', KEYS[1], SESSION_MEMORY)
session_due(ARGV[2], due)
return session_reply(v, redis.call('HGETALL', KEYS[2]))
