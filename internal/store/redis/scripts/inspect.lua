-- inspect.lua: read everything that holds a name, atomically and without
-- writing. The keys are listed in lib.lua.
--
-- ARGV[1]  events: see events_from in lib.lua; given on Redis Cluster,
--          where it names the log beside which the master keeps its
--          sessions' shadows (session_key in lib.lua)
--
-- Returns {lease id or false, owner, principal, token, hold count,
--          acquired ms, expires ms, metadata, last token, version,
--          remaining ttl ms, limit, queue length, now ms, session id,
--          remaining lock-delay ms (0 for none),
--          then per live shared lease or permit: its record (JSON)}
-- The remaining TTL (PTTL) lets a watcher time the expiry on its own clock,
-- whatever the skew between its clock and Redis's; so does 'now' for the
-- shared records' expiries. A lease bound to a session shows the session's
-- expiry, and one whose session is dead is not shown (lease_live in
-- lib.lua): the next script that meets it ends it, and closes the name
-- for its session's lock-delay, which is shown already. A lock hash or
-- fence of a layout this version does not know ends it with the error of
-- lease_layout (lib.lua); the shared records are returned as they are, and
-- the store reads their layout (sharedHolder in redis.go).
local _, now = clock()
if ARGV[1] then
	events_from(ARGV[1])
end
local h = redis.call('HMGET', KEYS[1], 'lease', 'owner', 'principal', 'token', 'count', 'acq', 'exp', 'meta', 'sess', 'v')
lease_layout(h[10])
local sid = h[9]
local till = 0 -- the end of a lock-delay that a dead lease has yet to set
local f = redis.call('HMGET', KEYS[2], 'token', 'ver', 'v')
lease_layout(f[3])
h[9] = f[1]
h[10] = f[2]
h[11] = redis.call('PTTL', KEYS[1])
if sid then
	if lease_live(sid, now) then
		local exp = session_state(sid).exp
		h[7], h[11] = fmt(exp), exp - now
	else
		till = math.max(till, delay_till(sid))
		for i = 1, 8 do
			h[i] = false
		end
		sid = nil
	end
end
h[12] = tonumber(redis.call('HGET', KEYS[4], 'limit') or '0')
h[13] = redis.call('ZCOUNT', KEYS[7], '(' .. now, '+inf')
h[14] = now
h[15] = sid or ''
h[16] = 0 -- below, once the shared leases were read
local all = redis.call('ZRANGE', KEYS[5], 0, -1, 'WITHSCORES')
for i = 1, #all, 2 do
	local raw = redis.call('HGET', KEYS[4], all[i])
	if raw and string.find(raw, '"sess"', 1, true) then
		local rec = cjson.decode(raw)
		if lease_live(rec.sess, now) then
			rec.exp = fmt(session_state(rec.sess).exp)
			h[#h + 1] = cjson.encode(rec)
		else
			till = math.max(till, delay_till(rec.sess))
		end
	elseif raw and tonumber(all[i + 1]) > now then
		h[#h + 1] = raw
	end
end
h[16] = math.max(redis.call('PTTL', delay_key()), till - now, 0)
return h
