-- topup.lua: add to an account's balance, at most once per idempotency key.
--
-- KEYS[1]  gw:{acct:ID}:acct              hash: balance, ...
-- KEYS[2]  gw:{acct:ID}:topup:KEY         string: the amount applied under KEY
--
-- ARGV[1]  amount, nano-USD
-- ARGV[2]  "1" when KEYS[2] names a real idempotency key, "0" to always apply
--
-- Returns {status, balance}. Status: 1 applied, 0 already applied under this
-- key, -1 no such account, -2 key already used with a different amount.

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
  redis.call('SET', KEYS[2], ARGV[1])
end
return {1, redis.call('HINCRBY', KEYS[1], 'balance', ARGV[1])}
