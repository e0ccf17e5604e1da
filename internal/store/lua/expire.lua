-- expire.lua: bring a credential's expiry forward, never push it back.
--
-- KEYS[1]  gw:{acct:ID}:key:KEYID         hash: the credential's metadata
--
-- ARGV[1]  the latest expiry wanted, unix ms
--
-- Returns the credential's expiry afterwards (unix ms), or -1 when the
-- credential does not exist.

if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
local cur = tonumber(redis.call('HGET', KEYS[1], 'expires') or '0')
local want = tonumber(ARGV[1])
if cur == 0 or want < cur then
  redis.call('HSET', KEYS[1], 'expires', ARGV[1])
  return want
end
return cur
