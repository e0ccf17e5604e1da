-- settle.lua: end a batch of admitted requests of one account, atomically,
-- each at most once. Only a held request settles: a hold leaves only through
-- settlement (the sweeper settles expired ones as interrupted), so a request
-- without one has settled already (or was never admitted). No other marker
-- is kept.
--
-- Settlements are queued by the sidecar as replies end and sent in batches;
-- one call settles all of an account's requests in a batch. What each
-- request needs on its own (its hold, its ledger entry) is done per
-- request; what adds up (held, balance, the day's spend, usage counters, a
-- credential's last_used) is summed in Lua and written once per call. A
-- batch of one is a single settlement. Usage is counted per day and in
-- total; a month is the sum of its days (the reader adds them up). A
-- credential whose last_used the caller wrote this minute already is left
-- out of KEYS.
--
-- KEYS[1]    gw:{acct:ID}:acct             hash: balance, held, leased, seats, ...
-- KEYS[2]    gw:{acct:ID}:holds            hash: request id -> hold (hold.lua)
-- KEYS[3]    gw:{acct:ID}:day:YYYYMMDD     string: settled spend of the current UTC day
-- KEYS[4]    gw:{acct:ID}:u:d:YYYYMMDD     hash: usage counters of the UTC day
-- KEYS[5]    gw:{acct:ID}:u:t              hash: usage counters of all time
-- KEYS[6]    gw:{acct:ID}:ledger           stream: one entry per settled request
-- KEYS[7]    gw:{acct:ID}:mon:YYYYMM       string: settled spend of the current UTC month
-- KEYS[8..7+k]  gw:{acct:ID}:key:KEYID, the metadata of each credential used (may be absent)
-- KEYS[8+k..7+k+n]  gw:{acct:ID}:swept:REQID of each request, in order: hash of
--               what its sweep charged: "hold", then counter field -> increment
-- KEYS[8+k+n..7+k+n+s]  gw:{acct:ID}:ks:KEYID, the state of each credential of
--               the batch (admit.lua): in flight, token window, spend
--               by day, month and in total; and gw:{acct:ID}:ps:PROJECTID,
--               the same of each project of the batch but the default
-- KEYS[8+k+n+s]  gw:{acct:ID}:leases, when m > 0: hash of the account's leases (lease.lua)
-- KEYS[9+k+n+s..8+k+n+s+m]  gw:{acct:ID}:lbits:LEASEID of each lease of the batch (record.lua)
--
-- ARGV[1]  n, the number of requests
-- ARGV[2]  k, the number of credentials whose last_used is written
-- ARGV[3]  day key lifetime, s
-- ARGV[4]  swept record lifetime, s
-- ARGV[5]  s, the number of credential and project states
-- ARGV[6]  the UTC day, YYYYMMDD
-- ARGV[7]  the UTC month, YYYYMM
-- ARGV[8]  month key lifetime, s
-- ARGV[9]  m, the number of leases the batch's requests were admitted from
-- ARGV[10..] n request records, one after the other, each:
--   request id; "1" to charge and count usage (2xx reply), else "0";
--   "1" when the sweeper settles it (a record of the charge is kept), else "0";
--   cost, nano-USD; the priced model (usage is counted under it);
--   credential index (1..k, 0 for none); last-used time of the credential,
--   unix ms; credential state index (1..s, 0 for none); tokens used
--   (input + output; 0 for a reply not charged); lease index (1..m, 0 when
--   admitted by admit.lua), its sequence number in the lease and its hold;
--   the token bound it took from the lease's tokens (0: none), their
--   bucket and the token windows they are in (bits: 1 the account's, 2
--   the key's, 4 the project's);
--   c, then c counter name, increment pairs (requests, then cost and each
--   usage kind when not zero);
--   f, then f ledger entry field, value pairs, a field whose value is zero
--   left out (it reads as zero). A ledger field named like a counter
--   ("cost", a usage kind) holds that amount; a reconciled entry holds the
--   difference instead, a difference of zero left out, and "reconciled"
--   is set to "1";
--   then the project's state index (1..s, 0 for none: the default
--   project): a project's state (gw:{acct:ID}:ps:PROJECTID) is one of the
--   s states, kept as a credential's is.
--
-- The names of counters and ledger fields are not known here: Go builds them
-- (internal/store/contract.go) and reads them back.
--
-- Usage hashes hold a model's counters as "m:requests:MODEL",
-- "m:input:MODEL", ...: the counter name never holds a colon, so a model
-- name may. The account's totals are the sum over its models. Zero
-- increments are skipped.
--
-- What admission counted for a request (the prefix of its record, see
-- admit.lua) is undone when its hold goes: the hold leaves the key's held
-- amount and in-flight count, and its token bound is moved from held to
-- settled, replaced by the tokens it used, in the token window's bucket it
-- was counted in, if that bucket is still kept (one that left the window
-- is never read again); the same for the project where admission counted
-- it ("tp", "pc"). Spend is added to the account's month and to the key's
-- and the project's day, month and total (a reconciled settlement adds its
-- difference).
--
-- A request admitted from a lease whose hold was not recorded yet (its
-- record, record.lua, comes later or never: its sidecar died) and whose bit
-- in the lease's bitmap is clear is settled here as if recorded at once:
-- its hold leaves the lease (and the "leased" sums), and so does its seat
-- where the lease holds seats (and the "seats" sums: it took one, and is no
-- longer in flight); its token bound, held in the lease's bucket, is
-- settled there as a recorded request's would be, and leaves the lease's
-- token count when that bucket is still the lease's; its bit is set so
-- that the record, when it comes, does nothing. Its hold and seat leave
-- the project's "leased" and "seats" sums too, and its token bound is
-- settled in the project's window, where the lease counts against the
-- project (lease.lua's pc, sl, tl): the request's project state index
-- names it.
--
-- Returns one result per request: 1 applied, 2 reconciled with its sweep,
-- 0 already settled (or never admitted); or {-1}
-- when the account does not exist.

local function int(n)
  return string.format('%d', n)
end

local n = tonumber(ARGV[1])
local k = tonumber(ARGV[2])

local out = {}
local released, cost = 0, 0
local counters, order = {}, {}
local function add(field, v)
  if not counters[field] then
    counters[field] = 0
    order[#order + 1] = field
  end
  counters[field] = counters[field] + v
end
local lastUsed = {}
local accountSeen = false
-- A model's counter names, "m:NAME:MODEL", made once per call rather than
-- once per request.
local counterNames = {}
local function counterField(name, model)
  local byName = counterNames[model]
  if not byName then
    byName = {}
    counterNames[model] = byName
  end
  local f = byName[name]
  if not f then
    f = 'm:' .. name .. ':' .. model
    byName[name] = f
  end
  return f
end
local s = tonumber(ARGV[5])
local today, month = ARGV[6], ARGV[7]
-- Per credential state index: held released, requests ended, token
-- corrections by bucket, cost and requests charged.
local kstate = {}
local function state(si)
  local st = kstate[si]
  if not st then
    st = {held = 0, open = 0, tok = {}, cost = 0, reqs = 0, leased = 0, seats = 0}
    kstate[si] = st
  end
  return st
end
-- The account's token corrections by bucket: {settled, held} to add.
local atok = {}
local function correct(t, b, used, bound)
  local c = t[b]
  if not c then
    c = {0, 0}
    t[b] = c
  end
  c[1] = c[1] + used
  c[2] = c[2] - bound
end

local m = tonumber(ARGV[9])
-- Per lease index: the holds settled from it, how many, and the credential
-- state index of its requests (a lease is one key's).
local ltake, lcount, lstate, ltok = {}, {}, {}, {}
-- And the project state index of its requests (a lease counts against
-- one project at most: lease.lua's pc).
local lpstate = {}
local lfirst = 7 + k + n + s -- KEYS[lfirst + 1]: the leases hash
local a = 10
for i = 1, n do
  -- A lease's fields are read only for a request admitted from one: a
  -- number conversion is a fair part of a request's cost here.
  local r = a -- the record's first argument
  local req, charged, swept, c, model = ARGV[a], ARGV[a + 1] == '1', ARGV[a + 2] == '1', tonumber(ARGV[a + 3]), ARGV[a + 4]
  local ki = tonumber(ARGV[a + 5])
  local si, usedTokens = tonumber(ARGV[a + 7]), tonumber(ARGV[a + 8])
  local li = tonumber(ARGV[a + 9])
  local nc = tonumber(ARGV[a + 15])
  local cfirst = a + 16
  local nf = tonumber(ARGV[cfirst + 2 * nc])
  local ffirst = cfirst + 2 * nc + 1
  local psi = tonumber(ARGV[ffirst + 2 * nf])
  a = ffirst + 2 * nf + 1
  local sweptKey = KEYS[7 + k + i]

  local v = redis.call('HGET', KEYS[2], req)
  if not v and not accountSeen then
    if redis.call('EXISTS', KEYS[1]) == 0 then
      return {-1}
    end
    accountSeen = true
  end
  -- Admitted from a lease and not recorded: settled from the lease (a
  -- request with a sweep record was recorded, so its bit is set).
  -- SETBIT answers the bit it replaced: setting one already set changes
  -- nothing, and a clear one is this settlement's to take.
  local fromLease = false
  if not v and li > 0 and not swept and redis.call('SETBIT', KEYS[lfirst + 1 + li], ARGV[r + 10], 1) == 0 then
    fromLease = true
    local lhold, lbound, lbucket, llevels = tonumber(ARGV[r + 11]), tonumber(ARGV[r + 12]), ARGV[r + 13], tonumber(ARGV[r + 14])
    ltake[li] = (ltake[li] or 0) + lhold
    lcount[li] = (lcount[li] or 0) + 1
    lstate[li] = si
    lpstate[li] = psi
    if lbound > 0 then
      -- Settled from the lease's bucket, as its record would have said.
      if lease_has(llevels, 1) then
        correct(atok, lbucket, usedTokens, lbound)
      end
      if lease_has(llevels, 2) and si > 0 then
        correct(state(si).tok, lbucket, usedTokens, lbound)
      end
      if lease_has(llevels, 4) and psi > 0 then
        correct(state(psi).tok, lbucket, usedTokens, lbound)
      end
      local t = ltok[li] or {}
      local b = tonumber(lbucket)
      t[b] = (t[b] or 0) + lbound
      ltok[li] = t
    end
  end
  if v or fromLease then
    accountSeen = true -- a hold exists only on an existing account
    local amount, record = 0, ''
    if v then
      -- The hold's lease, record and checkpoint go with it.
      redis.call('HDEL', KEYS[2], req)
      local expiry
      amount, expiry, record = hold_parse(v)
    end
    released = released + amount
    local tb, ta, tk, kc = string.match(record, '^{"tb":(%d+),"ta":(%d+),"tk":(%d+),"kc":(%d+)')
    if tb then
      tb = tonumber(tb)
      if ta ~= '0' then
        correct(atok, ta, usedTokens, tb)
      end
      if si > 0 then
        local st = state(si)
        if tk ~= '0' then
          correct(st.tok, tk, usedTokens, tb)
        end
        if kc == '1' then
          st.held = st.held + amount
          st.open = st.open + 1
        end
      end
      local tp, pc = string.match(record, '^{"tb":%d+,"ta":%d+,"tk":%d+,"kc":%d+,"tp":(%d+),"pc":(%d+)')
      if tp and psi > 0 then
        local st = state(psi)
        if tp ~= '0' then
          correct(st.tok, tp, usedTokens, tb)
        end
        if pc == '1' then
          st.held = st.held + amount
          st.open = st.open + 1
        end
      end
    end
    if charged and si > 0 then
      local st = state(si)
      st.cost = st.cost + c
      st.reqs = st.reqs + 1
    end
    if charged and psi > 0 then
      local st = state(psi)
      st.cost = st.cost + c
      st.reqs = st.reqs + 1
    end
    if ki > 0 then
      local used = tonumber(ARGV[r + 6])
      if used > (lastUsed[ki] or 0) then
        lastUsed[ki] = used
      end
    end
    local rec = {} -- what a sweep charged, kept for its reconciliation
    if charged then
      cost = cost + c
      for j = 0, nc - 1 do
        local v = tonumber(ARGV[cfirst + 2 * j + 1])
        if v ~= 0 then
          local f = counterField(ARGV[cfirst + 2 * j], model)
          add(f, v)
          if swept then
            rec[#rec + 1] = f
            rec[#rec + 1] = int(v)
          end
        end
      end
    end
    if swept then
      redis.call('HSET', sweptKey, 'hold', int(amount), unpack(rec))
      redis.call('EXPIRE', sweptKey, ARGV[4])
    end
    -- Never trimmed here: an entry leaves the ledger only once exported.
    redis.call('XADD', KEYS[6], '*', unpack(ARGV, ffirst, ffirst + 2 * nf - 1))
    out[i] = 1
  elseif not swept and redis.call('EXISTS', sweptKey) == 1 then
    -- Swept before this settlement arrived: post the difference.
    local prev = redis.call('HGETALL', sweptKey)
    redis.call('DEL', sweptKey)
    local cap, diff, byName, names = 0, {}, {}, {}
    local function delta(f, d)
      diff[f] = (diff[f] or 0) + d
      local name = string.match(f, '^m:([^:]*):')
      if not byName[name] then
        byName[name] = 0
        names[#names + 1] = name
      end
      byName[name] = byName[name] + d
    end
    for j = 1, #prev, 2 do
      if prev[j] == 'hold' then
        cap = tonumber(prev[j + 1])
      else
        delta(prev[j], -tonumber(prev[j + 1]))
      end
    end
    if charged then
      for j = 0, nc - 1 do
        local name, v = ARGV[cfirst + 2 * j], tonumber(ARGV[cfirst + 2 * j + 1])
        if name == 'cost' and v > cap then
          v = cap
        end
        delta('m:' .. name .. ':' .. model, v)
      end
    end
    for f, d in pairs(diff) do
      if d ~= 0 then
        add(f, d)
        if string.match(f, '^m:cost:') then
          cost = cost + d
          if si > 0 then
            local st = state(si)
            st.cost = st.cost + d
          end
          if psi > 0 then
            local st = state(psi)
            st.cost = st.cost + d
          end
        elseif string.match(f, '^m:requests:') then
          -- A request the sweep left uncharged counts at its key and its
          -- project now, as it does in the account's counters.
          if si > 0 then
            local st = state(si)
            st.reqs = st.reqs + d
          end
          if psi > 0 then
            local st = state(psi)
            st.reqs = st.reqs + d
          end
        end
      end
    end
    -- The entry's amounts are the differences: those of the counters
    -- (byName) that changed, under their names ("requests" has no field);
    -- an amount that did not change is left out, as Go leaves out every
    -- zero field (contract.go), and reads as zero.
    local amounts = {cost = true, reconciled = true}
    for j = 0, nc - 1 do
      amounts[ARGV[cfirst + 2 * j]] = true
    end
    local entry = {}
    for j = ffirst, ffirst + 2 * nf - 1, 2 do
      local f = ARGV[j]
      if not amounts[f] and not byName[f] then
        entry[#entry + 1] = f
        entry[#entry + 1] = ARGV[j + 1]
      end
    end
    for _, name in ipairs(names) do
      if name ~= 'requests' and byName[name] ~= 0 then
        entry[#entry + 1] = name
        entry[#entry + 1] = int(byName[name])
      end
    end
    entry[#entry + 1] = 'reconciled'
    entry[#entry + 1] = '1'
    redis.call('XADD', KEYS[6], '*', unpack(entry))
    out[i] = 2
  else
    out[i] = 0
  end
end

-- The holds settled from leases leave them, once per lease.
for li, h in pairs(ltake) do
  local bits = KEYS[lfirst + 1 + li]
  redis.call('EXPIRE', bits, ARGV[4])
  local lid = string.match(bits, ':lbits:(.*)$')
  local cur = redis.call('HGET', KEYS[lfirst + 1], lid)
  if cur then
    local l = lease_parse(cur)
    local kleased, kseats, pleased, pseats = lease_take(l, h, lcount[li], ltok[li] or {}, KEYS[1])
    redis.call('HSET', KEYS[lfirst + 1], lid, lease_format(l))
    if lstate[li] > 0 then
      local st = state(lstate[li])
      st.leased = st.leased + kleased
      st.seats = st.seats + kseats
    end
    if lpstate[li] > 0 then
      local st = state(lpstate[li])
      st.leased = st.leased + pleased
      st.seats = st.seats + pseats
    end
  end
end
if released > 0 then
  if redis.call('HINCRBY', KEYS[1], 'held', int(-released)) < 0 then
    redis.call('HSET', KEYS[1], 'held', '0')
  end
end
-- A counter whose new value is the increment was just created, and so may
-- be its key: only then is the key's lifetime set (once a day per model,
-- not on every call).
if cost ~= 0 then
  redis.call('HINCRBY', KEYS[1], 'balance', int(-cost))
  if redis.call('INCRBY', KEYS[3], int(cost)) == cost then
    redis.call('EXPIRE', KEYS[3], ARGV[3])
  end
  if redis.call('INCRBY', KEYS[7], int(cost)) == cost then
    redis.call('EXPIRE', KEYS[7], ARGV[8])
  end
end
if #order > 0 then
  local ttl = {[4] = ARGV[3]}
  for h = 4, 5 do
    local created = false
    for _, field in ipairs(order) do
      created = redis.call('HINCRBY', KEYS[h], field, int(counters[field])) == counters[field] or created
    end
    if created and ttl[h] then
      redis.call('EXPIRE', KEYS[h], ttl[h])
    end
  end
end

-- A token window ("tw", admit.lua) with the corrections of its buckets
-- applied; nil when there are none for it (their buckets left it).
local function corrected(v, t)
  if not v then
    return nil
  end
  local out, changed = {}, false
  for b, st, h in string.gmatch(v, '(%d+) (%d+) (%d+)') do
    st, h = tonumber(st), tonumber(h)
    local c = t[b]
    if c then
      st, h = st + c[1], math.max(h + c[2], 0)
      changed = true
    end
    out[#out + 1] = b .. ' ' .. int(st) .. ' ' .. int(h)
  end
  if not changed then
    return nil
  end
  return table.concat(out, ' ')
end
if next(atok) then
  local v = corrected(redis.call('HGET', KEYS[1], 'tw'), atok)
  if v then
    redis.call('HSET', KEYS[1], 'tw', v)
  end
end

-- Each credential's state: in flight, tokens, spend by window; read and
-- written once per credential. A window whose stamp is not the current one
-- starts again from this batch.
local kfirst = 7 + k + n
for si, st in pairs(kstate) do
  local key = KEYS[kfirst + si]
  local ks = redis.call('HMGET', key, 'held', 'open', 'tw', 'dd', 'dc', 'dr', 'md', 'mc', 'mr', 'tc', 'tr', 'leased', 'seats')
  local fields = {}
  local function put(f, v)
    fields[#fields + 1] = f
    fields[#fields + 1] = v
  end
  local function num(x)
    return tonumber(x or '0')
  end
  if st.open > 0 then
    put('held', int(math.max(num(ks[1]) - st.held, 0)))
    put('open', int(math.max(num(ks[2]) - st.open, 0)))
  end
  local v = corrected(ks[3], st.tok)
  if v then
    put('tw', v)
  end
  if st.leased > 0 then
    put('leased', int(math.max(num(ks[12]) - st.leased, 0)))
  end
  if st.seats > 0 then
    put('seats', int(math.max(num(ks[13]) - st.seats, 0)))
  end
  if st.reqs ~= 0 or st.cost ~= 0 then
    local dc, dr, mc, mr = st.cost, st.reqs, st.cost, st.reqs
    if ks[4] == today then
      dc, dr = dc + num(ks[5]), dr + num(ks[6])
    end
    if ks[7] == month then
      mc, mr = mc + num(ks[8]), mr + num(ks[9])
    end
    put('dd', today)
    put('dc', int(dc))
    put('dr', int(dr))
    put('md', month)
    put('mc', int(mc))
    put('mr', int(mr))
    put('tc', int(num(ks[10]) + st.cost))
    put('tr', int(num(ks[11]) + st.reqs))
  end
  if #fields > 0 then
    redis.call('HSET', key, unpack(fields))
  end
end

-- The credentials were used, whatever the replies; keep the latest time.
-- A credential's hash always has last_used, so nil means it is gone.
for ki, used in pairs(lastUsed) do
  local key = KEYS[7 + ki]
  local last = redis.call('HGET', key, 'last_used')
  if last and used > tonumber(last) then
    redis.call('HSET', key, 'last_used', int(used))
  end
end

return out
