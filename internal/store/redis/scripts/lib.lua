-- lib.lua: the helpers every script shares. The store loads lib.lua and the
-- scripts as one library of Redis Functions (Redis 7 and later), where each
-- script is the body of a function, so the helpers are defined once per
-- library load instead of once per call; on Redis 6.2 each script runs with
-- EVAL, lib.lua prepended (see library.go). Either way a call starts with
-- begin, which hands the helpers that call's keys and arguments and resets
-- what they remember of the last call.
--
-- The full scripts take the same nine keys, the first seven tagged {name}:
--   KEYS[1] lock hash (the exclusive lease)   <prefix>{name}:lock
--   KEYS[2] fence hash                        <prefix>{name}:fence
--   KEYS[3] abandoned request ids (set)       <prefix>{name}:abandoned
--   KEYS[4] shared leases and permits (hash)  <prefix>{name}:lock:shared
--   KEYS[5] their expiries (sorted set)       <prefix>{name}:lock:expiry
--   KEYS[6] queue: waiter id -> arrival       <prefix>{name}:queue
--   KEYS[7] queue: waiter id -> deadline ms   <prefix>{name}:queue:deadline
--   KEYS[8] event log (stream)                <prefix>events
--   KEYS[9] lease expiries (sorted set)       <prefix>events:expiries
--
-- KEYS[8] and KEYS[9] are one per Redis, not per name: they are given only
-- when events are recorded outside Redis Cluster. On Redis Cluster
-- events_from says where the log is.
--
-- The fast scripts (acquire_fast.lua, release_fast.lua) serve the common
-- case, a plain exclusive lock that nobody queues for, with fewer keys and
-- arguments (each costs Redis about as much as a small command); their
-- headers list them. They look for the keys only some locks have, and
-- when they find one, or anything else they leave to the full scripts,
-- they change nothing and answer FALLBACK, for the store to call the full
-- script instead.
--
-- A shared lease or permit is one field of KEYS[4]: its lease id -> a JSON
-- record {owner, principal, token, count, ttl, acq, exp, meta, idem,
-- idemop, limit, st, v (its layout, LEASE_LAYOUT)}, where st maps request
-- ids to 'g' (a re-entry that added a hold), 'c' (answer claimed by a
-- replay) or 'x' (abandoned), as the lock hash's 's:<id>' fields do. Index fields beside them: 'o:<principal>\n
-- <owner>' -> the owner's shared lease (reentrancy), 'i:<idempotency key>'
-- -> lease id, 'r:<request id>' -> lease id of each of a lease's re-entries
-- (abandon), and 'limit'. A record written before the marks has 'op', its
-- latest re-entry, the only one with an 'r:' field.
--
-- Numbers go into records as strings written by fmt: cjson, like Lua's own
-- conversion (tostring, ..), keeps 14 significant digits. A number given to
-- redis.call as an argument, or returned, keeps all its digits, but costs
-- Redis 7.0 more to write than fmt does.

local QUEUE_TTL = 1000 -- ms a queue place lasts unless renewed (lock.QueueEntryTTL)

-- FALLBACK is a fast script's answer when the full script must run instead.
local FALLBACK = -9

-- The running call's keys and arguments, as begin set them.
local KEYS, ARGV = nil, nil

-- EVENTS_MAX is the event log's MAXLEN, 0 when events are not recorded
-- (EV_MAXLEN as written: a number given to redis.call costs more). EV_LOG
-- is the log (a stream), EV_EXP the expiries of live leases (a sorted set),
-- and an earliest expiry is announced with EV_PUB on EV_CHAN.
local EVENTS_MAX, EV_MAXLEN, EV_LOG, EV_EXP, EV_CHAN, EV_PUB = 0, '0', nil, nil, nil, 'PUBLISH'

-- EV_FIELDS asks record for an entry of one field per event field.
local EV_FIELDS = false

-- What the helpers below remember within one call.
local FENCE, FENCE_W, RARE, name_of_lock, MEMBER = nil, {}, nil, nil, nil

-- SESS caches the sessions one call read (session_state);
-- SESSION_CLUSTER is set by session_begin.
local SESS, SESSION_CLUSTER = {}, false

