-- record.lua: record the holds of requests a sidecar admitted from one of its
-- leases (lease.lua), at most once each: each becomes an ordinary hold
-- (hold.lua), renewed, settled and swept as one admit.lua placed, and its
-- amount moves from the lease to the account's held sum.
--
-- KEYS[1]  gw:{acct:ID}:acct              hash: held, leased
-- KEYS[2]  gw:{acct:ID}:holds             hash: request id -> hold (hold.lua)
-- KEYS[3]  gw:{acct:ID}:leases            hash: lease id -> lease (lease.lua)
-- KEYS[4]  gw:{acct:ID}:lbits:LEASEID     bitmap: bit n set once the lease's n-th
--                                          request is recorded or settled
-- KEYS[5]  gw:{acct:ID}:ks:KEYID          hash: the key's state (admit.lua)
--
-- ARGV[1]  lease id
-- ARGV[2]  the holds' lease expiry, unix ms
-- ARGV[3]  the bitmap's lifetime, s
-- ARGV[4]  "1" when the lease counts against the key's budgets (its holds
--          count in the key's held and open), else "0"
-- ARGV[5..] per request: request id, its sequence number in the lease, hold
--          (nano-USD), admission record (admit.lua's, "kc" as the lease's)
--
-- A request whose bit is set was recorded, or settled by settle.lua before
-- its record came, and is left alone. When the lease is gone (swept after
-- its sidecar could not renew it), the hold is recorded all the same: the
-- request runs and will be charged (docs/billing.md, Leases: the overdraft
-- is at most the swept lease).
--
-- Returns the number of holds recorded.

local function int(n)
  return string.format('%d', n)
end

local lid = ARGV[1]
local expiry = tonumber(ARGV[2])
local moved, n = 0, 0
for i = 5, #ARGV, 4 do
  local seq = tonumber(ARGV[i + 1])
  if redis.call('GETBIT', KEYS[4], seq) == 0 then
    redis.call('SETBIT', KEYS[4], seq, 1)
    local h = tonumber(ARGV[i + 2])
    redis.call('HSETNX', KEYS[2], ARGV[i], hold_format(h, expiry, ARGV[i + 3], ''))
    moved = moved + h
    n = n + 1
  end
end
redis.call('EXPIRE', KEYS[4], ARGV[3])
if n == 0 then
  return 0
end
redis.call('HINCRBY', KEYS[1], 'held', int(moved))
local kc = ARGV[4] == '1'
local take = 0
local cur = redis.call('HGET', KEYS[3], lid)
if cur then
  local a, rest = string.match(cur, '^(%d+) (.*)$')
  a = tonumber(a)
  take = math.min(moved, a)
  redis.call('HSET', KEYS[3], lid, int(a - take) .. ' ' .. rest)
  if redis.call('HINCRBY', KEYS[1], 'leased', int(-take)) < 0 then
    redis.call('HSET', KEYS[1], 'leased', '0')
  end
end
if kc then
  local ks = redis.call('HMGET', KEYS[5], 'held', 'open', 'leased')
  redis.call('HSET', KEYS[5], 'held', int(tonumber(ks[1] or '0') + moved), 'open', int(tonumber(ks[2] or '0') + n),
    'leased', int(math.max(tonumber(ks[3] or '0') - take, 0)))
end
return n
