-- admit.lua: decide, atomically, whether one metered request may start.
-- It runs on every request's critical path: each command here is paid on
-- every admission, so it reads the account in one HMGET and writes only
-- what an admission must (usage, the ledger and last_used are settlement's).
--
-- KEYS[1]  gw:{acct:ID}:acct              hash: balance, held, daily, rpm, window, ...
-- KEYS[2]  gw:{acct:ID}:holds             hash: request id -> hold: amount, lease expiry,
--                                          admission record (hold.lua)
-- KEYS[3]  gw:{acct:ID}:rl                zset: admitted request ids scored by admission time (unix ms)
-- KEYS[4]  gw:{acct:ID}:day:YYYYMMDD      string: settled spend of the current UTC day
--
-- ARGV[1]  now, unix ms, from the caller's clock (never Redis TIME)
-- ARGV[2]  request id
-- ARGV[3]  hold: worst-case cost of the request, nano-USD
-- ARGV[4]  hold lease, ms: the sidecar renews it while the request runs
-- ARGV[5]  admission record: what the sweeper needs to settle the request
--          should its sidecar die (key id, model, start time), JSON
--
-- Returns {outcome, retry_after_ms}. Outcome: 0 admitted,
-- 1 rate limited, 2 daily limited, 3 insufficient balance, -1 no such account,
-- -2 request id already held.
--
-- A settled id is not looked for: request ids are made unique by the
-- sidecar (a random per-process prefix and a sequence), so one that settled
-- never comes back, and a hold is the only thing settlement acts on.
--
-- Expired holds (their sidecar died) are never released here: the
-- background sweeper (sweep.lua) settles them as interrupted at their last
-- checkpoint, so a crashed request is charged rather than dropped.
--
-- Money is compared as Lua numbers (doubles): exact up to 2^53 nano-USD. All
-- writes go through int() so Redis always receives plain integer strings.

local function int(n)
  return string.format('%d', n)
end

local now = tonumber(ARGV[1])
local req = ARGV[2]
local hold = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])

local acct = redis.call('HMGET', KEYS[1], 'balance', 'held', 'daily', 'rpm', 'window')
if not acct[1] then
  return {-1, 0}
end
local balance = tonumber(acct[1])
local held = tonumber(acct[2] or '0')
local daily = tonumber(acct[3] or '0')
local rpm = tonumber(acct[4] or '0')
local window = tonumber(acct[5] or '0')

-- 2. Rate limit: at most rpm*window admissions in any window minutes.
local span = 0
if rpm > 0 then
  if window < 1 then
    window = 1
  end
  local limit = rpm * window
  span = window * 60000
  -- An admission at t is inside the window while t > now - span.
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', int(now - span))
  local n = redis.call('ZCARD', KEYS[3])
  if n >= limit then
    -- Once the (n-limit+1) oldest admissions have left, one more fits; the
    -- last of them to leave is the one at index n-limit.
    local e = redis.call('ZRANGE', KEYS[3], int(n - limit), int(n - limit), 'WITHSCORES')
    local retry = tonumber(e[2]) + span - now
    if retry < 1000 then
      retry = 1000
    end
    return {1, retry}
  end
end

-- 3. Daily spend: settled today + open holds + this hold.
if daily > 0 then
  local spent = tonumber(redis.call('GET', KEYS[4]) or '0')
  if spent + held + hold > daily then
    return {2, 0}
  end
end

-- 4. Balance not yet promised to open holds.
if balance - held < hold then
  return {3, 0}
end

-- 5. Admit: hold the worst case, with its lease and admission record in one
-- field (HSETNX refuses an id already held, before anything is written).
if redis.call('HSETNX', KEYS[2], req, hold_format(hold, now + ttl, ARGV[5], '')) == 0 then
  return {-2, 0}
end
redis.call('HINCRBY', KEYS[1], 'held', int(hold))
if rpm > 0 then
  redis.call('ZADD', KEYS[3], int(now), req)
  redis.call('PEXPIRE', KEYS[3], int(span))
end
return {0, 0}
