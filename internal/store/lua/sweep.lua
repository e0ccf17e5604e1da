-- sweep.lua: find the expired holds of one account, whose requests' sidecar
-- stopped renewing them (it died or lost Redis for longer than the lease).
--
-- KEYS[1]  gw:{acct:ID}:acct              hash: balance, held, ...
-- KEYS[2]  gw:{acct:ID}:holds             hash: request id -> held amount
-- KEYS[3]  gw:{acct:ID}:holdexp           zset: request id scored by hold expiry (unix ms)
-- KEYS[4]  gw:{acct:ID}:holdrec           hash: request id -> admission record
-- KEYS[5]  gw:{acct:ID}:holdckpt          hash: request id -> usage checkpoint
--
-- ARGV[1]  now, unix ms, from the caller's clock
-- ARGV[2]  the most expired holds to return
--
-- An expired hold with an admission record is returned, not released: the
-- caller settles it with settle.lua (flagged interrupted), which releases it
-- and is idempotent, so two sweepers, or a sweeper and the request's own late
-- settlement, charge it once. An expired hold without a record (admitted
-- before records existed) is released here at no charge; index entries of
-- holds that no longer exist are dropped.
--
-- Returns {open, next, released, id1, record1, checkpoint1, id2, ...}: open
-- is the number of holds left (those returned included), next the earliest
-- expiry after now (-1 when none), released the holds released here.

local function int(n)
  return string.format('%d', n)
end

local now = ARGV[1]
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
local released = 0
local amount = 0
for _, id in ipairs(expired) do
  local held = redis.call('HGET', KEYS[2], id)
  local rec = redis.call('HGET', KEYS[4], id)
  if not held then
    redis.call('ZREM', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    redis.call('HDEL', KEYS[5], id)
  elseif not rec then
    redis.call('HDEL', KEYS[2], id)
    redis.call('ZREM', KEYS[3], id)
    redis.call('HDEL', KEYS[5], id)
    released = released + 1
    amount = amount + tonumber(held)
  else
    table.insert(out, id)
    table.insert(out, rec)
    table.insert(out, redis.call('HGET', KEYS[5], id) or '')
  end
end
if amount > 0 then
  local held = tonumber(redis.call('HGET', KEYS[1], 'held') or '0') - amount
  if held < 0 then
    held = 0
  end
  redis.call('HSET', KEYS[1], 'held', int(held))
end

local next = -1
local after = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if #after > 0 then
  next = tonumber(after[2])
end
local result = {redis.call('HLEN', KEYS[2]), next, released}
for _, v in ipairs(out) do
  table.insert(result, v)
end
return result
