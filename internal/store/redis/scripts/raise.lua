-- raise.lua: write a Redlock grant's fencing token back to one master
-- (internal/store/redlock). The grant's token is the largest candidate of
-- the masters that granted; raising every master's counter to it, and
-- giving the lease that token wherever it is held, makes any later
-- majority see a counter at least this high.
--
-- KEYS[1] lock hash, KEYS[2] fence hash, KEYS[4] shared leases (lib.lua)
-- ARGV[1] lease id
-- ARGV[2] token
--
-- Returns 1 when the lease is held here, 0 when only the counter moved.

local token = tonumber(ARGV[2])
local last = tonumber(redis.call('HGET', KEYS[2], 'token')) or 0
if token > last then
	redis.call('HSET', KEYS[2], 'token', ARGV[2])
end
local held = 0
if redis.call('HGET', KEYS[1], 'lease') == ARGV[1] then
	redis.call('HSET', KEYS[1], 'token', ARGV[2])
	held = 1
else
	local raw = redis.call('HGET', KEYS[4], ARGV[1])
	if raw then
		local rec = cjson.decode(raw)
		rec.token = ARGV[2]
		redis.call('HSET', KEYS[4], ARGV[1], cjson.encode(rec))
		held = 1
	end
end
if held == 1 then
	-- The holder's token changed: blocking queries must see a new index.
	redis.call('HINCRBY', KEYS[2], 'ver', 1)
end
return held
