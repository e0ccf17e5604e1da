-- record.lua: record the holds of requests a sidecar admitted from one of its
-- leases (lease.lua), at most once each: each becomes an ordinary hold
-- (hold.lua), renewed, settled and swept as one admit.lua placed, and its
-- amount moves from the lease to the account's held sum, and its seat
-- (where the lease holds seats) from the lease to the holds it counts in.
--
-- KEYS[1]  gw:{acct:ID}:acct              hash: held, leased, seats, window
-- KEYS[2]  gw:{acct:ID}:holds             hash: request id -> hold (hold.lua)
-- KEYS[3]  gw:{acct:ID}:leases            hash: lease id -> lease (lease.lua)
-- KEYS[4]  gw:{acct:ID}:lbits:LEASEID     bitmap: bit n set once the lease's n-th
--                                          request is recorded or settled
-- KEYS[5]  gw:{acct:ID}:ks:KEYID          hash: the key's state (admit.lua)
-- KEYS[6]  gw:{acct:ID}:rl                zset: the account's rate log (admit.lua)
-- KEYS[7]  gw:{acct:ID}:krl:KEYID         zset: the key's rate log (admit.lua)
-- KEYS[8]  gw:{acct:ID}:ps:PROJECTID      hash: the state of the project the lease
--                                          counts against (lease.lua's project), when it does
-- KEYS[9]  gw:{acct:ID}:prl:PROJECTID     zset: that project's rate log (admit.lua)
--
-- ARGV[1]  lease id
-- ARGV[2]  the holds' lease expiry, unix ms
-- ARGV[3]  the bitmap's lifetime, s
-- ARGV[4]  "1" when the holds count in the key's held and open (the key
--          has a spend budget, a concurrency or a tokens-per-minute limit,
--          admit.lua's kcount), else "0"
-- ARGV[5]  the rate logs the lease's slots are in (lease.lua's rl), bits: 1
--          the account's, 2 the key's, 4 the project's; 0 none
-- ARGV[6]  the longest of the key's and its project's rate windows, minutes
--          (the account's is read from KEYS[1]): the least a log of theirs
--          with a slot recorded is kept
-- ARGV[7..] per request: request id, its sequence number in the lease, hold
--          (nano-USD), admission record (admit.lua's, "kc" as ARGV[4]; "ta"
--          and "tk" the bucket of the lease's tokens it used, or 0),
--          its slot number (0: none), its admission time (unix ms)
--
-- A request whose record says "pc":1 (admit.lua's prefix) counts in the
-- project's held and open, as admit.lua counts it, and its hold leaves
-- the project's leased sum with the lease's amount (lease pc 1), its seat
-- the project's seats (the lease's sl has 4).
--
-- A request whose bit is set was recorded, or settled by settle.lua before
-- its record came, and its hold is left alone. Its slot is not: a request
-- that used a slot has its placeholder "L:<lease id>:<slot>" replaced in
-- each rate log of ARGV[5] by its own id scored at its admission time, in
-- any order with its settlement and as often as the record is retried (by
-- name: idempotent), so that the log then holds exactly the admission.
--
-- Each request recorded here took one of the lease's seats when the lease
-- has any (its sl is not 0: every admission from it needs one): the seat
-- leaves the lease and the seat sums as the hold enters the holds hash
-- (the account's in flight) and the key's open count, in this script, so
-- that in flight plus seats is unchanged.
--
-- A request that used the lease's tokens (its record's "ta", "tk" or "tp"
-- is not 0) has its token bound counted as held in that bucket already (by
-- lease.lua): the bound stays there, now the request's (settlement moves
-- it to settled, by its record), and leaves the lease's token count when
-- that bucket is still the lease's.
--
-- When the lease is gone (swept after its sidecar could not renew it), the
-- hold is recorded all the same: the request runs and will be charged
-- (docs/billing.md, Leases: the overdraft is at most the swept lease), and
-- its admission enters the rate logs.
--
-- An account that does not exist records nothing (and is not made): a
-- record sent from a dead sidecar's outbox may reach a store that no
-- longer has the account, or never had it.
--
-- Returns the number of holds recorded.

local function int(n)
  return string.format('%d', n)
end

if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end

local lid = ARGV[1]
local expiry = tonumber(ARGV[2])
local rl = tonumber(ARGV[5])
local logs = {}
if lease_has(rl, 1) then
  local w = tonumber(redis.call('HGET', KEYS[1], 'window') or '0')
  logs[#logs + 1] = {KEYS[6], math.max(w, 1) * 60000}
end
if lease_has(rl, 2) then
  logs[#logs + 1] = {KEYS[7], math.max(tonumber(ARGV[6]), 1) * 60000}
end
if lease_has(rl, 4) then
  logs[#logs + 1] = {KEYS[9], math.max(tonumber(ARGV[6]), 1) * 60000}
end
local slotted = false
local moved, n = 0, 0
-- Of those, the holds and requests the project counts (their "pc").
local pmoved, pn = 0, 0
-- Token bounds recorded, by bucket.
local bounds = {}
for i = 7, #ARGV, 6 do
  local slot = tonumber(ARGV[i + 4])
  if slot > 0 then
    for _, log in ipairs(logs) do
      redis.call('ZREM', log[1], 'L:' .. lid .. ':' .. ARGV[i + 4])
      redis.call('ZADD', log[1], ARGV[i + 5], ARGV[i])
      slotted = true
    end
  end
  local seq = tonumber(ARGV[i + 1])
  if redis.call('GETBIT', KEYS[4], seq) == 0 then
    redis.call('SETBIT', KEYS[4], seq, 1)
    local h = tonumber(ARGV[i + 2])
    redis.call('HSETNX', KEYS[2], ARGV[i], hold_format(h, expiry, ARGV[i + 3], ''))
    moved = moved + h
    n = n + 1
    -- admit.lua's prefix, and its project part where there is one.
    local tp, pc = string.match(ARGV[i + 3], '^{"tb":%d+,"ta":%d+,"tk":%d+,"kc":%d+,"tp":(%d+),"pc":(%d+)')
    if pc == '1' then
      pmoved = pmoved + h
      pn = pn + 1
    end
    local tb, ta, tk = string.match(ARGV[i + 3], '^{"tb":(%d+),"ta":(%d+),"tk":(%d+)')
    if tb then
      local b = tonumber(ta)
      if b == 0 then
        b = tonumber(tk)
      end
      if b == 0 then
        b = tonumber(tp or '0')
      end
      if b > 0 then
        bounds[b] = (bounds[b] or 0) + tonumber(tb)
      end
    end
  end
end
redis.call('EXPIRE', KEYS[4], ARGV[3])
if slotted then
  for _, log in ipairs(logs) do
    if redis.call('PTTL', log[1]) < log[2] then
      redis.call('PEXPIRE', log[1], int(log[2]))
    end
  end
end
if n == 0 then
  return 0
end
redis.call('HINCRBY', KEYS[1], 'held', int(moved))
-- What leaves the lease: money, seats and tokens, and from the key's
-- sums the money (lease kc 1) and seats (lease sl 2 or 3) they hold.
local kleased, kseats, pleased, pseats = 0, 0, 0, 0
local cur = redis.call('HGET', KEYS[3], lid)
if cur then
  local l = lease_parse(cur)
  kleased, kseats, pleased, pseats = lease_take(l, moved, n, bounds, KEYS[1])
  redis.call('HSET', KEYS[3], lid, lease_format(l))
end
if ARGV[4] == '1' then
  redis.call('HINCRBY', KEYS[5], 'held', int(moved))
  redis.call('HINCRBY', KEYS[5], 'open', n)
end
if kleased > 0 then
  lease_sum(KEYS[5], 'leased', -kleased)
end
if kseats > 0 then
  lease_sum(KEYS[5], 'seats', -kseats)
end
if pn > 0 then
  redis.call('HINCRBY', KEYS[8], 'held', int(pmoved))
  redis.call('HINCRBY', KEYS[8], 'open', pn)
end
if pleased > 0 then
  lease_sum(KEYS[8], 'leased', -pleased)
end
if pseats > 0 then
  lease_sum(KEYS[8], 'seats', -pseats)
end
return n
