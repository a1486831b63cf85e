-- admit.lua: fence a write with a token. The token is admitted when it is not
-- lower than the highest token admitted before under the same token key; the
-- key then holds the higher of the two.
--
-- KEYS[1]  token key: the highest token admitted so far, a decimal string
-- KEYS[2]  data key, optional: set to ARGV[2] only when the token is admitted
-- ARGV[1]  token, a decimal integer in [0, 2^53-1]
-- ARGV[2]  value for KEYS[2], when KEYS[2] is given
--
-- Returns 1 when the token is admitted (and KEYS[2] written), 0 when it is
-- stale (and nothing written). Errors when ARGV[1] or the token key's value
-- is not a number.
--
-- Tokens are compared as Lua numbers, which are exact below 2^53. The token
-- key keeps ARGV[1] as sent, never a number formatted by Lua, which would
-- round to 14 significant digits. Neither key gets a TTL: a fence that
-- expired would admit stale tokens again. In a cluster, both keys must hash
-- to one slot, e.g. {name}:fence and {name}:data.
local token = tonumber(ARGV[1])
if not token then
	return redis.error_reply('ERR fence: token is not a number: ' .. tostring(ARGV[1]))
end

local stored = redis.call('GET', KEYS[1])
if stored then
	local highest = tonumber(stored)
	if not highest then
		return redis.error_reply('ERR fence: ' .. KEYS[1] .. ' does not hold a token: ' .. stored)
	end
	if token < highest then
		return 0
	end
	if token > highest then
		redis.call('SET', KEYS[1], ARGV[1])
	end
else
	redis.call('SET', KEYS[1], ARGV[1])
end

if #KEYS > 1 then
	redis.call('SET', KEYS[2], ARGV[2])
end
return 1
