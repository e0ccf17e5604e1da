-- lease.lua: take, resize, return or sweep one escrow lease: a slice of an
-- account's spendable money, and of its request rate and concurrency, that
-- one sidecar admits requests against in memory (docs/billing.md, Leases).
--
-- A lease is one field of the account's leases hash (leasefield.lua):
--   "<amount> <expiry> <kc> <key id> <rl> <lo> <hi> <seats> <sl> <tokens> <tbucket> <tl>[ <pc> <project id>]"
-- amount: the escrow still in the lease, nano-USD: the sidecar's free
-- amount plus the holds it admitted whose record (record.lua) has not
-- landed yet; expiry: unix ms, renewed by the sidecar, after which the
-- sweeper returns the amount; kc: "1" when the lease counts against the
-- key's spend budgets (the key has one), else "0".
-- rl, lo, hi: the lease's request slots (absent in leases written before
-- slots: rl 0). rl says which rate logs hold its placeholders: 1 the
-- account's (KEYS[7]), 2 the key's (KEYS[8]), 3 both, 0 none (no rpm
-- limit: the lease admits at any rate). Slot n is the member "L:<lease
-- id>:<n>" of each such log: a placeholder, counted by admit.lua like an
-- admitted request. Slots below lo were used before the last renewal (their
-- placeholders are replaced by the requests' ids by record.lua, by name);
-- [lo, hi) were free at the last renewal or used since, all scored at that
-- renewal.
-- seats, sl: the lease's concurrency seats (absent in leases written
-- before seats: 0). sl says which concurrency limits they count against: 1
-- the account's, 2 the key's, 3 both, 0 none (no concurrency limit: no
-- seat needed). seats is the sidecar's free seats plus the requests it
-- admitted from them whose record (record.lua) or settlement (settle.lua)
-- has not landed yet; each of those moves one seat into the holds hash.
-- tokens, tbucket, tl: the lease's tokens per minute (absent in leases
-- written before them: 0). tl says which token windows ("tw", admit.lua)
-- hold them: 1 the account's, 2 the key's, 3 both, 0 none (no tpm limit).
-- tokens is the sidecar's free tokens plus the token bounds of the
-- requests it admitted from them since they were placed, not yet recorded
-- or settled: all counted as held in bucket tbucket of those windows. The
-- bucket is a future one, bucket(renewal + 10 s): a request may use them
-- only while bucket(now) <= tbucket, so each is counted in a bucket at
-- least as late as its admission's, as admit.lua counts it.
-- pc, project id: written only for a lease that counts against the key's
-- project at some level (absent: 0, none); pc is "1" when the lease counts
-- against the project's spend budgets (it has one). A lease's project
-- never changes: the caller names the project it was taken under, and
-- returns the lease when the key moves or the project's limits change.
-- The account's "leased" field is the sum of its leases' amounts, the
-- key state's "leased" the sum of those with kc = 1 and the project
-- state's "leased" of those with pc = 1: admit.lua and this script count
-- them as held. Likewise the account's "seats" is the sum of the seats of
-- its leases whose sl has bit 1, the key state's "seats" of those with
-- bit 2 and the project state's of those with bit 4: admit.lua and this
-- script count them as in flight.
--
-- KEYS[1]  gw:{acct:ID}:acct              hash: balance, held, leased, seats, daily,
--                                          monthly, rpm, window, tpm, conc, suspended,
--                                          tw (token window, admit.lua)
-- KEYS[2]  gw:{acct:ID}:leases            hash: lease id -> lease (above)
-- KEYS[3]  gw:{acct:ID}:ks:KEYID          hash: the key's state (admit.lua), leased, seats, tw
-- KEYS[4]  gw:{acct:ID}:day:YYYYMMDD      string: settled spend of the UTC day
-- KEYS[5]  gw:{acct:ID}:mon:YYYYMM        string: settled spend of the UTC month
-- KEYS[6]  gw:{acct:ID}:key:KEYID         hash: the key's metadata (revoked)
-- KEYS[7]  gw:{acct:ID}:rl                zset: the account's rate log (admit.lua)
-- KEYS[8]  gw:{acct:ID}:krl:KEYID         zset: the key's rate log (admit.lua)
-- KEYS[9]  gw:{acct:ID}:holds             hash: the account's holds (its requests in flight)
-- KEYS[10] gw:{acct:ID}:ps:PROJECTID      hash: the project's state (admit.lua), leased;
--                                          the lease's own project's when sweeping
-- KEYS[11] gw:{acct:ID}:prl:PROJECTID     zset: the project's rate log (admit.lua)
--
-- ARGV[1]  now, unix ms
-- ARGV[2]  the lease's new expiry, unix ms
-- ARGV[3]  lease id
-- ARGV[4]  key id
-- ARGV[5]  free: the sidecar's free amount of the lease; -1 to sweep: return
--          the lease only if it has expired (its sidecar stopped renewing)
-- ARGV[6]  want: the free amount the sidecar would like; 0 returns the lease
-- ARGV[7]  min: below this free amount no lease is kept
-- ARGV[8]  share: a lease's free amount is at most room / share, its free
--          slots at most the rate's room / share
-- ARGV[9..14]  the key's limits: rpm, tpm, concurrency, daily, monthly,
--          total (nano-USD); 0: none
-- ARGV[15] the UTC day, YYYYMMDD; ARGV[16] the UTC month, YYYYMM
-- ARGV[17] the key's rate window, minutes
-- ARGV[18] cursor: the sidecar's next slot number; every slot below it is
--          used, none at or above it is used until this call's reply
-- ARGV[19] the free slots the sidecar would like
-- ARGV[20] the least free slots worth a lease (of a rate-limited lease)
-- ARGV[21] the sidecar's free seats of the lease
-- ARGV[22] the free seats the sidecar would like
-- ARGV[23] the least free seats worth a lease (of a concurrency-limited lease)
-- ARGV[24] the sidecar's free tokens of the lease
-- ARGV[25] the free tokens the sidecar would like
-- ARGV[26] the least free tokens worth a lease (of a tpm-limited lease)
-- ARGV[27] "1" when the sidecar has called under this lease id before, else
--          "0" (absent: "0"): a lease it took that is missing was swept,
--          and is gone even when the sidecar has nothing of it free
-- ARGV[28] the key's project id when it has a limit, else "" (absent: ""):
--          for a lease already taken, the project it was taken under
--          (an error otherwise: KEYS[10] would name another's state)
-- ARGV[29..31] the project's daily, monthly and total budgets (nano-USD)
-- ARGV[32..34] the project's rpm, tpm and concurrency limits
-- ARGV[35] the project's rate window, minutes
--
-- The levels of rl, sl and tl (below) are bits: 1 the account, 2 the key,
-- 4 the key's project (its rate log KEYS[11], its in-flight count "open"
-- and "seats" and its token window "tw" in KEYS[10], kept as the key's
-- are). The project's slots, seats and tokens are placed, used and given
-- back as the key's; "3 both" below reads "each level whose bit is set".
--
-- room is the least, over the balance and each spend budget set (the
-- account's daily and monthly, the key's and its project's daily, monthly
-- and total), of
-- limit - spent - held - leased, with this lease's free amount added back.
-- The new free amount is min(want, floor(room / share)), or 0 when that is
-- below min, or when the lease may not be held: the account is missing or
-- suspended, the key is revoked, or the lease's kind changed (its key's
-- or its project's budgets, or which of the account, key and project have
-- a rate, a concurrency or a tokens-per-minute limit).
--
-- Slots: each renewal removes the lease's free placeholders ([cursor, hi))
-- and adds back min(wanted slots, floor(slot room / share)) scored now,
-- where slot room is the least, over the rate logs of the account and key
-- with an rpm limit, of rpm * window - admissions in the window (placeholders
-- of every lease included): so the log never holds more than admit.lua
-- admits, and a free slot never ages out of the window while it may be used.
-- Fewer than ARGV[20] returns the whole lease (reason 2). Returning removes
-- the free placeholders; the sweep removes [lo, hi).
--
-- Seats: each renewal sets the free seats to min(wanted seats,
-- floor(seat room / share)), where seat room is the least, over the account
-- and key with a concurrency limit, of limit - in flight - seats (the
-- account's in flight: its holds; the key's: its "open" count; seats of
-- every lease, with this lease's free seats added back): so in flight plus
-- seats never exceeds what admit.lua admits. Fewer than ARGV[23] returns
-- the whole lease (reason 2). Returning gives the free seats back; the
-- sweep gives back all the lease's seats.
--
-- Tokens: each renewal first takes the sidecar's free tokens out of the
-- lease's bucket (what is left there belongs to requests it admitted,
-- recorded later), then places min(wanted tokens, floor(token room /
-- share)) in bucket(now + 10 s), where token room is the least, over the
-- account's and key's tpm limits set, of tpm - (settled + held in the
-- window, future buckets included): so the window never counts more than
-- admit.lua admits. Fewer than ARGV[26] returns the whole lease (reason 2).
-- The sweep takes a dead lease's tokens out of its bucket.
--
-- Returns {delta, reason, hi, rl, seats delta, sl, tokens delta, tl,
-- tbucket}: delta is the change of the free amount (the
-- sidecar adds it to its own); reason 0 held, 1 not allowed a lease, 2 too
-- small, 3 no such account, 4 the lease is gone (swept: the sidecar must
-- drop its free amount and take a new lease under another id); hi: the
-- sidecar may use slots [cursor, hi), or -1: no rate limit, no slots needed;
-- rl: the rate logs the slots are in (above); seats delta: the change of
-- the free seats (the sidecar adds it to its own); sl: the limits the seats
-- count against (above; 0: no seat needed); tokens delta: the change of
-- the free tokens (the sidecar adds it to its own), usable while
-- bucket(now) <= tbucket; tl: the windows they are in (0: no tokens
-- needed). In sweep mode, {returned amount, 0, -1, 0, returned seats, 0,
-- returned tokens, 0, 0}.

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
local kwindow = tonumber(ARGV[17] or '0')
local cursor = tonumber(ARGV[18] or '0')
local wantSlots, minSlots = tonumber(ARGV[19] or '0'), tonumber(ARGV[20] or '0')
local fseats = tonumber(ARGV[21] or '0')
local wantSeats, minSeats = tonumber(ARGV[22] or '0'), tonumber(ARGV[23] or '0')
local ftok = tonumber(ARGV[24] or '0')
local wantTokens, minTokens = tonumber(ARGV[25] or '0'), tonumber(ARGV[26] or '0')
local taken = ARGV[27] == '1'
local project = ARGV[28] or ''
local pdaily, pmonthly, ptotal = tonumber(ARGV[29] or '0'), tonumber(ARGV[30] or '0'), tonumber(ARGV[31] or '0')
local prpm, ptpm, pconc = tonumber(ARGV[32] or '0'), tonumber(ARGV[33] or '0'), tonumber(ARGV[34] or '0')
local pwindow = tonumber(ARGV[35] or '0')
local pbudget = project ~= '' and (pdaily > 0 or pmonthly > 0 or ptotal > 0)
local BUCKET, TOKEN_LIFE = 5000, 10000
-- The oldest bucket in a token window (admit.lua).
local oldest = math.floor((now - 60000) / BUCKET)

