-- acquire.lua: grant a lock (exclusive, shared or a semaphore permit),
-- re-enter it, queue for it, or report what is in the way. The rules, step
-- by step, are in docs/LOCK_KINDS.md; the keys are listed in lib.lua.
--
-- ARGV[1]  request id (ULID): the lease id of a fresh grant
-- ARGV[2]  owner
-- ARGV[3]  principal ("" when the server runs open)
-- ARGV[4]  ttl in milliseconds
-- ARGV[5]  metadata, JSON, stored as given; "" for none
-- ARGV[6]  unlock channel
-- ARGV[7]  idempotency key, "" for none
-- ARGV[8]  publish command: PUBLISH, or SPUBLISH on Redis Cluster (sharded pub/sub)
-- ARGV[9]  mode: "x" exclusive, "s" shared
-- ARGV[10] semaphore limit, "0" for a lock
-- ARGV[11] "1" for a fair acquire
-- ARGV[12] waiter id, "" for a try (see lock.NewWaiterID)
-- ARGV[13] session id the lease is bound to, "" for none (ARGV[4] is then
--          ignored: the session's TTL and expiry count)
-- ARGV[14] ms the request has waited so far ("0" for its first try):
--          recorded with a fresh grant (record in lib.lua)
-- ARGV[15] events: see events_from in lib.lua ("0" to record none)
--
-- Returns, for a fresh exclusive lease (the lease id is the request id, the
-- rest is as asked), "<token> <acquired ms>" (a string costs Redis less
-- than an array); for any other grant:
--   {1, fresh (1|0), lease id, owner, principal, token, hold count, ttl ms,
--    acquired ms, expires ms, metadata, request id, replayed (1|0),
--    mode ("exclusive"|"shared"), limit}
-- when refused:
--   {0, owner in the way ("" for the queue), its token, look again in ms,
--    queue length, queued (1|0), the owner's lease ttl in ms (0 for the
--    queue)}
-- (look again is the sooner of the lease's end and the queue head's renewal
-- deadline: a retry hint, while the lease ttl is the holder's own expiry)
-- {-1} when this request was abandoned before it ran (see abandon.lua),
-- {-2, the held limit} on a limit mismatch, {-3} for an upgrade, {-4, ms
-- left} during a lock-delay, {-5} for an unknown session (or another
-- principal's), {-6} for a session that ended. A grant bound to a session
-- is always answered with the array, whose element 16 is the session id.
--
-- The exclusive lease keeps the lock hash of the plain lock: every re-entry
-- marks its request id there as having added a hold ('s:<request id>' =
-- 'g'), so that abandon.lua can undo exactly that hold whatever acquires
-- came after it; a fresh grant needs no mark, its request id being the lease
-- id (acquire_fast.lua writes none). The hash also keeps an idempotency key
-- with the request that used it ('idem', 'idemop'); a repeat of that key by
-- the same owner is answered with the lease as it is and marks the request's
-- answer as claimed ('c'). A shared lease keeps the marks in its record
-- (st), each re-entry also indexed by 'r:<request id>' in the shared hash.
-- The marks die with the lease (see abandon.lua for why none goes sooner).
--
-- A fresh grant writes the layout (v, LEASE_LAYOUT in lib.lua) of the
-- lock hash or record it makes, and of the fence with its token; a
-- record of a layout this version does not know ends the script with the
-- error of lease_layout, where it is read.
--
-- A grant publishes "c:<ttl ms>" on the unlock channel, so that waiters time
-- the new holder's expiry. A fresh grant leaves the fence's version (the
-- blocking-query index) alone: the new token changes the index anyway.
--
-- Events: a fresh lease records granted, another hold reentered; a replay,
-- a refusal or a queue place records nothing. A lease found expired on the
-- way records expired first.

local now_us, now = clock()
local req, owner, principal = ARGV[1], ARGV[2], ARGV[3]
local ttl = tonumber(ARGV[4])
local exp = now + ttl
local channel, idem, publish = ARGV[6], ARGV[7], ARGV[8]
local shared = ARGV[9] == 's'
local limit = tonumber(ARGV[10])
local fair = ARGV[11] == '1'
local waiter = ARGV[12]
events_from(ARGV[15])
local sid = ARGV[13]
local ttl_s = ARGV[4]
if sid ~= '' then
	local st = session_state(sid)
	if not st.exp or (principal ~= '' and st.principal ~= principal) then
		return {-5}
	end
	if st.ended or st.exp <= now then
		return {-6}
	end
	ttl_s, ttl, exp = st.ttl, tonumber(st.ttl), st.exp
end
local mode = 'exclusive'
if shared then
	mode = 'shared'
end

if rare() and redis.call('SISMEMBER', KEYS[3], req) == 1 then
	return {-1}
end

local held = redis.call('HMGET', KEYS[1], 'lease', 'owner', 'principal', 'token', 'acq', 'meta', 'idem', 'idemop', 'sess', 'v')
lease_layout(held[10])
if held[9] and lapse_exclusive(now, held[1], held[2], held[3], held[4], held[9]) then
	held = {}
end
settle_exclusive(now, held[1])
local nshared = prune_shared(now)
local queued = prune_queue(now)
local held_sess = held[9] or ''

-- A lock-delay closes the name to every grant until it ends.
local delay_left = redis.call('PTTL', delay_key())
if delay_left > 0 then
	return {-4, delay_left}
end

-- held_ms is how long the exclusive lease has left: its session's when bound.
local function held_ms()
	if held[9] then
		return session_state(held[9]).exp - now
	end
	return redis.call('PTTL', KEYS[1])
end

-- The next fencing token: max(counter + 1, now in microseconds). The
-- counter orders grants while Redis keeps its data, the clock keeps tokens
-- rising when the counter is lost. 2^53 - 1 keeps them exact in JavaScript.
local function next_token()
	local token = fence().token + 1
	if now_us > token then
		token = now_us
	end
	if token > 9007199254740991 then
		return nil
	end
	local tok = fmt(token)
	fence_set('token', tok)
	fence_set('v', LEASE_LAYOUT)
	return tok
end

-- granted finishes every grant of lease id (token, holds and expiry ms as
-- now): the caller's queue place goes, the next head learns it may go when
-- it may be granted beside this one (a reader behind a reader, a permit
-- behind a permit), and the grant is recorded.
local function granted(fresh, id, token, count, exp_ms)
	if fresh == 0 then
		fence_set('ver', fence().ver + 1)
	end
	fence_flush()
	redis.call(publish, channel, 'c:' .. fmt(exp - now))
	if waiter ~= '' and redis.call('ZREM', KEYS[6], waiter) == 1 then
		redis.call('ZREM', KEYS[7], waiter)
		local head = (shared or limit > 0) and queue_head()
		if head then
			redis.call(publish, channel, 'q:' .. head)
		end
	end
	local event = 'reentered'
	if fresh == 1 then
		event = 'granted'
	end
	local waited = nil
	if fresh == 1 then
		waited = ARGV[14]
	end
	record(now, event, id, mode, token, owner, principal, count, exp_ms, nil, sid, nil, waited)
	if fresh == 1 and sid ~= '' then
		bind(sid, id, mode, limit, token)
	end
end

local function record_reply(id, rec, fresh, request, replayed)
	return {1, fresh, id, rec.owner, rec.principal, rec.token, tonumber(rec.count), tonumber(rec.ttl),
		rec.acq, rec.exp, rec.meta, request, replayed, mode, limit, rec.sess or ''}
end

-- 3. Idempotent replays.
if idem ~= '' then
	if held[1] and held[2] == owner and held[3] == principal and held[7] == idem then
		local state = 's:' .. held[8]
		if redis.call('HGET', KEYS[1], state) ~= 'x' then
			redis.call('HSET', KEYS[1], state, 'c')
			local cur = redis.call('HMGET', KEYS[1], 'count', 'ttl', 'exp')
			local fresh = 0
			if held[8] == held[1] then
				fresh = 1
			end
			return {1, fresh, held[1], held[2], held[3], held[4], tonumber(cur[1]), tonumber(cur[2]), held[5], cur[3], held[6], held[8], 1, 'exclusive', 0, held_sess}
		end
	end
	if nshared > 0 then
		local id = redis.call('HGET', KEYS[4], 'i:' .. idem)
		local rec = id and load_record(id)
		if rec and rec.owner == owner and rec.principal == principal and rec.st[rec.idemop] ~= 'x' then
			rec.st[rec.idemop] = 'c'
			save_record(id, rec)
			local fresh = 0
			if rec.idemop == id then
				fresh = 1
			end
			if rec.limit ~= '0' then
				mode = 'exclusive'
			else
				mode = 'shared'
			end
			limit = tonumber(rec.limit)
			return record_reply(id, rec, fresh, rec.idemop, 1)
		end
	end
end

-- 4. The limit is fixed while anything is held.
if nshared > 0 then
	local have = tonumber(redis.call('HGET', KEYS[4], 'limit') or '0')
	if have ~= limit then
		return {-2, have}
	end
elseif held[1] and limit > 0 then
	return {-2, 0}
end

-- What is in the way, if anything: a lease (owner, token, ms left) or only
-- the queue.
local way_owner, way_token, way_ms = nil, nil, nil
local by_shared = false

local function first_shared()
	local first = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
	local rec = load_record(first[1])
	way_owner, way_token, way_ms = rec.owner, rec.token, tonumber(first[2]) - now
end

local my_owner_field = owner_field(principal, owner, sid)
local my_lease = held[2] == owner and held[3] == principal and held_sess == sid
local downgrade = false

if limit > 0 then
	-- 7. A semaphore permit: no reentrancy.
	if nshared >= limit then
		first_shared()
	end
elseif not shared then
	-- 5. Exclusive.
	if held[1] and my_lease then
		local count = redis.call('HINCRBY', KEYS[1], 'count', 1)
		redis.call('HSET', KEYS[1], 'ttl', ttl_s, 'exp', fmt(exp), 's:' .. req, 'g')
		if idem ~= '' then
			redis.call('HSET', KEYS[1], 'idem', idem, 'idemop', req)
		end
		if sid == '' then
			redis.call('PEXPIRE', KEYS[1], ttl)
		end
		granted(0, held[1], held[4], count, exp)
		return {1, 0, held[1], held[2], held[3], held[4], count, ttl, held[5], fmt(exp), held[6], req, 0, mode, 0, sid}
	end
	if nshared > 0 and redis.call('HEXISTS', KEYS[4], my_owner_field) == 1 then
		return {-3}
	end
	if held[1] then
		way_owner, way_token, way_ms = held[2], held[4], held_ms()
	elseif nshared > 0 then
		first_shared()
		by_shared = true
	end
else
	-- 6. Shared.
	local mine = nshared > 0 and redis.call('HGET', KEYS[4], my_owner_field)
	if mine then
		local rec = load_record(mine)
		rec.count = fmt(tonumber(rec.count) + 1)
		rec.ttl, rec.exp = ttl_s, fmt(exp)
		rec.st[req] = 'g'
		redis.call('HSET', KEYS[4], 'r:' .. req, mine)
		if idem ~= '' then
			rec.idem, rec.idemop = idem, req
			redis.call('HSET', KEYS[4], 'i:' .. idem, mine)
		end
		save_record(mine, rec)
		redis.call('ZADD', KEYS[5], exp, mine)
		keep_shared()
		granted(0, mine, rec.token, rec.count, rec.exp)
		return record_reply(mine, rec, 0, req, 0)
	end
	if held[1] then
		if my_lease then
			downgrade = true
		else
			way_owner, way_token, way_ms = held[2], held[4], held_ms()
		end
	end
end

-- 8. The queue.
local my_seq = nil
if waiter ~= '' and queued > 0 then
	my_seq = redis.call('ZSCORE', KEYS[6], waiter)
end
local held_off = false
if not way_owner and not downgrade and queued > 0 then
	local ahead
	if my_seq then
		ahead = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', '(' .. my_seq)
	else
		ahead = redis.call('ZRANGE', KEYS[6], 0, -1)
	end
	for _, id in ipairs(ahead) do
		local c = string.sub(id, 1, 1)
		-- lock.QueueBlocks: a fair entry, or an exclusive one ahead of a
		-- shared acquire; a fair acquire waits for anyone ahead.
		if fair or c == 'X' or c == 'S' or (shared and c == 'x') then
			held_off = true
			break
		end
	end
end

if way_owner or held_off then
	-- 9. Keep or take a queue place.
	local has_place = 0
	if waiter ~= '' and (my_seq or fair or by_shared) then
		if not my_seq then
			redis.call('ZADD', KEYS[6], redis.call('HINCRBY', KEYS[2], 'qseq', 1), waiter)
			RARE = true
		end
		redis.call('ZADD', KEYS[7], now + QUEUE_TTL, waiter)
		redis.call('PEXPIRE', KEYS[6], QUEUE_TTL)
		redis.call('PEXPIRE', KEYS[7], QUEUE_TTL)
		has_place = 1
	end
	-- 10. When to look again: when the lease in the way ends, or when the
	-- queue's head must have renewed its place (unless this is the head).
	local n = redis.call('ZCARD', KEYS[6])
	local head = queue_head()
	local look_ms = way_ms
	if head and head ~= waiter then
		local left = tonumber(redis.call('ZSCORE', KEYS[7], head)) - now
		if not look_ms or left < look_ms then
			look_ms = left
		end
	end
	return {0, way_owner or '', way_token or '0', look_ms or QUEUE_TTL, n, has_place, way_ms or 0}
end

-- A fresh grant.
local tok = next_token()
if not tok then
	return redis.error_reply('ERR fencing token space exhausted')
end
if not shared and limit == 0 then
	-- Fields that would hold nothing are left out: 'meta' without
	-- metadata, and the grant's mark (its request id is the lease id).
	local acq = fmt(now)
	redis.call('HSET', KEYS[1], 'lease', req, 'owner', owner, 'principal', principal,
		'token', tok, 'count', '1', 'ttl', ttl_s, 'acq', acq, 'exp', fmt(exp), 'v', LEASE_LAYOUT)
	if ARGV[5] ~= '' then
		redis.call('HSET', KEYS[1], 'meta', ARGV[5])
	end
	if idem ~= '' then
		redis.call('HSET', KEYS[1], 'idem', idem, 'idemop', req)
	end
	if sid ~= '' then
		-- Bound: no expiry of its own (lease_live in lib.lua).
		redis.call('HSET', KEYS[1], 'sess', sid)
		granted(1, req, tok, 1, exp)
		return {1, 1, req, owner, principal, tok, 1, ttl, acq, fmt(exp), ARGV[5], req, 0, mode, 0, sid}
	end
	redis.call('PEXPIRE', KEYS[1], ARGV[4])
	track_exclusive(req, tok, owner, principal)
	granted(1, req, tok, 1, exp)
	return tok .. ' ' .. acq
end
local rec = {owner = owner, principal = principal, token = tok, count = '1', ttl = ttl_s,
	acq = fmt(now), exp = fmt(exp), meta = ARGV[5], idem = idem, idemop = req,
	limit = ARGV[10], st = {_ = ''}, v = LEASE_LAYOUT}
if sid ~= '' then
	rec.sess = sid
	redis.call('HSET', KEYS[4], 'bound', '1')
end
save_record(req, rec)
redis.call('ZADD', KEYS[5], exp, req)
RARE = true
redis.call('HSET', KEYS[4], 'limit', ARGV[10])
if shared then
	redis.call('HSET', KEYS[4], my_owner_field, req)
end
if idem ~= '' then
	redis.call('HSET', KEYS[4], 'i:' .. idem, req)
end
keep_shared()
granted(1, req, rec.token, 1, rec.exp)
return record_reply(req, rec, 1, req, 0)