-- begin starts a call: keys and args are its KEYS and ARGV, and the event
-- log and its expiries are keys[ev] and keys[ev + 1] when given (8 in the
-- full scripts).
local function begin(keys, args, ev)
	KEYS, ARGV = keys, args
	EVENTS_MAX, EV_PUB = 0, 'PUBLISH'
	EV_LOG, EV_EXP, EV_CHAN = keys[ev], keys[ev + 1], keys[ev + 1]
	FENCE, FENCE_W, RARE, name_of_lock, MEMBER = nil, {}, nil, nil, nil
	SESS, SESSION_CLUSTER = {}, false
end

-- events_from reads a script's events argument (its header says which
-- ARGV), before the script changes anything: "<max>" records into KEYS[8]
-- and KEYS[9], "0" records nothing, and "<max>\n<log>\n<expiries>\n
-- <channel>" records into the log of the Redis Cluster master that serves
-- the name, whose keys are not the name's (their slot is the master's
-- lowest): the store runs the script with the allow-cross-slot-keys flag,
-- and the first access below fails, before any change, on a master that
-- does not serve that slot (the store's slot map was stale). "<max>
-- fields" in place of "<max>" asks for the older layout of an entry (see
-- record).
--
-- The argument is the same on every call to one Redis, and a Lua string
-- compares in one step: EV_ARG is the last one read, EV_READ what it said.
local EV_ARG, EV_READ = nil, nil

local function events_from(arg)
	if arg == '0' then
		return
	end
	if arg ~= EV_ARG then
		local head, log, exp, chan = string.match(arg, '^([^\n]+)\n([^\n]+)\n([^\n]+)\n([^\n]+)$')
		local max, layout = string.match(head or arg, '^(%d+)(.*)$')
		EV_READ = {tonumber(max), max, layout == ' fields', log, exp, chan}
		EV_ARG = arg
	end
	EVENTS_MAX, EV_MAXLEN, EV_FIELDS = EV_READ[1], EV_READ[2], EV_READ[3]
	if EV_READ[4] then
		EV_LOG, EV_EXP, EV_CHAN, EV_PUB = EV_READ[4], EV_READ[5], EV_READ[6], 'SPUBLISH'
		redis.call('EXISTS', EV_LOG)
	end
end

