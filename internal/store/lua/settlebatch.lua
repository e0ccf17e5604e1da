-- settlebatch.lua: settle the requests of many accounts in one call, each
-- account's as settle.lua does (its body, wrapped by Go as the local
-- function settle_account(KEYS, ARGV), stays the one place for what a
-- settlement does). Every key of the call is in one Redis Cluster slot:
-- the caller groups accounts by slot.
--
-- KEYS     each account's settle.lua KEYS, one after the other
-- ARGV     each call's settle.lua ARGV, one after the other, then per call
--          the number of its KEYS and of its ARGV, then g, the number of
--          calls (last, so that the first call's KEYS and ARGV are the
--          script's own from their first element: settle.lua reads them
--          in place, copying a batch of one account costs more than its
--          own Lua does)
--
-- Returns one reply per call: settle.lua's, or {-2, message} when it
-- raised an error (what it wrote before stays written, as when settle.lua
-- runs alone; the other calls are unaffected). A retry settles each request
-- at most once, as settle.lua does.

local g = tonumber(ARGV[#ARGV])
local counts = #ARGV - 1 - 2 * g -- ARGV[counts + 2j - 1], ARGV[counts + 2j]: call j's
local replies = {}
local kat, aat = 0, 0
for j = 1, g do
  local nk, na = tonumber(ARGV[counts + 2 * j - 1]), tonumber(ARGV[counts + 2 * j])
  local keys, args = KEYS, ARGV
  if j > 1 then
    keys, args = {}, {}
    for i = 1, nk do
      keys[i] = KEYS[kat + i]
    end
    for i = 1, na do
      args[i] = ARGV[aat + i]
    end
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