local amount, exp, kc, rl, lo, hi, seats, sl = 0, 0, '0', 0, cursor, cursor, 0, 0
local tokens, tbucket, tl = 0, 0, 0
local pc, lproject = 0, ''
local cur = redis.call('HGET', KEYS[2], lid)
if cur then
  local l = lease_parse(cur)
  amount, exp, kc, seats, sl = l.amount, l.expiry, l.kc, l.seats, l.sl
  tokens, tbucket, tl = l.tokens, l.tbucket, l.tl
  pc, lproject = l.pc, l.project
  if l.slots then
    rl, lo, hi = l.rl, l.lo, l.hi
  end
end
-- KEYS[10] and KEYS[11] must be those of the project the lease counts
-- against: a caller names the project the lease was taken under.
if lproject ~= '' and lproject ~= project then
  return redis.error_reply('lease ' .. lid .. ' counts against project ' .. lproject .. ', not ' .. project)
end

-- The rate logs of levels rl (1 the account's, 2 the key's, 4 the
-- project's).
local function logs(levels)
  local out = {}
  for i, log in ipairs({KEYS[7], KEYS[8], KEYS[11]}) do
    if lease_has(levels, 2 ^ (i - 1)) then
      out[#out + 1] = log
    end
  end
  return out
end

-- Remove slots [from, to)'s placeholders from the logs of levels.
local function unslot(levels, from, to)
  for _, log in ipairs(logs(levels)) do
    local batch = {}
    for n = from, to - 1 do
      batch[#batch + 1] = 'L:' .. lid .. ':' .. int(n)
      if #batch == 1000 or n == to - 1 then
        redis.call('ZREM', log, unpack(batch))
        batch = {}
      end
    end
  end
end

-- Change the lease's amount by d (clamped at zero), and the sums with it.
local function move(d)
  local new = amount + d
  if new < 0 then
    new = 0
  end
  d = new - amount
  if d ~= 0 then
    lease_sum(KEYS[1], 'leased', d)
    if kc == '1' then
      lease_sum(KEYS[3], 'leased', d)
    end
    if pc == 1 then
      lease_sum(KEYS[10], 'leased', d)
    end
  end
  amount = new
end

-- Change the lease's seats by d (clamped at zero), and the seat sums of
-- the limits they count against with it.
local function reseat(d)
  local new = math.max(seats + d, 0)
  d = new - seats
  if d ~= 0 then
    if lease_has(sl, 1) then
      lease_sum(KEYS[1], 'seats', d)
    end
    if lease_has(sl, 2) then
      lease_sum(KEYS[3], 'seats', d)
    end
    if lease_has(sl, 4) then
      lease_sum(KEYS[10], 'seats', d)
    end
  end
  seats = new
end

-- Add d to bucket b's held tokens (clamped at zero) in the token windows
-- of levels (1 the account's, 2 the key's, 4 the project's), pruned of
-- buckets that left the window as admit.lua prunes them.
local function hold(levels, b, d)
  for i, key in ipairs({KEYS[1], KEYS[3], KEYS[10]}) do
    if lease_has(levels, 2 ^ (i - 1)) then
      local out, found = {}, false
      local v = redis.call('HGET', key, 'tw')
      if v then
        for bk, st, h in string.gmatch(v, '(%d+) (%d+) (%d+)') do
          bk, st, h = tonumber(bk), tonumber(st), tonumber(h)
          if bk >= oldest then
            if bk == b then
              h = math.max(h + d, 0)
              found = true
            end
            out[#out + 1] = int(bk) .. ' ' .. int(st) .. ' ' .. int(h)
          end
        end
      end
      if not found and d > 0 then
        out[#out + 1] = int(b) .. ' 0 ' .. int(d)
      end
      redis.call('HSET', key, 'tw', table.concat(out, ' '))
    end
  end
end

-- Settled + held tokens in a token window (future buckets included).
local function windowSum(key)
  local sum = 0
  local v = redis.call('HGET', key, 'tw')
  if v then
    for bk, st, h in string.gmatch(v, '(%d+) (%d+) (%d+)') do
      if tonumber(bk) >= oldest then
        sum = sum + tonumber(st) + tonumber(h)
      end
    end
  end
  return sum
end

-- Take n tokens (at most the lease's) out of the lease and its bucket.
local function untoken(n)
  n = math.min(n, tokens)
  if n > 0 then
    hold(tl, tbucket, -n)
    tokens = tokens - n
  end
  return n
end

if free < 0 then
  if cur and exp <= now then
    local a, s = amount, seats
    -- Its tokens, free or bounds of requests whose record never came.
    local tk = untoken(tokens)
    move(-amount)
    -- Its seats, free or taken by requests whose record never came: the
    -- sidecar is gone, and any request it admitted from them with it.
    reseat(-seats)
    -- The placeholders of slots free or used since the last renewal: the
    -- sidecar is gone, and any request it admitted from them with it.
    unslot(rl, lo, hi)
    redis.call('HDEL', KEYS[2], lid)
    return {a, 0, -1, 0, s, 0, tk, 0, 0}
  end
  return {0, 0, -1, 0, 0, 0, 0, 0, 0}
end
-- Swept: never made again under the same id, where the late records of
-- its requests would take their holds out of a lease that never held them.
if not cur and (taken or free > 0 or fseats > 0 or ftok > 0) then
  return {-free, 4, -1, 0, -fseats, 0, -ftok, 0, 0}
end
-- The free tokens leave their bucket; what is kept is placed again below,
-- in a later one.
if cur then
  untoken(ftok)
end
-- The free slots' placeholders leave; what is kept is added back below,
-- scored now.
if cur and hi > cursor then
  unslot(rl, math.max(cursor, lo), hi)
end

local acct = redis.call('HMGET', KEYS[1], 'balance', 'held', 'leased', 'daily', 'monthly', 'rpm', 'tpm', 'conc', 'suspended', 'window', 'seats')
-- Where a limit applies: bits 1 the account, 2 the key, 4 the project; 0
-- none.
local function levelsOf(accountLimit, keyLimit, projectLimit)
  local l = 0
  if accountLimit > 0 then
    l = 1
  end
  if keyLimit > 0 then
    l = l + 2
  end
  if project ~= '' and projectLimit > 0 then
    l = l + 4
  end
  return l
end
local rpm = tonumber(acct[6] or '0')
local levels = levelsOf(rpm, krpm, prpm)
local tpm = tonumber(acct[7] or '0')
local tokenLevels = levelsOf(tpm, ktpm, ptpm)
local conc = tonumber(acct[8] or '0')
local seatLevels = levelsOf(conc, kconc, pconc)
if not cur then
  rl = levels
  sl = seatLevels
  tl = tokenLevels
end
local reason = 0
local target = 0
local kbudget = kdaily > 0 or kmonthly > 0 or ktotal > 0
if not acct[1] then
  reason = 3
elseif acct[9] == '1' or (cur and (kc == '1') ~= kbudget) or rl ~= levels or sl ~= seatLevels
    or tl ~= tokenLevels or (cur and (pc == 1) ~= pbudget) then
  reason = 1
else
  local revoked = redis.call('HGET', KEYS[6], 'revoked')
  if revoked and revoked ~= '0' then
    reason = 1
  end
end

-- The room left in a rate log (admissions and placeholders in the window
-- counted), as admit.lua counts it.
local function rateRoom(log, r, w)
  if w < 1 then
    w = 1
  end
  redis.call('ZREMRANGEBYSCORE', log, '-inf', int(now - w * 60000))
  return r * w - redis.call('ZCARD', log)
end

-- The least room left in the spend budgets of a key's or a project's
-- state hash, its held and leased counted (this lease's free amount added
-- back when the lease counts there), as admit.lua counts them.
local function budgetRoom(state, counted, daily, monthly, total)
  local st = redis.call('HMGET', state, 'held', 'leased', 'dd', 'dc', 'md', 'mc', 'tc')
  local held = tonumber(st[1] or '0') + tonumber(st[2] or '0')
  if counted then
    held = held - free
  end
  -- Spend today and this month: the counters of the day and month held.
  local day, mon = 0, 0
  if st[3] == ARGV[15] then
    day = tonumber(st[4] or '0')
  end
  if st[5] == ARGV[16] then
    mon = tonumber(st[6] or '0')
  end
  local room = math.huge
  if daily > 0 then
    room = math.min(room, daily - day - held)
  end
  if monthly > 0 then
    room = math.min(room, monthly - mon - held)
  end
  if total > 0 then
    room = math.min(room, total - tonumber(st[7] or '0') - held)
  end
  return room
end

local slots, nseats, ntok = 0, 0, 0
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
    room = math.min(room, budgetRoom(KEYS[3], kc == '1', kdaily, kmonthly, ktotal))
  end
  if pbudget then
    room = math.min(room, budgetRoom(KEYS[10], pc == 1, pdaily, pmonthly, ptotal))
  end
  target = math.min(want, math.floor(math.max(room, 0) / share))
  if target < min then
    target = 0
    reason = 2
  end
  if target > 0 and levels > 0 then
    local sroom = math.huge
    if lease_has(levels, 1) then
      sroom = math.min(sroom, rateRoom(KEYS[7], rpm, tonumber(acct[10] or '0')))
    end
    if lease_has(levels, 2) then
      sroom = math.min(sroom, rateRoom(KEYS[8], krpm, kwindow))
    end
    if lease_has(levels, 4) then
      sroom = math.min(sroom, rateRoom(KEYS[11], prpm, pwindow))
    end
    slots = math.min(wantSlots, math.floor(math.max(sroom, 0) / share))
    if slots < math.max(minSlots, 1) then
      slots, target, reason = 0, 0, 2
    end
  end
  if target > 0 and seatLevels > 0 then
    -- In flight as admit.lua counts it, this lease's free seats added back.
    local room = math.huge
    if lease_has(seatLevels, 1) then
      local taken = redis.call('HLEN', KEYS[9]) + tonumber(acct[11] or '0') - fseats
      room = math.min(room, conc - taken)
    end
    if lease_has(seatLevels, 2) then
      local ks = redis.call('HMGET', KEYS[3], 'open', 'seats')
      local taken = tonumber(ks[1] or '0') + tonumber(ks[2] or '0') - fseats
      room = math.min(room, kconc - taken)
    end
    if lease_has(seatLevels, 4) then
      local ps = redis.call('HMGET', KEYS[10], 'open', 'seats')
      local taken = tonumber(ps[1] or '0') + tonumber(ps[2] or '0') - fseats
      room = math.min(room, pconc - taken)
    end
    nseats = math.min(wantSeats, math.floor(math.max(room, 0) / share))
    if nseats < math.max(minSeats, 1) then
      nseats, slots, target, reason = 0, 0, 0, 2
    end
  end
  if target > 0 and tokenLevels > 0 then
    -- This lease's free tokens already left the windows above.
    local room = math.huge
    if lease_has(tokenLevels, 1) then
      room = math.min(room, tpm - windowSum(KEYS[1]))
    end
    if lease_has(tokenLevels, 2) then
      room = math.min(room, ktpm - windowSum(KEYS[3]))
    end
    if lease_has(tokenLevels, 4) then
      room = math.min(room, ptpm - windowSum(KEYS[10]))
    end
    ntok = math.min(wantTokens, math.floor(math.max(room, 0) / share))
    if ntok < math.max(minTokens, 1) then
      ntok, nseats, slots, target, reason = 0, 0, 0, 0, 2
    end
  end
end

if not cur then
  if target == 0 then
    return {0, reason, -1, 0, 0, 0, 0, 0, 0}
  end
  if kbudget then
    kc = '1'
  end
  if pbudget then
    pc = 1
  end
  if pbudget or lease_has(rl, 4) or lease_has(sl, 4) or lease_has(tl, 4) then
    lproject = project
  end
end
move(target - free)
reseat(nseats - fseats)
if ntok > 0 then
  -- Placed in a future bucket: usable until it ends, counted in the window
  -- until a minute after. The bounds of unrecorded requests left in an
  -- earlier bucket stay held there, no longer the lease's.
  local b = math.floor((now + TOKEN_LIFE) / BUCKET)
  hold(tl, b, ntok)
  if b ~= tbucket then
    tokens, tbucket = 0, b
  end
  tokens = tokens + ntok
end
-- The kept free slots, scored now: they stay in the window while usable.
if slots > 0 then
  local spans = {math.max(tonumber(acct[10] or '0'), 1), math.max(kwindow, 1), math.max(pwindow, 1)}
  for i, log in ipairs({KEYS[7], KEYS[8], KEYS[11]}) do
    if lease_has(rl, 2 ^ (i - 1)) then
      local batch = {}
      for n = cursor, cursor + slots - 1 do
        batch[#batch + 1] = int(now)
        batch[#batch + 1] = 'L:' .. lid .. ':' .. int(n)
        if #batch == 2000 or n == cursor + slots - 1 then
          redis.call('ZADD', log, unpack(batch))
          batch = {}
        end
      end
      if redis.call('PTTL', log) < spans[i] * 60000 then
        redis.call('PEXPIRE', log, int(spans[i] * 60000))
      end
    end
  end
end
if amount == 0 and seats == 0 and tokens == 0 then
  -- Placeholders of used slots left ([lo, cursor)) are replaced by their
  -- records, by name.
  redis.call('HDEL', KEYS[2], lid)
else
  -- Kept while its admitted requests' records have not all landed: they
  -- take their holds and seats out of it.
  redis.call('HSET', KEYS[2], lid, lease_format({amount = amount, expiry = expiry, kc = kc, key = keyid,
    rl = rl, lo = cursor, hi = cursor + slots, seats = seats, sl = sl, tokens = tokens, tbucket = tbucket, tl = tl,
    pc = pc, project = lproject}))
end
local hiOut = cursor + slots
if rl == 0 then
  hiOut, rl = -1, 0
end
return {target - free, reason, hiOut, rl, nseats - fseats, sl, ntok - ftok, tl, tbucket}
