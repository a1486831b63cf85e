-- session_renew.lua: reset a live session's expiry, and so every bound
-- lease's (lease_live in lib.lua reads it from here). The keys are those of
-- the session scripts, listed in lib.lua.
--
-- ARGV[1]  principal that must own the session; "" for anyone
-- ARGV[2]  ttl in milliseconds; 0 keeps the session's
-- ARGV[3]  session id
-- ARGV[4]  events: see events_from in lib.lua (unused); "c" on Redis
--          Cluster (session_begin in lib.lua)
--
-- On Redis Cluster it also stamps 'ver', keeps the record an hour past the
-- new expiry, and answers the masters holding shadows: the store then
-- renews each shadow (session_shadow.lua), 1 + M scripts in all.
--
-- The same four commands whatever the session holds (TIME, HMGET, HSET,
-- HGETALL): the sessions' expiries set keeps the score it had (due), and
-- the sweeper that finds it due while the session lives moves it on. Only
-- a renewal that shortens the session moves it (and announces it when it
-- is the earliest), so that it is swept on time.
--
-- Returns what session_answer in lib.lua does, {-5} for an unknown session
-- (or another principal's), {-6} for one that ended.

session_begin(ARGV[4])
local us, now = clock()
local v, refused = session_live(ARGV[1], now)
if not v then
	return refused
end
local ttl = ARGV[2]
if ttl == '0' then
	ttl = v[3]
end
local exp = now + tonumber(ttl)
v[3], v[5] = ttl, fmt(exp)
if SESSION_CLUSTER then
	v[8] = fmt(us)
	redis.call('HSET', KEYS[1], 'ttl', ttl, 'exp', v[5], 'ver', v[8])
	session_due(ARGV[3], v[5])
elseif exp < tonumber(v[7]) then
	redis.call('HSET', KEYS[1], 'ttl', ttl, 'exp', v[5], 'due', v[5])
	session_due(ARGV[3], v[5])
else
	redis.call('HSET', KEYS[1], 'ttl', ttl, 'exp', v[5])
end
return session_answer(v)
