-- settle.lua: end one admitted request, atomically and at most once.
--
-- KEYS[1]  gw:{acct:ID}:acct              hash: balance, held, ...
-- KEYS[2]  gw:{acct:ID}:holds             hash: request id -> held amount
-- KEYS[3]  gw:{acct:ID}:holdexp           zset: request id scored by hold expiry
-- KEYS[4]  gw:{acct:ID}:settled:REQID     string: the idempotency marker
-- KEYS[5]  gw:{acct:ID}:day:YYYYMMDD      string: settled spend of the current UTC day
-- KEYS[6]  gw:{acct:ID}:u:d:YYYYMMDD      hash: usage counters of the UTC day
-- KEYS[7]  gw:{acct:ID}:u:m:YYYYMM        hash: usage counters of the UTC month
-- KEYS[8]  gw:{acct:ID}:u:t               hash: usage counters of all time
-- KEYS[9]  gw:{acct:ID}:ledger            stream: one entry per settled request
-- KEYS[10] gw:{acct:ID}:key:KEYID         hash: the credential's metadata (may be absent)
-- KEYS[11] gw:{acct:ID}:holdrec           hash: request id -> admission record
-- KEYS[12] gw:{acct:ID}:holdckpt          hash: request id -> usage checkpoint
--
-- ARGV[1]  request id
-- ARGV[2]  "1" to charge and count usage (2xx reply), "0" otherwise
-- ARGV[3]  cost, nano-USD
-- ARGV[4]  input tokens
-- ARGV[5]  output tokens
-- ARGV[6]  cache write tokens
-- ARGV[7]  cache read tokens
-- ARGV[8]  model
-- ARGV[9]  idempotency marker lifetime, ms
-- ARGV[10] day key lifetime, s
-- ARGV[11] month key lifetime, s
-- ARGV[12] unused (the ledger is trimmed only after export, by trim.lua)
-- ARGV[13] last-used time of the credential, unix ms
-- ARGV[14..] the ledger entry as field, value pairs
--
-- Usage hashes hold a model's counters as "m:requests:MODEL",
-- "m:input:MODEL", ...: the counter name never holds a colon, so a model name
-- may. The account's totals are the sum over its models.
--
-- Returns 1 when applied, 0 when the request had already settled (or was
-- never admitted), -1 when the account does not exist.

local function int(n)
  return string.format('%d', n)
end

if redis.call('EXISTS', KEYS[4]) == 1 then
  return 0
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end

local req = ARGV[1]

-- Only a held request settles. A hold leaves only through settlement (the
-- sweeper settles expired ones), so a request without one has settled
-- already, even once its marker has expired: the marker need not outlive
-- the longest replay.
local amount = redis.call('HGET', KEYS[2], req)
if not amount then
  return 0
end
redis.call('HDEL', KEYS[2], req)
redis.call('ZREM', KEYS[3], req)
local held = tonumber(redis.call('HGET', KEYS[1], 'held') or '0') - tonumber(amount)
if held < 0 then
  held = 0
end
redis.call('HSET', KEYS[1], 'held', int(held))
redis.call('HDEL', KEYS[11], req)
redis.call('HDEL', KEYS[12], req)

if ARGV[2] == '1' then
  local cost = ARGV[3]
  redis.call('HINCRBY', KEYS[1], 'balance', int(-tonumber(cost)))
  redis.call('INCRBY', KEYS[5], cost)
  redis.call('EXPIRE', KEYS[5], ARGV[10])

  -- Only per-model counters are kept (the account's totals are their sum,
  -- taken on read), and zero increments are skipped: settlement is on every
  -- reply's critical path.
  local names = {'requests', 'input', 'output', 'cache_write', 'cache_read', 'cost'}
  local values = {'1', ARGV[4], ARGV[5], ARGV[6], ARGV[7], cost}
  local model = ARGV[8]
  for k = 6, 8 do
    for i, name in ipairs(names) do
      if values[i] ~= '0' then
        redis.call('HINCRBY', KEYS[k], 'm:' .. name .. ':' .. model, values[i])
      end
    end
  end
  redis.call('EXPIRE', KEYS[6], ARGV[10])
  redis.call('EXPIRE', KEYS[7], ARGV[11])
end

-- The credential was used, whatever the reply; keep the latest time.
if redis.call('EXISTS', KEYS[10]) == 1 then
  local last = tonumber(redis.call('HGET', KEYS[10], 'last_used') or '0')
  if tonumber(ARGV[13]) > last then
    redis.call('HSET', KEYS[10], 'last_used', ARGV[13])
  end
end

-- Never trimmed here: an entry leaves the ledger only once exported.
redis.call('XADD', KEYS[9], '*', unpack(ARGV, 14))
redis.call('SET', KEYS[4], '1', 'PX', ARGV[9])
return 1
