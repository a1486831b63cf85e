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
-- The acquire added a hold to a live lease if that lease is the one it
-- granted (the request id is the lease id) or one it re-entered: every
-- re-entry marks its request id in the lease ('g', see acquire.lua), so the
-- hold is found whatever acquires, releases or abandons came after it. A
-- multi-lock that re-entered one of its owner's leases and was refused on
-- another name gives that hold back while the owner may re-enter the same
-- lease at the same time: looking only at the lease's latest acquire would
-- leave the hold behind, and the lease held after the owner released every
-- hold it was granted. That hold is dropped once: the request is marked
-- abandoned ('x'), and an idempotent replay that claimed the answer first
-- ('c') keeps it. The exclusive lease keeps these marks in 's:<request id>'
-- fields, a shared lease in its record, found through 'r:<request id>'. A
-- lease written before the marks names its latest re-entry only: 'op' in
-- the lock hash, the one 'r:' field of a record.
--
-- The marks die with the lease (its hash or record, and drop_record takes
-- its 'r:' fields) and none goes sooner, so a lease holds one mark per
-- re-entry it had. Holds are counted, not named: a release does not say
-- which hold it drops, so while the lease lives any unsettled re-entry may
-- still be abandoned rightly (by the reaper, after an outage, say), and no
-- mark can be proven unneeded before the lease ends. A lease kept for long
-- and re-entered very often grows by a field (exclusive) or a record entry
-- and an 'r:' field (shared: each script that reads the record decodes its
-- marks) per re-entry until it ends.
--
-- Returns 0 when there was nothing to undo, 1 when a hold was dropped and
-- the lease lives on, 2 when the lease ended. A dropped hold records
-- released with the holds left.

local _, now = clock()
local req, channel, publish = ARGV[1], ARGV[2], ARGV[4]
events_from(ARGV[5])
redis.call('SADD', KEYS[3], req)
redis.call('PEXPIRE', KEYS[3], ARGV[3])

local mark = 's:' .. req
local h = redis.call('HMGET', KEYS[1], 'lease', mark, 'op', 'owner', 'principal', 'token', 'sess', 'v')
lease_layout(h[8])
if h[7] and lapse_exclusive(now, h[1], h[4], h[5], h[6], h[7]) then
	h = {}
end
settle_exclusive(now, h[1])
if h[1] and (h[2] or h[1] == req or h[3] == req) then
	-- The request granted or re-entered the exclusive lease.
	if h[2] and h[2] ~= 'g' then
		return 0
	end
	redis.call('HSET', KEYS[1], mark, 'x')
	redis.call('HINCRBY', KEYS[2], 'ver', 1)
	local left = redis.call('HINCRBY', KEYS[1], 'count', -1)
	if left > 0 then
		redis.call(publish, channel, 'c')
		record(now, 'released', h[1], 'exclusive', h[6], h[4], h[5], left)
		return 1
	end
	redis.call('DEL', KEYS[1])
	untrack_exclusive()
	unbind(h[7], h[1])
	lease_ended(now, channel, publish)
	record(now, 'released', h[1], 'exclusive', h[6], h[4], h[5], 0, nil, nil, h[7])
	return 2
end

prune_shared(now)
local id = req
local rec = load_record(id)
if not rec then
	id = redis.call('HGET', KEYS[4], 'r:' .. req)
	rec = id and load_record(id)
end
-- Found by its id, the request granted the lease; through 'r:', it
-- re-entered it.
if not rec or (rec.st[req] and rec.st[req] ~= 'g') then
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
unbind(rec.sess, id)
lease_ended(now, channel, publish)
record(now, 'released', id, record_mode(rec), rec.token, rec.owner, rec.principal, 0, nil, nil, rec.sess)
return 2
