-- admit.lua: decide, atomically, whether one metered request may start.
-- It runs on every request's critical path: each command here is paid on
-- every admission, so it reads the account in one HMGET, reads the key's
-- state only when the key has a limit that needs it, and writes only what
-- an admission must (usage, the ledger and last_used are settlement's).
--
-- Limits live at three levels, the account, the key's project and the
-- credential (key); each is optional (0: none) and every one set must pass:
-- the strictest wins. The account's limits are read here; the key's and its
-- project's come in ARGV from the caller's key cache (so a change is seen
-- within the cache's lifetime). A project's state is kept as a key's is
-- (KEYS[9] has the fields of KEYS[7]); it is read and written here only
-- while the project has a limit.
--
-- KEYS[1]  gw:{acct:ID}:acct              hash: balance, held, daily, rpm, window,
--                                          tpm, conc, monthly, tw (token window),
--                                          leased, seats (escrowed by leases, lease.lua)
-- KEYS[2]  gw:{acct:ID}:holds             hash: request id -> hold: amount, lease expiry,
--                                          admission record (hold.lua)
-- KEYS[3]  gw:{acct:ID}:rl                zset: admitted request ids scored by admission time (unix ms)
-- KEYS[4]  gw:{acct:ID}:day:YYYYMMDD      string: settled spend of the current UTC day
-- KEYS[5]  gw:{acct:ID}:mon:YYYYMM        string: settled spend of the current UTC month
-- KEYS[6]  gw:{acct:ID}:krl:KEYID         zset: the key's admissions, as KEYS[3]
-- KEYS[7]  gw:{acct:ID}:ks:KEYID          hash: the key's state: held, open, tw, leased, seats,
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
-- ARGV[17] "1" when the request's project has a limit (KEYS[8], KEYS[9] are
--          its own), else "0" (absent: "0")
-- ARGV[18..24] the project's limits, in the order of ARGV[8..14]
--
-- KEYS[8]  gw:{acct:ID}:prl:PROJECTID     zset: the project's admissions, as KEYS[3]
-- KEYS[9]  gw:{acct:ID}:ps:PROJECTID      hash: the project's state, as KEYS[7]
--
-- Returns {outcome, retry_after_ms, level, limit, used, held, request}.
-- Outcome: 0 admitted, 1 rate limited, 2 daily limited, 3 insufficient
-- balance, 4 tokens per minute, 5 concurrency, 6 monthly limited, 7 total
-- (lifetime) limited, -1 no such account, -2 request id already held.
-- Level: 1 the account, 2 the key, 3 the project. retry_after_ms is -1 when waiting
-- cannot help (a token bound above the limit itself). On a refusal the
-- last four are the refusing limit's amounts, for the client's message:
-- the limit; what is used of it (settled); what open requests hold of
-- it; what this request would take. In nano-USD for a budget (the balance:
-- limit is the balance, used 0), tokens for tokens per minute, requests
-- for the rate (used: admissions in the window; held 0) and concurrency
-- (used: requests in flight; held 0); request is 1 for those two. All 0
-- when admitted.
--
-- What leases escrow ("leased", lease.lua) counts as held in every spend
-- budget and in the balance, the project's ("leased" of KEYS[9]) in its
-- budgets: money leased to a sidecar is not spendable here. Likewise the
-- seats leases hold ("seats") count as requests in flight against the
-- account's, the key's and the project's concurrency limits, and the
-- slots and tokens they hold are in the rate logs and token windows.
--
-- Checks run kind by kind, the key, then the project, then the account:
-- concurrency, rate,
-- tokens per minute, daily, monthly, total spend, then the balance.
--
-- Tokens per minute count over a rolling window of 5 s buckets (bucket
-- floor(now / 5 s)): a bucket counts the tokens of the requests admitted
-- in it, open ones at their token bound ("held"), settled ones at what
-- they used ("settled"; settle.lua moves a request from one to the other).
-- The window is every bucket that ended less than 60 s ago: 12 or 13
-- buckets, 60 to 65 s. A request is admitted only if the window's
-- settled + held + its bound stays within the limit. So any 60 s of
-- admissions [t, t + 60 s) lies in buckets that were all in the window of
-- the last request admitted in it, and the requests admitted in any 60 s
-- use at most tpm tokens (unless a reply exceeds its bound, as for holds).
-- The window lives in one hash field, "tw": "bucket settled held ..."
-- triples, pruned of old buckets on each admission (at most 13 triples).
--
-- The admitted request's record is prefixed with what was counted, so that
-- settlement undoes exactly that: {"tb":bound,"ta":bucket counted at the
-- account (0: none),"tk":bucket counted at the key (0: none),"kc":1 when
-- the key's held/open were counted (it had a limit that needs them),
-- ... the caller's fields}; where the project's state was counted,
-- ',"tp":bucket counted at the project (0: none),"pc":1' follows "kc".
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
local hasproj = ARGV[17] == '1'
local prpm, pwindow, ptpm, pconc, pdaily, pmonthly, ptotal = 0, 0, 0, 0, 0, 0, 0
if hasproj then
  prpm, pwindow, ptpm, pconc = tonumber(ARGV[18]), tonumber(ARGV[19]), tonumber(ARGV[20]), tonumber(ARGV[21])
  pdaily, pmonthly, ptotal = tonumber(ARGV[22]), tonumber(ARGV[23]), tonumber(ARGV[24])
end
local BUCKET = 5000
local bucket = math.floor(now / BUCKET)
-- The oldest bucket in the window: the first to end after now - 60 s.
local oldest = math.floor((now - 60000) / BUCKET)
local ACCOUNT, KEY, PROJECT = 1, 2, 3

local acct = redis.call('HMGET', KEYS[1], 'balance', 'held', 'daily', 'rpm', 'window', 'tpm', 'conc', 'monthly', 'tw', 'leased', 'seats')
if not acct[1] then
  return {-1, 0, 0, 0, 0, 0, 0}
end
local balance = tonumber(acct[1])
local held = tonumber(acct[2] or '0')
local daily = tonumber(acct[3] or '0')
local rpm = tonumber(acct[4] or '0')
local window = tonumber(acct[5] or '0')
local tpm = tonumber(acct[6] or '0')
local conc = tonumber(acct[7] or '0')
local monthly = tonumber(acct[8] or '0')
-- Leases are escrow: counted as held in every budget and the balance.
held = held + tonumber(acct[10] or '0')

if not haskey then
  krpm, kwindow, ktpm, kconc, kdaily, kmonthly, ktotal = 0, 0, 0, 0, 0, 0, 0
end

-- A key's or a project's state hash (KEYS[7], KEYS[9]): its held, open,
-- token window, spend today, this month and in total, and what its leases
-- escrow and seat (lease.lua's kc and pc).
local function readState(key)
  local st = redis.call('HMGET', key, 'held', 'open', 'tw', 'dd', 'dc', 'md', 'mc', 'tc', 'leased', 'seats')
  local day, mon = 0, 0
  if st[4] == today then
    day = tonumber(st[5] or '0')
  end
  if st[6] == month then
    mon = tonumber(st[7] or '0')
  end
  return tonumber(st[1] or '0'), tonumber(st[2] or '0'), st[3], day, mon,
    tonumber(st[8] or '0'), tonumber(st[9] or '0'), tonumber(st[10] or '0')
end

-- The key's state, read only when one of its limits needs it.
-- Its in-flight counts (held, open) are kept only while it has such a
-- limit; the record says whether they were, for settlement to undo.
local kcount = ktpm > 0 or kconc > 0 or kdaily > 0 or kmonthly > 0 or ktotal > 0
local kheld, kopen, ktok, kday, kmon, kall, kleased, kseats = 0, 0, nil, 0, 0, 0, 0, 0
if kcount then
  kheld, kopen, ktok, kday, kmon, kall, kleased, kseats = readState(KEYS[7])
end

-- The project's state, read only when it has a limit (all of them need
-- its in-flight counts or its spend, but the rate).
local pcount = ptpm > 0 or pconc > 0 or pdaily > 0 or pmonthly > 0 or ptotal > 0
local pheld, popen, ptok, pday, pmon, pall, pleased, pseats = 0, 0, nil, 0, 0, 0, 0, 0
if pcount then
  pheld, popen, ptok, pday, pmon, pall, pleased, pseats = readState(KEYS[9])
end

-- A token window ("tw") read: its buckets still in the window, each
-- {bucket, settled, held}, and their sums.
local function tokenWindow(v)
  local w, settled, open = {}, 0, 0
  if v then
    for b, st, h in string.gmatch(v, '(%d+) (%d+) (%d+)') do
      b = tonumber(b)
      if b >= oldest then
        st, h = tonumber(st), tonumber(h)
        w[#w + 1] = {b, st, h}
        settled, open = settled + st, open + h
      end
    end
  end
  return w, settled, open
end

-- The wait until enough of window w has left it for a bound of need more
-- tokens to fit under the limit (over by over tokens now).
local function tokenWait(w, over)
  table.sort(w, function(x, y) return x[1] < y[1] end)
  for _, e in ipairs(w) do
    over = over - e[2] - e[3]
    if over <= 0 then
      -- Bucket e leaves the window 60 s after it ends.
      return math.max((e[1] + 1) * BUCKET + 60000 - now, 1)
    end
  end
  return (bucket + 1) * BUCKET + 60000 - now
end

-- Window w with bound added to this bucket's held tokens, as a "tw" value.
local function tokenWindowAdd(w)
  local found = false
  local out = {}
  for _, e in ipairs(w) do
    if e[1] == bucket then
      e[3] = e[3] + bound
      found = true
    end
    out[#out + 1] = int(e[1]) .. ' ' .. int(e[2]) .. ' ' .. int(e[3])
  end
  if not found then
    out[#out + 1] = int(bucket) .. ' 0 ' .. int(bound)
  end
  return table.concat(out, ' ')
end

-- 1. Concurrency: requests in flight are the open holds, and the seats
-- leases hold (free, or taken by a request not recorded yet).
if kconc > 0 and kopen + kseats + 1 > kconc then
  return {5, 1000, KEY, kconc, kopen + kseats, 0, 1}
end
if pconc > 0 and popen + pseats + 1 > pconc then
  return {5, 1000, PROJECT, pconc, popen + pseats, 0, 1}
end
if conc > 0 then
  local inflight = redis.call('HLEN', KEYS[2]) + tonumber(acct[11] or '0')
  if inflight + 1 > conc then
    return {5, 1000, ACCOUNT, conc, inflight, 0, 1}
  end
end

-- 2. Rate limit: at most rpm*window admissions in any window minutes.
-- Returns the wait in ms when the log is full, else nil; and the limit
-- and the admissions in the window.
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
    return nil, limit, n
  end
  -- Once the (n-limit+1) oldest admissions have left, one more fits; the
  -- last of them to leave is the one at index n-limit.
  local e = redis.call('ZRANGE', log, int(n - limit), int(n - limit), 'WITHSCORES')
  local retry = tonumber(e[2]) + span - now
  if retry < 1000 then
    retry = 1000
  end
  return retry, limit, n
end
if krpm > 0 then
  local wait, limit, n = rateWait(KEYS[6], krpm, kwindow)
  if wait then
    return {1, wait, KEY, limit, n, 0, 1}
  end
end
if prpm > 0 then
  local wait, limit, n = rateWait(KEYS[8], prpm, pwindow)
  if wait then
    return {1, wait, PROJECT, limit, n, 0, 1}
  end
end
if rpm > 0 then
  local wait, limit, n = rateWait(KEYS[3], rpm, window)
  if wait then
    return {1, wait, ACCOUNT, limit, n, 0, 1}
  end
end

-- 3. Tokens per minute: the window's settled + held plus this request's
-- bound.
local kwin, win
if ktpm > 0 then
  local w, st, h = tokenWindow(ktok)
  if bound > ktpm then
    return {4, -1, KEY, ktpm, st, h, bound}
  end
  if st + h + bound > ktpm then
    return {4, tokenWait(w, st + h + bound - ktpm), KEY, ktpm, st, h, bound}
  end
  kwin = w
end
local pwin
if ptpm > 0 then
  local w, st, h = tokenWindow(ptok)
  if bound > ptpm then
    return {4, -1, PROJECT, ptpm, st, h, bound}
  end
  if st + h + bound > ptpm then
    return {4, tokenWait(w, st + h + bound - ptpm), PROJECT, ptpm, st, h, bound}
  end
  pwin = w
end
if tpm > 0 then
  local w, st, h = tokenWindow(acct[9])
  if bound > tpm then
    return {4, -1, ACCOUNT, tpm, st, h, bound}
  end
  if st + h + bound > tpm then
    return {4, tokenWait(w, st + h + bound - tpm), ACCOUNT, tpm, st, h, bound}
  end
  win = w
end

-- 4. Spend budgets: settled in the window + open holds (and leases) + this hold.
local kheldOnly, pheldOnly = kheld, pheld
kheld = kheld + kleased
pheld = pheld + pleased
if kdaily > 0 and kday + kheld + hold > kdaily then
  return {2, 0, KEY, kdaily, kday, kheld, hold}
end
if pdaily > 0 and pday + pheld + hold > pdaily then
  return {2, 0, PROJECT, pdaily, pday, pheld, hold}
end
if daily > 0 then
  local spent = tonumber(redis.call('GET', KEYS[4]) or '0')
  if spent + held + hold > daily then
    return {2, 0, ACCOUNT, daily, spent, held, hold}
  end
end
if kmonthly > 0 and kmon + kheld + hold > kmonthly then
  return {6, 0, KEY, kmonthly, kmon, kheld, hold}
end
if pmonthly > 0 and pmon + pheld + hold > pmonthly then
  return {6, 0, PROJECT, pmonthly, pmon, pheld, hold}
end
if monthly > 0 then
  local spent = tonumber(redis.call('GET', KEYS[5]) or '0')
  if spent + held + hold > monthly then
    return {6, 0, ACCOUNT, monthly, spent, held, hold}
  end
end
if ktotal > 0 and kall + kheld + hold > ktotal then
  return {7, 0, KEY, ktotal, kall, kheld, hold}
end
if ptotal > 0 and pall + pheld + hold > ptotal then
  return {7, 0, PROJECT, ptotal, pall, pheld, hold}
end

-- 5. Balance not yet promised to open holds.
if balance - held < hold then
  return {3, 0, ACCOUNT, balance, 0, held, hold}
end

-- 6. Admit: hold the worst case, with its lease and admission record in one
-- field (HSETNX refuses an id already held, before anything is written).
local ta, tk, kc = 0, 0, 0
if tpm > 0 then
  ta = bucket
end
if ktpm > 0 then
  tk = bucket
end
if kcount then
  kc = 1
end
local record = string.format('{"tb":%d,"ta":%d,"tk":%d,"kc":%d', bound, ta, tk, kc)
local tp = 0
if ptpm > 0 then
  tp = bucket
end
if pcount then
  record = record .. string.format(',"tp":%d,"pc":1', tp)
end
local rest = string.sub(ARGV[5], 2)
if rest ~= '}' then
  rest = ',' .. rest
end
record = record .. rest
if redis.call('HSETNX', KEYS[2], req, hold_format(hold, now + ttl, record, '')) == 0 then
  return {-2, 0, 0, 0, 0, 0, 0}
end
redis.call('HINCRBY', KEYS[1], 'held', int(hold))
kheld = kheldOnly
pheld = pheldOnly
if ta > 0 then
  redis.call('HSET', KEYS[1], 'tw', tokenWindowAdd(win))
end
if kcount then
  if tk > 0 then
    redis.call('HSET', KEYS[7], 'held', int(kheld + hold), 'open', int(kopen + 1),
      'tw', tokenWindowAdd(kwin))
  else
    redis.call('HSET', KEYS[7], 'held', int(kheld + hold), 'open', int(kopen + 1))
  end
end
if pcount then
  if tp > 0 then
    redis.call('HSET', KEYS[9], 'held', int(pheld + hold), 'open', int(popen + 1),
      'tw', tokenWindowAdd(pwin))
  else
    redis.call('HSET', KEYS[9], 'held', int(pheld + hold), 'open', int(popen + 1))
  end
end
if prpm > 0 then
  redis.call('ZADD', KEYS[8], int(now), req)
  redis.call('PEXPIRE', KEYS[8], int(math.max(pwindow, 1) * 60000))
end
if rpm > 0 then
  redis.call('ZADD', KEYS[3], int(now), req)
  redis.call('PEXPIRE', KEYS[3], int(math.max(window, 1) * 60000))
end
if krpm > 0 then
  redis.call('ZADD', KEYS[6], int(now), req)
  redis.call('PEXPIRE', KEYS[6], int(math.max(kwindow, 1) * 60000))
end
return {0, 0, 0, 0, 0, 0, 0}
