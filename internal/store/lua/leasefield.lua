-- leasefield.lua: the value of one field of an account's leases hash
-- (lease.lua), shared by the scripts that read or write leases (it is
-- prepended to each of them: lease, record, settle, sweep).
--
--   "<amount> <expiry> <kc> <key id> <rl> <lo> <hi> <seats> <sl> <tokens> <tbucket> <tl> <pc> <project id>"
--
-- Fields are only ever appended: a lease written before a field existed
-- reads it as zero (no slots, no seats, no project); the last two are
-- written only for a lease that counts against a project.
--
-- The levels a lease's slots, seats or tokens count at (rl, sl, tl) are
-- bits: 1 the account, 2 the key, 4 the key's project. lease.lua
-- documents each field.

local function lease_parse(v)
  local a, e, c, k, r, l, h, s, sl, t, tb, tl, pc, p = string.match(v,
    '^(%d+) (%d+) (%d) ?(%S*) ?(%d*) ?(%d*) ?(%d*) ?(%d*) ?(%d*) ?(%d*) ?(%d*) ?(%d*) ?(%d*) ?(%S*)')
  if not a then
    return nil
  end
  local function num(x)
    if x == '' then
      return 0
    end
    return tonumber(x)
  end
  local out = {amount = tonumber(a), expiry = tonumber(e), kc = c, key = k,
    rl = num(r), lo = num(l), hi = num(h), seats = num(s), sl = num(sl), tokens = num(t), tbucket = num(tb), tl = num(tl),
    pc = num(pc), project = p,
    slots = r ~= '' and l ~= '' and h ~= ''}
  return out
end

local function lease_format(l)
  local v = string.format('%d %d %s %s %d %d %d %d %d %d %d %d', l.amount, l.expiry, l.kc, l.key,
    l.rl, l.lo, l.hi, l.seats, l.sl, l.tokens, l.tbucket, l.tl)
  -- A lease of no project is written as before projects.
  if (l.project or '') ~= '' then
    v = v .. ' ' .. string.format('%d', l.pc or 0) .. ' ' .. l.project
  end
  return v
end

-- Whether levels (rl, sl, tl) has bit (1, 2 or 4) set.
local function lease_has(levels, bit)
  return math.floor(levels / bit) % 2 == 1
end

-- Add d to a hash's sum field (leased, seats), clamped at zero: a sum
-- never goes below what its leases hold, whatever order their changes
-- land in.
local function lease_sum(key, field, d)
  if redis.call('HINCRBY', key, field, string.format('%d', d)) < 0 then
    redis.call('HSET', key, field, '0')
  end
end

-- Take out of lease l what n requests recorded or settled from it held:
-- up to amount of its money and n of its seats (and out of the account's
-- leased and seats sums, acct), and the token bounds they took from the
-- lease's bucket (bounds: bucket -> sum). Returns the money and seats
-- taken that the key's sums hold too (l.kc 1; l.sl has 2), for the
-- caller to take out of the key's state, and the money and seats the
-- project's state holds (l.pc 1; l.sl has 4), for the caller to take out
-- of it.
local function lease_take(l, amount, n, bounds, acct)
  local take = math.min(amount, l.amount)
  l.amount = l.amount - take
  lease_sum(acct, 'leased', -take)
  local seats = math.min(n, l.seats)
  if seats > 0 then
    l.seats = l.seats - seats
    if lease_has(l.sl, 1) then
      lease_sum(acct, 'seats', -seats)
    end
  end
  l.tokens = math.max(l.tokens - (bounds[l.tbucket] or 0), 0)
  local kleased, kseats = 0, 0
  if l.kc == '1' then
    kleased = take
  end
  if lease_has(l.sl, 2) then
    kseats = seats
  end
  local pleased, pseats = 0, 0
  if l.pc == 1 then
    pleased = take
  end
  if lease_has(l.sl, 4) then
    pseats = seats
  end
  return kleased, kseats, pleased, pseats
end
