-- leasefield.lua: the value of one field of an account's leases hash
-- (lease.lua), shared by the scripts that read or write leases (it is
-- prepended to each of them: lease, record, settle, sweep).
--
--   "<amount> <expiry> <kc> <key id> <rl> <lo> <hi> <seats> <sl> <tokens> <tbucket> <tl>"
--
-- Fields are only ever appended: a lease written before a field existed
-- reads it as zero (no slots, no seats). lease.lua documents each field.

local function lease_parse(v)
  local a, e, c, k, r, l, h, s, sl, t, tb, tl = string.match(v,
    '^(%d+) (%d+) (%d) ?(%S*) ?(%d*) ?(%d*) ?(%d*) ?(%d*) ?(%d*) ?(%d*) ?(%d*) ?(%d*)')
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
    slots = r ~= '' and l ~= '' and h ~= ''}
  return out
end

local function lease_format(l)
  return string.format('%d %d %s %s %d %d %d %d %d %d %d %d', l.amount, l.expiry, l.kc, l.key,
    l.rl, l.lo, l.hi, l.seats, l.sl, l.tokens, l.tbucket, l.tl)
end

-- Add d to a hash's sum field (leased, seats), clamped at zero: a sum
-- never goes below what its leases hold, whatever order their changes
-- land in.
local function lease_sum(key, field, d)
  if redis.call('HINCRBY', key, field, string.format('%d', d)) < 0 then
    redis.call('HSET', key, field, '0')
  end
end

-- Take up to n seats (requests recorded or settled from lease l) out of l
-- and out of the account's seat sum (acct, when l counts seats there);
-- returns how many were taken, for the key's sum (when l.sl >= 2).
local function lease_unseat(l, n, acct)
  local take = math.min(n, l.seats)
  if take > 0 then
    l.seats = l.seats - take
    if l.sl % 2 == 1 then
      lease_sum(acct, 'seats', -take)
    end
  end
  return take
end
