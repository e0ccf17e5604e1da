-- sweep.lua: find the expired holds of one account, whose requests' sidecar
-- stopped renewing them (it died or lost Redis for longer than the lease).
--
-- KEYS[1]  gw:{acct:ID}:acct              hash: balance, held, ...
-- KEYS[2]  gw:{acct:ID}:holds             hash: request id -> hold (hold.lua)
-- KEYS[3]  gw:{acct:ID}:leases            hash: lease id -> lease (lease.lua)
--
-- ARGV[1]  now, unix ms, from the caller's clock
-- ARGV[2]  the most expired holds to return
-- ARGV[3]  hold lease, ms
--
-- The account's holds are read whole (HGETALL): an account holds one entry
-- per running request, and the sweeper comes by about once a lease.
--
-- An expired hold with an admission record is returned, not released: the
-- caller settles it with settle.lua (flagged interrupted), which releases it
-- and is idempotent, so two sweepers, or a sweeper and the request's own late
-- settlement, charge it once. An expired hold without a record is released
-- here at no charge. A hold without a lease (written by an older sidecar) is
-- given one from now, so that a request still running finishes first.
--
-- Leases (lease.lua) are swept the same way: an expired one is returned to
-- the caller, which gives its amount back with lease.lua (that script needs
-- the key's state and rate log, which only the caller can name; it also
-- removes the lease's request-slot placeholders and gives back its seats).
--
-- Returns {open, next, released, e, lease1, key1, ..., lease_e, key_e, id1,
-- record1, checkpoint1, id2, ...}: open is the number of holds and leases
-- left (those returned included), next the earliest expiry after now (-1
-- when none), released the holds released here, e the expired leases.

local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local lease = tonumber(ARGV[3])
local all = redis.call('HGETALL', KEYS[2])
local out = {}
local found, open, released, amount = 0, 0, 0, 0
local next = -1
local function later(e)
  if next < 0 or e < next then
    next = e
  end
end
for i = 1, #all, 2 do
  local id = all[i]
  local held, expiry, record, ckpt = hold_parse(all[i + 1])
  if not expiry then
    redis.call('HSET', KEYS[2], id, hold_format(held, now + lease, '', ''))
    later(now + lease)
    open = open + 1
  elseif expiry > now then
    later(expiry)
    open = open + 1
  elseif record == '' then
    redis.call('HDEL', KEYS[2], id)
    released = released + 1
    amount = amount + held
  else
    open = open + 1
    if found < limit then
      found = found + 1
      table.insert(out, id)
      table.insert(out, record)
      table.insert(out, ckpt)
    end
  end
end
local expired = {}
local leases = redis.call('HGETALL', KEYS[3])
for i = 1, #leases, 2 do
  local l = lease_parse(leases[i + 1])
  open = open + 1
  if l and l.expiry > now then
    later(l.expiry)
  else
    table.insert(expired, leases[i])
    table.insert(expired, l and l.key or '')
  end
end
if amount > 0 then
  local held = tonumber(redis.call('HGET', KEYS[1], 'held') or '0') - amount
  if held < 0 then
    held = 0
  end
  redis.call('HSET', KEYS[1], 'held', string.format('%d', held))
end

local result = {open, next, released, #expired / 2}
for _, v in ipairs(expired) do
  table.insert(result, v)
end
for _, v in ipairs(out) do
  table.insert(result, v)
end
return result
