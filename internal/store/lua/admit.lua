-- admit.lua: decide, atomically, whether one metered request may start.
-- It runs on every request's critical path: each command here is paid on
-- every admission, so it reads the account in one HMGET and writes only
-- what an admission must (usage, the ledger and last_used are settlement's).
--
-- KEYS[1]  gw:{acct:ID}:acct              hash: balance, held, daily, rpm, window, sweep_at, ...
-- KEYS[2]  gw:{acct:ID}:holds             hash: request id -> held amount (nano-USD)
-- KEYS[3]  gw:{acct:ID}:holdexp           zset: request id scored by hold expiry (unix ms)
-- KEYS[4]  gw:{acct:ID}:rl                zset: admitted request ids scored by admission time (unix ms)
-- KEYS[5]  gw:{acct:ID}:day:YYYYMMDD      string: settled spend of the current UTC day
-- KEYS[6]  gw:{acct:ID}:settled:REQID     string: present once REQID has settled
--
-- ARGV[1]  now, unix ms, from the caller's clock (never Redis TIME)
-- ARGV[2]  request id
-- ARGV[3]  hold: worst-case cost of the request, nano-USD
-- ARGV[4]  hold lifetime, ms
-- ARGV[5]  sweep interval, ms: with no hold open, the next sweep is due this
--          long after the last
--
-- Returns {outcome, retry_after_ms, expired_holds}. Outcome: 0 admitted,
-- 1 rate limited, 2 daily limited, 3 insufficient balance, -1 no such account,
-- -2 request id already held or settled.
--
-- Expired holds (their sidecar died; they will never settle) are released
-- by an amortised sweep: only when the account's sweep_at has passed. A
-- sweep sets sweep_at to the expiry of the earliest hold still open (one
-- interval on when none is), so most admissions skip it, at the cost of one
-- more field in the HMGET. The same sweep is sweep.lua, for a background
-- sweeper; the two must stay alike.
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
local interval = tonumber(ARGV[5])

local acct = redis.call('HMGET', KEYS[1], 'balance', 'held', 'daily', 'rpm', 'window', 'sweep_at')
if not acct[1] then
  return {-1, 0, 0}
end
local balance = tonumber(acct[1])
local held = tonumber(acct[2] or '0')
local daily = tonumber(acct[3] or '0')
local rpm = tonumber(acct[4] or '0')
local window = tonumber(acct[5] or '0')

-- 1. The amortised sweep, whatever the outcome.
local swept = 0
if now >= tonumber(acct[6] or '0') then
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
  swept = #expired
  -- The next sweep is due when the earliest remaining hold expires, or
  -- one interval on when none is open.
  local next = now + interval
  local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  if first[2] then
    next = tonumber(first[2])
  end
  redis.call('HSET', KEYS[1], 'held', int(held), 'sweep_at', int(next))
end

-- A request id that already settled is not admitted again (one still held
-- is caught by HSETNX below).
if redis.call('EXISTS', KEYS[6]) == 1 then
  return {-2, 0, swept}
end

-- 2. Rate limit: at most rpm*window admissions in any window minutes.
local span = 0
if rpm > 0 then
  if window < 1 then
    window = 1
  end
  local limit = rpm * window
  span = window * 60000
  -- An admission at t is inside the window while t > now - span.
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', int(now - span))
  local n = redis.call('ZCARD', KEYS[4])
  if n >= limit then
    -- Once the (n-limit+1) oldest admissions have left, one more fits; the
    -- last of them to leave is the one at index n-limit.
    local e = redis.call('ZRANGE', KEYS[4], int(n - limit), int(n - limit), 'WITHSCORES')
    local retry = tonumber(e[2]) + span - now
    if retry < 1000 then
      retry = 1000
    end
    return {1, retry, swept}
  end
end

-- 3. Daily spend: settled today + open holds + this hold.
if daily > 0 then
  local spent = tonumber(redis.call('GET', KEYS[5]) or '0')
  if spent + held + hold > daily then
    return {2, 0, swept}
  end
end

-- 4. Balance not yet promised to open holds.
if balance - held < hold then
  return {3, 0, swept}
end

-- 5. Admit: hold the worst case (HSETNX refuses an id already held, before
-- anything is written) and log the admission.
if redis.call('HSETNX', KEYS[2], req, int(hold)) == 0 then
  return {-2, 0, swept}
end
redis.call('ZADD', KEYS[3], int(now + ttl), req)
redis.call('HINCRBY', KEYS[1], 'held', int(hold))
if rpm > 0 then
  redis.call('ZADD', KEYS[4], int(now), req)
  redis.call('PEXPIRE', KEYS[4], int(span))
end
return {0, 0, swept}
