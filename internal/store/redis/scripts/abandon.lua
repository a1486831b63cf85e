-- abandon.lua: undo the hold of an acquire whose answer never reached its
-- caller (the call timed out, the connection broke, the caller left). The
-- keys are listed in lib.lua.
--
-- ARGV[1]  request id of the acquire
-- ARGV[2]  unlock channel
-- ARGV[3]  how long to remember the request id, in milliseconds
-- ARGV[4]  publish command: PUBLISH, or SPUBLISH on Redis Cluster (sharded pub/sub)
-- ARGV[5]  events: see events_from in lib.lua ("0" to record none)
--
-- The request id goes into the abandoned set first: an acquire that is still
-- on its way (in a socket buffer of a paused Redis, say) and runs after this
-- script finds it there and grants nothing.
--
-- The acquire added a hold if the lease is the one it granted (the request
-- id is the lease id) or it was the lease's latest acquire ('op'). That hold
-- is dropped once: the request is marked abandoned ('x'), and an idempotent
-- replay that claimed the answer first ('c') keeps it. The exclusive lease
-- keeps these marks in 's:<request id>' fields, a shared lease or permit in
-- its record.
--
-- Returns 0 when there was nothing to undo, 1 when a hold was dropped and
-- the lease lives on, 2 when the lease ended. A dropped hold records
-- released with the holds left.

local _, now = clock()
local req, channel, publish = ARGV[1], ARGV[2], ARGV[4]
events_from(ARGV[5])
redis.call('SADD', KEYS[3], req)
redis.call('PEXPIRE', KEYS[3], ARGV[3])

local h = redis.call('HMGET', KEYS[1], 'lease', 'op', 'owner', 'principal', 'token')
settle_exclusive(now, h[1])
if h[1] and (h[1] == req or h[2] == req) then
	if redis.call('HSETNX', KEYS[1], 's:' .. req, 'x') == 0 then
		return 0
	end
	redis.call('HINCRBY', KEYS[2], 'ver', 1)
	local left = redis.call('HINCRBY', KEYS[1], 'count', -1)
	if left > 0 then
		redis.call(publish, channel, 'c')
		record(now, 'released', h[1], 'exclusive', h[5], h[3], h[4], left)
		return 1
	end
	redis.call('DEL', KEYS[1])
	untrack_exclusive()
	lease_ended(now, channel, publish)
	record(now, 'released', h[1], 'exclusive', h[5], h[3], h[4], 0)
	return 2
end

prune_shared(now)
local id = req
local rec = load_record(id)
if not rec then
	id = redis.call('HGET', KEYS[4], 'r:' .. req)
	rec = id and load_record(id)
end
if not rec or (id ~= req and rec.op ~= req) or rec.st[req] then
	return 0
end
rec.st[req] = 'x'
redis.call('HINCRBY', KEYS[2], 'ver', 1)
local left = tonumber(rec.count) - 1
if left > 0 then
	rec.count = fmt(left)
	save_record(id, rec)
	redis.call(publish, channel, 'c')
	record(now, 'released', id, record_mode(rec), rec.token, rec.owner, rec.principal, left)
	return 1
end
drop_record(id, rec)
lease_ended(now, channel, publish)
record(now, 'released', id, record_mode(rec), rec.token, rec.owner, rec.principal, 0)
return 2
