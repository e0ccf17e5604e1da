-- session.lua: read a console session and keep it alive, as every sidecar
-- sees it: a session unused for its idle time is gone by its TTL; one
-- older than its lifetime is deleted here; any other is read and given
-- its idle time again, never past its lifetime.
--
-- KEYS[1]  gw:console:SIDE:HASH  hash: the session's fields (console/session.go),
--                                with created (unix ms)
--
-- ARGV[1]  now, unix ms, from the caller's clock (never Redis TIME)
-- ARGV[2]  the idle time, ms
-- ARGV[3]  the lifetime, ms
--
-- Returns the session's fields and values as HGETALL does, or an empty
-- array when there is no live session.

local now = tonumber(ARGV[1])
local idle = tonumber(ARGV[2])
local lifetime = tonumber(ARGV[3])

local created = tonumber(redis.call('HGET', KEYS[1], 'created'))
if not created then
  return {}
end
local left = created + lifetime - now
if left <= 0 then
  redis.call('DEL', KEYS[1])
  return {}
end
redis.call('PEXPIRE', KEYS[1], math.min(idle, left))
return redis.call('HGETALL', KEYS[1])
