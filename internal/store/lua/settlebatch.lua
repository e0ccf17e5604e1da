-- settlebatch.lua: settle the requests of many accounts in one call, each
-- account's as settle.lua does (its body, wrapped by Go as the local
-- function settle_account(KEYS, ARGV), stays the one place for what a
-- settlement does). Every key of the call is in one Redis Cluster slot:
-- the caller groups accounts by slot.
--
-- KEYS     each account's settle.lua KEYS, one after the other
-- ARGV[1]  g, the number of accounts' calls
-- ARGV[2..1+2g]  per call: the number of its KEYS, then of its ARGV
-- ARGV[2+2g..]   each call's settle.lua ARGV, one after the other
--
-- Returns one reply per call: settle.lua's, or {-2, message} when it
-- raised an error (what it wrote before stays written, as when settle.lua
-- runs alone; the other calls are unaffected). A retry settles each request
-- at most once, as settle.lua does.

local g = tonumber(ARGV[1])
local replies = {}
local kat, aat = 0, 1 + 2 * g
for j = 1, g do
  local nk, na = tonumber(ARGV[2 * j]), tonumber(ARGV[2 * j + 1])
  local keys, args = {}, {}
  for i = 1, nk do
    keys[i] = KEYS[kat + i]
  end
  for i = 1, na do
    args[i] = ARGV[aat + i]
  end
  kat, aat = kat + nk, aat + na
  local ok, r = pcall(settle_account, keys, args)
  if ok then
    replies[j] = r
  else
    if type(r) == 'table' and r.err then
      r = r.err
    end
    replies[j] = {-2, tostring(r)}
  end
end
return replies
