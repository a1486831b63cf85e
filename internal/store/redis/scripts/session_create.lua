-- session_create.lua: start a session (docs/SESSIONS.md). The keys are
-- those of the session scripts, listed in lib.lua.
--
-- ARGV[1]  owner
-- ARGV[2]  principal ("" when the server runs open)
-- ARGV[3]  ttl in milliseconds
-- ARGV[4]  lock-delay in milliseconds
-- ARGV[5]  session id
-- ARGV[6]  events: see events_from in lib.lua (unused); "c" on Redis
--          Cluster (session_begin in lib.lua)
--
-- Returns {1, owner, principal, ttl, delay, expires ms}.

session_begin(ARGV[6])
local us, now = clock()
local exp = fmt(now + tonumber(ARGV[3]))
if SESSION_CLUSTER then
	redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'principal', ARGV[2], 'ttl', ARGV[3], 'delay', ARGV[4],
		'exp', exp, 'ver', fmt(us), 'v', SESSION_LAYOUT)
else
	redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'principal', ARGV[2], 'ttl', ARGV[3], 'delay', ARGV[4],
		'exp', exp, 'due', exp, 'v', SESSION_LAYOUT)
end
session_due(ARGV[5], exp)
return {1, ARGV[1], ARGV[2], ARGV[3], ARGV[4], exp}
