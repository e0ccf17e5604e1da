-- revoke.lua: mark a credential revoked, keeping the first revocation time.
--
-- KEYS[1]  gw:{acct:ID}:key:KEYID         hash: the credential's metadata
--
-- ARGV[1]  now, unix ms
--
-- Returns 1 when revoked now, 0 when already revoked, -1 when the credential
-- does not exist.

if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
local revoked = redis.call('HGET', KEYS[1], 'revoked')
if revoked and revoked ~= '0' then
  return 0
end
redis.call('HSET', KEYS[1], 'revoked', ARGV[1])
return 1
