-- sweep.lua: release the expired holds of one account now.
--
-- A hold outlives its request only when the request's sidecar died: it will
-- never settle. admit.lua runs this same sweep, amortised, on admissions; a
-- background sweeper can run this script for accounts with no admissions.
--
-- KEYS[1]  gw:{acct:ID}:acct              hash: held, sweep_at, ...
-- KEYS[2]  gw:{acct:ID}:holds             hash: request id -> held amount (nano-USD)
-- KEYS[3]  gw:{acct:ID}:holdexp           zset: request id scored by hold expiry (unix ms)
--
-- ARGV[1]  now, unix ms, from the caller's clock
-- ARGV[2]  sweep interval, ms: the next amortised sweep (admit.lua) is due when
--          the earliest remaining hold expires, or this long after now when
--          none is open
--
-- Returns the number of holds released, or -1 when the account does not
-- exist.

local function int(n)
  return string.format('%d', n)
end

local now = tonumber(ARGV[1])
local held = redis.call('HGET', KEYS[1], 'held')
if not held and redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
held = tonumber(held or '0')
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', int(now))
local released = 0
for _, id in ipairs(expired) do
  local amount = redis.call('HGET', KEYS[2], id)
  if amount then
    released = released + tonumber(amount)
    redis.call('HDEL', KEYS[2], id)
  end
end
if #expired > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', int(now))
  held = held - released
  if held < 0 then
    held = 0
  end
end
local next = now + tonumber(ARGV[2])
local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if first[2] then
  next = tonumber(first[2])
end
redis.call('HSET', KEYS[1], 'held', int(held), 'sweep_at', int(next))
return #expired
