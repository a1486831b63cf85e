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
-- Returns 1 when the lease is held here, 0 when only the counter moved. A
-- lock hash, fence or record of a layout this version does not know ends
-- it with the error of lease_layout (lib.lua), before it changes anything.

local token = tonumber(ARGV[2])
local f = redis.call('HMGET', KEYS[2], 'token', 'v')
lease_layout(f[2])
local h = redis.call('HMGET', KEYS[1], 'lease', 'v')
lease_layout(h[2])
local rec = h[1] ~= ARGV[1] and load_record(ARGV[1])
local last = tonumber(f[1]) or 0
if token > last then
	redis.call('HSET', KEYS[2], 'token', ARGV[2], 'v', LEASE_LAYOUT)
end
local held = 0
if h[1] == ARGV[1] then
	redis.call('HSET', KEYS[1], 'token', ARGV[2])
	held = 1
elseif rec then
	rec.token = ARGV[2]
	redis.call('HSET', KEYS[4], ARGV[1], cjson.encode(rec))
	held = 1
end
if held == 1 then
	-- The holder's token changed: blocking queries must see a new index.
	redis.call('HINCRBY', KEYS[2], 'ver', 1)
end
return held
