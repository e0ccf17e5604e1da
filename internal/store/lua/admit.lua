-- admit.lua: decide, atomically, whether one metered request may start.
-- It runs on every request's critical path: each command here is paid on
-- every admission, so it reads the account in one HMGET, reads the key's
-- state only when the key has a limit that needs it, and writes only what
-- an admission must (usage, the ledger and last_used are settlement's).
--
-- Limits live at two levels, the account and the credential (key); each is
-- optional (0: none) and every one set must pass: the strictest wins. The
-- account's limits are read here; the key's come in ARGV from the caller's
-- key cache (so a change is seen within the cache's lifetime).
--
-- KEYS[1]  gw:{acct:ID}:acct              hash: balance, held, daily, rpm, window,
--                                          tpm, conc, monthly, tok ("minute tokens")
-- KEYS[2]  gw:{acct:ID}:holds             hash: request id -> hold: amount, lease expiry,
--                                          admission record (hold.lua)
-- KEYS[3]  gw:{acct:ID}:rl                zset: admitted request ids scored by admission time (unix ms)
-- KEYS[4]  gw:{acct:ID}:day:YYYYMMDD      string: settled spend of the current UTC day
-- KEYS[5]  gw:{acct:ID}:mon:YYYYMM        string: settled spend of the current UTC month
-- KEYS[6]  gw:{acct:ID}:krl:KEYID         zset: the key's admissions, as KEYS[3]
-- KEYS[7]  gw:{acct:ID}:ks:KEYID          hash: the key's state: held, open, tok,
--                                          dd/dc/dr (day stamp, spend, requests),
--                                          md/mc/mr (month), tc/tr (all time)
--
-- ARGV[1]  now, unix ms, from the caller's clock (never Redis TIME)
-- ARGV[2]  request id
-- ARGV[3]  hold: worst-case cost of the request, nano-USD
-- ARGV[4]  hold lease, ms: the sidecar renews it while the request runs
-- ARGV[5]  admission record: what the sweeper needs to settle the request
--          should its sidecar die (key id, model, start time), JSON object
-- ARGV[6]  token bound: the most tokens (input + output) the request can use
-- ARGV[7]  "1" when the request has a key (KEYS[6], KEYS[7] are its own), else "0"
-- ARGV[8..14]  the key's limits: rpm, window minutes, tpm, concurrency,
--          daily, monthly and total (lifetime) spend in nano-USD; 0: none
-- ARGV[15] the UTC day, YYYYMMDD
-- ARGV[16] the UTC month, YYYYMM
--
-- Returns {outcome, retry_after_ms, level}. Outcome: 0 admitted,
-- 1 rate limited, 2 daily limited, 3 insufficient balance, 4 tokens per
-- minute, 5 concurrency, 6 monthly limited, 7 total (lifetime) limited,
-- -1 no such account, -2 request id already held. Level: 1 the account,
-- 2 the key. retry_after_ms is -1 when waiting cannot help (a token bound
-- above the limit itself).
--
-- Checks run kind by kind, the key before the account: concurrency, rate,
-- tokens per minute, daily, monthly, total spend, then the balance.
--
-- Tokens per minute count per UTC minute (floor(now / 60 s)): the token
-- bounds of the requests admitted in it, each replaced by the tokens it
-- used when it settles (settle.lua). A request is admitted only if the
-- minute's count plus its bound stays within the limit, so the requests
-- admitted in one minute never use more than tpm tokens (unless a reply
-- exceeds its bound, as for holds); a span of 60 s overlaps two minutes, so
-- it may see up to 2 × tpm.
--
-- The admitted request's record is prefixed with what was counted, so that
-- settlement undoes exactly that: {"tb":bound,"ta":minute counted at the
-- account (0: none),"tk":minute counted at the key (0: none),"kc":1 when
-- the key's held/open were counted (it had a limit that needs them),
-- ... the caller's fields}.
--
-- A settled id is not looked for: request ids are made unique by the
-- sidecar (a random per-process prefix and a sequence), so one that settled
-- never comes back, and a hold is the only thing settlement acts on.
--
-- Expired holds (their sidecar died) are never released here: the
-- background sweeper (sweep.lua) settles them as interrupted at their last
-- checkpoint, so a crashed request is charged rather than dropped; until
-- then they count as in flight and as held.
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
local bound = tonumber(ARGV[6])
local haskey = ARGV[7] == '1'
local krpm, kwindow, ktpm, kconc = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local kdaily, kmonthly, ktotal = tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14])
local today, month = ARGV[15], ARGV[16]
local minute = math.floor(now / 60000)
local ACCOUNT, KEY = 1, 2

local acct = redis.call('HMGET', KEYS[1], 'balance', 'held', 'daily', 'rpm', 'window', 'tpm', 'conc', 'monthly', 'tok')
if not acct[1] then
  return {-1, 0, 0}
end
local balance = tonumber(acct[1])
local held = tonumber(acct[2] or '0')
local daily = tonumber(acct[3] or '0')
local rpm = tonumber(acct[4] or '0')
local window = tonumber(acct[5] or '0')
local tpm = tonumber(acct[6] or '0')
local conc = tonumber(acct[7] or '0')
local monthly = tonumber(acct[8] or '0')

if not haskey then
  krpm, kwindow, ktpm, kconc, kdaily, kmonthly, ktotal = 0, 0, 0, 0, 0, 0, 0
end

-- The key's state, read only when one of its limits needs it.
-- Its in-flight counts (held, open) are kept only while it has such a
-- limit; the record says whether they were, for settlement to undo.
local kcount = ktpm > 0 or kconc > 0 or kdaily > 0 or kmonthly > 0 or ktotal > 0
local kheld, kopen, ktok, kday, kmon, kall = 0, 0, nil, 0, 0, 0
if kcount then
  local ks = redis.call('HMGET', KEYS[7], 'held', 'open', 'tok', 'dd', 'dc', 'md', 'mc', 'tc')
  kheld = tonumber(ks[1] or '0')
  kopen = tonumber(ks[2] or '0')
  ktok = ks[3]
  if ks[4] == today then
    kday = tonumber(ks[5] or '0')
  end
  if ks[6] == month then
    kmon = tonumber(ks[7] or '0')
  end
  kall = tonumber(ks[8] or '0')
end

-- The tokens counted in this minute so far, from a "minute tokens" value.
local function minuteTokens(v)
  if not v then
    return 0
  end
  local m, n = string.match(v, '^(%d+) (%d+)$')
  if tonumber(m) ~= minute then
    return 0
  end
  return tonumber(n)
end

-- 1. Concurrency: requests in flight are the open holds.
if kconc > 0 and kopen + 1 > kconc then
  return {5, 1000, KEY}
end
if conc > 0 and redis.call('HLEN', KEYS[2]) + 1 > conc then
  return {5, 1000, ACCOUNT}
end

-- 2. Rate limit: at most rpm*window admissions in any window minutes.
-- Returns the wait in ms when the log is full, else nil.
local function rateWait(log, r, w)
  if w < 1 then
    w = 1
  end
  local limit = r * w
  local span = w * 60000
  -- An admission at t is inside the window while t > now - span.
  redis.call('ZREMRANGEBYSCORE', log, '-inf', int(now - span))
  local n = redis.call('ZCARD', log)
  if n < limit then
    return nil
  end
  -- Once the (n-limit+1) oldest admissions have left, one more fits; the
  -- last of them to leave is the one at index n-limit.
  local e = redis.call('ZRANGE', log, int(n - limit), int(n - limit), 'WITHSCORES')
  local retry = tonumber(e[2]) + span - now
  if retry < 1000 then
    retry = 1000
  end
  return retry
end
if krpm > 0 then
  local wait = rateWait(KEYS[6], krpm, kwindow)
  if wait then
    return {1, wait, KEY}
  end
end
if rpm > 0 then
  local wait = rateWait(KEYS[3], rpm, window)
  if wait then
    return {1, wait, ACCOUNT}
  end
end

-- 3. Tokens per minute: this minute's count plus this request's bound.
local toNextMinute = (minute + 1) * 60000 - now
local ktokens, tokens = 0, 0
if ktpm > 0 then
  ktokens = minuteTokens(ktok)
  if bound > ktpm then
    return {4, -1, KEY}
  end
  if ktokens + bound > ktpm then
    return {4, toNextMinute, KEY}
  end
end
if tpm > 0 then
  tokens = minuteTokens(acct[9])
  if bound > tpm then
    return {4, -1, ACCOUNT}
  end
  if tokens + bound > tpm then
    return {4, toNextMinute, ACCOUNT}
  end
end

-- 4. Spend budgets: settled in the window + open holds + this hold.
if kdaily > 0 and kday + kheld + hold > kdaily then
  return {2, 0, KEY}
end
if daily > 0 then
  local spent = tonumber(redis.call('GET', KEYS[4]) or '0')
  if spent + held + hold > daily then
    return {2, 0, ACCOUNT}
  end
end
if kmonthly > 0 and kmon + kheld + hold > kmonthly then
  return {6, 0, KEY}
end
if monthly > 0 then
  local spent = tonumber(redis.call('GET', KEYS[5]) or '0')
  if spent + held + hold > monthly then
    return {6, 0, ACCOUNT}
  end
end
if ktotal > 0 and kall + kheld + hold > ktotal then
  return {7, 0, KEY}
end

-- 5. Balance not yet promised to open holds.
if balance - held < hold then
  return {3, 0, ACCOUNT}
end

-- 6. Admit: hold the worst case, with its lease and admission record in one
-- field (HSETNX refuses an id already held, before anything is written).
local ta, tk, kc = 0, 0, 0
if tpm > 0 then
  ta = minute
end
if ktpm > 0 then
  tk = minute
end
if kcount then
  kc = 1
end
local record = string.format('{"tb":%d,"ta":%d,"tk":%d,"kc":%d', bound, ta, tk, kc)
local rest = string.sub(ARGV[5], 2)
if rest ~= '}' then
  rest = ',' .. rest
end
record = record .. rest
if redis.call('HSETNX', KEYS[2], req, hold_format(hold, now + ttl, record, '')) == 0 then
  return {-2, 0, 0}
end
redis.call('HINCRBY', KEYS[1], 'held', int(hold))
if ta > 0 then
  redis.call('HSET', KEYS[1], 'tok', int(minute) .. ' ' .. int(tokens + bound))
end
if kcount then
  if tk > 0 then
    redis.call('HSET', KEYS[7], 'held', int(kheld + hold), 'open', int(kopen + 1),
      'tok', int(minute) .. ' ' .. int(ktokens + bound))
  else
    redis.call('HSET', KEYS[7], 'held', int(kheld + hold), 'open', int(kopen + 1))
  end
end
if rpm > 0 then
  redis.call('ZADD', KEYS[3], int(now), req)
  redis.call('PEXPIRE', KEYS[3], int(math.max(window, 1) * 60000))
end
if krpm > 0 then
  redis.call('ZADD', KEYS[6], int(now), req)
  redis.call('PEXPIRE', KEYS[6], int(math.max(kwindow, 1) * 60000))
end
return {0, 0, 0}
