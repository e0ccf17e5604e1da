-- topup.lua: add to an account's balance, at most once per idempotency key.
--
-- KEYS[1]  gw:{acct:ID}:acct              hash: balance, ...
-- KEYS[2]  gw:{acct:ID}:topup:KEY         string: the amount applied under KEY
--
-- ARGV[1]  amount, nano-USD
-- ARGV[2]  "1" when KEYS[2] names a real idempotency key, "0" to always apply
-- ARGV[3]  the largest balance allowed, nano-USD (2^53-1: exact as a Lua number)
--
-- Returns {status, balance}. Status: 1 applied, 0 already applied under this
-- key, -1 no such account, -2 key already used with a different amount, -3
-- the balance would exceed ARGV[3]. Every check comes before any write:
-- Redis does not roll a script back, so a refused top-up must leave its
-- idempotency key unused.

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1, 0}
end
if ARGV[2] == '1' then
  local prev = redis.call('GET', KEYS[2])
  if prev then
    local balance = redis.call('HGET', KEYS[1], 'balance')
    if prev ~= ARGV[1] then
      return {-2, balance}
    end
    return {0, balance}
  end
end
local balance = redis.call('HGET', KEYS[1], 'balance')
-- Both are at most 2^53-1, so a sum beyond the bound compares above it.
if tonumber(balance) + tonumber(ARGV[1]) > tonumber(ARGV[3]) then
  return {-3, balance}
end
if ARGV[2] == '1' then
  redis.call('SET', KEYS[2], ARGV[1])
end
return {1, redis.call('HINCRBY', KEYS[1], 'balance', ARGV[1])}
