-- lease.lua: take, resize, return or sweep one escrow lease: a slice of an
-- account's spendable money that one sidecar admits requests against in
-- memory (docs/billing.md, Leases).
--
-- A lease is one field of the account's leases hash:
--   "<amount> <expiry> <kc> <key id>"
-- amount: the escrow still in the lease, nano-USD: the sidecar's free
-- amount plus the holds it admitted whose record (record.lua) has not
-- landed yet; expiry: unix ms, renewed by the sidecar, after which the
-- sweeper returns the amount; kc: "1" when the lease counts against the
-- key's spend budgets (the key has one), else "0".
-- The account's "leased" field is the sum of its leases' amounts, and the
-- key state's "leased" the sum of those with kc = 1: admit.lua and this
-- script count them as held.
--
-- KEYS[1]  gw:{acct:ID}:acct              hash: balance, held, leased, daily, monthly,
--                                          rpm, tpm, conc, suspended
-- KEYS[2]  gw:{acct:ID}:leases            hash: lease id -> lease (above)
-- KEYS[3]  gw:{acct:ID}:ks:KEYID          hash: the key's state (admit.lua), leased
-- KEYS[4]  gw:{acct:ID}:day:YYYYMMDD      string: settled spend of the UTC day
-- KEYS[5]  gw:{acct:ID}:mon:YYYYMM        string: settled spend of the UTC month
-- KEYS[6]  gw:{acct:ID}:key:KEYID         hash: the key's metadata (revoked)
--
-- ARGV[1]  now, unix ms
-- ARGV[2]  the lease's new expiry, unix ms
-- ARGV[3]  lease id
-- ARGV[4]  key id
-- ARGV[5]  free: the sidecar's free amount of the lease; -1 to sweep: return
--          the lease only if it has expired (its sidecar stopped renewing)
-- ARGV[6]  want: the free amount the sidecar would like; 0 returns the lease
-- ARGV[7]  min: below this free amount no lease is kept
-- ARGV[8]  share: a lease's free amount is at most room / share
-- ARGV[9..14]  the key's limits: rpm, tpm, concurrency, daily, monthly,
--          total (nano-USD); 0: none
-- ARGV[15] the UTC day, YYYYMMDD; ARGV[16] the UTC month, YYYYMM
--
-- room is the least, over the balance and each spend budget set (the
-- account's daily and monthly, the key's daily, monthly and total), of
-- limit - spent - held - leased, with this lease's free amount added back.
-- The new free amount is min(want, floor(room / share)), or 0 when that is
-- below min, or when the lease may not be held: the account is missing or
-- suspended, the account or key has a request-rate, tokens-per-minute or
-- concurrency limit (counted per request by admit.lua), the key is revoked.
--
-- Returns {delta, reason}: delta is the change of the free amount (the
-- sidecar adds it to its own); reason 0 held, 1 not allowed a lease, 2 too
-- small, 3 no such account, 4 the lease is gone (swept: the sidecar must
-- drop its free amount and take a new lease under another id). In sweep
-- mode, {returned amount, 0}.

local function int(n)
  return string.format('%d', n)
end

local now = tonumber(ARGV[1])
local expiry = tonumber(ARGV[2])
local lid, keyid = ARGV[3], ARGV[4]
local free = tonumber(ARGV[5])
local want, min, share = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local krpm, ktpm, kconc = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local kdaily, kmonthly, ktotal = tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14])

local amount, exp, kc = 0, 0, '0'
local cur = redis.call('HGET', KEYS[2], lid)
if cur then
  local a, e, c = string.match(cur, '^(%d+) (%d+) (%d)')
  amount, exp, kc = tonumber(a), tonumber(e), c
end

-- Change the lease's amount by d (clamped at zero), and the sums with it.
local function move(d)
  local new = amount + d
  if new < 0 then
    new = 0
  end
  d = new - amount
  if d ~= 0 then
    if redis.call('HINCRBY', KEYS[1], 'leased', int(d)) < 0 then
      redis.call('HSET', KEYS[1], 'leased', '0')
    end
    if kc == '1' then
      if redis.call('HINCRBY', KEYS[3], 'leased', int(d)) < 0 then
        redis.call('HSET', KEYS[3], 'leased', '0')
      end
    end
  end
  amount = new
end

if free < 0 then
  if cur and exp <= now then
    local a = amount
    move(-amount)
    redis.call('HDEL', KEYS[2], lid)
    return {a, 0}
  end
  return {0, 0}
end
if not cur and free > 0 then
  return {-free, 4}
end

local acct = redis.call('HMGET', KEYS[1], 'balance', 'held', 'leased', 'daily', 'monthly', 'rpm', 'tpm', 'conc', 'suspended')
local reason = 0
local target = 0
local kbudget = kdaily > 0 or kmonthly > 0 or ktotal > 0
if not acct[1] then
  reason = 3
elseif acct[9] == '1' or tonumber(acct[6] or '0') > 0 or tonumber(acct[7] or '0') > 0 or tonumber(acct[8] or '0') > 0
    or krpm > 0 or ktpm > 0 or kconc > 0 or (cur and (kc == '1') ~= kbudget) then
  reason = 1
else
  local revoked = redis.call('HGET', KEYS[6], 'revoked')
  if revoked and revoked ~= '0' then
    reason = 1
  end
end
if reason == 0 and want > 0 then
  local held = tonumber(acct[2] or '0') + tonumber(acct[3] or '0') - free
  local room = tonumber(acct[1]) - held
  local daily, monthly = tonumber(acct[4] or '0'), tonumber(acct[5] or '0')
  if daily > 0 then
    room = math.min(room, daily - tonumber(redis.call('GET', KEYS[4]) or '0') - held)
  end
  if monthly > 0 then
    room = math.min(room, monthly - tonumber(redis.call('GET', KEYS[5]) or '0') - held)
  end
  if kbudget then
    local ks = redis.call('HMGET', KEYS[3], 'held', 'leased', 'dd', 'dc', 'md', 'mc', 'tc')
    local kheld = tonumber(ks[1] or '0') + tonumber(ks[2] or '0')
    if kc == '1' then
      kheld = kheld - free
    end
    if kdaily > 0 then
      local spent = 0
      if ks[3] == ARGV[15] then
        spent = tonumber(ks[4] or '0')
      end
      room = math.min(room, kdaily - spent - kheld)
    end
    if kmonthly > 0 then
      local spent = 0
      if ks[5] == ARGV[16] then
        spent = tonumber(ks[6] or '0')
      end
      room = math.min(room, kmonthly - spent - kheld)
    end
    if ktotal > 0 then
      room = math.min(room, ktotal - tonumber(ks[7] or '0') - kheld)
    end
  end
  target = math.min(want, math.floor(math.max(room, 0) / share))
  if target < min then
    target = 0
    reason = 2
  end
end

if not cur then
  if target == 0 then
    return {0, reason}
  end
  if kbudget then
    kc = '1'
  end
end
move(target - free)
if amount == 0 then
  redis.call('HDEL', KEYS[2], lid)
else
  redis.call('HSET', KEYS[2], lid, int(amount) .. ' ' .. int(expiry) .. ' ' .. kc .. ' ' .. keyid)
end
return {target - free, reason}
