-- lib.lua: shared by every script that reads shared leases, permits or the
-- queue; the store prepends it to those scripts (see scripts.go).
--
-- Those scripts take the same seven keys, all tagged {name}:
--   KEYS[1] lock hash (the exclusive lease)   <prefix>{name}:lock
--   KEYS[2] fence hash                        <prefix>{name}:fence
--   KEYS[3] abandoned request ids (set)       <prefix>{name}:abandoned
--   KEYS[4] shared leases and permits (hash)  <prefix>{name}:lock:shared
--   KEYS[5] their expiries (sorted set)       <prefix>{name}:lock:expiry
--   KEYS[6] queue: waiter id -> arrival       <prefix>{name}:queue
--   KEYS[7] queue: waiter id -> deadline ms   <prefix>{name}:queue:deadline
--
-- A shared lease or permit is one field of KEYS[4]: its lease id -> a JSON
-- record {owner, principal, token, count, ttl, acq, exp, meta, op, idem,
-- idemop, st}, where st maps request ids to 'c' (answer claimed by a
-- replay) or 'x' (abandoned), as the lock hash's 's:<id>' fields do. Index
-- fields beside them: 'o:<principal>\n<owner>' -> the owner's shared lease
-- (reentrancy), 'i:<idempotency key>' -> lease id, 'r:<request id>' -> lease
-- id of a lease's latest reentrant acquire (abandon), and 'limit'.
--
-- Numbers go into records as strings formatted with '%.0f': cjson, like
-- Lua's own conversion, keeps 14 significant digits.

local QUEUE_TTL = 1000 -- ms a queue place lasts unless renewed (lock.QueueEntryTTL)

local function clock()
	local t = redis.call('TIME')
	local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
	return us, math.floor(us / 1000)
end

local function fmt(n)
	return string.format('%.0f', n)
end

local function load_record(id)
	local raw = redis.call('HGET', KEYS[4], id)
	if not raw then
		return nil
	end
	return cjson.decode(raw)
end

local function save_record(id, rec)
	redis.call('HSET', KEYS[4], id, cjson.encode(rec))
end

local function owner_field(principal, owner)
	return 'o:' .. principal .. '\n' .. owner
end

-- drop_record removes a shared lease or permit and the index fields that
-- point at it.
local function drop_record(id, rec)
	redis.call('HDEL', KEYS[4], id)
	redis.call('ZREM', KEYS[5], id)
	if rec then
		local of = owner_field(rec.principal, rec.owner)
		if redis.call('HGET', KEYS[4], of) == id then
			redis.call('HDEL', KEYS[4], of)
		end
		if rec.idem ~= '' and redis.call('HGET', KEYS[4], 'i:' .. rec.idem) == id then
			redis.call('HDEL', KEYS[4], 'i:' .. rec.idem)
		end
		if rec.op ~= id then
			redis.call('HDEL', KEYS[4], 'r:' .. rec.op)
		end
	end
	if redis.call('ZCARD', KEYS[5]) == 0 then
		redis.call('DEL', KEYS[4], KEYS[5])
	end
end

-- prune_shared drops expired shared leases and permits and returns how many
-- are live.
local function prune_shared(now)
	if redis.call('EXISTS', KEYS[5]) == 0 then
		return 0
	end
	local gone = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now)
	for _, id in ipairs(gone) do
		drop_record(id, load_record(id))
	end
	return redis.call('ZCARD', KEYS[5])
end

-- keep_shared makes the shared keys outlive their longest lease and no more,
-- so that a name whose holders all died leaves nothing behind.
local function keep_shared()
	local last = redis.call('ZRANGE', KEYS[5], -1, -1, 'WITHSCORES')
	if last[2] then
		redis.call('PEXPIREAT', KEYS[4], last[2])
		redis.call('PEXPIREAT', KEYS[5], last[2])
	end
end

-- prune_queue drops lapsed queue places and returns the queue's length.
local function prune_queue(now)
	if redis.call('EXISTS', KEYS[6]) == 0 then
		return 0
	end
	local gone = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', now)
	for _, id in ipairs(gone) do
		redis.call('ZREM', KEYS[6], id)
		redis.call('ZREM', KEYS[7], id)
	end
	return redis.call('ZCARD', KEYS[6])
end

local function queue_head()
	return redis.call('ZRANGE', KEYS[6], 0, 0)[1]
end

-- lease_ended tells waiters that a lease ended: the queue's head by its id
-- when there is a queue, else one waiter per instance.
local function lease_ended(now, channel, publish)
	if prune_queue(now) > 0 then
		redis.call(publish, channel, 'q:' .. queue_head())
	else
		redis.call(publish, channel, 'r')
	end
end