-- LEASE_LAYOUT is the layout of a name's lease records that this version
-- writes and reads (layout.LeasesV1 in Go): the field v of the lock hash
-- (KEYS[1]) and of the fence (KEYS[2]), and v in a shared lease's or
-- permit's record (KEYS[4]). A grant writes it with the record, in the
-- same command; a record without it is layout 1, as v0.1.0 wrote it.
-- Every script reads v wherever it reads one of these records (in the same
-- HMGET) and hands it to lease_layout, which refuses a layout this version
-- does not know (a later release wrote the record): the script ends with
-- the error "LAYOUT leases <v>", which the store answers 503 and reports
-- (docs/UPGRADING.md). Such a record is never read as free, nor written
-- over. A script that bumps one of the fence's counters (ver, qseq) or
-- notes the released lease there, without reading it, reads the lock hash
-- or the record it acts on first; those fence fields keep their meaning
-- in every layout. What a script changed before it met the record stands
-- (Redis keeps a script's writes before an error): changes to records of
-- a layout it knows, such as a lease of a dead session lapsed.
local LEASE_LAYOUT = '1'

local function lease_layout(v)
	if v and v ~= LEASE_LAYOUT then
		v = tostring(v)
		if #v > 16 or string.find(v, '[^%w%._%-]') then
			v = '?'
		end
		error({err = 'LAYOUT leases ' .. v})
	end
end

-- The fence hash (KEYS[2]) holds the token counter, the blocking-query
-- index (ver), the exclusive lease's events member (evx), the last
-- released lease (released) and its layout (v). fence reads them in one
-- call, once per script; fence_set queues a write and fence_flush makes
-- the queued writes in one call.
local function fence()
	if not FENCE then
		local v = redis.call('HMGET', KEYS[2], 'token', 'ver', 'evx', 'released', 'v')
		lease_layout(v[5])
		FENCE = {token = tonumber(v[1]) or 0, ver = tonumber(v[2]) or 0, evx = v[3], released = v[4]}
	end
	return FENCE
end

local function fence_set(field, value)
	FENCE_W[#FENCE_W + 1] = field
	FENCE_W[#FENCE_W + 1] = value
end

local function fence_flush()
	if #FENCE_W > 0 then
		redis.call('HSET', KEYS[2], unpack(FENCE_W))
		FENCE_W = {}
	end
end

-- RARE tells whether the name has any of the keys that only some locks
-- use: abandoned request ids (KEYS[3]), shared leases and permits (their
-- expiries, KEYS[5]) or a queue (KEYS[6]). Most names have none, and one
-- call then spares a look at each. A script that creates one sets it.
local function rare()
	if RARE == nil then
		RARE = redis.call('EXISTS', KEYS[3], KEYS[5], KEYS[6]) > 0
	end
	return RARE
end

-- queue_length counts the live places in the queue.
local function queue_length(now)
	if not rare() then
		return 0
	end
	return redis.call('ZCOUNT', KEYS[7], '(' .. now, '+inf')
end

local function clock()
	local t = redis.call('TIME')
	local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
	return us, math.floor(us / 1000)
end

-- fmt writes an integer (a token, a time in ms) in full. '%d' is less than
-- half the work of '%.0f', where Lua's integer format holds 64 bits, as it
-- does wherever Redis runs (checked at the first call: a library being
-- loaded has no string functions).
local INT_FORMAT = nil

local function fmt(n)
	if not INT_FORMAT then
		INT_FORMAT = '%.0f'
		if string.format('%d', 2 ^ 53) == '9007199254740992' then
			INT_FORMAT = '%d'
		end
	end
	return string.format(INT_FORMAT, n)
end

local function load_record(id)
	local raw = redis.call('HGET', KEYS[4], id)
	if not raw then
		return nil
	end
	local rec = cjson.decode(raw)
	lease_layout(rec.v)
	return rec
end

local function save_record(id, rec)
	redis.call('HSET', KEYS[4], id, cjson.encode(rec))
end

-- owner_field indexes an owner's shared lease for reentrancy; a lease
-- bound to a session is another holder to the same owner without it.
local function owner_field(principal, owner, sess)
	if sess and sess ~= '' then
		return 'o:' .. principal .. '\n' .. owner .. '\n' .. sess
	end
	return 'o:' .. principal .. '\n' .. owner
end

local function record_mode(rec)
	if rec.limit ~= '0' then
		return 'exclusive' -- a semaphore permit
	end
	return 'shared'
end

-- Events (docs/EVENTS.md). record appends one event to the log (EV_LOG):
-- type, lock, lease id, owner, principal, mode, token, holds left, queue
-- length and, for a lease bound to a session, the session, then for a
-- grant whose request waited the ms it waited (after an empty session when
-- none; a reader of layout 2 that knows ten parts ignores it), in that order
-- in one field, e, separated by newlines (none of them holds one), which
-- costs Redis a third less than a field each; the field v before it is the
-- entry's layout, 2 (a stream stores the field names of entries like the
-- first once, so v costs one byte an entry). A reader that does not know
-- an entry's layout says so (docs/UPGRADING.md, internal/layout). With EV_FIELDS, a field each,
-- as versions before wrote them: t, l, k, o, p, m, n, h, q, s (for a
-- rolling deploy from those, which read only that layout; the store reads
-- both, parseEvent in events.go). The stream trims itself to about
-- EVENTS_MAX entries; the store trims what is older than the retention.
--
-- A lease is tracked in EV_EXP while it lives, so that its expiry can be
-- recorded although Redis deletes its keys when it expires: the member
-- carries all the expired event needs,
--   <name>\n<lease id>\n<mode>\n<token>\n<owner>\n<principal>
-- (names, owners and principals hold no newline), scored by the expiry ms.
-- The fence's 'evx' field names the member of the exclusive lease, whose
-- keys vanish with it, so that the next script of the name records its
-- expiry before its own event (see settle_exclusive).
--
-- Every instance's sweeper sleeps until the earliest expiry it knows of. A
-- script that adds an expiry earlier than any in EV_EXP publishes its ms
-- on EV_CHAN, and marks it with the member "" (no
-- lease's): every sweeper wakes up by then, so a later expiry needs no
-- announcement while the mark is pending (acquire_fast.lua announces
-- also when no mark is pending: one announcement more, never one less). The sweeper that finds the mark
-- due removes it and looks at EV_EXP again.

local function lock_name()
	if not name_of_lock then
		-- KEYS[1] is <prefix>{<name>}:lock and the prefix holds no brace.
		name_of_lock = string.sub(KEYS[1], string.find(KEYS[1], '{', 1, true) + 1, -7)
	end
	return name_of_lock
end

-- lease_member returns a lease's member; a script that records a lease
-- it tracks asks twice, and builds it once (MEMBER: {id, member}).
local function lease_member(id, mode, token, owner, principal)
	if MEMBER and MEMBER[1] == id then
		return MEMBER[2]
	end
	local m = lock_name() .. '\n' .. id .. '\n' .. mode .. '\n' .. token .. '\n' .. owner .. '\n' .. principal
	MEMBER = {id, m}
	return m
end

-- record records event t of lease id: count is its holds left (0: the lease
-- ended), exp its expiry ms when it lives on. by, when given, is the
-- principal that made the change (a force release's admin). meta, given
-- by an update only, is the lease's new metadata (JSON, "" for none): the
-- field md of the entry, beside e (or the fields), which a reader that
-- does not know it passes over. waited, given by a grant only, is how long
-- its request waited, in ms ("0" or nil: not at all). An expiry is
-- recorded only by the script that takes the lease out of EV_EXP, so once
-- whichever scripts and sweepers see it.
local function record(now, t, id, mode, token, owner, principal, count, exp, by, sess, meta, waited)
	if EVENTS_MAX == 0 then
		return
	end
	local member = lease_member(id, mode, token, owner, principal)
	if sess and sess ~= '' then
		-- A bound lease has no member of its own: its session has one.
		exp = nil
	elseif tonumber(count) == 0 then
		if redis.call('ZREM', EV_EXP, member) == 0 and t == 'expired' then
			return
		end
	elseif exp then
		local first = redis.call('ZRANGE', EV_EXP, 0, 0, 'WITHSCORES')
		redis.call('ZADD', EV_EXP, exp, member)
		if not first[2] or tonumber(exp) < tonumber(first[2]) then
			redis.call('ZADD', EV_EXP, exp, '')
			redis.call(EV_PUB, EV_CHAN, exp)
		end
	end
	local q = queue_length(now)
	if q == 0 then
		q = '0'
	end
	if EV_FIELDS then
		if meta then
			redis.call('XADD', EV_LOG, 'MAXLEN', '~', EV_MAXLEN, '*', 't', t, 'l', lock_name(), 'k', id,
				'o', owner, 'p', by or principal, 'm', mode, 'n', token, 'h', count, 'q', q, 's', sess or '', 'md', meta)
			return
		end
		if sess and sess ~= '' then
			redis.call('XADD', EV_LOG, 'MAXLEN', '~', EV_MAXLEN, '*', 't', t, 'l', lock_name(), 'k', id,
				'o', owner, 'p', by or principal, 'm', mode, 'n', token, 'h', count, 'q', q, 's', sess)
			return
		end
		redis.call('XADD', EV_LOG, 'MAXLEN', '~', EV_MAXLEN, '*', 't', t, 'l', lock_name(), 'k', id,
			'o', owner, 'p', by or principal, 'm', mode, 'n', token, 'h', count, 'q', q)
		return
	end
	local e = t .. '\n' .. lock_name() .. '\n' .. id .. '\n' .. owner .. '\n' .. (by or principal) .. '\n' ..
		mode .. '\n' .. token .. '\n' .. count .. '\n' .. q
	if waited and waited ~= '0' then
		e = e .. '\n' .. (sess or '') .. '\n' .. waited
	elseif sess and sess ~= '' then
		e = e .. '\n' .. sess
	end
	if meta then
		redis.call('XADD', EV_LOG, 'MAXLEN', '~', EV_MAXLEN, '*', 'v', '2', 'e', e, 'md', meta)
		return
	end
	redis.call('XADD', EV_LOG, 'MAXLEN', '~', EV_MAXLEN, '*', 'v', '2', 'e', e)
end

-- track_exclusive notes the member of a fresh exclusive lease in the fence.
local function track_exclusive(id, token, owner, principal)
	if EVENTS_MAX > 0 then
		fence_set('evx', lease_member(id, 'exclusive', token, owner, principal))
	end
end

-- released_member tells whether m, the fence's 'evx', is the member of
-- the lease that released names (the fence's 'released'): release_fast.lua
-- leaves it behind, as it took the member out of the expiries set and
-- recorded the release, so it names no lease to settle.
local function released_member(m, released)
	if not released then
		return false
	end
	local at = #lock_name() + 2
	return string.sub(m, at, at + #released) == released .. '\n'
end

-- untrack_exclusive forgets it when the lease ends by a script.
local function untrack_exclusive()
	if EVENTS_MAX > 0 then
		redis.call('HDEL', KEYS[2], 'evx')
	end
end

local function split_member(m)
	local f = {}
	for part in string.gmatch(m .. '\n', '([^\n]*)\n') do
		f[#f + 1] = part
	end
	return f -- name, lease id, mode, token, owner, principal
end

-- Sessions (docs/SESSIONS.md). A bound lease carries its session's id
-- ('sess' in the lock hash, sess in a shared record) and no expiry of its
-- own: whether it lives is read here, from the session's hash, by every
-- script that meets it, so a dead session's leases are dead at the instant
-- its TTL ends, whether or not a sweeper has run. The session's keys are
-- derived from the prefix of KEYS[1]. On Redis Cluster a lock script reads
-- instead the shadow of the session that the master serving its name keeps
-- in its event log's hash tag (events_from names the log): the same fields
-- (exp, ttl, delay, principal, ended, and ver, the primary's clock in us
-- when it last wrote them), and the same leases hash, for this master's
-- leases only (docs/SESSIONS.md, "Redis Cluster").
local function key_prefix()
	return string.sub(KEYS[1], 1, string.find(KEYS[1], '{', 1, true) - 1)
end

local function session_key(sid)
	if EV_PUB == 'SPUBLISH' then
		return string.sub(EV_LOG, 1, -8) .. ':s:' .. sid -- <prefix>{#e<n>}:s:<id>
	end
	return key_prefix() .. '{s:' .. sid .. '}:session'
end

local function session_leases_key(sid)
	if EV_PUB == 'SPUBLISH' then
		return string.sub(EV_LOG, 1, -8) .. ':s:' .. sid .. ':leases'
	end
	return key_prefix() .. '{s:' .. sid .. '}:leases'
end

-- delay_key holds the end (ms) of the name's lock-delay, and expires then.
local function delay_key()
	return key_prefix() .. '{' .. lock_name() .. '}:delay'
end

-- session_state reads a session once per call: exp (ms) is nil for an
-- unknown (or forgotten) session; ended is 'expired' or 'released' once
-- it ended.
local function session_state(sid)
	local st = SESS[sid]
	if not st then
		local v = redis.call('HMGET', session_key(sid), 'exp', 'ttl', 'delay', 'principal', 'ended')
		st = {exp = tonumber(v[1]), ttl = v[2], delay = tonumber(v[3]) or 0, principal = v[4], ended = v[5]}
		SESS[sid] = st
	end
	return st
end

-- lease_live tells whether a lease bound to sid (nil or '' for none) lives.
local function lease_live(sid, now)
	if not sid or sid == '' then
		return true
	end
	local st = session_state(sid)
	return st.exp ~= nil and not st.ended and st.exp > now
end

-- close_for_delay closes the name to new grants until ms till.
local function close_for_delay(till, now)
	if till <= now then
		return
	end
	local k = delay_key()
	if tonumber(redis.call('GET', k) or '0') < till then
		redis.call('SET', k, fmt(till), 'PXAT', fmt(till))
	end
end

-- A session's leases are a hash: "<name>\n<lease id>" -> "<mode>\n<limit>
-- \n<token>", all GetSession shows of them. bind adds lease id of this
-- name, unbind drops it.
local function bind(sid, id, mode, limit, token)
	redis.call('HSET', session_leases_key(sid), lock_name() .. '\n' .. id, mode .. '\n' .. limit .. '\n' .. token)
end

local function unbind(sid, id)
	if sid and sid ~= '' then
		redis.call('HDEL', session_leases_key(sid), lock_name() .. '\n' .. id)
	end
end

-- delay_till is the end (ms) of the lock-delay of a lease bound to sid
-- that ended with its session's expiry: counted from that expiry; 0 for
-- none. A deleted session's leases have none.
local function delay_till(sid)
	local st = session_state(sid)
	if st.exp and st.ended ~= 'released' and st.delay > 0 then
		return st.exp + st.delay
	end
	return 0
end

-- lapse_delay sets the lock-delay of a lease that ended with its session's
-- expiry (delay_till).
local function lapse_delay(sid, now)
	close_for_delay(delay_till(sid), now)
end

-- lapse_exclusive ends the exclusive lease when it is bound to a session
-- that is dead, as its expiry, and reports whether it did.
local function lapse_exclusive(now, id, owner, principal, token, sid)
	if not id or lease_live(sid, now) then
		return false
	end
	redis.call('DEL', KEYS[1])
	unbind(sid, id)
	lapse_delay(sid, now)
	record(now, 'expired', id, 'exclusive', token, owner, principal, 0, nil, nil, sid)
	return true
end

-- settle_exclusive records the expiry of the exclusive lease when Redis
-- deleted its hash (its TTL ran out) and the sweeper has not recorded it
-- yet, so that the name's events stay in the order of its changes. lease
-- is the lock hash's lease as the script read it: while there is one, the
-- fence's 'evx' names it.
local function settle_exclusive(now, lease)
	if EVENTS_MAX == 0 or lease then
		return
	end
	local m = fence().evx
	-- A fast release leaves evx naming the lease it released and recorded
	-- (released_member): no expiry to record, and nothing to change, so
	-- that a script that finds nothing to do writes nothing.
	if not m or released_member(m, FENCE.released) then
		return
	end
	FENCE.evx = nil
	local f = split_member(m)
	redis.call('HDEL', KEYS[2], 'evx')
	record(now, 'expired', f[2], f[3], f[4], f[5], f[6], 0)
end

-- held_exclusive opens a script that acts on a live lease id of any mode
-- for principal ("" for anyone), renew.lua and update.lua: it reads the
-- lock hash, refuses a layout this version does not know (lease_layout),
-- ends a lease of a dead session (lapse_exclusive) and settles an expired
-- one (settle_exclusive). It returns the hash's fields
--   {lease, owner, principal, token, count, ttl, acq, meta, sess, v, exp}
-- when id is the exclusive lease and principal may act on it; nil and the
-- reply {-1} when it is another principal's; nil when id is not the
-- exclusive lease (the script looks among the shared leases next).
local function held_exclusive(now, id, principal)
	local h = redis.call('HMGET', KEYS[1], 'lease', 'owner', 'principal', 'token', 'count', 'ttl', 'acq', 'meta', 'sess', 'v', 'exp')
	lease_layout(h[10])
	if h[9] and lapse_exclusive(now, h[1], h[2], h[3], h[4], h[9]) then
		h = {}
	end
	settle_exclusive(now, h[1])
	if h[1] ~= id then
		return nil
	end
	if principal ~= '' and h[3] ~= principal then
		return nil, {-1}
	end
	return h
end

-- drop_record removes a shared lease or permit and the index fields that
-- point at it.
local function drop_record(id, rec)
	redis.call('HDEL', KEYS[4], id)
	redis.call('ZREM', KEYS[5], id)
	if rec then
		local of = owner_field(rec.principal, rec.owner, rec.sess)
		if redis.call('HGET', KEYS[4], of) == id then
			redis.call('HDEL', KEYS[4], of)
		end
		if rec.idem ~= '' and redis.call('HGET', KEYS[4], 'i:' .. rec.idem) == id then
			redis.call('HDEL', KEYS[4], 'i:' .. rec.idem)
		end
		-- Every re-entry's 'r:' field: st names each (the lease's own
		-- request, its id, has none), 'op' the one of an older record.
		local fields = {}
		for r in pairs(rec.st) do
			if r ~= id and r ~= '_' then
				fields[#fields + 1] = 'r:' .. r
			end
		end
		if rec.op and rec.op ~= id then
			fields[#fields + 1] = 'r:' .. rec.op
		end
		for i = 1, #fields, 1000 do
			redis.call('HDEL', KEYS[4], unpack(fields, i, math.min(i + 999, #fields)))
		end
	end
	if redis.call('ZCARD', KEYS[5]) == 0 then
		redis.call('DEL', KEYS[4], KEYS[5])
	end
end

-- prune_shared drops expired shared leases and permits, records their
-- expiry, and returns how many are live.
local function prune_shared(now)
	if not rare() or redis.call('EXISTS', KEYS[5]) == 0 then
		return 0
	end
	local gone = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now)
	for _, id in ipairs(gone) do
		local rec = load_record(id)
		if rec and rec.sess and lease_live(rec.sess, now) then
			-- Bound: its score is its session's expiry when last seen.
			redis.call('ZADD', KEYS[5], session_state(rec.sess).exp, id)
		else
			drop_record(id, rec)
			if rec then
				unbind(rec.sess, id)
				if rec.sess then
					lapse_delay(rec.sess, now)
				end
				record(now, 'expired', id, record_mode(rec), rec.token, rec.owner, rec.principal, 0, nil, nil, rec.sess)
			end
		end
	end
	return redis.call('ZCARD', KEYS[5])
end

-- EXPIRED_GRACE is how long (ms) the shared keys outlive their longest
-- lease while events are recorded: their records tell the expiry of the
-- last leases to the sweeper, which records it and drops them within a
-- second, or to the name's next script, which records it before its own
-- event. The grace only matters while no sweeper runs.
local EXPIRED_GRACE = 600000

-- keep_shared makes the shared keys outlive their longest lease and no more
-- (but the grace), so that a name whose holders all died leaves nothing
-- behind.
local function keep_shared()
	if redis.call('HEXISTS', KEYS[4], 'bound') == 1 then
		-- A bound lease lives as long as its session, whatever its score.
		redis.call('PERSIST', KEYS[4])
		redis.call('PERSIST', KEYS[5])
		return
	end
	local last = redis.call('ZRANGE', KEYS[5], -1, -1, 'WITHSCORES')
	if last[2] then
		local at = tonumber(last[2])
		if EVENTS_MAX > 0 then
			at = at + EXPIRED_GRACE
		end
		redis.call('PEXPIREAT', KEYS[4], fmt(at))
		redis.call('PEXPIREAT', KEYS[5], fmt(at))
	end
end

-- prune_queue drops lapsed queue places and returns the queue's length.
local function prune_queue(now)
	if not rare() or redis.call('EXISTS', KEYS[6]) == 0 then
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

-- The session scripts (session_*.lua) take their own keys:
--   KEYS[1] session hash       <prefix>{s:<id>}:session
--   KEYS[2] its leases (hash)  <prefix>{s:<id>}:leases
--   KEYS[3] sessions' expiries <prefix>sessions:expiries
--   KEYS[4] event log, KEYS[5] lease expiries: as KEYS[8] and KEYS[9] above
-- On Redis Cluster there is no KEYS[3] (SESSION_CLUSTER), and a shadow's
-- scripts (session_shadow.lua, session_sweep.lua) take the
-- shadow's keys instead: <prefix>{#e<n>}:s:<id>, <prefix>{#e<n>}:s:<id>
-- :leases and the master's lease expiries, <prefix>{#e<n>}:events:expiries,
-- where the shadow's member is the session id.
-- The session hash holds owner, principal, ttl, delay (ms), exp (ms), due
-- (its score in KEYS[3]) and, once it ended, ended ('expired' or
-- 'released'); an ended session is remembered SESSION_MEMORY ms.
local SESSION_MEMORY = 3600000 -- lock.EndedSessionMemory
-- SESSION_CHUNK bounds the leases one script ends, so that none blocks
-- Redis for long.
local SESSION_CHUNK = 200

-- SESSION_CLUSTER: a session script runs on the session's own record on
-- Redis Cluster, where its events argument is "c" (session_begin). No
-- sweeper looks at the record there (each master's sweeper ends the leases
-- of its own shadows, see session_shadow.lua), so the record forgets
-- itself SESSION_MEMORY ms after its expiry; its 'ver' field is the
-- primary's clock (us) at its last write, which orders the shadows'
-- copies; its 'masters' field lists the masters holding shadows (their
-- logs' slots, each followed by a space); and it has no KEYS[3].
-- SESSION_LAYOUT is the layout of the session hashes this version writes
-- (field v; layout.SessionsV1 in Go): the fields above, as v0.1.0 wrote
-- them without v. The lock scripts read only exp, ttl, delay, principal
-- and ended (session_state), which a later layout keeps.
local SESSION_LAYOUT = '1'

local function session_begin(arg)
	SESSION_CLUSTER = arg == 'c'
end

-- session_read reads the session hash, nil when there is none or it is
-- another principal's ("" for anyone): owner, principal, ttl, delay, exp,
-- ended, due, ver, masters, v (its layout: SESSION_LAYOUT, or none when
-- v0.1.0 wrote it, the same layout).
local function session_read(principal)
	local v = redis.call('HMGET', KEYS[1], 'owner', 'principal', 'ttl', 'delay', 'exp', 'ended', 'due', 'ver', 'masters', 'v')
	if not v[1] or (principal ~= '' and v[2] ~= principal) then
		return nil
	end
	return v
end

-- session_live reads the session hash of a session that lives: its fields
-- (as session_read), or nil and the reply for an unknown session or
-- another principal's ({-5}), one that ended ({-6}), or one of a layout
-- this version does not know ({-7, its layout}: written by a newer one,
-- which the store reports, docs/UPGRADING.md).
local function session_live(principal, now)
	local v = session_read(principal)
	if not v then
		return nil, {-5}
	end
	if v[10] and v[10] ~= SESSION_LAYOUT then
		return nil, {-7, v[10]}
	end
	if v[6] or tonumber(v[5]) <= now then
		return nil, {-6}
	end
	return v
end

-- session_due puts session sid into the sessions' expiries at ms at, and
-- announces at on the channel of the same name when it is the earliest,
-- so that every instance's sweeper looks then (sessions.go).
local function session_due(sid, at)
	if SESSION_CLUSTER then
		redis.call('PEXPIREAT', KEYS[1], fmt(tonumber(at) + SESSION_MEMORY))
		return
	end
	local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
	redis.call('ZADD', KEYS[3], at, sid)
	if not first[2] or tonumber(at) < tonumber(first[2]) then
		redis.call('PUBLISH', KEYS[3], at)
	end
end

-- session_reply answers a session: {1, owner, principal, ttl, delay, exp,
-- then each lease's field and value in KEYS[2] (see bind)}.
local function session_reply(v, leases)
	local r = {1, v[1], v[2], v[3], v[4], v[5]}
	for _, x in ipairs(leases) do
		r[#r + 1] = x
	end
	return r
end

-- session_answer answers a session (v as session_read reads it): with its
-- leases (session_reply), or on Redis Cluster {1, owner, principal, ttl,
-- delay, exp, ver, then the slot of each master holding a shadow}, whose
-- shadows hold the leases.
local function session_answer(v)
	if SESSION_CLUSTER then
		local r = {1, v[1], v[2], v[3], v[4], v[5], v[8] or '0'}
		for slot in string.gmatch(v[9] or '', '(%d+) ') do
			r[#r + 1] = slot
		end
		return r
	end
	return session_reply(v, redis.call('HGETALL', KEYS[2]))
end

-- end_bound ends lease id of name, bound to session sid, as how
-- ('expired' or 'released'), from a session script whose keys are skeys:
-- it runs as the name's own scripts do, with the name's keys.
local function end_bound(sid, name, id, how, now, skeys, evarg)
	local t = string.sub(skeys[1], 1, string.find(skeys[1], '{', 1, true) - 1) .. '{' .. name .. '}'
	begin({t .. ':lock', t .. ':fence', t .. ':abandoned', t .. ':lock:shared', t .. ':lock:expiry',
		t .. ':queue', t .. ':queue:deadline', skeys[4], skeys[5]}, ARGV, 8)
	events_from(evarg)
	local channel = t .. ':unlock'
	local mode, token, owner, principal
	local h = redis.call('HMGET', KEYS[1], 'lease', 'owner', 'principal', 'token', 'sess', 'v')
	lease_layout(h[6])
	if h[1] == id and h[5] == sid then
		redis.call('DEL', KEYS[1])
		if how == 'released' then
			redis.call('HSET', KEYS[2], 'released', id, 'released_by', h[3])
		end
		mode, token, owner, principal = 'exclusive', h[4], h[2], h[3]
	else
		local rec = load_record(id)
		if not rec or rec.sess ~= sid then
			return
		end
		drop_record(id, rec)
		mode, token, owner, principal = record_mode(rec), rec.token, rec.owner, rec.principal
	end
	lease_ended(now, channel, EV_PUB)
	if how == 'expired' then
		lapse_delay(sid, now)
	end
	record(now, how, id, mode, token, owner, principal, 0, nil, nil, sid)
end
