-- expire.lua: record the expiry of one lease the sweeper found due in the
-- expiries set (see EV_EXP in lib.lua); run only while events are recorded. The keys are
-- listed in lib.lua; KEYS[1..7] are those of the lease's name.
--
-- ARGV[1]  the lease's member of EV_EXP (see record in lib.lua)
-- ARGV[2]  events: see events_from in lib.lua
--
-- Whoever removes the member records the expiry, so sweepers of several
-- instances, and the scripts of the name itself, record it once. A lease
-- that lives on (it was renewed) keeps its member, scored by its expiry.
--
-- Returns 1 when the expiry was recorded (here, or by an earlier script),
-- 0 when the lease lives on.

local _, now = clock()
local member = ARGV[1]
events_from(ARGV[2])
if not redis.call('ZSCORE', EV_EXP, member) then
	return 1
end
local h = redis.call('HMGET', KEYS[1], 'lease', 'exp', 'v')
lease_layout(h[3])
settle_exclusive(now, h[1])
prune_shared(now)
if not redis.call('ZSCORE', EV_EXP, member) then
	return 1
end

local f = split_member(member)
local id = f[2]
if h[1] == id then
	redis.call('ZADD', EV_EXP, h[2], member)
	return 0
end
local rec = load_record(id)
if rec then
	redis.call('ZADD', EV_EXP, rec.exp, member)
	return 0
end
-- Gone with its keys, which Redis deleted at its expiry.
record(now, 'expired', id, f[3], f[4], f[5], f[6], 0)
return 1
